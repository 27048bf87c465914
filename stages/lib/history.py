"""Commit-history versions of a git source, for the v2 and v3 generations (docs/DESIGN.md section 7).

Walks the first-parent history between two pinned commits (`history_from`, exclusive, and the source's pin;
without `history_from`, the last `max_commits` commits) and reads each commit's change list with
`git diff-tree -r -M` against its first parent, blobs with `git cat-file --batch`: no working tree is ever
checked out. For every commit that touches a C/C++ file:
  pairs (v2)  the file before (as of the parent) and after (as of the commit), as two documents
  diffs (v3)  one document: a synthesized header, then the new code with each removed line kept as a
              `// Removed: ...` comment at its place (doxygen `/** @file ... @brief ... */` or simple
              `// File: ...` header, chosen per document at `doxygen_share`, seeded)
A version's identity is (repo, path, commit it is read at). The before-version of a commit is the
after-version of the last commit in the walk that wrote the file, so it is emitted once, as that after; only
when the file was last written before the walk starts is it emitted as a "before" (read at the parent).
Renames keep the old path in `rename_from`; merge commits are diffed against their first parent and marked;
binary blobs, submodule bumps (gitlinks), symlinks and oversized blobs are recorded as skipped with the reason.
The LICENSE/COPYING files are recorded per distinct license state of the tree, and every version carries the
state as of its commit, so the license stage judges a file by the licenses of that commit.
"""

from __future__ import annotations

import difflib
import fnmatch
import hashlib
import subprocess
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from cpp_data.stages.lib.license_pointers import is_license_file_name
from cpp_data.stages.lib.repo_files import BlobReader, git, is_cpp


@dataclass
class Commit:
    sha: str
    parents: list[str]
    author_time: int
    commit_time: int
    subject: str


def walk(repo: Path, tip: str, since: str | None, max_commits: int) -> list[Commit]:
    """First-parent commits from oldest to newest: `since` (exclusive) .. `tip`, at most `max_commits`."""
    args = ["log", "--first-parent", f"--max-count={max_commits}", "--format=%H%x00%P%x00%at%x00%ct%x00%s%x1e", tip]
    if since:
        args.append(f"^{since}")
    out = git(args, cwd=repo)
    commits = []
    for rec in out.split("\x1e"):
        rec = rec.strip("\n")
        if not rec:
            continue
        sha, parents, at, ct, subject = rec.split("\x00", 4)
        commits.append(Commit(sha, parents.split(), int(at), int(ct), subject))
    return commits[::-1]


def changes(repo: Path, commit: Commit):
    """(status, old_mode, new_mode, old_oid, new_oid, old_path, new_path) of a commit against its first parent."""
    base = commit.parents[0] if commit.parents else "--root"
    args = ["diff-tree", "-r", "-z", "-M", "--raw", "--no-commit-id"]
    args += [base, commit.sha] if commit.parents else ["--root", commit.sha]
    out = subprocess.run(["git", *args], cwd=repo, capture_output=True, check=True).stdout
    fields = out.split(b"\0")
    i = 0
    while i < len(fields) - 1:
        meta = fields[i].decode()
        if not meta.startswith(":"):
            i += 1
            continue
        old_mode, new_mode, old_oid, new_oid, status = meta[1:].split(" ")
        old_path = fields[i + 1].decode("utf-8", "surrogateescape")
        if status[0] in "RC":
            new_path = fields[i + 2].decode("utf-8", "surrogateescape")
            i += 3
        else:
            new_path = old_path
            i += 2
        yield status[0], old_mode, new_mode, old_oid, new_oid, old_path, new_path


def license_state(repo: Path, commit: str, blobs: BlobReader, cache: dict, max_bytes: int) -> tuple[str, list]:
    """(state id, [(path, content)]) of the LICENSE/COPYING files in the tree of `commit`."""
    out = subprocess.run(["git", "ls-tree", "-r", "-z", "--full-tree", commit], cwd=repo, capture_output=True,
                         check=True).stdout
    found = []
    for rec in out.split(b"\0"):
        if not rec:
            continue
        meta, path = rec.split(b"\t", 1)
        mode, kind, oid = meta.decode().split()
        p = path.decode("utf-8", "surrogateescape")
        if kind == "blob" and is_license_file_name(PurePosixPath(p).name):
            found.append((p, oid))
    key = hashlib.sha256(repr(sorted(found)).encode()).hexdigest()[:16]
    if key not in cache:
        files = []
        for p, oid in sorted(found):
            data = blobs.read(oid)
            if len(data) <= max_bytes:
                files.append((p, data))
        cache[key] = files
    return key, cache[key]


