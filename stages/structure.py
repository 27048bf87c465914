"""structure: the tree-sitter layer's columns on every document of the shards (docs/DESIGN.md sections 6 and 7).

Three phases, each as datatrove tasks on the build's executor (stages/lib/shard_tasks.py):
1. Analyze (one task per slice of at most `rows_per_task` rows): every document is parsed once, and its
   columns are written to a piece beside the shards' columns; the task also writes its function definitions
   and calls as rows (stages/lib/name_graph.py), the only thing the next phase needs of the text.
2. Graph (one task per group of repositories, after the driver routes the definition and call rows to their
   repository's group): calls are linked by name within each repository (`name_graph.resolve`, the rule of
   syntax.call_graph) and every function gets its dependency level (clang_index/levels.py: leaves 0, cycles as
   one); per document the task writes the levels and the tree-sitter call edges between its own chunks.
3. Merge (one task per shard file): the pieces of each row group, completed with phase 2's levels and edges,
   are written as that row group again, so files, row groups and row order (and `text`) stay the shards'.
Columns added per document:
  structure_ids, ast_depth, sibling_index, ast_node_type  one value per character of `text`
  chunk_boundaries   functions, classes, namespaces and typedefs: start, end (characters), kind, name, dep_level
  call_edges         {from, to}: indices into the document's chunks, for calls between its own functions:
                     libclang's call/ref edges where the semantics stage indexed the file (its functions
                     matched to chunks by first line), the tree-sitter name graph otherwise
  type_edges         {from, to}: function chunk -> class/struct/enum chunk it references (libclang only)
  build_info, platform_info   JSON: the compile command of the file's TU; target, -std and -D flags ("" without)
  constituents       the document itself: source_repo, source_commit, source_path, character range, license
  language_info      JSON: language (c or c++ by extension), parser, edges (libclang | tree-sitter),
                     error_byte_share (bytes in ERROR nodes)
It also writes call_graph.parquet: the repository-level edges (source_repo, caller_file, caller, callee_file,
callee), repositories in name order, that the v4 context documents are built from. Memory: a task holds one
slice; the graph phase holds one repository's definition and call rows as columns.
"""

from __future__ import annotations

import json
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from datatrove.pipeline.base import PipelineStep

from cpp_data.clang_index.levels import dependency_levels
from cpp_data.pipeline.contract.executor import stat_total
from cpp_data.pipeline.contract.stage import Stage, StageContext
from cpp_data.pipeline.foundation.allocator import give_back_freed_memory
from cpp_data.pipeline.foundation.fsutil import atomic_write_json
from cpp_data.pipeline.foundation.worker_cache import worker_cache
from cpp_data.schemas.generations import columns as generation_columns
from cpp_data.schemas.generations import write_schema
from cpp_data.stages.lib import name_graph, repo_groups, syntax
from cpp_data.stages.lib.list_columns import list_array
from cpp_data.stages.lib.shard_tasks import (
    WORK,
    SliceWork,
    clean_work,
    map_shards,
    merge_shards,
    plan_slices,
    write_task_table,
)

CHUNK_KINDS = frozenset({"function", "class", "struct", "union", "enum", "namespace", "typedef"})
ENRICHED = "v6"  # the generation whose columns these shards carry, whatever the recipe's (they feed v4 too)
MAX_NAME = 256  # error-recovered parses of macro code can yield a whole region as a "name"
_ARRAYS = ("structure_ids", "ast_depth", "sibling_index", "ast_node_type")  # one value per character; types: v6's


@dataclass(frozen=True)
class StructureParams:
    bounds: ClassVar[dict] = {"max_candidates": (1, None), "rows_per_task": (1, None), "graph_group_rows": (1, None)}
    max_candidates: int = 8  # calls whose name matches more definitions than this are not linked
    compression: str = "zstd"
    compression_level: int = 3
    rows_per_task: int = 256  # documents per analyze task (the output bytes do not depend on it)
    graph_group_rows: int = 4_000_000  # definition and call rows per graph task at most (see GRAPH_SPREAD)


