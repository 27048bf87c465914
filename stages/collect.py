"""collect: take each source at its pinned commit and keep its C and C++ files.

Git sources are fetched shallowly at the pinned SHA into a bare repository (local paths work offline) and read
blob by blob with `git ls-tree` and `git cat-file --batch`: no working tree is checked out, so symlinks are
never followed at all. Plain directories are walked without following links, and their digest is checked
against the lock so a directory that changed since it was locked fails loudly.

Output: files-NNNNN.parquet (COLLECTED_FILE, `files_per_part` files each, path order), license_files.parquet
(license texts for the license stage: LICENSE/COPYING, and sidecars such as fmt.license.rst), submodules.json
(the submodules walked, each with its URL and the commit its parent records), skipped.parquet
(REJECTION rows: not C/C++, too large, empty, symlink, a submodule not walked, out of scope, not a regular
file, unreadable, a Git LFS pointer). Retrieval time goes into stage.json, not into the data (bytes stay
reproducible).
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import tempfile
from collections import Counter
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path, PurePosixPath
from typing import ClassVar

import pyarrow as pa
import pyarrow.parquet as pq
from tqdm import tqdm

from cpp_data.pipeline.contract.stage import Stage, StageContext
from cpp_data.schemas.artifacts import COLLECTED_FILE, LICENSE_FILE, REJECTION
from cpp_data.stages.lib.dir_files import TreeDigest, file_sha256, is_undecodable, printable_path, walk_directory
from cpp_data.stages.lib.license_pointers import is_license_file_name
from cpp_data.stages.lib.repo_files import (
    DEFAULT_EXTENSIONS,
    HEAD_BYTES,
    BlobReader,
    fetch_commit,
    is_cpp,
    is_lfs_pointer,
)
from cpp_data.stages.lib.scrub import scrub_path
from cpp_data.stages.lib.submodules import SUBMODULES, ExpandedTree, Submodule


@dataclass(frozen=True)
class CollectParams:
    bounds: ClassVar[dict] = {"max_bytes": (1, None), "files_per_part": (1, None), "max_license_file_bytes": (0, None),
                              "history_max_commits": (1, None), "doxygen_share": (0, 1)}
    extensions: tuple[str, ...] = DEFAULT_EXTENSIONS
    max_bytes: int = 1_000_000  # larger files are recorded as too_large and never loaded into a part
    files_per_part: int = 500  # one datatrove task per part downstream
    max_license_file_bytes: int = 200_000
    # v2/v3: collect the versions of a commit walk instead of the files at the pin (see stages/lib/history.py)
    history: str = ""  # "" | "pairs" (v2: before and after) | "diffs" (v3: one document per commit and file)
    history_max_commits: int = 1000
    history_paths: tuple[str, ...] = ()  # fnmatch globs; empty: every C/C++ file
    doxygen_share: float = 0.5  # v3 header styles: doxygen at this share, simple otherwise
    history_seed: int = 42


class _Parts:
    """Buffers collected files and writes them as numbered parts."""

    def __init__(self, out: Path, per_part: int):
        self.out, self.per_part, self.n = out, per_part, 0
        self.rows: list[dict] = []

    def add(self, row: dict) -> None:
        self.rows.append(row)
        if len(self.rows) >= self.per_part:
            self.flush()

    def flush(self) -> None:
        if self.rows:
            table = pa.Table.from_pylist(self.rows, schema=COLLECTED_FILE)
            pq.write_table(table, self.out / f"files-{self.n:05d}.parquet", compression="zstd")
            self.n += 1
            self.rows = []


class _Collector:
    """What collect keeps of one source: files taken into parts, rows of skipped files with their reason, the
    license files the license stage reads, and the counts. Both walkers (a git commit, a plain directory) and the
    history walk feed it through `take` and `skip`. Every path is scrubbed as text is (`stored_path`): a secret
    or an address in a file's name never reaches a row."""

    def __init__(self, ctx: StageContext, p: CollectParams):
        self.src, self.p = ctx.pin, p
        self.parts = _Parts(ctx.out, p.files_per_part)
        self.skipped: list[dict] = []
        self.licenses: list[dict] = []
        self.reasons: Counter = Counter()
        self.opted_out: Counter = Counter({rule: 0 for rule in self.src.opt_out.rules()})
        self.seen = self.kept_bytes = self.kept_files = 0
        self.submodules: list[Submodule] = []  # walked (git sources with `submodules`)

    def skip(self, path: str, size: int, sha: str | None, reason: str, commit: str | None = None) -> None:
        self.reasons[reason] += 1
        self.skipped.append({"source_repo": self.src.name, "source_commit": commit or self.src.commit,
                             "source_path": stored_path(path), "size_bytes": size, "raw_sha256": sha,
                             "decision": "skipped", "reason": reason})  # no license answer: REJECTION's nulls

    def opted_out_by_path(self, path: str, size: int, sha: str | None, commit: str | None = None) -> bool:
        """Skip the file at `path` as opt_out when a path rule names it (counting the rule); False if none does."""
        rule = self.src.opt_out.path_rule(path)
        if rule is not None:
            self.opted_out[rule] += 1
            self.skip(path, size, sha, "opt_out", commit)
        return rule is not None

    def out_of_scope(self, path: str, size: int, sha: str | None, data: bytes | None = None) -> None:
        """Skip the file at `path`, which the source's include/exclude globs leave out, as out_of_scope. A
        license text among such files is still kept for the license stage (`data`, read by the caller): the
        root LICENSE governs the included folders."""
        if data is not None and is_license_file_name(PurePosixPath(path).name) \
                and len(data) <= self.p.max_license_file_bytes:
            self.licenses.append({"source_repo": self.src.name, "source_path": stored_path(path), "content": data})
        self.skip(path, size, sha, "out_of_scope")

    def take(self, path: str, data: bytes, sha: str | None = None) -> None:
        """A file read at the pin: opted out by its bytes, kept as a license text and/or a C/C++ file, or
        skipped with its reason. `sha`: the caller's SHA-256 of `data`, when it hashed it already."""
        sha = sha or hashlib.sha256(data).hexdigest()
        if rule := self.src.opt_out.content_rule(sha):  # before anything reads it, its license file included
            self.opted_out[rule] += 1
            self.skip(path, len(data), sha, "opt_out")
            return
        if is_license_file_name(PurePosixPath(path).name) and len(data) <= self.p.max_license_file_bytes:
            self.licenses.append({"source_repo": self.src.name, "source_path": stored_path(path), "content": data})
        if not is_cpp(path, data[:HEAD_BYTES], self.p.extensions):
            self.skip(path, len(data), sha, "not_cpp")
        elif not data:
            self.skip(path, 0, sha, "empty_file")
        elif is_lfs_pointer(data):  # the file's bytes are on an LFS server, not in the repository
            self.skip(path, len(data), sha, "lfs_pointer")
        else:
            self.add(path, self.src.commit, data, sha)

    def add(self, path: str, commit: str, data: bytes, sha: str, history: dict | None = None) -> None:
        """Keep a C/C++ file (a version of one, with its `history` row, for v2/v3) in the parts."""
        self.kept_bytes += len(data)
        self.kept_files += 1
        row = {"source_repo": self.src.name, "source_commit": commit, "source_path": stored_path(path),
               "size_bytes": len(data), "raw_sha256": sha, "content": data}
        self.parts.add({**row, "history": history} if history is not None else row)

    def finish(self, out: Path) -> None:
        self.parts.flush()
        pq.write_table(pa.Table.from_pylist(self.skipped, schema=REJECTION), out / "skipped.parquet")
        pq.write_table(pa.Table.from_pylist(self.licenses, schema=LICENSE_FILE), out / "license_files.parquet")
        (out / SUBMODULES).write_text(json.dumps([m.row() for m in self.submodules], indent=1) + "\n")

    def counts(self, retrieved_at: str) -> dict:
        return {
            "retrieved_at": retrieved_at,
            "files_seen": self.seen,
            "files_collected": self.kept_files,
            "bytes_collected": self.kept_bytes,
            "parts": self.parts.n,
            "skipped": dict(sorted(self.reasons.items())),
            "license_files": len(self.licenses),
            "opt_out_matches": dict(sorted(self.opted_out.items())),
            **({"submodules": [m.row() for m in self.submodules]} if self.submodules else {}),
        }


