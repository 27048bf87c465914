"""Reading a source repository: git at a pinned commit, and which files are C or C++.

Shared by collect (files at the pin), the history walk of v2/v3 (stages/lib/history.py) and semantics (a
worktree of the pin for the compile database)."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path, PurePosixPath

DEFAULT_EXTENSIONS = (".c", ".h", ".cc", ".cpp", ".cxx", ".c++", ".cp", ".hh", ".hpp", ".hxx", ".h++", ".ipp",
                      ".tpp", ".txx", ".tcc", ".inl", ".ixx", ".cppm")
_SHEBANG_HINTS = (b"tcc", b"cling", b"c++", b"g++", b"clang", b"cpp", b"rund")
# `.inc` is C/C++ in abseil and protobuf, assembly (NASM) or Pascal elsewhere: such a file is taken when its
# head reads as C/C++ (HEAD_BYTES), like an extensionless one, unless the recipe lists `.inc` outright
SNIFFED_EXTENSIONS = (".inc",)
HEAD_BYTES = 4096  # what collect passes as `head`: a license banner can fill the first few hundred bytes
# The preprocessor lines a C/C++ header opens with: an #include of <...> or "...", #pragma once, or an include
# guard (#ifndef X then #define X). A LICENSE text, a Makefile or a NASM include has none of them.
_CPP_HEAD = re.compile(rb'^[ \t]*#[ \t]*(?:include[ \t]*[<"]|pragma[ \t]+once\b|'
                       rb"ifndef[ \t]+(\w+)[ \t]*\r?\n(?:[ \t]*(?://[^\n]*)?\r?\n)*[ \t]*#[ \t]*define[ \t]+\1\b)",
                       re.M)


def is_cpp(path: str, head: bytes, extensions: tuple[str, ...]) -> bool:
    """C/C++ by extension; an extensionless file (GSL's `span`, Eigen's `Core`, libstdc++'s `vector`) by a
    C/C++ shebang, an Emacs `-*- C++ -*-` mode line, or a head that reads as C/C++ (_CPP_HEAD), as is a
    `.inc` file. Without the head test, GSL's headers and Eigen's module headers would all be skipped as
    not_cpp."""
    name = PurePosixPath(path).name
    suffix = PurePosixPath(name).suffix.lower()
    if suffix in extensions:
        return True
    if suffix and suffix not in SNIFFED_EXTENSIONS:
        return False
    first = head.split(b"\n", 1)[0]
    if first.startswith(b"#!"):
        return any(h in first for h in _SHEBANG_HINTS)
    return b"-*- c++ -*-" in first.lower() or b"-*-c++-*-" in first.lower() or _CPP_HEAD.search(head) is not None


# Git LFS keeps a large file's bytes on a server and commits a small text pointer in its place (the LFS spec:
# UTF-8 lines `key value`, starting with this version line, under 1024 bytes). A repository cloned without LFS,
# as collect fetches every source, holds the pointer under the C++ file's name.
_LFS_VERSIONS = (b"version https://git-lfs.github.com/spec/v1\n", b"version https://hawser.github.com/spec/v1\n")
_LFS_POINTER_MAX = 1024


def is_lfs_pointer(data: bytes) -> bool:
    """Whether `data` is a Git LFS pointer (the file's content is not in the repository) rather than the file."""
    return len(data) < _LFS_POINTER_MAX and data.startswith(_LFS_VERSIONS) and b"\noid " in data


def git(args: list[str], cwd: Path) -> str:
    proc = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True,
                          env={**os.environ, "GIT_TERMINAL_PROMPT": "0"})
    if proc.returncode != 0:
        last = proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else f"exit {proc.returncode}"
        raise RuntimeError(f"git {' '.join(args[:2])}: {last}")
    return proc.stdout


def fetch_commit(url: str, commit: str, requested_ref: str | None, into: Path) -> Path:
    """Shallow-fetch `commit` from `url` into a bare repository at `into`; verify what arrived."""
    into.mkdir(parents=True, exist_ok=True)
    git(["init", "--quiet", "--bare", str(into)], cwd=into)
    attempts = [commit] + ([requested_ref] if requested_ref and requested_ref != "HEAD" else [])
    last = None
    for want in attempts:
        try:
            git(["fetch", "--quiet", "--depth", "1", "--no-tags", url, want], cwd=into)
            got = git(["rev-parse", "FETCH_HEAD^{commit}"], cwd=into).strip()
            if got == commit:
                return into
            last = f"fetched {want} but it is {got}, not the pinned {commit}"
        except RuntimeError as exc:
            last = str(exc)
    try:  # servers that refuse shallow fetches by SHA: fetch everything, then check the pin exists
        git(["fetch", "--quiet", "--no-tags", url, "+refs/*:refs/remotes/src/*"], cwd=into)
        git(["cat-file", "-e", f"{commit}^{{commit}}"], cwd=into)
        return into
    except RuntimeError:
        raise RuntimeError(f"cannot fetch pinned commit {commit} from {url}: {last}") from None


class BlobReader:
    """`git cat-file --batch` as a reader of blob contents by object id."""

    def __init__(self, repo: Path):
        self.proc = subprocess.Popen(["git", "cat-file", "--batch"], cwd=repo, stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE)
        assert self.proc.stdin is not None and self.proc.stdout is not None  # both piped
        self.stdin, self.stdout = self.proc.stdin, self.proc.stdout

    def read(self, oid: str) -> bytes:
        data = self.read_present(oid)
        if data is None:
            raise RuntimeError(f"git object {oid} is missing from the repository (a partial clone or snapshot?)")
        return data

    def read_present(self, oid: str) -> bytes | None:
        """The blob's contents, or None where the repository lacks the object (cat-file answers `<oid> missing`)."""
        self.stdin.write(oid.encode() + b"\n")
        self.stdin.flush()
        header = self.stdout.readline().split()
        if header[1:2] == [b"missing"]:
            return None
        size = int(header[2])
        data = self.stdout.read(size)
        self.stdout.read(1)
        return data

    def close(self) -> None:
        self.stdin.close()
        self.proc.wait()


def tree_entries(repo: Path, commit: str):
    """Yield (path, mode, oid, size) for every tree entry at `commit`, sorted by path."""
    out = subprocess.run(["git", "ls-tree", "-r", "-l", "-z", "--full-tree", commit], cwd=repo,
                         capture_output=True, check=True).stdout
    for record in out.split(b"\0"):
        if not record:
            continue
        meta, path = record.split(b"\t", 1)
        mode, kind, oid, size = meta.split()
        yield path.decode("utf-8", "surrogateescape"), mode.decode(), kind.decode(), oid.decode(), \
            (int(size) if size != b"-" else 0)
