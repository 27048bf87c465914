"""context_graph: the v4 documents (docs/DESIGN.md section 7), one per function, from the tree-sitter call graph.

For every function the structure stage found (at the pin), a document made of its direct callees, then its
direct callers, then the function itself, each block headed by a `// <role>: <path>: <name>` line. Neighbours
are added smallest first while the document stays within `budget_bytes` (the recipe's token budget at ~4 bytes
per token of C++); the target always goes in, cut at the budget if it alone exceeds it. Only neighbours on the
target's side of the train/valid split are used, so no validation text leaks into training documents.
Every piece keeps its provenance in `constituents` (source_repo, source_commit, source_path, character range in the
file's
normalized text, i.e. its file-level document, and license),
and the document's license is the SPDX conjunction of its pieces'. Documents come in shard order: the order
in which the structure shards hold their files, then each file's functions in order.

A call edge never leaves its repository, so the work splits by repository, in three phases (datatrove tasks on
the build's executor, docs/DESIGN.md section 13):
1. Extract (a task per slice of `rows_per_task` documents of the structure shards): each file's functions,
   the first definition of each name standing for its overloads, as rows with their text, character range,
   the file's metadata and split, and their place (row in shard order, chunk).
2. Documents (a task per group of whole repositories, about `group_bytes` of function text, after the driver
   routes the function rows: stages/lib/repo_groups.py): the group's functions and its repositories' edges
   from call_graph.parquet, one document per function, written in place order.
3. Write: the driver merges the groups' documents by place (a k-way merge reading a batch per group at a time)
   into the shards of each split.
Memory: a documents task holds its group's function texts (a repository never splits, so the largest one bounds
it); the driver holds a batch per group. The bytes do not depend on the slicing, the grouping, the number of
workers or the executor.
"""

from __future__ import annotations

import hashlib
import heapq
import json
import os
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import pyarrow as pa
import pyarrow.parquet as pq
from datatrove.pipeline.base import PipelineStep

from cpp_data.pipeline.contract.executor import stat_total
from cpp_data.pipeline.contract.stage import Stage, StageContext
from cpp_data.pipeline.foundation.fsutil import atomic_write_json
from cpp_data.schemas.generations import write_schema
from cpp_data.schemas.provenance import IDENTITY, LICENSE, LICENSE_FAMILY, names
from cpp_data.schemas.shard_writer import SPLITS, ShardParams, ShardWriter
from cpp_data.stages.lib import repo_groups
from cpp_data.stages.lib.shard_tasks import WORK, SliceWork, clean_work, map_shards, plan_slices, write_task_table

ENRICHED = "v6"  # the generation of the structure stage's shards (their metadata columns' types)

_META = [*names(*IDENTITY, *LICENSE, LICENSE_FAMILY), "is_vendored"]
DOC_COLUMNS = ["text", "doc_id", *_META, "text_sha256", "size_bytes", "target_name", "n_callers", "n_callees",
               "constituents"]


@dataclass(frozen=True)
class ContextGraphParams:
    bounds: ClassVar[dict] = {"budget_bytes": (1, None), "docs_per_shard": (1, None), "row_group_size": (1, None),
                              "rows_per_task": (1, None), "group_bytes": (1, None)}
    generation: str = "v4"
    budget_bytes: int = 16_384  # ~4,096 tokens of C++
    docs_per_shard: int = 50_000
    row_group_size: int = 1024
    rows_per_task: int = 1024  # structure documents per extract task (the output bytes do not depend on it)
    group_bytes: int = 64_000_000  # function text per documents task; a repository is never split


@dataclass
class Function:
    key: tuple[str, str, str]  # repo, path, qualified name
    text: str
    start: int
    end: int
    meta: dict
    split: str


_PLACE = [("order_row", pa.int64()), ("order_chunk", pa.int32())]  # row in shard order, chunk in the row


def function_schema() -> pa.Schema:
    """The extract tasks' rows: one per function (first definition of its name in its file)."""
    meta = [write_schema(ENRICHED, _META).field(n) for n in _META]
    return pa.schema([("source_repo", pa.string()), ("source_path", pa.string()), ("name", pa.string()),
                      ("text", pa.string()), ("text_bytes", pa.int64()), ("start", pa.int64()), ("end", pa.int64()),
                      *[f for f in meta if f.name not in ("source_repo", "source_path")],
                      ("split", pa.string()), *_PLACE])


def document_schema(generation: str) -> pa.Schema:
    """The documents tasks' rows: a document of the generation, its split and the place of its function."""
    doc = write_schema(generation, DOC_COLUMNS)
    return pa.schema([*doc, ("split", pa.string()), *_PLACE])