def header(style: str, path: str, commit: Commit) -> str:
    if style == "doxygen":
        return (f"/**\n * @file {path}\n * @brief {commit.subject}\n * @commit {commit.sha}\n"
                f" * @parent {commit.parents[0] if commit.parents else '(root)'}\n */\n")
    return f"// File: {path}\n// Commit: {commit.sha} {commit.subject}\n"


def removed_as_comments(before: str, after: str) -> str:
    """The new text, with every line the commit removed kept as `// Removed: <line>` where it stood."""
    old, new = before.splitlines(keepends=True), after.splitlines(keepends=True)
    out = []
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, old, new, autojunk=False).get_opcodes():
        if tag in ("delete", "replace"):
            for line in old[i1:i2]:
                body = line.rstrip("\r\n")
                out.append(f"// Removed: {body}\n")
        if tag in ("equal", "insert", "replace"):
            out.extend(new[j1:j2])
    return "".join(out)


def header_style(seed: int, share: float, source: str, path: str, commit: str) -> str:
    h = hashlib.blake2b(f"header\0{seed}\0{source}\0{path}\0{commit}".encode("utf-8", "surrogatepass"),
                        digest_size=8).digest()
    return "doxygen" if int.from_bytes(h, "big") < share * 2**64 else "simple"


def wanted(path: str, globs: tuple[str, ...], extensions) -> bool:
    return is_cpp(path, b"", extensions) and (not globs or any(fnmatch.fnmatch(path, g) for g in globs))


def fetch_history(url: str, tip: str, since: str | None, depth: int, into: Path) -> Path:
    """A bare repository holding `tip` and its first-parent history back to `since` (or `depth` commits)."""
    into.mkdir(parents=True, exist_ok=True)
    git(["init", "--quiet", "--bare", str(into)], cwd=into)
    src = f"file://{Path(url).resolve()}" if "://" not in url and Path(url).exists() else url
    args = ["fetch", "--quiet", "--no-tags"] + ([] if since else ["--depth", str(depth)]) + [src, tip]
    git(args, cwd=into)
    if git(["rev-parse", "FETCH_HEAD^{commit}"], cwd=into).strip() != tip:
        raise RuntimeError(f"fetched {url} but FETCH_HEAD is not the pinned {tip}")
    if since:
        try:
            git(["cat-file", "-e", f"{since}^{{commit}}"], cwd=into)
        except RuntimeError:
            raise RuntimeError(f"history_from {since} is not an ancestor fetched with {tip} from {url}") from None
    return into


