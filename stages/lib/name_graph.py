"""The name-level call graph of a repository, computed on tables (docs/DESIGN.md section 6).

The rule is `call_graph`'s (below): a call's short name is matched against every function of the
repository with that short name; the candidates are narrowed by (1) a written qualifier being a suffix of the
candidate's scope, (2) the caller's file, (3) the caller's scope, each filter skipped when it would leave none;
what remains is linked, unless more than `max_candidates` remain. Edges are deduplicated per (caller, caller
file, callee, callee file), in the order the calls come (then the definitions), keeping the candidate count of
the last call that made the edge.

Here the rule runs on two Arrow tables instead of Python objects per call, so the structure stage can hold one
repository's definitions and calls as columns (a few dozen bytes a row) rather than the spans and arrays of every
file. The join runs on integer codes (`resolve`): a call's candidates are a run of the definitions sorted by (name,
order), the filters compare codes of paths and scopes, and the qualifier test runs once per distinct (qualifier,
scope) pair. A call without a qualifier gets the run its filters would leave, counted per (name, file, scope), so a
generic name costs its calls plus its definitions, not their product (`_candidate_runs`). Chunks of consecutive
calls keep the candidate rows under `max_join_rows`, which bounds memory where a qualified call's name has thousands
of definitions (`get`, `size`), and the edges are deduplicated on codes too, so strings are taken for the distinct
edges only. Joining the tables themselves would carry a dozen strings per candidate row; the codes give the same
edges, order and candidate counts in a fraction of the time and memory, and the graph task of a large repository,
a build's largest process, stays bounded by `max_join_rows` (docs/SCALING.md, memory).

Hand-written because no library resolves C++ calls by name; pyarrow and numpy do the joins and group scans.
"""

from __future__ import annotations

from typing import Mapping, NamedTuple

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
    scopes: dict[int, str] = {}  # per caller: a function makes many calls
    for i, call in enumerate(fs.calls):
        caller = fs.spans[call.caller]
        if (scope := scopes.get(call.caller)) is None:
            scope = scopes[call.caller] = _scope_of(caller.qualname)
        calls.append({"source_path": path, "caller": caller.qualname, "caller_scope": scope,
                      "name": call.name, "qualifier": "::".join(components(call.qualifier)) if call.qualifier else "",
                      "order": (order << 20) + i})
    return defs, calls