class SemanticIndex:
    """libclang's view of a source (the semantics stage's tables), looked up per file: functions by first line,
    call/ref and type edges, and the compile command of the file's TU."""

    def __init__(self, art_path: Path) -> None:
        self.functions: dict[str, dict[int, dict]] = defaultdict(dict)  # file -> start line -> function
        for f in pq.read_table(art_path / "functions.parquet").to_pylist():
            self.functions[f["file"]].setdefault(f["start_line"], f)
        self.edges: dict[str, list] = defaultdict(list)
        for e in pq.read_table(art_path / "edges.parquet").to_pylist():
            self.edges[e["src"]].append(e["dst"])
        self.types: dict[str, list] = defaultdict(list)
        for t in pq.read_table(art_path / "type_refs.parquet").to_pylist():
            self.types[t["src"]].append(t["dst_name"])
        self.tus = {t["file"]: t for t in pq.read_table(art_path / "tu_status.parquet").to_pylist()}

    def command_for(self, path: str) -> dict | None:
        tu = self.tus.get(path)
        if tu is None:  # a header: the TU that indexed its first function
            f = next(iter(self.functions.get(path, {}).values()), None)
            tu = self.tus.get(f["tu"]) if f else None
        return tu


def _semantic_edges(chunks: list, path: str, sem: SemanticIndex) -> tuple[list, list] | None:
    """Call and type edges between a document's chunks from libclang, matched by each function's first line;
    None when libclang indexed no function of this file (the tree-sitter edges stand)."""
    by_line = sem.functions.get(path)
    if not by_line:
        return None
    usr_to_chunk = {}
    for i, c in enumerate(chunks):
        f = by_line.get(c.line) if c.kind == "function" else None
        if f:
            usr_to_chunk[f["usr"]] = i
    types = {c.qualname: i for i, c in enumerate(chunks) if c.kind in ("class", "struct", "union", "enum")}
    calls = sorted({(a, usr_to_chunk[d]) for u, a in usr_to_chunk.items() for d in sem.edges.get(u, ())
                    if d in usr_to_chunk and usr_to_chunk[d] != a})
    type_edges = sorted({(a, types[n]) for u, a in usr_to_chunk.items() for n in sem.types.get(u, ()) if n in types})
    return calls, type_edges


def _platform(command: str) -> dict:
    args = command.split()
    target = next((a.split("=", 1)[1] for a in args if a.startswith("--target=")), None) or next(
        (args[i + 1] for i, a in enumerate(args[:-1]) if a == "-target"), None)
    return {"target": target or "host", "std": next((a[5:] for a in args if a.startswith("-std=")), None),
            "defines": sorted({a[2:] for a in args if a.startswith("-D")})}


def document_columns(text: str, path: str, fs, sem: SemanticIndex | None = None,
                     provenance: dict | None = None) -> dict:
    """The added columns of one document, but for what needs its whole repository: functions get dep_level 0
    and, where libclang gave no edges (language_info says tree-sitter), call_edges stay empty until the merge
    fills in the name graph's (`_complete`)."""
    chunks = [s for s in fs.spans if s.kind in CHUNK_KINDS]
    semantic = _semantic_edges(chunks, path, sem) if sem else None
    if semantic is None:
        call_edges: list[dict] = []
        type_edges: list[dict] = []
        source = "tree-sitter"
    else:
        (call_edges, type_edges), source = semantic, "libclang"
    tu = sem.command_for(path) if sem else None
    return {
        "type_edges": [{"from": a, "to": b} for a, b in type_edges],
        "build_info": json.dumps({"directory": tu["directory"], "command": tu["arguments"], "status": tu["status"],
                                 "database": tu.get("database", "")},
                                 sort_keys=True) if tu else "",
        "platform_info": json.dumps(_platform(tu["arguments"]), sort_keys=True) if tu else "",
        "constituents": [{**provenance, "start": 0, "end": len(text)}] if provenance else [],
        "chunk_boundaries": [{"start": s.start, "end": s.end, "kind": s.kind, "name": s.qualname[:MAX_NAME],
                              "dep_level": 0 if s.kind == "function" else -1} for s in chunks],
        "call_edges": [{"from": a, "to": b} for a, b in call_edges],
        "language_info": json.dumps({"language": "c" if path.endswith(".c") else "c++",
                                     "parser": "tree-sitter-cpp", "edges": source,
                                     "error_byte_share": round(fs.error_byte_share, 4)}, sort_keys=True),
    }


