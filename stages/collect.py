"""collect: take each source at its pinned commit and keep its C and C++ files.

Git sources are fetched shallowly at the pinned SHA into a bare repository (local paths work offline) and read
blob by blob with `git ls-tree` and `git cat-file --batch`: no working tree is checked out, so symlinks are
never followed at all. Plain directories are walked without following links, and their digest is checked
against the lock so a directory that changed since it was locked fails loudly.

Output: files-NNNNN.parquet (COLLECTED_FILE, `files_per_part` files each, path order), license_files.parquet
(LICENSE/COPYING texts for the license stage), skipped.parquet (REJECTION rows: not C/C++, too large, empty,
symlink, submodule, not a regular file, unreadable, a Git LFS pointer). Retrieval time goes into stage.json, not
into the data (bytes stay reproducible).
"""

from __future__ import annotations

import errno
import hashlib
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

from cpp_data.pipeline.exclusions import OptOut
from cpp_data.pipeline.sources import TreeDigest, file_sha256, is_undecodable, printable_path, walk_directory
from cpp_data.pipeline.stage import Stage, StageContext
from cpp_data.schemas.artifacts import COLLECTED_FILE, LICENSE_FILE, REJECTION
from cpp_data.stages.lib.license_match import LICENSE_FILE as LICENSE_NAME
from cpp_data.stages.lib.repo_files import (DEFAULT_EXTENSIONS, HEAD_BYTES, BlobReader, fetch_commit, is_cpp,
                                            is_lfs_pointer, tree_entries)



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
        self.out, self.per_part, self.rows, self.n = out, per_part, [], 0

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