class Extract(SliceWork):
    """Phase 1: the functions of a slice's documents, to functions/<rank>.parquet."""

    columns = ["text", "chunk_boundaries", *_META]

    def __init__(self, splits: list[str]):
        self.splits = splits  # the split of each listed shard file

    def transform(self, table: pa.Table, piece, rank: int, work: Path, stat) -> None:
        rows = []
        split = self.splits[piece.file]
        for i, row in enumerate(table.to_pylist()):
            meta = {k: row[k] for k in _META}
            seen = set()
            for k, c in enumerate(row["chunk_boundaries"]):
                if c["kind"] != "function" or c["name"] in seen:  # overloads: the first definition stands
                    continue
                seen.add(c["name"])
                text = row["text"][c["start"]:c["end"]]
                rows.append({**meta, "name": c["name"], "text": text, "text_bytes": len(text.encode("utf-8")),
                             "start": c["start"], "end": c["end"], "split": split,
                             "order_row": piece.first_row + i, "order_chunk": k})
        (work / "functions").mkdir(exist_ok=True)
        write_task_table(pa.Table.from_pylist(rows, schema=function_schema()),
                         work / "functions" / f"{rank:05d}.parquet")
        stat("functions", len(rows))


def build_document(target: Function, callees: list[Function], callers: list[Function], budget: int) -> dict:
    pieces = [("target", target)]
    used = len(target.text.encode("utf-8"))
    chosen: dict[str, list[Function]] = {"callee": [], "caller": []}
    for role, group in (("callee", callees), ("caller", callers)):
        for f in sorted(group, key=lambda f: (len(f.text), f.key)):
            size = len(f.text.encode("utf-8")) + 64
            if f.key != target.key and used + size <= budget:
                chosen[role].append(f)
                used += size
    pieces = [("callee", f) for f in chosen["callee"]] + [("caller", f) for f in chosen["caller"]] + pieces
    blocks, constituents = [], []
    for role, f in pieces:
        body = f.text if role != "target" else f.text.encode("utf-8")[:budget].decode("utf-8", "ignore")
        blocks.append(f"// {role}: {f.key[1]}: {f.key[2]}\n{body}\n")
        constituents.append({"source_repo": f.key[0], "source_commit": f.meta["source_commit"], "source_path": f.key[1],
                             "start": f.start, "end": f.start + len(body), "license_spdx": f.meta["license_spdx"]})
    text = "\n".join(blocks)
    licenses = sorted({c["license_spdx"] for c in constituents if c["license_spdx"]})
    spdx = licenses[0] if len(licenses) == 1 else " AND ".join(f"({x})" for x in licenses)
    doc_id = hashlib.blake2b("\0".join(target.key).encode("utf-8", "surrogatepass"), digest_size=8).hexdigest()
    return {"text": text, "doc_id": doc_id, **target.meta, "license_spdx": spdx,
            "text_sha256": hashlib.sha256(text.encode("utf-8")).hexdigest(), "size_bytes": len(text.encode("utf-8")),
            "target_name": target.key[2], "n_callers": len(chosen["caller"]), "n_callees": len(chosen["callee"]),
            "constituents": constituents}


class Documents(PipelineStep):
    """Phase 2, task g: a document per function of the repositories of group g (groups/functions-g.parquet),
    with their edges from call_graph.parquet, to documents/docs-g.parquet in place order."""

    type = "📄 - DOCUMENTS"
    name = "documents"

    def __init__(self, work: Path, call_graph: Path, generation: str, budget: int):
        super().__init__()
        self.work, self.call_graph, self.generation, self.budget = Path(work), Path(call_graph), generation, budget

    def run(self, data, rank: int = 0, world_size: int = 1):
        rows = pq.read_table(self.work / "groups" / f"functions-{rank:05d}.parquet").to_pylist()
        rows.sort(key=lambda r: (r["order_row"], r["order_chunk"]))
        functions: dict[tuple, Function] = {}
        place: dict[tuple, tuple[int, int]] = {}
        for r in rows:
            key = (r["source_repo"], r["source_path"], r["name"])
            if key in functions:  # a path met twice in a repository: its first file stands, as in shard order
                continue
            functions[key] = Function(key, r["text"], r["start"], r["end"], {k: r[k] for k in _META}, r["split"])
            place[key] = (r["order_row"], r["order_chunk"])
        del rows
        repos = sorted({k[0] for k in functions})
        callees, callers = defaultdict(list), defaultdict(list)
        edges = pq.read_table(self.call_graph, filters=[("source_repo", "in", repos)]) if repos else None
        for e in edges.to_pylist() if edges is not None else ():
            a, b = ((e["source_repo"], e["caller_file"], e["caller"]),
                    (e["source_repo"], e["callee_file"], e["callee"]))
            if a in functions and b in functions and a != b:
                callees[a].append(b)
                callers[b].append(a)
        schema = document_schema(self.generation)
        out = self.work / "documents"
        out.mkdir(exist_ok=True)
        tmp = out / f".docs-{rank:05d}.parquet.tmp"
        writer, batch = pq.ParquetWriter(tmp, schema, compression="zstd"), []
        for key, f in functions.items():
            same_side = [functions[k] for k in dict.fromkeys(callees[key]) if functions[k].split == f.split]
            up = [functions[k] for k in dict.fromkeys(callers[key]) if functions[k].split == f.split]
            doc = build_document(f, same_side, up, self.budget)
            batch.append({**doc, "split": f.split, "order_row": place[key][0], "order_chunk": place[key][1]})
            self.stat_update("text_bytes", value=doc["size_bytes"])
            if len(batch) == 1024:
                writer.write_table(pa.Table.from_pylist(batch, schema=schema))
                batch = []
        writer.write_table(pa.Table.from_pylist(batch, schema=schema))
        writer.close()
        os.replace(tmp, out / f"docs-{rank:05d}.parquet")
        self.stat_update("functions", value=len(functions))
        self.stat_update("functions_with_context", value=sum(1 for k in functions if callees[k] or callers[k]))
        return
        yield