# What the analyze tasks write for the graph phase: the definitions (with the chunk each one is) and calls of
# every document, tagged with the document's repository and place (task rank, row in the slice).
_PLACE = [("source_repo", pa.string()), ("rank", pa.int64()), ("row", pa.int32())]
GRAPH_DEFINITIONS = pa.schema([*_PLACE, *name_graph.DEFINITIONS, ("chunk", pa.int32()),
                               ("tree_sitter_edges", pa.bool_())])  # the document takes the name graph's edges
GRAPH_CALLS = pa.schema([*_PLACE, *name_graph.CALLS])
# What the graph tasks write per document (sorted by rank, row): levels of its functions (chunk, level; only
# levels above 0) and its tree-sitter call edges (null where libclang's stand).
_EDGE = pa.list_(pa.struct([("from", pa.int32()), ("to", pa.int32())]))
DOCUMENT_GRAPH = pa.schema([("rank", pa.int64()), ("row", pa.int32()),
                            ("levels", pa.list_(pa.struct([("chunk", pa.int32()), ("level", pa.int32())]))),
                            ("call_edges", _EDGE)])
CALL_GRAPH = pa.schema([(n, pa.string()) for n in ("source_repo", "caller_file", "caller", "callee_file", "callee")])


class Analyze(SliceWork):
    """Phase 1: parse every document of a slice once; its columns into the piece, its definitions and calls
    into graph_in/."""

    columns = ["text", "source_repo", "source_path", "source_commit", "license_spdx"]

    def __init__(self, semantics: dict[str, str]):
        self.semantics = semantics  # source -> the semantics stage's directory

    def schema(self, names: list[str]) -> pa.Schema:
        return write_schema(ENRICHED, names)

    def transform(self, table: pa.Table, piece, rank: int, work: Path, stat) -> pa.Table:
        parser = worker_cache("tree-sitter parser", syntax.new_parser)
        types = {c.name: c.type for c in generation_columns(ENRICHED)}
        arrays: dict[str, list] = {name: [] for name in _ARRAYS}
        extra: dict[str, list] = {k: [] for k in ("chunk_boundaries", "call_edges", "type_edges", "language_info",
                                                  "build_info",
                                 "platform_info", "constituents")}
        defs, calls = [], []
        for row, (text, repo, path, commit, lic) in enumerate(zip(*(table.column(c).to_pylist() for c in (
                "text", "source_repo", "source_path", "source_commit", "license_spdx")))):
            fs = syntax.analyze(text, parser)
            stat("error_bytes", fs.error_bytes)
            stat("total_bytes", fs.n_bytes)
            for name in _ARRAYS:
                arrays[name].append(getattr(fs, name))
            index_dir = self.semantics.get(repo)
            sem = (worker_cache(index_dir, lambda d=index_dir: SemanticIndex(Path(d)), "semantics", keep=8)
                   if index_dir is not None else None)
            cols = document_columns(text, path, fs, sem, {"source_repo": repo, "source_commit": commit,
                                                          "source_path": path, "license_spdx": lic})
            stat("chunks", len(cols["chunk_boundaries"]))
            for k in extra:
                extra[k].append(cols[k])
            d, c = name_graph.file_rows(path, fs, piece.first_row + row)  # d: the function spans in order
            fn_chunks = [k for k, sp in enumerate(x for x in fs.spans if x.kind in CHUNK_KINDS)
                         if sp.kind == "function"]
            from_ts = '"edges": "tree-sitter"' in cols["language_info"]
            place = {"source_repo": repo, "rank": rank, "row": row}
            defs += [{**place, **x, "chunk": k, "tree_sitter_edges": from_ts} for x, k in zip(d, fn_chunks)]
            calls += [{**place, **x} for x in c]
        (work / "graph_in").mkdir(exist_ok=True)
        pq.write_table(pa.Table.from_pylist(defs, schema=GRAPH_DEFINITIONS),
                       work / "graph_in" / f"defs-{rank:05d}.parquet")
        pq.write_table(pa.Table.from_pylist(calls, schema=GRAPH_CALLS), work / "graph_in" / f"calls-{rank:05d}.parquet")
        added = {name: list_array(arrays[name], types[name]) for name in _ARRAYS}
        added |= {name: pa.array(values, type=types[name]) for name, values in extra.items()}
        return pa.table(added)

    def finalize(self, table: pa.Table, rank: int, work: Path) -> pa.Table:
        """Phase 3: a piece with its functions' levels and its tree-sitter call edges filled in."""
        import pyarrow.dataset as ds

        graph = worker_cache(("document graph", str(work)), lambda: ds.dataset(
            sorted(str(f) for f in (work / "graph").glob("docs-*.parquet")), schema=DOCUMENT_GRAPH))
        got = graph.to_table(filter=pc.field("rank") == rank)
        if got.num_rows == 0:
            return table
        table = _set_levels(table, got)
        edges = {r: v for r, v in zip(got.column("row").to_pylist(), got.column("call_edges").to_pylist())
                 if v is not None}
        if not edges:
            return table
        call_edges = table.column("call_edges").to_pylist()
        for r, pairs in edges.items():
            call_edges[r] = pairs
        i = table.column_names.index("call_edges")
        return table.set_column(i, table.schema.field(i), pa.array(call_edges, type=table.schema.field(i).type))


