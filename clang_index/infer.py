"""Inferred compile commands: one per C/C++ source file that no build system gave a command, read from the tree.

Where configure fails offline (a missing dependency, an empty submodule), or a repository has no CMake or Meson
at all, or a database leaves some of the tree's sources out, libclang still parses those files with a command
made from what the tree says (`database: inferred` in the receipt and in each TU's row):
- include directories from where each `#include "x/y.h"` (and `<x/y.h>` naming a file of the tree rather than
  of the system) actually lives: first beside the includer (what the compiler does for quotes), else the file
  of the tree whose path ends with the spelled path, the one sharing the longest directory with the includer;
  the directory is that file's path less the spelling. Per TU, the directories its headers need, breadth-first,
  then the public roots that exist (`include/`, `src/`, ...), then the root; headers a failed configure wrote
  (`generated`: CMake writes configure_file() outputs before it fails) answer what the tree cannot;
- `-std` from the build files (the root's first: CMAKE_CXX_STANDARD, cxx_std_NN, -std=c++NN, cpp_std), else
  c++20 where the code uses C++20 headers or keywords, else libclang's default;
- defines the root's build files set outside any condition (add_compile_definitions, add_definitions, make's
  *FLAGS -D, meson's add_project_arguments), and a define a file demands (`#ifndef X` then `#error`).
Which files get a command (`tu_roots`): a source file another source file includes (a unity build's parts,
googletest's gtest-all.cc) is parsed through its includer, so only the sources no other source reaches are
main files. Each command's receipt names its include directories and the headers that stayed unresolved
(outside the tree: the system's or a missing dependency's).

Hand-written: no library infers commands from a tree (compiledb and bear read a build; clangd's fallback is
a bare `clang++ file`). Everything here is a deterministic function of the tree's files.
"""

from __future__ import annotations

import glob
import os
import re
from collections import defaultdict
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from cpp_data.clang_index.compile_db import CompileCommand

SOURCE_SUFFIXES = (".c", ".cc", ".cpp", ".cxx", ".c++", ".cp", ".ixx", ".cppm")
INCLUDE = re.compile(rb'^[ \t]*#[ \t]*(?:include|import|include_next)[ \t]*([<"])([^>"\n]+)[>"]', re.M)
# `#ifndef X`, `#if !defined(X)` or `#if ! X` (or `#elif`) whose next directive is `#error`: the file demands
# X (spdlog's "Please define SPDLOG_COMPILED_LIB to compile this file", JUCE's global header switch); platform
# and version guards are no demand of the project
DEMANDED = re.compile(rb"^[ \t]*#[ \t]*(?:ifndef[ \t]+(\w+)|(?:el)?if[ \t]*![ \t]*defined[ \t]*\(?[ \t]*(\w+)[ \t]*\)?"
                      rb"|(?:el)?if[ \t]*![ \t]*(\w+))[ \t]*\r?\n"
                      rb"(?:(?![ \t]*#)[^\n]*\n){0,40}[ \t]*#[ \t]*error", re.M)
_PLATFORM = re.compile(r"(?i)win|apple|mac|linux|posix|arch|endian|version|cplusplus")
CXX20_HINT = re.compile(rb"#\s*include\s*<(concepts|ranges|span|format|coroutine|bit|numbers|source_location)>"
                        rb"|\bco_await\b|\bco_yield\b|\bconcept\s+\w+\s*=")
PUBLIC_ROOTS = ("include", "src", "source", "lib", "inc")
_STD_PATTERNS = (re.compile(r"CMAKE_CXX_STANDARD\s+(\d\d)"), re.compile(r"cxx_std_(\d\d)"),
                 re.compile(r"-std=(?:c|gnu)\+\+(\d\d|0x|1y|1z|2a|2b)"),
                 re.compile(r"cpp_std\s*=\s*'?(?:c|gnu)\+\+(\d\d)"))
_STD_ALIAS = {"0x": 11, "1y": 14, "1z": 17, "2a": 20, "2b": 23}
_KNOWN_STD = (11, 14, 17, 20, 23, 26)
BUILD_FILES = ("CMakeLists.txt", "meson.build", "Makefile", "makefile", "GNUmakefile", "configure.ac")
STD_DEPTH = 3  # directory levels below the root whose build files may set -std
CODE_SCAN_BYTES = 200_000


@dataclass(frozen=True)
class Inferred:
    """One inferred command, with what its receipt says: include directories (relative to the root, `.` the
    root itself) and the headers that stayed unresolved."""
    command: CompileCommand
    include_dirs: list[str] = field(default_factory=list)
    unresolved: list[str] = field(default_factory=list)

    def receipt(self, root: Path) -> dict:
        return {"file": os.path.relpath(self.command.file, root), "include_dirs": self.include_dirs,
                "unresolved": self.unresolved}