def merged_documents(paths: list[Path]) -> Iterator[dict]:
    """The documents of every group file, each sorted by place, merged into one stream in place order (one
    batch of each file in memory)."""
    def rows(path: Path) -> Iterator[dict]:
        for batch in pq.ParquetFile(path).iter_batches(batch_size=1024):
            yield from batch.to_pylist()

    return heapq.merge(*(rows(p) for p in paths), key=lambda r: (r["order_row"], r["order_chunk"]))


class ContextGraph(Stage):
    name = "context_graph"
    libraries = ('pyarrow', 'numpy', 'tree-sitter', 'tree-sitter-cpp')
    version = 2
    scope = "corpus"
    inputs = ("structure",)
    Params = ContextGraphParams
    resumable_tasks = True

    summary_counts = {"documents": "documents", "train_documents": "train_documents",
                      "valid_documents": "valid_documents", "shards": "shards", "shard_bytes": "shard_bytes",
                      "text_bytes": "text_bytes", "moved_to_valid": "moved_to_valid"}
    publishes = ("shards",)

    def run(self, ctx: StageContext) -> dict:
        p: ContextGraphParams = self.params
        src = ctx.input("structure").path
        listing = json.loads((src / "shards.json").read_text())["files"]
        work = ctx.out / WORK
        slices = plan_slices(src, listing, p.rows_per_task)
        map_shards(ctx, src, listing, Extract([e["split"] for e in listing]), slices, "extract")
        extracted = [work / "functions" / f"{r:05d}.parquet" for r in range(len(slices))]
        group_of = repo_groups.repository_groups(repo_groups.repository_sizes(extracted, "text_bytes"),
                                                 p.group_bytes)
        groups = repo_groups.route(extracted, function_schema(), group_of, work / "groups", "functions")
        stats = ctx.executor.run([Documents(work, src / "call_graph.parquet", p.generation,
                                                       p.budget_bytes)],
                              groups, work / "_datatrove" / "documents", f"{ctx.label}: documents")
        schema = write_schema(p.generation, DOC_COLUMNS)
        out = ctx.out / "shards"
        out.mkdir(exist_ok=True)
        sp = ShardParams(generation=p.generation, docs_per_shard=p.docs_per_shard, row_group_size=p.row_group_size)
        writers = {split: ShardWriter(out, split, schema, sp) for split in SPLITS}
        pending: dict[str, list[dict]] = {split: [] for split in SPLITS}
        for doc in merged_documents([work / "documents" / f"docs-{g:05d}.parquet" for g in range(groups)]):
            rows = pending[doc["split"]]
            rows.append(doc)
            if len(rows) == p.row_group_size:
                writers[doc["split"]].write(pa.Table.from_pylist(rows, schema=schema))
                rows.clear()
        files, counts = [], {}
        for split in SPLITS:
            if pending[split]:
                writers[split].write(pa.Table.from_pylist(pending[split], schema=schema))
            written = writers[split].close()
            counts[split] = sum(e["rows"] for e in written)
            files += written
        atomic_write_json(ctx.out / "shards.json", {"generation": p.generation, "files": files})
        clean_work(ctx)
        return {"documents": counts["train"] + counts["valid"], "train_documents": counts["train"],
                "valid_documents": counts["valid"], "functions": stat_total(stats, "functions"),
                "functions_with_context": stat_total(stats, "functions_with_context"),
                "shards": len(files), "shard_bytes": sum(e["bytes"] for e in files),
                "text_bytes": stat_total(stats, "text_bytes"), "tasks": {"extract": len(slices), "documents": groups}}
