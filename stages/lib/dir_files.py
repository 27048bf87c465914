"""Reading a plain directory source: its entries in a fixed order without following links, file names that are
not UTF-8, and the tree digest that pins it (`tree:<sha256>` of exactly the bytes read)."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator
from pathlib import Path

from cpp_data.pipeline.foundation.fsutil import hash_file


def walk_directory(root: Path) -> Iterator[tuple[str, os.DirEntry | None]]:
    """Yield (relative posix path, entry) for every non-directory entry under root, sorted, never
    following symbolic links (so links to directories, outside targets and loops are never entered). A
    directory that cannot be listed is yielded as ("its/path/", None), so callers record it instead of
    losing what it holds without a trace."""
    stack = [(root, "")]
    while stack:
        directory, prefix = stack.pop()
        try:
            entries = sorted(os.scandir(directory), key=lambda e: e.name)
        except OSError:
            yield prefix or "./", None
            continue
        subdirs = []
        for entry in entries:
            rel = f"{prefix}{entry.name}"
            if entry.is_dir(follow_symlinks=False):
                if entry.name != ".git":
                    subdirs.append((Path(entry.path), rel + "/"))
            else:
                yield rel, entry
        stack.extend(reversed(subdirs))


def printable_path(rel: str) -> str:
    """A path as it can be stored and shown: a file name's bytes that are not UTF-8 (held as surrogate
    escapes by os.scandir and by collect's git reader) become `\\xNN`."""
    return rel.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


def is_undecodable(rel: str) -> bool:
    try:
        rel.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


class TreeDigest:
    """`tree:<sha256>` of a directory, fed entry by entry in walk order: path, then a link's target or a
    file's content digest. Collect feeds it the very bytes it reads, so what it collected is what the pin
    names."""

    def __init__(self) -> None:
        self._h = hashlib.sha256()

    def add(self, rel: str, link_target: str | None = None, file_sha256: bytes | None = None,
            unreadable: bool = False) -> None:
        self._h.update(rel.encode("utf-8", "surrogateescape") + b"\0")
        if link_target is not None:
            self._h.update(b"L" + link_target.encode("utf-8", "surrogateescape"))
        elif file_sha256 is not None:
            self._h.update(b"F" + file_sha256)
        elif unreadable:
            self._h.update(b"U")
        self._h.update(b"\n")

    def hexdigest(self) -> str:
        return "tree:" + self._h.hexdigest()


def file_sha256(path: str) -> bytes:
    return hash_file(hashlib.sha256(), Path(path)).digest()