class _HistoryWalk:
    """One walk over a repository's commits: it reads each touched file's versions and hands them to the
    collector's `add(path, commit, data, history)`, `skip(path, commit, size, sha, reason)` and
    `add_license(path, data, state)`, remembering what it already emitted so a version appears once."""

    def __init__(self, repo: Path, blobs, p, source: str, add, skip, add_license):
        self.repo, self.blobs, self.p, self.source = repo, blobs, p, source
        self.add, self.skip, self.add_license = add, skip, add_license
        self.counts = {"commits": 0, "merges": 0, "versions": 0}
        self.states: dict = {}
        self.state_of: dict = {}  # commit -> license state id
        self.emitted_states: set = set()
        self.emitted: set = set()  # (path, commit) versions already written
        self.refused: set = set()  # (path, commit) versions already recorded as skipped
        self.origin: dict = {}  # path -> the path its lineage started at (renames followed)
        self.last_change: dict = {}  # path -> the commit in the walk that last wrote it (its current version)

    def state_at(self, sha: str) -> str:
        if sha not in self.state_of:
            self.state_of[sha] = license_state(self.repo, sha, self.blobs, self.states,
                                               self.p.max_license_file_bytes)[0]
        return self.state_of[sha]

    def visit(self, commit) -> None:
        """One commit of the walk: its touched C/C++ files (and submodule bumps, whatever their path)."""
        p = self.p
        self.counts["commits"] += 1
        self.counts["merges"] += len(commit.parents) > 1
        parent = commit.parents[0] if commit.parents else ""
        touched = [c for c in changes(self.repo, commit)
                   if wanted(c[6], p.history_paths, p.extensions) or wanted(c[5], p.history_paths, p.extensions)
                   or "160000" in (c[1], c[2])]
        if not touched:
            return
        after_state = self.state_at(commit.sha)
        before_state = self.state_at(parent) if parent else after_state
        for st in (after_state, before_state):
            if st not in self.emitted_states:
                self.emitted_states.add(st)
                for path, data in self.states[st]:
                    self.add_license(path, data, st)
        for change in touched:
            self.visit_change(commit, parent, change, before_state, after_state)

    def visit_change(self, commit, parent: str, change: tuple, before_state: str, after_state: str) -> None:
        status, old_mode, new_mode, old_oid, new_oid, old_path, new_path = change
        root = self.origin.get(old_path, old_path)
        if status == "R":
            self.origin[new_path] = root
        meta = {"lineage": root, "commit": commit.sha, "parent_commit": parent, "author_time": commit.author_time,
                "commit_time": commit.commit_time, "change": status,
                "rename_from": old_path if status == "R" else None, "is_merge": len(commit.parents) > 1}
        before = self.read(old_mode, old_oid, old_path, parent) if status != "A" and parent else None
        after = self.read(new_mode, new_oid, new_path, commit.sha) if status != "D" else None
        if self.p.history == "pairs":
            self.emit_pairs(change, meta, before, after, before_state, after_state)
        elif (after is not None or before is not None) and (new_mode if status != "D" else old_mode) not in (
                "160000", "120000"):
            self.emit_diff(commit, new_path, meta, before, after, after_state)

    def read(self, mode: str, oid: str, path: str, at: str) -> bytes | None:
        """A version's bytes, or None (recorded once as skipped) for a submodule, a symlink, a file too large or
        a binary one."""
        data = None if mode in ("160000", "120000") else self.blobs.read(oid)
        reason = ("submodule" if mode == "160000" else "symlink" if mode == "120000" or data is None
                  else "too_large" if len(data) > self.p.max_bytes else "binary" if b"\0" in data else None)
        if reason is None:
            return data
        if (path, at) not in self.refused:
            self.refused.add((path, at))
            self.skip(path, at, len(data or b""), data and hashlib.sha256(data).hexdigest(), reason)
        return None

    def emit_pairs(self, change: tuple, meta: dict, before, after, before_state: str, after_state: str) -> None:
        """v2: the file before and after the commit; the before-version is the after-version of the last commit
        in the walk that wrote it, so each version is written once."""
        status, _, _, _, _, old_path, new_path = change
        commit, parent = meta["commit"], meta["parent_commit"]
        versions = [("before", old_path, self.last_change.get(old_path, parent), parent, before, before_state),
                    ("after", new_path, commit, commit, after, after_state)]
        if status != "D":
            self.last_change[new_path] = commit
        for side, path, identity, at, data, state in versions:
            if data is None or (path, identity) in self.emitted:
                continue
            self.emitted.add((path, identity))
            self.add(path, at, data, {**meta, "side": side, "header_style": None, "license_state": state})
            self.counts["versions"] += 1

    def emit_diff(self, commit, new_path: str, meta: dict, before, after, after_state: str) -> None:
        """v3: one document per commit and file: a header, then the new code with removed lines as comments."""
        style = header_style(self.p.history_seed, self.p.doxygen_share, self.source, new_path, commit.sha)
        old_text = (before or b"").decode("utf-8", "replace")
        new_text = (after or b"").decode("utf-8", "replace")
        text = header(style, new_path, commit) + removed_as_comments(old_text, new_text)
        self.add(new_path, commit.sha, text.encode("utf-8"),
                 {**meta, "side": "diff", "header_style": style, "license_state": after_state})
        self.counts["versions"] += 1


def collect_history(ctx, p, add, skip, add_license) -> dict:
    """Emit the versions of a git source's history walk through `add(row)` / `skip(...)`; returns counts."""
    import tempfile

    src = ctx.pin
    if src.kind != "git":
        raise RuntimeError(f"source {src.name!r}: the {p.history} history walk needs a git source, not a directory")
    with tempfile.TemporaryDirectory(dir=ctx.out, prefix=".git-") as tmp:
        repo = fetch_history(src.url, src.commit, src.history_from_commit, p.history_max_commits + 1,
                             Path(tmp) / "repo.git")
        blobs = BlobReader(repo)
        history = _HistoryWalk(repo, blobs, p, src.name, add, skip, add_license)
        try:
            for commit in walk(repo, src.commit, src.history_from_commit, p.history_max_commits):
                history.visit(commit)
        finally:
            blobs.close()
    return {**history.counts, "license_states": len(history.emitted_states)}
