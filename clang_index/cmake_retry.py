"""What a failed CMake configure names: the project switches to turn off before trying again.

A configure that fails offline mostly fails in code the library does not need: a test or benchmark directory
that is an empty submodule (leveldb's third_party/benchmark behind LEVELDB_BUILD_BENCHMARKS), a FetchContent of a
test framework. CMake's whole output names every error site (`CMake Error at F:L (cmd)`) and the call stack that
led there; the `if()` conditions around each site, and around the `add_subdirectory()`/`include()` that brought
its file in, up to the root CMakeLists.txt, name the variables that guard it. Those that are options of the
project (`option()`, `cmake_dependent_option()`, `set(... CACHE BOOL ...)`) are what a retry turns off
(clang_index/configure.py), those that look like tests, benchmarks, examples, docs or tools first.

Hand-written: CMake offers no machine-readable account of a failed configure (the File API needs a configured
tree); this reads its text the way a person does.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

ERROR_AT = re.compile(r"^CMake Error at (.+?):(\d+) \((\w+)\)", re.M)
FRAME = re.compile(r"^\s+(\S+?\.(?:txt|cmake)):(\d+) \((\w+)\)", re.M)
OPTION_DECL = re.compile(r"(?im)^\s*(?:option|cmake_dependent_option)\s*\(\s*([A-Za-z0-9_]+)")
CACHE_BOOL_SET = re.compile(r"(?im)^\s*set\s*\(\s*([A-Za-z0-9_]+)\s+\S+\s+CACHE\s+BOOL")
_IF_OPEN = re.compile(r"(?i)^\s*(if|elseif)\s*\((.*)")
_IF_ELSE = re.compile(r"(?i)^\s*else\s*\(")
_IF_END = re.compile(r"(?i)^\s*endif\s*\(")
_WORD = re.compile(r"\$\{([A-Za-z0-9_]+)\}|\b([A-Za-z_][A-Za-z0-9_]*)\b")
_KEYWORDS = {"AND", "OR", "NOT", "DEFINED", "EQUAL", "LESS", "GREATER", "STREQUAL", "MATCHES", "VERSION_LESS",
             "VERSION_GREATER", "VERSION_EQUAL", "VERSION_GREATER_EQUAL", "VERSION_LESS_EQUAL", "EXISTS", "TARGET",
             "COMMAND", "POLICY", "TEST", "IN_LIST", "IS_DIRECTORY", "ON", "OFF", "TRUE", "FALSE", "YES", "NO",
             "LESS_EQUAL", "GREATER_EQUAL", "STRLESS", "STRGREATER", "IS_ABSOLUTE", "CACHE", "ENV"}
# A switch for what a library's own code does not need: tests, benchmarks, examples, docs, fuzzers, tools
NON_LIBRARY = re.compile(r"(?i)(^|_)(build_?|enable_?|with_?)?(tests?|testing|bench(mark)?s?|examples?|samples?|"
                         r"docs?|documentation|fuzz(ers?|ing)?|tools?|demos?|apps?|utils?|perf|contrib)(_|$)")
MAX_BUILD_FILES = 500  # CMakeLists.txt and *.cmake files read for option declarations


def declared_options(root: Path) -> set[str]:
    """The boolean options the project's CMake code declares anywhere in the tree."""
    found: set[str] = set()
    files = sorted(root.rglob("CMakeLists.txt"))[:MAX_BUILD_FILES] + sorted(root.rglob("*.cmake"))[:MAX_BUILD_FILES]
    for path in files:
        try:
            text = path.read_text(errors="replace")
        except OSError:
            continue
        found |= set(OPTION_DECL.findall(text)) | set(CACHE_BOOL_SET.findall(text))
    return found


def _condition(lines: list[str], i: int, first: str) -> str:
    """An if() condition that may go on over the next lines, up to its closing parenthesis (10 lines at most)."""
    cond, j = first, i
    while cond.count("(") + 1 > cond.count(")") and j + 1 < len(lines) and j - i < 10:
        j += 1
        cond += " " + lines[j].split("#", 1)[0]
    return cond


