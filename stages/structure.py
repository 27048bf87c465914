"""structure: the tree-sitter layer's columns on every document of the shards (docs/DESIGN.md sections 6 and 7).

Pass 1 analyzes every document and keeps only its spans and calls, grouped by repository, to link calls by name
within each repository (stages/lib/syntax.py `call_graph`) and to give every function its dependency level
(clang_index/levels.py: leaves 0, cycles as one). Pass 2 analyzes again and writes, beside the shards' columns
and with the same files, row groups and row order (so `text` stays byte-identical):
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
It also writes call_graph.parquet: the repository-level edges (repo, caller_file, caller, callee_file, callee)
that the v4 context documents are built from. Analyzing twice costs a second parse but keeps memory bounded by one row group plus the per-repository name
tables, not by the per-character arrays of the whole corpus.
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass, replace

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from tqdm import tqdm

from cpp_data.clang_index.levels import dependency_levels
from cpp_data.pipeline.fsutil import atomic_write_json
from cpp_data.pipeline.stage import Stage, StageContext
from cpp_data.schemas.generations import columns as generation_columns
from cpp_data.schemas.generations import write_schema
from cpp_data.stages.lib import syntax
from cpp_data.schemas.reader import iter_shard
from cpp_data.schemas.shard_writer import rewrite_shards

CHUNK_KINDS = frozenset({"function", "class", "struct", "union", "enum", "namespace", "typedef"})
ENRICHED = "v6"  # the generation whose columns these shards carry, whatever the recipe's (they feed v4 too)
MAX_NAME = 256  # error-recovered parses of macro code can yield a whole region as a "name"
_ARRAYS = {"structure_ids": np.uint8, "ast_depth": np.int8, "sibling_index": np.int8, "ast_node_type": np.int16}


@dataclass(frozen=True)
class StructureParams:
    max_candidates: int = 8  # calls whose name matches more definitions than this are not linked
    compression: str = "zstd"
    compression_level: int = 3


def _lists(arrays: list[np.ndarray], dtype) -> pa.Array:
    offsets = np.zeros(len(arrays) + 1, dtype=np.int32)
    np.cumsum([len(a) for a in arrays], out=offsets[1:])
    values = np.concatenate(arrays).astype(dtype) if arrays else np.zeros(0, dtype)
    return pa.ListArray.from_arrays(pa.array(offsets), pa.array(values))


def repository_levels(files: dict, max_candidates: int) -> tuple[dict, dict]:
    """(edges by caller file, level by (file, qualname)) of one repository's name-level call graph."""
    edges = syntax.call_graph(files, max_candidates)
    levels = dependency_levels(((e.caller_file, e.caller), (e.callee_file, e.callee)) for e in edges)
    by_file: dict[str, list] = defaultdict(list)
    for e in edges:
        by_file[e.caller_file].append(e)
    return by_file, levels


class SemanticIndex:
    """libclang's view of a source (the semantics stage's tables), looked up per file: functions by first line,
    call/ref and type edges, and the compile command of the file's TU."""

    def __init__(self, art_path):
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


def document_columns(text: str, path: str, fs, edges: list, levels: dict, sem: SemanticIndex | None = None,
                     provenance: dict | None = None) -> dict:
    chunks = [s for s in fs.spans if s.kind in CHUNK_KINDS]
    index = {s.qualname: i for i, s in enumerate(chunks) if s.kind == "function"}
    semantic = _semantic_edges(chunks, path, sem) if sem else None
    if semantic is None:
        call_edges = sorted({(index[e.caller], index[e.callee]) for e in edges
                             if e.callee_file == path and e.caller in index and e.callee in index})
        type_edges, source = [], "tree-sitter"
    else:
        (call_edges, type_edges), source = semantic, "libclang"
    tu = sem.command_for(path) if sem else None
    return {
        "type_edges": [{"from": a, "to": b} for a, b in type_edges],
        "build_info": json.dumps({"directory": tu["directory"], "command": tu["arguments"], "status": tu["status"]},
                                 sort_keys=True) if tu else "",
        "platform_info": json.dumps(_platform(tu["arguments"]), sort_keys=True) if tu else "",
        "constituents": [{**provenance, "start": 0, "end": len(text)}] if provenance else [],
        "chunk_boundaries": [{"start": s.start, "end": s.end, "kind": s.kind, "name": s.qualname[:MAX_NAME],
                              "dep_level": levels.get((path, s.qualname), 0) if s.kind == "function" else -1}
                             for s in chunks],
        "call_edges": [{"from": a, "to": b} for a, b in call_edges],
        "language_info": json.dumps({"language": "c" if path.endswith(".c") else "c++",
                                     "parser": "tree-sitter-cpp", "edges": source,
                                     "error_byte_share": round(fs.error_byte_share, 4)}, sort_keys=True),
    }