def _set_levels(table: pa.Table, got: pa.Table) -> pa.Table:
    """chunk_boundaries with dep_level set from `got`'s (row, levels: [{chunk, level}]) rows, without leaving
    Arrow: the levels are written into the flattened dep_level values at offset[row] + chunk."""
    levels = got.column("levels").combine_chunks()
    lengths = pc.fill_null(pc.list_value_length(levels), 0).to_numpy()
    if not lengths.sum():
        return table
    i = table.column_names.index("chunk_boundaries")
    col = pa.concat_arrays(table.column(i).chunks) if table.column(i).num_chunks != 1 else table.column(i).chunk(0)
    offsets = col.offsets.to_numpy()
    rows = np.repeat(got.column("row").to_numpy(), lengths)
    items = levels.flatten()
    values = col.values
    dep = values.field("dep_level").to_numpy(zero_copy_only=False).copy()
    dep[offsets[rows] + items.field("chunk").to_numpy()] = items.field("level").to_numpy()
    names = [values.type.field(k).name for k in range(values.type.num_fields)]
    fields = [pa.array(dep, pa.int32()) if n == "dep_level" else values.field(n) for n in names]
    struct = pa.StructArray.from_arrays(fields, fields=list(values.type))
    return table.set_column(i, table.schema.field(i), pa.ListArray.from_arrays(col.offsets, struct,
                                                                                   type=col.type))