@lru_cache(maxsize=1)
def _system_dirs() -> tuple[str, ...]:
    return ("/usr/include", "/usr/include/x86_64-linux-gnu", "/usr/local/include",
            *sorted(glob.glob("/usr/include/c++/*")), *sorted(glob.glob("/usr/include/x86_64-linux-gnu/c++/*")),
            *sorted(glob.glob("/usr/lib/llvm-*/lib/clang/*/include")))


@lru_cache(maxsize=4096)
def system_header(spelled: str) -> bool:
    """Whether the system answers `#include <spelled>` (libstdc++, libc, clang's builtin headers)."""
    return any(os.path.exists(os.path.join(d, spelled)) for d in _system_dirs())


class IncludeGraph:
    """The tree's `#include` lines resolved against the tree: `files` are paths relative to `root`."""

    def __init__(self, root: Path, files: list[str]):
        self.root, self.files = root, set(files)
        self.by_name: dict[str, list[str]] = defaultdict(list)
        for f in sorted(files):
            self.by_name[os.path.basename(f)].append(f)
        self._includes: dict[str, list[tuple[str, str]]] = {}
        self._resolved: dict[tuple[str, str, str], tuple[str | None, str | None]] = {}
        self._closures: dict[str, tuple[list[str], list[str], list[str]]] = {}

    def includes(self, rel: str) -> list[tuple[str, str]]:
        """(`"` or `<`, spelled path) of each include line of a file of the tree."""
        hit = self._includes.get(rel)
        if hit is None:
            try:
                data = (self.root / rel).read_bytes()
            except OSError:
                data = b""
            hit = self._includes[rel] = [(m.group(1).decode(), m.group(2).decode("utf-8", "replace").strip())
                                         for m in INCLUDE.finditer(data)]
        return hit

    def resolve(self, includer: str, kind: str, spelled: str) -> tuple[str | None, str | None]:
        """(the tree's file, the include directory it needs or None beside the includer); (None, None) for a
        system header or one the tree lacks."""
        key = (os.path.dirname(includer), kind, spelled)
        if key not in self._resolved:
            self._resolved[key] = self._resolve(key[0], kind, os.path.normpath(spelled))
        return self._resolved[key]

    def _resolve(self, here: str, kind: str, spelled: str) -> tuple[str | None, str | None]:
        if kind == '"':
            local = os.path.normpath(os.path.join(here, spelled))
            if local in self.files:
                return local, None
        elif system_header(spelled):
            return None, None  # <vector>, <span>: the system's, even where the tree has a file of that name
        if spelled.startswith(".."):
            return None, None
        found = [f for f in self.by_name.get(os.path.basename(spelled), ()) if f == spelled
                 or f.endswith("/" + spelled)]
        if not found:
            return None, None

        def nearness(f: str) -> tuple[int, int, str]:
            shared = os.path.commonpath([here, os.path.dirname(f)]) if here and os.path.dirname(f) else ""
            return -len(shared.split("/")) if shared else 0, f.count("/"), f

        best = min(found, key=nearness)
        return best, best[:len(best) - len(spelled)].rstrip("/") or "."

    def closure(self, main: str) -> tuple[list[str], list[str], list[str]]:
        """(the tree's files `main` reaches, breadth-first; the include directories they need, in order of
        first need; the spelled headers neither the tree nor the system answers)."""
        if main not in self._closures:
            self._closures[main] = self._closure(main)
        return self._closures[main]

    def _closure(self, main: str) -> tuple[list[str], list[str], list[str]]:
        seen, queue, dirs, unresolved = [main], [main], [], []
        reached = {main}
        while queue:
            current = queue.pop(0)
            for kind, spelled in self.includes(current):
                target, directory = self.resolve(current, kind, spelled)
                if target is None:
                    if not system_header(spelled) and spelled not in unresolved:
                        unresolved.append(spelled)
                    continue
                if directory is not None and directory not in dirs:
                    dirs.append(directory)
                if target not in reached:
                    reached.add(target)
                    seen.append(target)
                    queue.append(target)
        return seen, dirs, unresolved


def tu_roots(graph: IncludeGraph, sources: list[str], given: set[str]) -> list[str]:
    """The sources (relative, sorted) that need a command of their own: not in `given` (the database's) and
    reached by no other source, as a unity build's parts are; where sources only reach each other (a cycle), the
    first in sort order of those no chosen TU reaches."""
    included: set[str] = set()
    for s in sources:
        included.update(f for f in graph.closure(s)[0][1:] if f != s)
    chosen = [s for s in sorted(sources) if s not in given and s not in included]
    reached = set(given) | set(chosen)
    for s in [*sorted(given), *chosen]:
        if s in graph.files:
            reached.update(graph.closure(s)[0])
    for s in sorted(sources):
        if s not in reached:
            chosen.append(s)
            reached.update(graph.closure(s)[0])
    return sorted(chosen)


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