class Structure(Stage):
    name = "structure"
    libraries = ('pyarrow', 'numpy', 'tree-sitter', 'tree-sitter-cpp')
    version = 3
    scope = "corpus"
    inputs = ("shards", "semantics")
    Params = StructureParams

    def run(self, ctx: StageContext) -> dict:
        p: StructureParams = self.params
        src = ctx.input("shards").path
        listing = json.loads((src / "shards.json").read_text())["files"]
        parser = syntax.new_parser()
        repos: dict[str, dict] = defaultdict(dict)  # repo -> {path: spans and calls only}
        for entry in tqdm(listing, desc=f"{ctx.label}: call graph", unit="shard", leave=False,
                          disable=not ctx.executor.progress):
            for t in iter_shard(src / entry["path"], None, ["text", "source_repo", "source_path"]):
                for text, repo, path in zip(*(t.column(c).to_pylist() for c in t.column_names)):
                    fs = syntax.analyze(text, parser)
                    repos[repo][path] = replace(fs, structure_ids=None, ast_depth=None, sibling_index=None,
                                                ast_node_type=None)
        semantic = {a.source: SemanticIndex(a.path) for a in ctx.inputs.get("semantics", [])}
        graphs = {repo: repository_levels(files, p.max_candidates) for repo, files in sorted(repos.items())}
        pq.write_table(pa.Table.from_pylist(
            [{"source_repo": repo, "caller_file": e.caller_file, "caller": e.caller, "callee_file": e.callee_file,
              "callee": e.callee} for repo, (by_file, _) in graphs.items() for f in sorted(by_file)
             for e in by_file[f]],
            schema=pa.schema([(n, pa.string()) for n in ("source_repo", "caller_file", "caller", "callee_file", "callee")])),
            ctx.out / "call_graph.parquet", compression="zstd")
        n_edges = sum(len(e) for by_file, _ in graphs.values() for e in by_file.values())
        del repos
        stats = {"error_bytes": 0, "total_bytes": 0, "chunks": 0}
        types = {c.name: c.type for c in generation_columns(ENRICHED)}

        def transform(table: pa.Table, entry: dict) -> pa.Table:
            arrays = {name: [] for name in _ARRAYS}
            extra = {k: [] for k in ("chunk_boundaries", "call_edges", "type_edges", "language_info",
                                     "build_info", "platform_info", "constituents")}
            for text, repo, path, commit, lic in zip(*(table.column(c).to_pylist() for c in (
                    "text", "source_repo", "source_path", "source_commit", "license_spdx"))):
                fs = syntax.analyze(text, parser)
                stats["error_bytes"] += fs.error_bytes
                stats["total_bytes"] += fs.n_bytes
                for name in _ARRAYS:
                    arrays[name].append(getattr(fs, name))
                by_file, levels = graphs[repo]
                cols = document_columns(text, path, fs, by_file.get(path, []), levels, semantic.get(repo),
                                        {"source_repo": repo, "source_commit": commit, "source_path": path,
                                         "license_spdx": lic})
                stats["chunks"] += len(cols["chunk_boundaries"])
                for k in extra:
                    extra[k].append(cols[k])
            for name, dtype in _ARRAYS.items():
                table = table.append_column(name, _lists(arrays[name], dtype).cast(types[name]))
            for name, values in extra.items():
                table = table.append_column(name, pa.array(values, type=types[name]))
            schema = write_schema(ENRICHED, table.column_names)
            return table.select(schema.names).cast(schema)

        out_listing = rewrite_shards(src, ctx.out, transform, p.compression, p.compression_level,
                                     f"{ctx.label}: columns", ctx.executor.progress)
        error_bytes, total_bytes, chunks = stats["error_bytes"], stats["total_bytes"], stats["chunks"]
        atomic_write_json(ctx.out / "shards.json", {"generation": ENRICHED, "files": out_listing})
        return {"documents": sum(e["rows"] for e in out_listing), "chunks": chunks, "call_edges_by_name": n_edges,
                "error_byte_share": round(error_bytes / total_bytes, 4) if total_bytes else 0.0,
                "shard_bytes": sum(e["bytes"] for e in out_listing)}