def repository_graph(defs: pa.Table, calls: pa.Table, max_candidates: int) -> tuple[pa.Table, list[dict]]:
    """(edges in call_graph order, DOCUMENT_GRAPH rows) of one repository from its definition and call rows."""
    edges = name_graph.resolve(defs.select(name_graph.DEFINITIONS.names), calls.select(name_graph.CALLS.names),
                               max_candidates)
    # the join's arrays are freed; Python's objects below come from arenas of their own, which cannot reuse
    # that heap: handed back, it lowers a large repository's graph task peak (pipeline/foundation/allocator.py)
    give_back_freed_memory()
    caller_file, caller = edges.column("caller_file").to_pylist(), edges.column("caller").to_pylist()
    callee_file, callee = edges.column("callee_file").to_pylist(), edges.column("callee").to_pylist()
    levels = dependency_levels(((a, b), (c, d)) for a, b, c, d in zip(caller_file, caller, callee_file, callee))
    docs: dict[tuple[int, int], dict] = {}
    chunk_by_name: dict[str, dict[str, int]] = defaultdict(dict)  # path -> qualname -> chunk (the last one wins)
    place_of: dict[str, tuple[int, int]] = {}
    ts_paths = set()
    for rank, row, path, qualname, chunk, ts in zip(*(defs.column(c).to_pylist() for c in (
            "rank", "row", "source_path", "qualname", "chunk", "tree_sitter_edges"))):
        doc = docs.setdefault((rank, row), {"rank": rank, "row": row, "levels": [], "call_edges": None})
        level = levels.get((path, qualname), 0)
        if level:
            doc["levels"].append({"chunk": chunk, "level": level})
        chunk_by_name[path][qualname] = chunk
        place_of[path] = (rank, row)
        if ts:
            ts_paths.add(path)
    pairs: dict[str, set] = defaultdict(set)
    for a, b, c, d in zip(caller_file, caller, callee_file, callee):
        if a == c and a in ts_paths:
            index = chunk_by_name[a]
            pairs[a].add((index[b], index[d]))
    for path, found in pairs.items():
        docs[place_of[path]]["call_edges"] = [{"from": x, "to": y} for x, y in sorted(found)]
    rows = [d for d in docs.values() if d["levels"] or d["call_edges"]]
    rows.sort(key=lambda d: (d["rank"], d["row"]))
    order = sorted(range(len(caller_file)), key=lambda k: caller_file[k])  # stable: call order within a file
    table = pa.table({"caller_file": [caller_file[k] for k in order], "caller": [caller[k] for k in order],
                      "callee_file": [callee_file[k] for k in order], "callee": [callee[k] for k in order]})
    return table, rows


def _string_columns(schema: pa.Schema) -> list[str]:
    return [f.name for f in schema if f.type == pa.string() and f.name != repo_groups.REPO]


class GraphGroup(PipelineStep):
    """Phase 2, task g: the name graph of every repository of group g (its rows routed to graph_groups/)."""

    type = "🕸 - GRAPH"
    name = "graph"

    def __init__(self, work: Path, max_candidates: int):
        super().__init__()
        self.work, self.max_candidates = Path(work), max_candidates

    def run(self, data, rank: int = 0, world_size: int = 1):
        src, out = self.work / "graph_groups", self.work / "graph"
        out.mkdir(exist_ok=True)
        # string columns stay dictionary-encoded while a repository waits its turn (name_graph decodes each
        # where a step needs it): paths and scopes repeat on every row
        defs = repo_groups.read_by_repository(src / f"defs-{rank:05d}.parquet", _string_columns(GRAPH_DEFINITIONS))
        calls = repo_groups.read_by_repository(src / f"calls-{rank:05d}.parquet", _string_columns(GRAPH_CALLS))
        edge_tables, doc_rows = [], []
        for repo in sorted(defs):
            d = defs.pop(repo)  # each repository's rows go once its graph is made
            c = calls.pop(repo) if repo in calls else GRAPH_CALLS.empty_table()
            edges, rows = repository_graph(d, c, self.max_candidates)
            del d, c
            edge_tables.append(pa.table({"source_repo": pa.array([repo] * edges.num_rows, pa.string()),
                                         **{n: edges.column(n) for n in edges.column_names}}, schema=CALL_GRAPH))
            doc_rows += rows
            self.stat_update("call_edges_by_name", value=edges.num_rows)
        doc_rows.sort(key=lambda d: (d["rank"], d["row"]))
        write_task_table(pa.concat_tables(edge_tables) if edge_tables else CALL_GRAPH.empty_table(),
                         out / f"edges-{rank:05d}.parquet")
        write_task_table(pa.Table.from_pylist(doc_rows, schema=DOCUMENT_GRAPH), out / f"docs-{rank:05d}.parquet",
                         row_group_size=4096)  # small row groups: each merge task reads only its ranks' rows
        return
        yield


