"""shards: the versioned Parquet shards of a build (docs/DESIGN.md section 9).

- Documents: every kept document of the per-document stages (decontaminate's parts) that neither exact nor near
  dedup removed.
- Split: validation when BLAKE2b(repo, path) falls under `valid_fraction` (no file on both sides, and the split
  does not move when the seed does). A build of >= 2 documents never has an empty validation split: if the hash
  chose none, the training file nearest the split line moves over (`moved_to_valid` in the counts).
- Shuffle: documents are ordered by a seeded BLAKE2b key of (repo, path). To keep memory bounded this is an
  external sort: pass 1 routes each document into one of N on-disk buckets by the key's top range (a datatrove
  task per document part), pass 2 sorts each bucket in memory, so buckets come out in global key order; each
  shard file is then a task that takes its rows from the sorted buckets that hold them.
- Output: shards/{train,valid}-NNNNN.parquet with `docs_per_shard` rows, `row_group_size`-row row groups,
  zstd, page checksums; shards.json lists each file's rows, bytes and SHA-256.
"""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute  # noqa: F401  (pa.compute)
import pyarrow.parquet as pq
from datatrove.pipeline.base import PipelineStep

from cpp_data.pipeline.contract.stage import DOCUMENTS, Stage, StageContext
from cpp_data.pipeline.foundation.fsutil import atomic_write_json
from cpp_data.pipeline.foundation.worker_cache import worker_cache
from cpp_data.schemas.generations import write_schema
from cpp_data.schemas.provenance import IDENTITY, LICENSE, LICENSE_FAMILY, RAW_SHA256, SIZE_BYTES, TEXT_SHA256, names
from cpp_data.schemas.shard_writer import SPLITS, ShardParams, ShardWriter
from cpp_data.stages.lib import keys
from cpp_data.stages.lib.inputs import document_parts
from cpp_data.stages.lib.shard_tasks import WORK, write_task_table

SHARD_COLUMNS = ["text", "doc_id", *names(*IDENTITY, TEXT_SHA256, RAW_SHA256, *LICENSE, LICENSE_FAMILY, SIZE_BYTES),
                 "n_lines", "max_line_length", "unique_line_ratio", "comment_share", "byte_entropy", "is_vendored",
                 "redactions"]
# history generations: the columns taken from each document's `history` struct
HISTORY_COLUMNS = {
    "v2": ["parent_commit", "author_time", "commit_time", "text_commit", "change_type", "rename_from", "is_merge",
           "side"],
    "v3": ["parent_commit", "author_time", "commit_time", "text_commit", "change_type", "rename_from", "is_merge",
           "header_style"],
}
def _flatten_history(table: pa.Table) -> pa.Table:
    """History struct -> the v2/v3 columns; `source_commit` becomes the commit the document belongs to."""
    hist = table.column("history").to_pylist()
    if any(h is None for h in hist):
        raise ValueError("a v2/v3 build got documents without history (set collect.history in the recipe)")
    text_commit = table.column("source_commit")
    table = table.set_column(table.column_names.index("source_commit"), "source_commit",
                             pa.array([h["commit"] for h in hist]))
    cols = {"parent_commit": [h["parent_commit"] for h in hist], "author_time": [h["author_time"] for h in hist],
            "commit_time": [h["commit_time"] for h in hist], "text_commit": text_commit.to_pylist(),
            "change_type": [h["change"] for h in hist], "rename_from": [h["rename_from"] or "" for h in hist],
            "is_merge": [h["is_merge"] for h in hist], "side": [h["side"] for h in hist],
            "header_style": [h["header_style"] or "" for h in hist]}
    for name, values in cols.items():
        table = table.append_column(name, pa.array(values))
    return table.drop(["history"])


def _prepare(table: pa.Table, removed: np.ndarray, p: ShardParams, schema: pa.Schema):
    """Drop removed duplicates; add doc ids; compute split and shuffle keys. Returns (table, split, key)."""
    keep = ~keys.contains(removed, keys.table_keys(table))
    table = table.filter(pa.array(keep))
    sources, paths = table.column("source_repo").to_pylist(), table.column("source_path").to_pylist()
    commits = table.column("source_commit").to_pylist()
    doc_ids = [keys.doc_id(s, c, q) for s, c, q in zip(sources, commits, paths)]
    if p.generation in HISTORY_COLUMNS:
        table = _flatten_history(table)
    table = table.append_column("doc_id", pa.array(doc_ids))
    hashes = [keys.split_hash(s, q) for s, q in zip(sources, paths)]
    split = np.array([h < p.valid_fraction * 2**64 for h in hashes], dtype=bool)  # keys.is_valid_split, exactly
    place = np.array(hashes, dtype=np.uint64)
    order_key = np.array([keys.shuffle_key(p.seed, s, q, c) for s, q, c in zip(sources, paths, commits)],
                         dtype=np.uint64)
    return table.select(schema.names).cast(schema), split, order_key, place


