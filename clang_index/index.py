"""Index a whole project: every TU of a compile database through the process pool, rows merged.

Rows are deduplicated across TUs (a header's definitions are met by every TU including it; the first TU in
input order wins). The result tables are what the semantics stage writes as Parquet.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import NamedTuple

from cpp_data.clang_index.compile_db import CompileCommand, check_libclang, find_resource_dir
from cpp_data.clang_index.pool import run_pool
from cpp_data.clang_index.walker import index_tu


class IndexResult(NamedTuple):
    """Rows of `index_project`, deduplicated across TUs (first TU wins), plus one status row per TU."""
    functions: list[dict]
    edges: list[dict]
    type_refs: list[dict]
    includes: list[dict]
    preamble: list[dict]
    tu_status: list[dict]



def index_tus(commands: list[CompileCommand], project_root: str | Path, workers: int = 1, timeout_s: float = 60,
              max_rss_mb: int | None = 4096, skips: list[frozenset[str]] | None = None) -> list[dict]:
    """One result per TU, in input order: each TU in its own process, killed after timeout_s, its address space
    capped at max_rss_mb. `skips`: per TU, the files it does not walk (clang_index/selection.py: each header
    walked by one TU)."""
    check_libclang()
    per_command = [(s,) for s in skips] if skips is not None else None
    return run_pool(index_tu, commands, (os.path.realpath(project_root), str(find_resource_dir())), workers,
                    timeout_s, max_rss_mb, per_command)


def merge_tus(per_tu: list[dict]) -> IndexResult:
    """The rows of TU results (index_tus, in input order), deduplicated across TUs (the first TU wins)."""
    out = IndexResult([], [], [], [], [], [])
    seen: set[tuple] = set()
    keys = {"functions": ("usr",), "edges": ("src", "dst", "kind"), "type_refs": ("src", "dst"),
            "includes": ("includer", "included", "line"), "preamble": ("file", "kind", "start_line", "name")}
    for res in per_tu:
        for table, key in keys.items():
            for row in res.get(table, ()):
                k = (table, *(row[c] for c in key))
                if k not in seen:
                    seen.add(k)
                    getattr(out, table).append(row)
        out.tu_status.append({c: res.get(c, d) for c, d in (("file", ""), ("status", "crashed"), ("seconds", 0.0),
                              ("parse_s", 0.0), ("walk_s", 0.0), ("warnings", 0), ("errors", 0), ("fatals", 0),
                              ("error_messages", []), ("source_bytes", 0), ("header_bytes", 0))})
    return out


def index_project(commands: list[CompileCommand], project_root: str | Path, workers: int = 2, timeout_s: float = 60,
                  max_rss_mb: int | None = 4096, walk_once: bool = False) -> IndexResult:
    """Index every TU (index_tus) and merge the rows (merge_tus). walk_once: each main file once and each file
    walked by one TU (clang_index/selection.py, with no kept list), as the semantics stage indexes."""
    if not walk_once:
        return merge_tus(index_tus(commands, project_root, workers, timeout_s, max_rss_mb))
    from cpp_data.clang_index.selection import select_tus, tree_files

    root = Path(os.path.realpath(project_root))
    sel = select_tus(commands, root, tree_files(root), None)
    return merge_tus(index_tus(sel.commands, root, workers, timeout_s, max_rss_mb, sel.skips))
