"""Function and class definitions as libclang sees them: the judge of the tree-sitter structure spans (issue 15,
bench/structure_vs_libclang.py, tests/test_structure_libclang.py).

Per TU, for cursors located in project files: function definitions (functions, methods, constructors,
destructors, conversion functions, function templates) and class definitions (class, struct, union, class
templates and partial specializations), each with its extent and whether its name was spelled by a macro
expansion (`TEST(A, B) {...}` is a class and a method to libclang, one macro call to tree-sitter); the project
files the TU read; and the lines its preprocessor skipped (`#if` branches libclang never parsed, where
tree-sitter still sees definitions). Function bodies are not walked, as tree-sitter does not look into them for
definitions. `collect_definitions` runs the TUs through the indexing pool and merges them: a definition met by
several TUs counts once, and a line is dead only if every TU that read its file skipped it.

Hand-written: the python bindings do not expose the skipped ranges, so that libclang call is declared here with
ctypes.
"""

from __future__ import annotations

import ctypes
import os
from collections import Counter
from pathlib import Path
from typing import NamedTuple

import clang.cindex as ci

from cpp_data.clang_index.compile_db import CompileCommand, check_libclang, find_resource_dir
from cpp_data.clang_index.pool import run_pool
from cpp_data.clang_index.walker import CLASS_KINDS, DEF_KINDS, NS_KINDS, PARSE_OPTIONS, Walker, parse_tu

DETAILED_PREPROCESSING_RECORD = 0x01  # CXTranslationUnit_DetailedPreprocessingRecord: keeps the skipped ranges
_DESCEND = NS_KINDS | {ci.CursorKind.FRIEND_DECL}  # friend functions defined in a class are definitions too


class _RangeList(ctypes.Structure):
    _fields_ = [("count", ctypes.c_uint), ("ranges", ctypes.POINTER(ci.SourceRange))]


def _lib():
    lib = ci.conf.lib
    if not getattr(lib, "_definitions_declared", False):
        lib.clang_getAllSkippedRanges.argtypes = [ci.TranslationUnit]
        lib.clang_getAllSkippedRanges.restype = ctypes.POINTER(_RangeList)
        lib.clang_disposeSourceRangeList.argtypes = [ctypes.POINTER(_RangeList)]
        lib.clang_disposeSourceRangeList.restype = None
        lib._definitions_declared = True
    return lib


def _spelled_by_macro(c: ci.Cursor, line_text: str) -> bool:
    """The cursor's name is not written at its location: a macro made the definition (`TEST(A, B)` makes class
    `A_B_Test`; a macro body defines a class at its call). libclang's spelling location does not say so for
    names pasted by `##`, so the source text is read."""
    name = c.spelling or ""
    if name.startswith("operator"):
        want = "operator"
    elif c.is_anonymous() or not name or name.startswith("("):
        want = {"STRUCT_DECL": "struct", "UNION_DECL": "union"}.get(c.kind.name, "class")
    else:
        want = name.lstrip("~").split("<")[0]
    at = line_text[c.location.column - 1:].lstrip("~ \t")
    return not at.startswith(want)


def definitions_tu(cmd: CompileCommand, project_root: str | Path, resource_dir: str | None = None) -> dict:
    """Parse one TU (in a pool worker) and list its project definitions, project files and skipped lines."""
    root = os.path.realpath(project_root)
    tu, res = parse_tu(cmd, resource_dir, PARSE_OPTIONS | DETAILED_PREPROCESSING_RECORD)
    res.update(definitions=[], skipped=[], files=[])
    if tu is None:
        return res
    lib, w = _lib(), Walker(root, cmd.file)
    stack = list(tu.cursor.get_children())[::-1]
    while stack:
        c = stack.pop()
        k = c.kind
        path, inside = w.file_of(c.location.file)
        if not inside:
            continue
        if k in DEF_KINDS or k in CLASS_KINDS:
            if not c.is_definition():
                continue
            s, e = c.extent.start, c.extent.end
            res["definitions"].append({"file": path, "family": "function" if k in DEF_KINDS else "class",
                                       "kind": k.name, "name": c.spelling, "start_line": s.line,
                                       "start_col": s.column, "end_line": e.line, "end_col": e.column,
                                       "line": c.location.line,
                                       "macro": _spelled_by_macro(c, w.source_lines(path, c.location.line,
                                                                                    c.location.line)),
                                       # `= default` / `= delete`: a body only where clang made one; an
                                       # explicit instantiation (`template class A<int>;`) has no braces
                                       "bodiless": (c.is_default_method() or c.is_deleted_method())
                                       if k in DEF_KINDS else
                                       "{" not in w.source_lines(path, s.line, e.line)})
            if k in DEF_KINDS:
                continue
        elif k not in _DESCEND:
            continue
        stack.extend(reversed(list(c.get_children())))
    files = {w.file_of(inc.include)[0] for inc in tu.get_includes()} | {os.path.realpath(cmd.file)}
    res["files"] = sorted(f for f in files if f.startswith(w.root))
    ranges = lib.clang_getAllSkippedRanges(tu)
    try:
        for i in range(ranges.contents.count if ranges else 0):
            r = ranges.contents.ranges[i]
            path, inside = w.file_of(r.start.file)
            if inside:
                res["skipped"].append((path, r.start.line, r.end.line))
    finally:
        if ranges:
            lib.clang_disposeSourceRangeList(ranges)
    return res


class Definitions(NamedTuple):
    definitions: list[dict]            # deduplicated across TUs
    files: dict[str, int]              # project file -> how many TUs read it
    dead_lines: dict[str, set[int]]    # project file -> lines skipped by every TU that read it
    tu_status: list[dict]


def collect_definitions(commands: list[CompileCommand], project_root: str | Path, workers: int = 2,
                        timeout_s: float = 120, max_rss_mb: int | None = 4096) -> Definitions:
    """Run `definitions_tu` over every TU (pool: own process, timeout, memory cap) and merge."""
    check_libclang()
    per_tu = run_pool(definitions_tu, commands, (os.path.realpath(project_root), str(find_resource_dir())),
                      workers, timeout_s, max_rss_mb)
    defs, seen = [], set()
    files: Counter[str] = Counter()
    skipped: dict[str, Counter[int]] = {}
    for res in per_tu:
        for d in res.get("definitions", ()):
            key = (d["file"], d["family"], d["start_line"], d["start_col"], d["end_line"], d["end_col"])
            if key not in seen:
                seen.add(key)
                defs.append(d)
        files.update(res.get("files", ()))
        tu_lines: dict[str, set[int]] = {}
        for path, first, last in res.get("skipped", ()):
            tu_lines.setdefault(path, set()).update(range(first, last + 1))
        for path, lines in tu_lines.items():
            skipped.setdefault(path, Counter()).update(lines)
    dead = {p: {ln for ln, n in cnt.items() if n >= files[p]} for p, cnt in skipped.items()}
    status = [{"file": r.get("file", ""), "status": r.get("status", "crashed"),
               "error_messages": r.get("error_messages", [])} for r in per_tu]
    return Definitions(defs, dict(files), dead, status)
