"""context_graph: the v4 documents (docs/DESIGN.md section 7), one per function, from the tree-sitter call graph.

For every function the structure stage found (at the pin), a document made of its direct callees, then its
direct callers, then the function itself, each block headed by a `// <role>: <path>: <name>` line. Neighbours
are added smallest first while the document stays within `budget_bytes` (the recipe's token budget at ~4 bytes
per token of C++); the target always goes in, cut at the budget if it alone exceeds it. Only neighbours on the
target's side of the train/valid split are used, so no validation text leaks into training documents.
Every piece keeps its provenance in `constituents` (source_repo, source_commit, source_path, character range in the file's
normalized text, i.e. its file-level document, and license),
and the document's license is the SPDX conjunction of its pieces'. Function texts are held in memory for the
whole corpus (about its size in C++ function bodies); the documents are written in shard order.
"""

from __future__ import annotations

import hashlib
import json
from collections import defaultdict
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.parquet as pq

from cpp_data.pipeline.fsutil import atomic_write_json
from cpp_data.pipeline.stage import Stage, StageContext
from cpp_data.schemas.generations import write_schema
from cpp_data.schemas.reader import iter_shard
from cpp_data.schemas.shard_writer import SPLITS, ShardParams, ShardWriter

_META = ["source_repo", "source_commit", "source_path", "license_spdx", "license_source", "license_confidence",
         "license_family", "is_vendored"]
DOC_COLUMNS = ["text", "doc_id", *_META, "text_sha256", "size_bytes", "target_name", "n_callers", "n_callees",
               "constituents"]


@dataclass(frozen=True)
class ContextGraphParams:
    generation: str = "v4"
    budget_bytes: int = 16_384  # ~4,096 tokens of C++
    docs_per_shard: int = 50_000
    row_group_size: int = 1024


@dataclass
class Function:
    key: tuple[str, str, str]  # repo, path, qualified name
    text: str
    start: int
    end: int
    meta: dict
    split: str


def _load(structure_dir) -> tuple[dict, list]:
    """Every function of the structure stage's shards, by key, and the keys in shard order."""
    listing = json.loads((structure_dir / "shards.json").read_text())["files"]
    functions: dict[tuple, Function] = {}
    order = []
    for entry in listing:
        rows = (row for t in iter_shard(structure_dir / entry["path"], None, ["text", "chunk_boundaries", *_META])
                for row in t.to_pylist())
        for row in rows:
            meta = {k: row[k] for k in _META}
            for c in row["chunk_boundaries"]:
                if c["kind"] != "function":
                    continue
                key = (row["source_repo"], row["source_path"], c["name"])
                if key not in functions:  # overloads share a name: the first definition stands for them
                    functions[key] = Function(key, row["text"][c["start"]:c["end"]], c["start"], c["end"], meta,
                                              entry["split"])
                    order.append(key)
    return functions, order


def build_document(target: Function, callees: list[Function], callers: list[Function], budget: int) -> dict:
    pieces = [("target", target)]
    used = len(target.text.encode("utf-8"))
    chosen = {"callee": [], "caller": []}
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


class ContextGraph(Stage):
    name = "context_graph"
    libraries = ('pyarrow', 'numpy', 'tree-sitter', 'tree-sitter-cpp')
    version = 1
    scope = "corpus"
    inputs = ("structure",)
    Params = ContextGraphParams

    summary_counts = {"documents": "documents", "train_documents": "train_documents",
                      "valid_documents": "valid_documents", "shards": "shards", "shard_bytes": "shard_bytes",
                      "text_bytes": "text_bytes", "moved_to_valid": "moved_to_valid"}
    publishes = ("shards",)

    def run(self, ctx: StageContext) -> dict:
        p: ContextGraphParams = self.params
        src = ctx.input("structure").path
        functions, order = _load(src)
        callees, callers = defaultdict(list), defaultdict(list)
        for e in pq.read_table(src / "call_graph.parquet").to_pylist():
            a, b = ((e["source_repo"], e["caller_file"], e["caller"]),
                    (e["source_repo"], e["callee_file"], e["callee"]))
            if a in functions and b in functions and a != b:
                callees[a].append(b)
                callers[b].append(a)
        schema = write_schema(p.generation, DOC_COLUMNS)
        out = ctx.out / "shards"
        out.mkdir()
        sp = ShardParams(generation=p.generation, docs_per_shard=p.docs_per_shard, row_group_size=p.row_group_size)
        files, counts, text_bytes = [], {}, 0
        for split in SPLITS:
            writer = ShardWriter(out, split, schema, sp)
            rows = []
            for key in order:
                f = functions[key]
                if f.split != split:
                    continue
                same_side = [functions[k] for k in dict.fromkeys(callees[key]) if functions[k].split == split]
                up = [functions[k] for k in dict.fromkeys(callers[key]) if functions[k].split == split]
                rows.append(build_document(f, same_side, up, p.budget_bytes))
                text_bytes += rows[-1]["size_bytes"]
                if len(rows) == p.row_group_size:
                    writer.write(pa.Table.from_pylist(rows, schema=schema))
                    rows = []
            if rows:
                writer.write(pa.Table.from_pylist(rows, schema=schema))
            written = writer.close()
            counts[split] = sum(e["rows"] for e in written)
            files += written
        atomic_write_json(ctx.out / "shards.json", {"generation": p.generation, "files": files})
        with_context = sum(1 for k in order if callees[k] or callers[k])
        return {"documents": counts["train"] + counts["valid"], "train_documents": counts["train"],
                "valid_documents": counts["valid"], "functions": len(order), "functions_with_context": with_context,
                "shards": len(files), "shard_bytes": sum(e["bytes"] for e in files), "text_bytes": text_bytes}
