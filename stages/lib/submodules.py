"""A git commit's tree with its submodules expanded, each at the commit its parent records (the gitlink).

A submodule is a pointer in the parent's tree: a gitlink entry (mode 160000) holding a commit id, and a URL in
the commit's own `.gitmodules` (not a working tree's). Expanding one fetches exactly that commit, shallowly, from
that URL (a relative URL such as `../googletest.git` is read against the parent's, git's rule) and walks its
tree in turn, recursively, paths prefixed with the submodule's path. What is not expanded stays a gitlink entry
for the caller to record: a submodule with no URL, one deeper than `max_depth`, one met again at the same
commit and path, or one the caller's `wanted(path)` passes over (nothing under it is in scope).

Hand-written: `git submodule update` needs a working tree and fetches whatever the superproject's remotes hold;
collect reads blobs from bare repositories (no checkout, so no symlink is followed) and must fetch each pinned
commit and verify it (repo_files.fetch_commit).
"""

from __future__ import annotations

import posixpath
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from cpp_data.stages.lib.repo_files import BlobReader, fetch_commit, git, tree_entries

SUBMODULES = "submodules.json"  # in collect's output: the submodules walked, [{path, url, commit}]


@dataclass(frozen=True)
class Submodule:
    path: str  # in the top repository's tree: third_party/googletest
    url: str  # resolved: a relative URL read against its parent's
    commit: str  # the gitlink's commit: what the parent pins

    def row(self) -> dict:
        return {"path": self.path, "url": self.url, "commit": self.commit}


def gitmodules(repo: Path, commit: str) -> dict[str, str]:
    """Submodule path -> URL, from `.gitmodules` as the commit holds it; {} without one."""
    try:
        out = git(["config", "--blob", f"{commit}:.gitmodules", "-z", "--get-regexp",
                   r"^submodule\..*\.(path|url)$"], repo)
    except RuntimeError:  # no .gitmodules at that commit (or no entry): gitlinks stay unexpanded
        return {}
    by_name: dict[str, dict[str, str]] = {}
    for record in out.split("\0"):
        key, _, value = record.partition("\n")
        if key.startswith("submodule."):
            name, _, field = key[len("submodule."):].rpartition(".")
            by_name.setdefault(name, {})[field] = value
    return {v["path"].strip("/"): v["url"] for v in by_name.values() if "path" in v and "url" in v}


def resolve_url(url: str, parent_url: str) -> str:
    """A submodule URL as git reads it: `./x` and `../x` relative to the parent repository's URL."""
    if not url.startswith(("./", "../")):
        return url
    scheme, sep, rest = parent_url.rstrip("/").rpartition("://")
    joined = posixpath.normpath(posixpath.join(rest, url))
    return f"{scheme}{sep}{joined}" if sep else joined


class ExpandedTree:
    """The entries of a pinned commit with its submodules expanded (`entries`), each entry with the blob reader
    of the repository it lives in; `found` lists the submodules expanded, in the order met. Close it (or use
    it as a context manager) to end the blob readers."""

    def __init__(self, repo: Path, url: str, scratch: Path, expand: bool, wanted: Callable[[str], bool],
                 max_depth: int = 8):
        self.repo, self.url, self.scratch = repo, url, scratch
        self.expand, self.wanted, self.max_depth = expand, wanted, max_depth
        self.found: list[Submodule] = []
        self._readers: list[BlobReader] = []
        self._seen: set[tuple[str, str]] = set()

    def __enter__(self) -> ExpandedTree:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        for reader in self._readers:
            reader.close()
        self._readers = []

    def entries(self, commit: str) -> Iterator[tuple[str, str, str, str, int, BlobReader]]:
        """(path, mode, kind, oid, size, blob reader) of every entry of `commit` and of its expanded submodules."""
        yield from self._walk(self.repo, commit, self.url, "", 0)

    def _walk(self, repo: Path, commit: str, url: str, prefix: str, depth: int):
        reader = BlobReader(repo)
        self._readers.append(reader)
        modules = gitmodules(repo, commit) if self.expand else {}
        for path, mode, kind, oid, size in tree_entries(repo, commit):
            full = prefix + path
            sub_url = modules.get(path) if kind == "commit" else None
            if sub_url is None or depth >= self.max_depth or (oid, full) in self._seen or not self.wanted(full):
                yield full, mode, kind, oid, size, reader
                continue
            self._seen.add((oid, full))
            sub = Submodule(full, resolve_url(sub_url, url), oid)
            sub_repo = fetch_commit(sub.url, oid, None, self.scratch / f"submodule-{len(self.found):04d}.git")
            self.found.append(sub)
            yield from self._walk(sub_repo, oid, sub.url, full + "/", depth + 1)