def if_stack(lines: list[str], upto: int) -> list[str]:
    """The conditions of the if()/elseif() blocks open at line `upto` (1-based), outermost first; after an
    else() the condition is kept as text with "else " in front (its words still name the guard)."""
    stack: list[str] = []
    for i, raw in enumerate(lines[:upto - 1]):
        line = raw.split("#", 1)[0]
        m = _IF_OPEN.match(line)
        if m and m.group(1).lower() == "if":
            stack.append(_condition(lines, i, m.group(2)))
        elif m and stack:
            stack[-1] = _condition(lines, i, m.group(2))
        elif _IF_ELSE.match(line) and stack:
            stack[-1] = "else " + stack[-1]
        elif _IF_END.match(line) and stack:
            stack.pop()
    return stack


def _lines_matching(path: Path, pattern: re.Pattern) -> list[int]:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return []
    return [k for k, line in enumerate(text.splitlines(), 1) if pattern.match(line)]


def _subdirectory_sites(root: Path, sub: Path) -> list[tuple[str, int]]:
    """The add_subdirectory() lines that bring in directory `sub` (relative to root): the nearest parent
    CMakeLists.txt that names it."""
    for parent in [sub.parent, *sub.parent.parents]:
        relsub = re.escape(os.path.relpath(sub, parent))
        pattern = re.compile(r'(?i)^\s*add_subdirectory\s*\(\s*"?(?:\$\{CMAKE_CURRENT_SOURCE_DIR\}/)?' + relsub +
                             r'["/\s)]')
        listed = parent / "CMakeLists.txt"
        sites = [(listed.as_posix(), k) for k in _lines_matching(root / listed, pattern)]
        if sites:
            return sites
    return []


def includer_sites(root: Path, rel: str) -> list[tuple[str, int]]:
    """Where `rel` (a subdirectory's CMakeLists.txt or a .cmake file, relative to root) is brought in, as
    (file relative to root, line) sites."""
    p = Path(rel)
    if p.name == "CMakeLists.txt" and p.parent != Path("."):
        return _subdirectory_sites(root, p.parent)
    if p.suffix != ".cmake":
        return []
    pattern = re.compile(r'(?i)^\s*include\s*\(\s*"?[^)]*\b' + re.escape(p.stem) + r"\b")
    return [(listed.relative_to(root).as_posix(), k)
            for listed in sorted(root.rglob("CMakeLists.txt"))[:MAX_BUILD_FILES]
            for k in _lines_matching(listed, pattern)]


def _names(condition: str) -> list[str]:
    return [n for m in _WORD.finditer(condition) for n in [m.group(1) or m.group(2)]
            if n.upper() not in _KEYWORDS and not n.startswith("CMAKE_")]


def guard_variables(root: Path, output: str) -> list[str]:
    """The variables named by the if() conditions around every error site of a CMake output and the sites that
    brought those files in, up to the root, in the order met."""
    sites = [(m.group(1), int(m.group(2))) for pattern in (ERROR_AT, FRAME) for m in pattern.finditer(output)]
    names: list[str] = []
    seen: set[tuple[str, int]] = set()
    while sites:
        where, line = sites.pop()
        rel = os.path.relpath(where, root) if os.path.isabs(where) else where
        if rel.startswith("..") or (rel, line) in seen or not (root / rel).is_file():
            continue
        seen.add((rel, line))
        lines = (root / rel).read_text(errors="replace").splitlines()
        for condition in if_stack(lines, line):
            names += [n for n in _names(condition) if n not in names]
        sites += includer_sites(root, rel)
    return names


def next_switches(root: Path, output: str, options: set[str], already_off: set[str]) -> list[str]:
    """The options to turn off for the next retry after a failed configure (`output`): those guarding its error
    sites that are not off yet, the non-library ones (tests, benchmarks, ...) alone where there are any, else
    the first three."""
    new = [g for g in guard_variables(root, output) if g in options and g not in already_off]
    return [g for g in new if NON_LIBRARY.search(g)] or new[:3]