def stored_path(path: str) -> str:
    """A file's path as rows store it: not-UTF-8 bytes escaped (printable_path), then a segment holding a secret
    or an e-mail address replaced by the scrub's placeholder (stages/lib/scrub.scrub_path)."""
    return scrub_path(printable_path(path))


def walk_git(c: _Collector, ctx: StageContext, scratch: Path) -> None:
    """Feed `c` every entry of the source's pinned commit, read from a shallow fetch in `scratch`: blobs through
    `git cat-file`, never a checkout, so no symlink is followed. With the source's `submodules`, each submodule
    that may hold files in scope is walked too, at the commit the parent records (stages/lib/submodules.py);
    `c.submodules` lists them."""
    src = ctx.pin
    repo = fetch_commit(src.url, src.commit, src.requested_ref, scratch / "repo.git")
    with ExpandedTree(repo, src.url, scratch, src.submodules, src.may_hold) as tree:
        for path, mode, kind, oid, size, blobs in tqdm(tree.entries(src.commit), desc=ctx.label, unit="file",
                                                       leave=False, disable=not ctx.executor.config.progress):
            c.seen += 1
            _git_entry(c, path, mode, kind, oid, size, blobs)
        c.submodules = tree.found


def _git_entry(c: _Collector, path: str, mode: str, kind: str, oid: str, size: int, blobs: BlobReader) -> None:
    """One entry of a git tree: skipped with its reason, or read and taken. A gitlink left here is a submodule
    not walked (`submodules` off, no URL in .gitmodules, or nothing in it in scope)."""
    if is_undecodable(path):  # stored escaped; no stage downstream gets a name it can't write
        c.skip(path, size, None, "undecodable_path")
    elif c.opted_out_by_path(path, size, None):
        pass
    elif not c.src.in_scope(path):
        license_text = (kind == "blob" and mode != "120000" and size <= c.p.max_license_file_bytes
                        and is_license_file_name(PurePosixPath(path).name))
        c.out_of_scope(path, size, None, blobs.read(oid) if license_text else None)
    elif kind == "commit":
        c.skip(path, 0, None, "submodule")
    elif mode == "120000":
        c.skip(path, size, None, "symlink")
    elif size > c.p.max_bytes:
        c.skip(path, size, None, "too_large")
    else:
        c.take(path, blobs.read(oid))


