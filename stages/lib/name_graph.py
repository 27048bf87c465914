"""The name-level call graph of a repository, computed on tables (docs/DESIGN.md section 6).

The rule is stages/lib/syntax.py's `call_graph`: a call's short name is matched against every function of the
repository with that short name; the candidates are narrowed by (1) a written qualifier being a suffix of the
candidate's scope, (2) the caller's file, (3) the caller's scope, each filter skipped when it would leave none;
what remains is linked, unless more than `max_candidates` remain. Edges are deduplicated per (caller, caller
file, callee, callee file), in the order the calls come (then the definitions), keeping the candidate count of
the last call that made the edge.

Here the rule runs on two Arrow tables instead of Python objects per call: definitions and calls, joined on
the short name by pyarrow, the three filters applied per call group with numpy, so the structure stage can
hold one repository's definitions and calls as columns (a few dozen bytes a row) rather than the spans and
arrays of every file. The join is cut into chunks of calls whose candidate rows stay under `max_join_rows`,
which bounds memory even where a generic name (`get`, `size`) has thousands of definitions. A joined row
carries a dozen strings (a few hundred bytes with the copies the sort and filters make): at the former 4 M rows
a chunk, the 92 MB single-repository source of bench/scale.py's 4x corpus (Qt 5, Eigen, Boost) took the graph
task to 4.3 GB; at 500 k its peak was 1.1 GB, and the stage ran faster (51.8 s against 63.4 s).

Hand-written because no library resolves C++ calls by name; pyarrow and numpy do the joins and group scans.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from cpp_data.stages.lib.syntax import FileStructure, components

DEFINITIONS = pa.schema([
    ("source_path", pa.string()),  # the file defining the function
    ("qualname", pa.string()),
    ("name", pa.string()),  # short name, what calls are matched on
    ("scope", pa.string()),  # components of the qualname but the last, joined by '::' (templates dropped)
    ("order", pa.int64()),  # definition order: files in shard order, spans in file order
])
CALLS = pa.schema([
    ("source_path", pa.string()),  # the caller's file
    ("caller", pa.string()),  # the caller's qualname
    ("caller_scope", pa.string()),
    ("name", pa.string()),  # callee short name
    ("qualifier", pa.string()),  # written qualifier's components joined by '::' ('' for none)
    ("order", pa.int64()),  # call order: files in shard order, calls in file order
])
EDGES = pa.schema([
    ("caller_file", pa.string()), ("caller", pa.string()), ("callee_file", pa.string()), ("callee", pa.string()),
    ("candidates", pa.int32()),
])


def _scope_of(qualname: str) -> str:
    return "::".join(components(qualname)[:-1])


def file_rows(path: str, fs: FileStructure, order: int) -> tuple[list[dict], list[dict]]:
    """(definition rows, call rows) of one analyzed file; `order` is the file's place in shard order, which
    with each span's and call's index orders definitions and calls as `call_graph` meets them."""
    defs = [{"source_path": path, "qualname": sp.qualname, "name": sp.name, "scope": _scope_of(sp.qualname),
             "order": (order << 20) + i}
            for i, sp in enumerate(fs.spans) if sp.kind == "function"]
    calls = []
    for i, call in enumerate(fs.calls):
        caller = fs.spans[call.caller]
        calls.append({"source_path": path, "caller": caller.qualname, "caller_scope": _scope_of(caller.qualname),
                      "name": call.name, "qualifier": "::".join(components(call.qualifier)),
                      "order": (order << 20) + i})
    return defs, calls


def _group_any(mask: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """Per row: whether any row of its group (groups are runs starting at `starts`) has `mask` set."""
    return np.repeat(np.maximum.reduceat(mask.astype(np.int8), starts).astype(bool), np.diff(np.r_[starts, len(mask)]))


def _resolve_chunk(calls: pa.Table, defs: pa.Table, max_candidates: int | None) -> pa.Table:
    joined = calls.rename_columns([f"c_{n}" for n in calls.column_names]).join(
        defs.rename_columns([f"d_{n}" for n in defs.column_names]), keys="c_name", right_keys="d_name",
        join_type="inner", use_threads=False)
    if joined.num_rows == 0:
        return EDGES.empty_table().append_column("order", pa.array([], pa.int64()))
    joined = joined.sort_by([("c_order", "ascending"), ("d_order", "ascending")])
    call_order = joined.column("c_order").to_numpy()
    starts = np.flatnonzero(np.r_[True, call_order[1:] != call_order[:-1]])
    suffix = pc.equal(joined.column("c_qualifier"), "").to_numpy(zero_copy_only=False)
    written = np.flatnonzero(~suffix)  # calls with a qualifier: is it a suffix of the candidate's scope?
    if len(written):
        idx = pa.array(written)
        suffix[written] = [s == q or s.endswith("::" + q) for q, s in zip(
            pc.take(joined.column("c_qualifier"), idx).to_pylist(), pc.take(joined.column("d_scope"), idx).to_pylist())]
    same_file = pc.equal(joined.column("c_source_path"), joined.column("d_source_path")).to_numpy(zero_copy_only=False)
    same_scope = pc.equal(joined.column("c_caller_scope"), joined.column("d_scope")).to_numpy(zero_copy_only=False)
    keep = np.ones(len(call_order), dtype=bool)
    for test in (suffix, same_file, same_scope):  # each narrows, unless it would leave a call no candidate
        narrowed = keep & test
        keep = np.where(_group_any(narrowed, starts), narrowed, keep)
    count = np.add.reduceat(keep.astype(np.int64), starts)
    count = np.repeat(count, np.diff(np.r_[starts, len(keep)]))
    if max_candidates is not None:
        keep &= count <= max_candidates
    sel = pa.array(keep)
    j = joined.filter(sel)
    return pa.table({"caller_file": j.column("c_source_path"), "caller": j.column("c_caller"),
                     "callee_file": j.column("d_source_path"), "callee": j.column("d_qualname"),
                     "candidates": pa.array(count[keep], pa.int32()),
                     "order": pa.array(np.arange(len(keep))[keep], pa.int64())})


def resolve(defs: pa.Table, calls: pa.Table, max_candidates: int | None = 8,
            max_join_rows: int = 500_000) -> pa.Table:
    """Edges (EDGES) of one repository from its definitions (DEFINITIONS) and calls (CALLS), in call order."""
    defs = defs.sort_by("order")
    calls = calls.sort_by("order")
    if defs.num_rows == 0 or calls.num_rows == 0:
        return EDGES.empty_table()
    per_name = defs.group_by("name").aggregate([("name", "count")])
    lookup = pc.index_in(calls.column("name"), per_name.column("name"))
    fanout = pc.fill_null(pc.take(per_name.column("name_count"), lookup), 0).to_numpy()
    calls = calls.filter(pa.array(fanout > 0))
    fanout = fanout[fanout > 0]
    parts, start, base = [], 0, 0
    bounds = np.cumsum(fanout)
    while start < calls.num_rows:  # chunks of consecutive calls whose joins stay under max_join_rows
        stop = max(start + 1, int(np.searchsorted(bounds, (bounds[start - 1] if start else 0) + max_join_rows,
                                                  side="right")))
        part = _resolve_chunk(calls.slice(start, stop - start), defs, max_candidates)
        parts.append(part.set_column(part.column_names.index("order"), "order",
                                     pc.add(part.column("order"), base)))
        base += int(bounds[stop - 1] - (bounds[start - 1] if start else 0))
        start = stop
    edges = pa.concat_tables(parts)
    if edges.num_rows == 0:
        return EDGES.empty_table()
    keys = ["caller", "caller_file", "callee", "callee_file"]
    firsts = edges.group_by(keys, use_threads=False).aggregate([("order", "min"), ("candidates", "last")])
    firsts = firsts.sort_by("order_min")
    return pa.table({n: firsts.column("candidates_last" if n == "candidates" else n) for n in EDGES.names},
                    schema=EDGES)