def language_standard(root: Path, files: list[str]) -> str | None:
    """`c++NN`: the highest known standard the root's build files name, else the highest any build file within
    STD_DEPTH levels names, else c++20 where the code uses C++20 headers or keywords, else None."""
    top: list[int] = []
    deeper: list[int] = []
    for directory, dirs, names in os.walk(root):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        depth = len(Path(directory).relative_to(root).parts)
        if depth >= STD_DEPTH:
            dirs[:] = []
        for name in sorted(names):
            if name in BUILD_FILES or name.endswith(".cmake"):
                found = _standards(_read(Path(directory) / name))
                (top if depth == 0 else deeper).extend(found)
    if top or deeper:
        return f"c++{max(top or deeper)}"
    for f in files:
        try:
            with open(root / f, "rb") as fh:
                if CXX20_HINT.search(fh.read(CODE_SCAN_BYTES)):
                    return "c++20"
        except OSError:
            continue
    return None


def _standards(text: str) -> list[int]:
    values = []
    for pattern in _STD_PATTERNS:
        for m in pattern.findall(text):
            v = _STD_ALIAS.get(m) or (int(m) if m.isdigit() else 0)
            if v in _KNOWN_STD:
                values.append(v)
    return values


def _unconditional(text: str, opener: str, closer: str) -> str:
    """The lines outside any if()/endif() (CMake) or ifeq/endif (make) block."""
    out, depth = [], 0
    for line in text.splitlines():
        s = line.strip().lower()
        if re.match(opener, s):
            depth += 1
        elif re.match(closer, s):
            depth = max(0, depth - 1)
        elif depth == 0:
            out.append(line)
    return "\n".join(out)


def project_defines(root: Path) -> list[str]:
    """The `-D` flags the root's build files set for every file, outside any condition."""
    found: list[str] = []
    cmake = _unconditional(_read(root / "CMakeLists.txt"), r"if\s*\(", r"endif\s*\(")
    for m in re.finditer(r"(?is)\b(add_compile_definitions|add_definitions)\s*\(([^)]*)\)", cmake):
        for token in m.group(2).split():
            token = token.strip('"')
            if token.startswith("-D") and "$" not in token:
                found.append(token)
            elif m.group(1).lower() == "add_compile_definitions" and re.fullmatch(r"[A-Za-z_]\w*(=\S*)?", token):
                found.append("-D" + token)
    for name in ("GNUmakefile", "makefile", "Makefile"):
        if (root / name).is_file():
            make = _unconditional(_read(root / name), r"if(n?eq|n?def)\b", r"endif\b")
            for m in re.finditer(r"(?m)^\s*(?:override\s+)?(?:CPPFLAGS|CFLAGS|CXXFLAGS|DEFS)\s*[+:?]?=(.*)$", make):
                found += [x for x in m.group(1).split() if re.fullmatch(r"-D[A-Za-z_]\w*(=[^$\s]*)?", x)]
            break
    for m in re.finditer(r"add_project_arguments\(([^)]*)\)", _read(root / "meson.build")):
        found += re.findall(r"'(-D[A-Za-z_]\w*(?:=[^']*)?)'", m.group(1))
    return list(dict.fromkeys(found))


def demanded_defines(root: Path, reached: list[str]) -> list[str]:
    """`-DX` for each X a reached file demands with `#ifndef X` (or `#if ! X`) then `#error` (not a platform's or
    version's)."""
    out: list[str] = []
    for rel in sorted(reached):
        try:
            data = (root / rel).read_bytes()
        except OSError:
            continue
        for m in DEMANDED.finditer(data):
            name = (m.group(1) or m.group(2) or m.group(3)).decode()
            if not name.startswith("_") and not _PLATFORM.search(name) and f"-D{name}" not in out:
                out.append(f"-D{name}")
    return out


def _generated_dir(generated: tuple[Path, ...], spelled: str) -> str | None:
    """The first configure directory (and sub-directory) that holds `spelled`, for a header the tree lacks."""
    if ".." in Path(spelled).parts or os.path.isabs(spelled):
        return None
    for base in generated:
        for hit in sorted(glob.glob(os.path.join(glob.escape(str(base)), "**", glob.escape(spelled)),
                                    recursive=True)):
            if "CMakeFiles" not in hit and os.path.isfile(hit):
                return hit[:len(hit) - len(spelled)].rstrip("/")
    return None


_FLAG_WITH_VALUE = ("-I", "-isystem", "-D", "-iquote")