class RouteDocuments(PipelineStep):
    """Task r: document part r's kept documents with their doc ids, split and shuffle key, routed to on-disk
    buckets by the key's top range (buckets/<split>-<b>-<r>.parquet), with what the split needs in route-r.json."""

    type = "🔀 - ROUTE"
    name = "route"

    def __init__(self, parts: list[str], removed: Path, work: Path, p: ShardParams, nb: int):
        super().__init__()
        self.parts, self.removed, self.work, self.p, self.nb = parts, Path(removed), Path(work), p, nb

    def run(self, data, rank: int = 0, world_size: int = 1):
        p, nb = self.p, self.nb
        schema = shard_schema(p.generation)
        removed = worker_cache(("removed keys", str(self.removed)), lambda: keys.read_removed(self.removed))
        table, split, order_key, place = _prepare(pq.read_table(self.parts[rank]), removed, p, schema)
        first = None
        if (~split).any():  # the training file nearest the split line, in case validation stays empty
            i = int(np.argmin(np.where(split, np.uint64(2**64 - 1), place)))
            first = [int(place[i]), table.column("source_repo")[i].as_py(), table.column("source_path")[i].as_py()]
        table = table.append_column("_key", pa.array(order_key, type=pa.uint64()))
        width = np.uint64(-(-2**64 // nb)) if nb > 1 else None  # exact integer ceiling of 2^64 / nb
        bucket = (order_key // width).astype(np.int64) if nb > 1 else np.zeros(len(order_key), dtype=np.int64)
        out = self.work / "buckets"
        out.mkdir(exist_ok=True)
        rows: dict[str, dict[int, int]] = {"train": {}, "valid": {}}
        for s_name, mask in (("valid", split), ("train", ~split)):
            for b in np.unique(bucket[mask]).tolist():
                sub = table.filter(pa.array(mask & (bucket == b)))
                write_task_table(sub, out / f"{s_name}-{b:05d}-{rank:05d}.parquet", compression="none")
                rows[s_name][b] = sub.num_rows
        (self.work / f"route-{rank:05d}.json").write_text(json.dumps(
            {"documents": table.num_rows, "valid": int(split.sum()), "first": first, "rows": rows}))
        self.stat_update("documents", value=table.num_rows)
        return
        yield


def _bucket(work: Path, split: str, b: int) -> pa.Table:
    """Bucket b of a split, sorted: the shuffled order of its documents (by key, then doc_id)."""
    files = sorted((work / "buckets").glob(f"{split}-{b:05d}-*.parquet"))
    t = pa.concat_tables([pq.read_table(f) for f in files])
    return t.take(pa.compute.sort_indices(t, sort_keys=[("_key", "ascending"), ("doc_id", "ascending")]))


class WriteShard(PipelineStep):
    """Task k: shard file k of the plan (its split's rows [start, stop) in shuffled order), taken from the
    sorted buckets that hold them, written by the one shard writer."""

    type = "🔀 - ROUTE"
    name = "write"

    def __init__(self, work: Path, out: Path, p: ShardParams):
        super().__init__()
        self.work, self.out, self.p = Path(work), Path(out), p

    def run(self, data, rank: int = 0, world_size: int = 1):
        job = json.loads((self.work / "files.json").read_text())[rank]
        writer = ShardWriter(self.out, job["split"], shard_schema(self.p.generation), self.p)
        writer.index = job["index"]
        text_bytes = 0
        for b, start, stop in job["ranges"]:
            t = _bucket(self.work, job["split"], b).slice(start, stop - start).drop(["_key"])
            text_bytes += int(pa.compute.sum(t.column("size_bytes")).as_py() or 0)
            writer.write(t)
        files = writer.close()
        (self.work / "written").mkdir(exist_ok=True)
        (self.work / "written" / f"{rank:05d}.json").write_text(json.dumps({"files": files, "text_bytes": text_bytes}))
        return
        yield


def shard_schema(generation: str) -> pa.Schema:
    return write_schema(generation, SHARD_COLUMNS + HISTORY_COLUMNS.get(generation, []))


def _ensure_validation(work: Path, first: tuple[int, str, str]) -> None:
    """A split by hash leaves a small corpus with no validation document (a build that cannot be verified or
    trained with validation). Then the training file nearest the split line, `first` = (hash, repo, path), moves
    to validation with all its versions, so no file lands on both sides; deterministic like the hash split."""
    _, repo, path = first
    for f in sorted((work / "buckets").glob("train-*.parquet")):
        t = pq.read_table(f)
        mask = pa.compute.and_(pa.compute.equal(t.column("source_repo"), repo),
                               pa.compute.equal(t.column("source_path"), path))
        if not pa.compute.any(mask).as_py():
            continue
        write_task_table(t.filter(mask), f.with_name("valid" + f.name[len("train"):]), compression="none")
        rest = t.filter(pa.compute.invert(mask))
        if rest.num_rows:
            write_task_table(rest, f, compression="none")
        else:
            f.unlink()


def _file_plan(work: Path, nb: int, p: ShardParams) -> list[dict]:
    """The shard files of both splits: per file its split, index and the (bucket, start, stop) row ranges
    it takes, buckets in key order, from the routed buckets' row counts."""
    plan = []
    for split in SPLITS:
        spans, total = [], 0
        for b in range(nb):
            n = sum(pq.read_metadata(f).num_rows for f in (work / "buckets").glob(f"{split}-{b:05d}-*.parquet"))
            if n:
                spans.append((b, total, total + n))
                total += n
        for index, first in enumerate(range(0, total, p.docs_per_shard)):
            last = min(total, first + p.docs_per_shard)
            plan.append({"split": split, "index": index, "rows": last - first,
                         "ranges": [(b, max(first, a) - a, min(last, c) - a) for b, a, c in spans
                                    if a < last and c > first]})
    return plan


class Shards(Stage):
    name = "shards"
    version = 3
    scope = "corpus"
    inputs = (DOCUMENTS, "near_dedup")
    Params = ShardParams
    resumable_tasks = True

    summary_counts = {"documents": "documents", "train_documents": "train_documents",
                      "valid_documents": "valid_documents", "shards": "shards", "shard_bytes": "shard_bytes",
                      "text_bytes": "text_bytes", "moved_to_valid": "moved_to_valid"}
    publishes = ("shards",)

    def run(self, ctx: StageContext) -> dict:
        p: ShardParams = self.params
        removed_file = ctx.input("near_dedup").path / "removed_keys.parquet"
        parts = document_parts(ctx)
        footers = [pq.read_metadata(x) for x in parts]
        total_bytes = sum(md.row_group(i).total_byte_size for md in footers for i in range(md.num_row_groups))
        # at most max_buckets bucket files per task (file-descriptor limits)
        nb = min(p.max_buckets, max(1, math.ceil(total_bytes / p.bucket_bytes)))
        work = ctx.out / WORK
        work.mkdir(exist_ok=True)  # a resumed stage keeps its finished tasks' buckets
        ctx.executor.run([RouteDocuments([str(x) for x in parts], removed_file, work, p, nb)], len(parts),
                      work / "_datatrove" / "route", f"{ctx.label}: route")
        routed = [json.loads((work / f"route-{r:05d}.json").read_text()) for r in range(len(parts))]
        seen_docs = sum(r["documents"] for r in routed)
        valid_docs = sum(r["valid"] for r in routed)
        firsts = [tuple(r["first"]) for r in routed if r["first"] is not None]
        first = min(firsts) if firsts else None
        moved_to_valid = None
        if valid_docs == 0 and seen_docs >= 2 and first is not None:
            _ensure_validation(work, first)
            moved_to_valid = f"{first[1]}:{first[2]}"
        plan = _file_plan(work, nb, p)
        (work / "files.json").write_text(json.dumps(plan))
        shard_dir = ctx.out / "shards"
        shard_dir.mkdir(exist_ok=True)
        ctx.executor.run([WriteShard(work, shard_dir, p)], len(plan), work / "_datatrove" / "write",
                      f"{ctx.label}: write")
        files, text_bytes = [], 0
        for k in range(len(plan)):
            got = json.loads((work / "written" / f"{k:05d}.json").read_text())
            files += got["files"]
            text_bytes += got["text_bytes"]
        rows = {s: sum(f["rows"] for f in files if f["split"] == s) for s in SPLITS}
        removed = keys.read_removed(removed_file)
        shutil.rmtree(work, ignore_errors=True)
        atomic_write_json(ctx.out / "shards.json", {"generation": p.generation, "files": files})
        return {
            "documents": rows["train"] + rows["valid"],
            "train_documents": rows["train"],
            "valid_documents": rows["valid"],
            "shards": len(files),
            "shard_bytes": sum(e["bytes"] for e in files),
            "duplicates_dropped": int(len(removed)),
            "shuffle_buckets": nb,
            "text_bytes": text_bytes,
            "moved_to_valid": moved_to_valid,
        }