def walk_plain_directory(c: _Collector, ctx: StageContext) -> None:
    """Feed `c` every entry of a plain directory source, links never followed, and check that what was read is
    the tree its pin names (TreeDigest of exactly the bytes read)."""
    src = ctx.pin
    root = Path(src.url)
    digest = TreeDigest()
    for path, entry in tqdm(walk_directory(root), desc=ctx.label, unit="file", leave=False,
                            disable=not ctx.executor.config.progress):
        c.seen += 1
        if entry is None:  # a directory that cannot be listed: one row for it and what it holds
            digest.add(path, unreadable=True)
            c.skip(path, 0, None, "unreadable")
        elif entry.is_symlink():
            digest.add(path, link_target=os.readlink(entry.path))
            c.skip(path, 0, None, _symlink_reason(root, Path(entry.path)))
        elif not entry.is_file(follow_symlinks=False):
            digest.add(path)
            c.skip(path, 0, None, "not_regular_file")
        else:
            _read_directory_file(c, digest, path, entry)
    if digest.hexdigest() != src.commit:
        raise RuntimeError(f"source {src.name!r}: {root} is not the tree its pin names (pinned "
                           f"{src.commit[:17]}..., read {digest.hexdigest()[:17]}...): it changed after the pin was "
                           f"taken or while it was read; once it is still, run the build again with --relock (or "
                           f"`cpp-data sources lock` if a lock file pins it)")