def _group_any(mask: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """Per row: whether any row of its group (groups are runs starting at `starts`) has `mask` set."""
    return np.repeat(np.maximum.reduceat(mask.astype(np.int8), starts).astype(bool), np.diff(np.r_[starts, len(mask)]))


def _plain(column: pa.ChunkedArray) -> pa.ChunkedArray:
    """A string column as plain strings: the structure stage reads its groups' string columns dictionary-encoded
    (smaller in memory while a repository waits its turn); each is decoded here only while a step needs it."""
    if not pa.types.is_dictionary(column.type):
        return column
    return pa.chunked_array([c.dictionary_decode() for c in column.chunks], type=column.type.value_type)


def _dictionary(*columns: pa.ChunkedArray) -> tuple[pa.Array, list[np.ndarray]]:
    """(the distinct strings, each column as int codes into them): equal strings, equal codes, across columns."""
    both = pa.chunked_array([c for col in columns for c in _plain(col).chunks], type=pa.string())
    strings = pc.unique(both)
    codes = pc.fill_null(pc.index_in(both, strings), -1).to_numpy()
    out, at = [], 0
    for col in columns:
        out.append(codes[at:at + len(col)])
        at += len(col)
    return strings, out


def _codes(*columns: pa.ChunkedArray) -> list[np.ndarray]:
    return _dictionary(*columns)[1]


def _resolve_chunk(ci: np.ndarray, di: np.ndarray, ids: dict,
                   max_candidates: int | None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The rule over candidate rows (call row ci, definition row di), grouped by call in call order and
    definition order within a call; returns the kept rows' (call row, definition row, candidates)."""
    starts = np.flatnonzero(np.r_[True, ci[1:] != ci[:-1]])
    suffix = ids["no_qualifier"][ci]
    written = np.flatnonzero(~suffix)  # calls with a qualifier: is it a suffix of the candidate's scope?
    if len(written):  # tested once per distinct (qualifier, scope) pair, far fewer than candidate rows
        strings = ids["strings"]
        n = len(strings) + 1
        pairs, inverse = np.unique(ids["qualifier"][ci[written]] * n + ids["def_scope"][di[written]],
                                   return_inverse=True)
        test = np.array([s == q or s.endswith("::" + q) for q, s in zip(
            strings.take(pa.array(pairs // n)).to_pylist(), strings.take(pa.array(pairs % n)).to_pylist())], bool)
        suffix[written] = test[inverse.reshape(-1)]
    same_file = ids["call_path"][ci] == ids["def_path"][di]
    same_scope = ids["caller_scope"][ci] == ids["def_scope"][di]
    keep = np.ones(len(ci), dtype=bool)
    for test in (suffix, same_file, same_scope):  # each narrows, unless it would leave a call no candidate
        narrowed = keep & test
        keep = np.where(_group_any(narrowed, starts), narrowed, keep)
    count = np.add.reduceat(keep.astype(np.int64), starts)
    count = np.repeat(count, np.diff(np.r_[starts, len(keep)]))
    if max_candidates is not None:
        keep &= count <= max_candidates
    return ci[keep], di[keep], count[keep]


def _group_ids(*pairs: tuple[np.ndarray, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Dense ids of the tuples (definition columns, call columns) of codes: equal tuples, equal ids, across the
    two. Each column is folded in and the ids made dense again, so the products stay below the rows squared."""
    n = len(pairs[0][0])
    ids = np.zeros(n + len(pairs[0][1]), np.int64)
    for d, c in pairs:
        column = np.concatenate([d, c]).astype(np.int64) + 1  # a null's code (-1) becomes 0
        ids = np.unique(ids * (int(column.max()) + 1) + column, return_inverse=True)[1].reshape(-1)
    return ids[:n], ids[n:]


def _candidate_runs(def_name: np.ndarray, call_name: np.ndarray, def_path: np.ndarray, call_path: np.ndarray,
                    def_scope: np.ndarray, caller_scope: np.ndarray,
                    no_qualifier: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(definition rows in runs, each call's first position in them, its run's length): the definitions a call
    is resolved over, in definition order.

    A call with a written qualifier gets every definition of its short name, and the rule's three filters run
    on them (`_resolve_chunk`). For a call without one, the filter on the qualifier keeps everything, and the
    other two only ask whether any candidate shares the caller's file, then its scope; counts of the
    definitions per (name, file, scope), (name, file) and (name, scope) answer that, so its run is already the
    set the filters leave: the definitions of its name in its file and scope, else in its file, else in its
    scope, else all of them. Its filters then keep every row, and the edges are the same.

    Why: without it, a generic name's every call carries every definition of that name as a candidate row, calls
    times definitions (a file of 20,000 `int f(long a) { return f(a + 1); }` is the length of the text squared;
    a repository's `get` or `size` grows the same way)."""
    order = np.arange(len(def_name))
    levels = [(def_name, call_name)]
    levels.append(_group_ids((def_name, call_name), (def_path, call_path)))
    levels.append(_group_ids((def_name, call_name), (def_scope, caller_scope)))
    levels.append(_group_ids((def_name, call_name), (def_path, call_path), (def_scope, caller_scope)))
    runs, starts, lengths, at = [], [], [], 0
    for d, c in levels:  # definitions by (key, order): a run per key
        by = np.lexsort((order, d))
        keys = d[by]
        first = np.searchsorted(keys, c, side="left")
        lengths.append(np.searchsorted(keys, c, side="right") - first)
        starts.append(first + at)
        runs.append(by)
        at += len(by)
    name, file, scope, both = range(4)
    level = np.full(len(call_name), name)
    unq = no_qualifier
    level[unq & (lengths[file] > 0)] = file
    level[unq & (lengths[both] > 0)] = both
    level[unq & (lengths[file] == 0) & (lengths[scope] > 0)] = scope
    pick = np.arange(len(call_name))
    return (np.concatenate(runs), np.stack(starts)[level, pick], np.stack(lengths)[level, pick])


def _in_order(table: pa.Table) -> pa.Table:
    """`table` sorted by its `order` column (stably), without a copy when it already is: the structure stage's
    rows come in order, and sorting would copy a repository's rows."""
    order = table.column("order").to_numpy()
    return table if bool(np.all(order[1:] >= order[:-1])) else table.sort_by("order")


def resolve(defs: pa.Table, calls: pa.Table, max_candidates: int | None = 8,
            max_join_rows: int = 250_000) -> pa.Table:
    """Edges (EDGES) of one repository from its definitions (DEFINITIONS) and calls (CALLS), in call order.

    The join runs on integer codes: every call's candidates are a run of definitions in definition order (those of
    its short name; for a call without a qualifier, those its filters leave: `_candidate_runs`), so a chunk of calls
    becomes two arrays of row numbers (16 bytes a candidate row) and the filters compare codes of paths and scopes;
    strings are taken only for calls with a written qualifier and for the edges kept. Chunks of consecutive calls
    stay under `max_join_rows` candidate rows. (Joining the tables themselves would carry a dozen strings per
    candidate row, several times the memory of the codes.)"""
    defs, calls = _in_order(defs), _in_order(calls)
    if defs.num_rows == 0 or calls.num_rows == 0:
        return EDGES.empty_table()
    def_name, call_name = _codes(defs.column("name"), calls.column("name"))
    call_path, def_path = _codes(calls.column("source_path"), defs.column("source_path"))
    strings, (caller_scope, def_scope, qualifier) = _dictionary(calls.column("caller_scope"), defs.column("scope"),
                                                               calls.column("qualifier"))
    no_qualifier = pc.equal(calls.column("qualifier"), "").to_numpy(zero_copy_only=False)
    ids = {"call_path": call_path, "def_path": def_path, "caller_scope": caller_scope, "def_scope": def_scope,
           "qualifier": qualifier, "strings": strings, "no_qualifier": no_qualifier}
    by, lo, fanout = _candidate_runs(def_name, call_name, def_path, call_path, def_scope, caller_scope,
                                     no_qualifier)
    fanout[call_name < 0] = 0
    if max_candidates is not None:  # an unqualified call's run is its final set: too many, no edge
        fanout[no_qualifier & (fanout > max_candidates)] = 0
    rows = np.flatnonzero(fanout > 0)  # calls with at least one candidate, in call order
    if len(rows) == 0:  # no call names a definition of the repository (a main() calling only the library)
        return EDGES.empty_table()
    bounds = np.cumsum(fanout[rows])
    kept_c, kept_d, kept_n = [], [], []
    start = 0
    while start < len(rows):  # chunks of consecutive calls whose candidates stay under max_join_rows
        before = bounds[start - 1] if start else 0
        stop = max(start + 1, int(np.searchsorted(bounds, before + max_join_rows, side="right")))
        chunk = rows[start:stop]
        n = fanout[chunk]
        ci = np.repeat(chunk, n)
        first = np.repeat(np.cumsum(n) - n, n)
        di = by[np.repeat(lo[chunk], n) + np.arange(len(ci)) - first]
        c, d, k = _resolve_chunk(ci, di, ids, max_candidates)
        kept_c.append(c)
        kept_d.append(d)
        kept_n.append(k)
        start = stop
    c, d, n = np.concatenate(kept_c), np.concatenate(kept_d), np.concatenate(kept_n)
    if len(c) == 0:
        return EDGES.empty_table()
    # One edge per (caller, caller file, callee, callee file), in the order of its first call, with the candidate
    # count of its last: found on codes, so strings are taken for the distinct edges only (taking them for every
    # linked call first, then grouping on them, would raise a large repository's peak).
    caller, callee = _codes(calls.column("caller"))[0][c], _codes(defs.column("qualname"))[0][d]
    key = (caller, call_path[c], callee, def_path[d])
    by_key = np.lexsort((np.arange(len(c)),) + key[::-1])  # runs of equal keys, each in call order
    new_key = np.zeros(len(c), dtype=bool)
    new_key[0] = True
    for k in key:
        k = k[by_key]
        new_key[1:] |= k[1:] != k[:-1]
    starts = np.flatnonzero(new_key)
    first = by_key[starts]
    last = by_key[np.r_[starts[1:], len(c)] - 1]
    keep = np.argsort(first, kind="stable")
    first, last = first[keep], last[keep]
    return pa.table({"caller_file": _plain(pc.take(calls.column("source_path"), pa.array(c[first]))),
                     "caller": _plain(pc.take(calls.column("caller"), pa.array(c[first]))),
                     "callee_file": _plain(pc.take(defs.column("source_path"), pa.array(d[first]))),
                     "callee": _plain(pc.take(defs.column("qualname"), pa.array(d[first]))),
                     "candidates": pa.array(n[last], pa.int32())}, schema=EDGES)


class CallEdge(NamedTuple):
    caller: str
    caller_file: str
    callee: str
    callee_file: str
    candidates: int  # how many definitions the name resolved to (> 1: ambiguous, linked to all)


def call_graph(files: Mapping[str, FileStructure], max_candidates: int | None = 8) -> list[CallEdge]:
    """Name-level caller -> callee edges within a repository.

    A call's short name is matched against every function defined in `files` with that short name (calls to names
    defined nowhere, e.g. std or macros, are dropped). The candidates are then narrowed by each of these filters in
    turn, a filter being skipped when it would leave none: (1) a written qualifier (`ns::A::f()`, `A::f()`) must be a
    suffix of the candidate's scope; (2) candidates in the caller's file; (3) candidates whose scope equals the
    caller's (same class/namespace). Whatever remains is linked, all of it when ambiguous (`candidates` > 1),
    unless more than `max_candidates` remain (generic names such as `size`, `get`): such calls are dropped.
    Edges are deduplicated per (caller, caller file, callee, callee file). The rule runs on tables
    (stages/lib/name_graph.py), which is how the structure stage calls it for a whole repository."""
    defs, calls = [], []
    for k, (path, fs) in enumerate(files.items()):
        d, c = file_rows(path, fs, k)
        defs += d
        calls += c
    edges = resolve(pa.Table.from_pylist(defs, schema=DEFINITIONS),
                               pa.Table.from_pylist(calls, schema=CALLS), max_candidates)
    return [CallEdge(*row) for row in zip(*(edges.column(c).to_pylist()
                                            for c in ("caller", "caller_file", "callee", "callee_file", "candidates")))]