# A corpus under GRAPH_SPREAD * graph_group_rows rows is cut into groups of about 1/GRAPH_SPREAD of its rows, so
# that a small corpus's graph phase is a few tasks, not one task on one core (the same output either way). A
# constant, not the worker count: the stage's files must not depend on it.
GRAPH_SPREAD = 8


def route_to_groups(work: Path, ranks: int, group_rows: int) -> int:
    """Route every analyze task's definition and call rows to the group of its repository (stages/lib/
    repo_groups.py: repositories in name order, groups of about `group_rows` rows, or of 1/GRAPH_SPREAD of all
    rows where that is less, a repository never split). Returns the number of groups."""
    inputs = {kind: [work / "graph_in" / f"{kind}-{r:05d}.parquet" for r in range(ranks)] for kind in ("defs", "calls")}
    sizes: dict[str, int] = defaultdict(int)
    for paths in inputs.values():
        for repo, n in repo_groups.repository_sizes(paths).items():
            sizes[repo] += n
    limit = min(group_rows, max(1, -(-sum(sizes.values()) // GRAPH_SPREAD)))
    group_of = repo_groups.repository_groups(sizes, limit)
    for kind, schema in (("defs", GRAPH_DEFINITIONS), ("calls", GRAPH_CALLS)):
        repo_groups.route(inputs[kind], schema, group_of, work / "graph_groups", kind)
    return max(group_of.values()) + 1 if group_of else 0


class Structure(Stage):
    name = "structure"
    libraries = ('pyarrow', 'numpy', 'tree-sitter', 'tree-sitter-cpp')
    version = 4
    scope = "corpus"
    inputs = ("shards", "semantics")
    Params = StructureParams
    resumable_tasks = True
    publishes = ("shards",)  # a recipe that stops here publishes the shards with their structure columns

    def run(self, ctx: StageContext) -> dict:
        p: StructureParams = self.params
        src = ctx.input("shards").path
        listing = json.loads((src / "shards.json").read_text())["files"]
        work = ctx.out / WORK
        semantics = {a.source or "": str(a.path) for a in ctx.inputs.get("semantics", [])}
        slices = plan_slices(src, listing, p.rows_per_task)
        job = Analyze(semantics)
        t0 = time.monotonic()
        stats = map_shards(ctx, src, listing, job, slices, "analyze")
        t1 = time.monotonic()
        groups = route_to_groups(work, len(slices), p.graph_group_rows)
        graph_stats = ctx.executor.run([GraphGroup(work, p.max_candidates)], groups,
                                    work / "_datatrove" / "graph", f"{ctx.label}: graph")
        writer = pq.ParquetWriter(ctx.out / "call_graph.parquet", CALL_GRAPH, compression="zstd")
        for g in range(groups):
            writer.write_table(pq.read_table(work / "graph" / f"edges-{g:05d}.parquet"))
        writer.close()
        t2 = time.monotonic()
        out_listing = merge_shards(ctx, src, listing, job, p.compression, p.compression_level)
        atomic_write_json(ctx.out / "shards.json", {"generation": ENRICHED, "files": out_listing})
        clean_work(ctx)
        error_bytes, total_bytes = stat_total(stats, "error_bytes"), stat_total(stats, "total_bytes")
        return {"documents": sum(e["rows"] for e in out_listing), "chunks": stat_total(stats, "chunks"),
                "call_edges_by_name": stat_total(graph_stats, "call_edges_by_name"),
                "error_byte_share": round(error_bytes / total_bytes, 4) if total_bytes else 0.0,
                "shard_bytes": sum(e["bytes"] for e in out_listing), "tasks": {"analyze": len(slices),
                                                                               "graph": groups},
                "seconds": {"analyze": round(t1 - t0, 2), "graph": round(t2 - t1, 2),
                            "merge": round(time.monotonic() - t2, 2)}}