class Collect(Stage):
    name = "collect"
    version = 3
    scope = "source"
    Params = CollectParams

    summary_counts = {"files_seen": "files_seen", "cpp_files_collected": "files_collected",
                      "cpp_bytes_collected": "bytes_collected", "skipped": "skipped",
                      "retrieved_at": "per_source:retrieved_at", "files_seen_by_source": "per_source:files_seen"}

    def run(self, ctx: StageContext) -> dict:
        p: CollectParams = self.params
        src = ctx.source
        retrieved_at = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        parts = _Parts(ctx.out, p.files_per_part)
        skipped: list[dict] = []
        licenses: list[dict] = []
        reasons: Counter = Counter()
        kept_bytes = seen = 0

        def skip(path: str, size: int, sha: str | None, reason: str) -> None:
            reasons[reason] += 1
            skipped.append({"source_repo": src.name, "source_commit": src.commit, "source_path": printable_path(path),
                            "size_bytes": size, "raw_sha256": sha,
                            "decision": "skipped", "reason": reason, "license_spdx": None,
                            "license_source": None, "license_confidence": None})

        if p.history:
            return self._history(ctx, p, parts, skipped, licenses, reasons, retrieved_at)

        opt_out = OptOut.from_rules(src.opt_out)

        def take(path: str, data: bytes, sha: str | None = None) -> None:  # sha: the caller's, when it hashed
            nonlocal kept_bytes
            name = PurePosixPath(path).name
            sha = sha or hashlib.sha256(data).hexdigest()
            if opt_out.content(sha):  # before anything reads it, its license file included
                skip(path, len(data), sha, "opt_out")
                return
            if LICENSE_NAME.match(name) and len(data) <= p.max_license_file_bytes:
                licenses.append({"source_repo": src.name, "source_path": path, "content": data})
            if not is_cpp(path, data[:HEAD_BYTES], p.extensions):
                skip(path, len(data), sha, "not_cpp")
            elif not data:
                skip(path, 0, sha, "empty_file")
            elif is_lfs_pointer(data):  # the file's bytes are on an LFS server, not in the repository
                skip(path, len(data), sha, "lfs_pointer")
            else:
                kept_bytes += len(data)
                parts.add({"source_repo": src.name, "source_commit": src.commit, "source_path": path, "size_bytes": len(data),
                           "raw_sha256": sha, "content": data})

        with tempfile.TemporaryDirectory(dir=ctx.out, prefix=".git-") as tmp:
            if src.kind == "git":
                repo = fetch_commit(src.url, src.commit, src.requested_ref, Path(tmp) / "repo.git")
                blobs = BlobReader(repo)
                try:
                    for path, mode, kind, oid, size in tqdm(tree_entries(repo, src.commit), desc=ctx.label,
                                                            unit="file", leave=False,
                                                            disable=not ctx.executor.progress):
                        seen += 1
                        if is_undecodable(path):  # stored escaped; no stage downstream gets a name it can't write
                            skip(path, size, None, "undecodable_path")
                        elif opt_out.path(path):
                            skip(path, size, None, "opt_out")
                        elif kind == "commit":
                            skip(path, 0, None, "submodule")
                        elif mode == "120000":
                            skip(path, size, None, "symlink")
                        elif size > p.max_bytes:
                            skip(path, size, None, "too_large")
                        else:
                            take(path, blobs.read(oid))
                finally:
                    blobs.close()
            else:
                root = Path(src.url)
                digest = TreeDigest()  # of exactly what is read, checked against the pin at the end
                for path, entry in tqdm(walk_directory(root), desc=ctx.label, unit="file", leave=False,
                                        disable=not ctx.executor.progress):
                    seen += 1
                    if entry is None:  # a directory that cannot be listed: one row for it and what it holds
                        digest.add(path, unreadable=True)
                        skip(path, 0, None, "unreadable")
                    elif entry.is_symlink():
                        digest.add(path, link_target=os.readlink(entry.path))
                        skip(path, 0, None, _symlink_reason(root, Path(entry.path)))
                    elif not entry.is_file(follow_symlinks=False):
                        digest.add(path)
                        skip(path, 0, None, "not_regular_file")
                    elif (size := entry.stat(follow_symlinks=False).st_size) > p.max_bytes:
                        try:
                            raw = file_sha256(entry.path)
                        except OSError:
                            digest.add(path, unreadable=True)
                            skip(path, size, None, "unreadable")
                            continue
                        digest.add(path, file_sha256=raw)
                        skip(path, size, raw.hex(), "too_large")
                    else:
                        try:
                            with open(entry.path, "rb") as f:
                                data = f.read()
                        except OSError:
                            digest.add(path, unreadable=True)
                            skip(path, size, None, "unreadable")
                            continue
                        raw = hashlib.sha256(data).digest()  # once: the tree digest's and the row's
                        digest.add(path, file_sha256=raw)
                        if is_undecodable(path):
                            skip(path, len(data), raw.hex(), "undecodable_path")
                        elif opt_out.path(path):  # read all the same: the pin's tree digest covers it
                            skip(path, len(data), raw.hex(), "opt_out")
                        else:
                            take(path, data, raw.hex())
                if digest.hexdigest() != src.commit:
                    raise RuntimeError(f"source {src.name!r}: {root} is not the tree its pin names (pinned "
                                       f"{src.commit[:17]}..., read {digest.hexdigest()[:17]}...): it changed "
                                       f"after the pin was taken or while it was read; once it is still, run the "
                                       f"build again with --relock (or `cpp-data sources lock` if a lock file "
                                       f"pins it)")
        parts.flush()
        pq.write_table(pa.Table.from_pylist(skipped, schema=REJECTION), ctx.out / "skipped.parquet")
        pq.write_table(pa.Table.from_pylist(licenses, schema=LICENSE_FILE), ctx.out / "license_files.parquet")
        return {
            "retrieved_at": retrieved_at,
            "files_seen": seen,
            "files_collected": seen - len(skipped),
            "bytes_collected": kept_bytes,
            "parts": parts.n,
            "skipped": dict(sorted(reasons.items())),
            "license_files": len(licenses),
        }


    def _history(self, ctx, p, parts, skipped, licenses, reasons, retrieved_at) -> dict:
        from cpp_data.stages.lib.history import collect_history

        src = ctx.source
        if p.history not in ("pairs", "diffs"):
            raise ValueError(f"collect.history must be 'pairs' or 'diffs', not {p.history!r}")
        kept = {"bytes": 0, "files": 0}

        opt_out = OptOut.from_rules(src.opt_out)

        def add(path: str, commit: str, data: bytes, history: dict) -> None:
            sha = hashlib.sha256(data).hexdigest()
            reason = ("undecodable_path" if is_undecodable(path)
                      else "opt_out" if opt_out.path(path) or opt_out.content(sha)
                      else "lfs_pointer" if is_lfs_pointer(data) else None)
            if reason:
                skip(path, commit, len(data), sha, reason)
                return
            kept["bytes"] += len(data)
            kept["files"] += 1
            parts.add({"source_repo": src.name, "source_commit": commit, "source_path": path, "size_bytes": len(data),
                       "raw_sha256": sha, "content": data, "history": history})

        def skip(path: str, commit: str, size: int, sha: str | None, reason: str) -> None:
            reasons[reason] += 1
            skipped.append({"source_repo": src.name, "source_commit": commit, "source_path": printable_path(path),
                            "size_bytes": size, "raw_sha256": sha, "decision": "skipped", "reason": reason, "license_spdx": None,
                            "license_source": None, "license_confidence": None})

        def add_license(path: str, data: bytes, state: str) -> None:
            licenses.append({"source_repo": src.name, "source_path": printable_path(path), "content": data, "state": state})

        counts = collect_history(ctx, p, add, skip, add_license)
        parts.flush()
        pq.write_table(pa.Table.from_pylist(skipped, schema=REJECTION), ctx.out / "skipped.parquet")
        pq.write_table(pa.Table.from_pylist(licenses, schema=LICENSE_FILE), ctx.out / "license_files.parquet")
        return {"retrieved_at": retrieved_at, "files_seen": kept["files"] + len(skipped),
                "files_collected": kept["files"], "bytes_collected": kept["bytes"], "parts": parts.n,
                "skipped": dict(sorted(reasons.items())), "license_files": len(licenses), "history": counts}


def _symlink_reason(root: Path, link: Path) -> str:
    """Why a symlink is skipped, from the tree alone, so that the same tree digest gives the same ledger: an
    absolute link, or one whose path leaves the tree, is `symlink_outside_tree` whether or not its target
    exists on this machine (a dangling absolute link had become outside_tree once its target appeared, changing
    the build's name); inside the tree, a link is a loop, dangling, or a plain `symlink` to a file read under
    its own path."""
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