def borrowed_flags(cmd: CompileCommand, c_file: bool) -> tuple[str | None, list[str], list[str]]:
    """(-std, include flags with absolute paths, -D flags) of a database command, for an inferred command of a
    file beside it; -std only where the language is the same."""
    std, includes, defines = None, [], []
    args, k = cmd.arguments[1:], 0
    while k < len(args):
        a = args[k]
        flag, value = next(((f, a[len(f):]) for f in _FLAG_WITH_VALUE if a.startswith(f)), (None, ""))
        if flag and not value and k + 1 < len(args):
            k, value = k + 1, args[k + 1]
        k += 1
        if a.startswith("-std=") and ("++" in a) != c_file:
            std = a[5:]
        elif flag == "-D":
            defines.append("-D" + value)
        elif flag:
            includes += [flag, os.path.normpath(os.path.join(cmd.directory, value))]
    return std, includes, defines


def nearest(database: list[CompileCommand], path: str) -> CompileCommand | None:
    """The database command whose file shares the longest directory with `path` (the first in file order)."""
    def shared(c: CompileCommand) -> int:
        return len(os.path.commonpath([os.path.dirname(c.file), os.path.dirname(path)]).split(os.sep))

    return max(sorted(database, key=lambda c: c.file), key=shared, default=None)


def system_source_roots() -> list[Path]:
    """`include` directories of the source packages under /usr/src (Debian's googletest ships gtest's and gmock's
    headers only there): they answer an include the tree and the system cannot, such as <gtest/gtest.h>."""
    return [Path(p) for p in sorted(glob.glob("/usr/src/*/include") + glob.glob("/usr/src/*/*/include"))]


def _answer(spelled: str, generated: tuple[Path, ...], extra_roots: list[Path]) -> str | None:
    """The directory to add for a header neither the tree nor the system has: a configure run's, else a source
    package's under /usr/src (only for a spelling with a directory: a bare `config.h` from elsewhere is a guess)."""
    found = _generated_dir(generated, spelled)
    if found is None and "/" in spelled and ".." not in Path(spelled).parts:
        found = next((str(r) for r in extra_roots if (r / spelled).is_file()), None)
    return found


def infer_commands(root: Path, files: list[str], given: set[str], generated: tuple[Path, ...] = (),
                   database: list[CompileCommand] | None = None, graph: IncludeGraph | None = None) -> list[Inferred]:
    """Inferred commands for `root`'s sources that `given` (absolute paths the database compiles) leaves out and
    no other source reaches (`tu_roots`), sorted by file. `files` are every C/C++ file of the tree (absolute);
    `generated` are configure directories whose headers answer includes the tree cannot; a file the `database`
    leaves out borrows -std, -D and include flags from the database command nearest it (leveldb's
    LEVELDB_PLATFORM_POSIX), after its own include directories. `graph`: the tree's include graph over `files`,
    when the caller has it already (its closures are computed once)."""
    root = Path(root)
    rel = sorted(os.path.relpath(f, root) for f in files)
    graph = graph or IncludeGraph(root, rel)
    sources = [f for f in rel if f.lower().endswith(SOURCE_SUFFIXES)]
    mains = tu_roots(graph, sources, {os.path.relpath(f, root) for f in given})
    if not mains:
        return []
    std, defines = language_standard(root, sources), project_defines(root)
    public = [d for d in PUBLIC_ROOTS if (root / d).is_dir()]
    answered: dict[str, str | None] = {}
    extra_roots = system_source_roots()
    out = []
    for main in mains:
        reached, dirs, unresolved = graph.closure(main)
        for s in unresolved:
            if s not in answered:
                answered[s] = _answer(s, generated, extra_roots)
        extra = [answered[s] for s in unresolved if answered[s]]
        include = dirs + [d for d in [*public, "."] if d not in dirs]
        is_c = main.lower().endswith(".c")
        near = nearest(database or [], str(root / main))
        own_std, borrowed_includes, borrowed_defines = borrowed_flags(near, is_c) if near else (None, [], [])
        use_std = own_std or (std if not is_c else None)
        flags = [*defines, *(d for d in borrowed_defines if d not in defines)]
        args = ["clang" if is_c else "clang++", *([f"-std={use_std}"] if use_std else []),
                *(f"-I{root / d}" if d != "." else f"-I{root}" for d in include),
                *(f"-I{d}" for d in dict.fromkeys(extra)), *borrowed_includes,
                *flags, *(d for d in demanded_defines(root, reached) if d not in flags),
                "-c", str(root / main)]
        out.append(Inferred(CompileCommand(str(root), str(root / main), args), include,
                            [s for s in unresolved if not answered[s]]))
    return out