def _read_directory_file(c: _Collector, digest: TreeDigest, path: str, entry: os.DirEntry) -> None:
    """One regular file of a plain directory: hashed into the tree digest (read all the same when it is
    skipped: the pin covers every byte), then skipped or taken."""
    size = entry.stat(follow_symlinks=False).st_size
    try:
        if size > c.p.max_bytes:
            data, raw = None, file_sha256(entry.path)
        else:
            with open(entry.path, "rb") as f:
                data = f.read()
            raw = hashlib.sha256(data).digest()  # once: the tree digest's and the row's
    except OSError:
        digest.add(path, unreadable=True)
        c.skip(path, size, None, "unreadable")
        return
    digest.add(path, file_sha256=raw)
    if data is None:
        c.skip(path, size, raw.hex(), "too_large")
    elif is_undecodable(path):
        c.skip(path, len(data), raw.hex(), "undecodable_path")
    elif c.opted_out_by_path(path, len(data), raw.hex()):
        pass
    elif not c.src.in_scope(path):
        c.out_of_scope(path, len(data), raw.hex(), data)
    else:
        c.take(path, data, raw.hex())


class Collect(Stage):
    name = "collect"
    version = 5
    scope = "source"
    Params = CollectParams

    summary_counts = {"files_seen": "files_seen", "cpp_files_collected": "files_collected",
                      "cpp_bytes_collected": "bytes_collected", "skipped": "skipped",
                      "retrieved_at": "per_source:retrieved_at", "files_seen_by_source": "per_source:files_seen",
                      "opt_out_matches": "opt_out_matches"}

    def run(self, ctx: StageContext) -> dict:
        p: CollectParams = self.params
        retrieved_at = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        c = _Collector(ctx, p)
        if p.history:
            return {**self._history(ctx, c), "retrieved_at": retrieved_at}
        if ctx.pin.kind == "git":
            with tempfile.TemporaryDirectory(dir=ctx.out, prefix=".git-") as tmp:
                walk_git(c, ctx, Path(tmp))
        else:
            walk_plain_directory(c, ctx)
        c.finish(ctx.out)
        return c.counts(retrieved_at)

    @staticmethod
    def _history(ctx: StageContext, c: _Collector) -> dict:
        """v2/v3: the versions of the source's commit walk (stages/lib/history.py) instead of its files."""
        from cpp_data.stages.lib.history import collect_history

        p = c.p
        if p.history not in ("pairs", "diffs"):
            raise ValueError(f"collect.history must be 'pairs' or 'diffs', not {p.history!r}")

        def add(path: str, commit: str, data: bytes, history: dict) -> None:
            sha = hashlib.sha256(data).hexdigest()
            if is_undecodable(path):
                c.skip(path, len(data), sha, "undecodable_path", commit)
            elif rule := c.src.opt_out.path_rule(path) or c.src.opt_out.content_rule(sha):
                c.opted_out[rule] += 1
                c.skip(path, len(data), sha, "opt_out", commit)
            elif not c.src.in_scope(path):
                c.skip(path, len(data), sha, "out_of_scope", commit)
            elif is_lfs_pointer(data):
                c.skip(path, len(data), sha, "lfs_pointer", commit)
            else:
                c.add(path, commit, data, sha, history)

        def skip(path: str, commit: str, size: int, sha: str | None, reason: str) -> None:
            c.skip(path, size, sha, reason, commit)

        def add_license(path: str, data: bytes, state: str) -> None:
            c.licenses.append({"source_repo": c.src.name, "source_path": stored_path(path), "content": data,
                               "state": state})

        history = collect_history(ctx, p, add, skip, add_license)
        c.finish(ctx.out)
        c.seen = c.kept_files + len(c.skipped)
        return {**c.counts(""), "history": history}


def _symlink_reason(root: Path, link: Path) -> str:
    """Why a symlink is skipped, from the tree alone, so that the same tree digest gives the same ledger: an
    absolute link, or one whose path leaves the tree, is `symlink_outside_tree` whether or not its target
    exists on the building machine (were it judged by its target, a dangling absolute link would turn
    outside_tree once its target appeared, changing the build's name); inside the tree, a link is a loop,
    dangling, or a plain `symlink` to a file read under its own path."""
    if os.path.isabs(os.readlink(link)):
        return "symlink_outside_tree"
    try:
        Path(os.path.realpath(link)).relative_to(root.resolve())  # not strict: where the path leads, as far as it goes
    except ValueError:
        return "symlink_outside_tree"
    try:
        os.path.realpath(link, strict=True)
    except OSError as exc:
        return "symlink_loop" if exc.errno == errno.ELOOP else "symlink_dangling"
    return "symlink"

