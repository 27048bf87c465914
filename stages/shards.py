"""shards: the versioned Parquet shards of a build (docs/DESIGN.md section 9).

- Documents: every kept document of the license stage that neither exact nor near dedup removed.
- Split: validation when BLAKE2b(repo, path) falls under `valid_fraction` (no file on both sides, and the split
  does not move when the seed does). A build of >= 2 documents never has an empty validation split: if the hash
  chose none, the training file nearest the split line moves over (`moved_to_valid` in the counts).
- Shuffle: documents are ordered by a seeded BLAKE2b key of (repo, path). To keep memory bounded this is an
  external sort: pass 1 routes each document into one of N on-disk buckets by the key's top range, pass 2
  sorts each bucket in memory and appends it, so buckets come out in global key order.
- Output: shards/{train,valid}-NNNNN.parquet with `docs_per_shard` rows, `row_group_size`-row row groups,
  zstd, page checksums; shards.json lists each file's rows, bytes and SHA-256.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute  # noqa: F401  (pa.compute)
import pyarrow.parquet as pq
from tqdm import tqdm

from cpp_data.pipeline.fsutil import atomic_write_json
from cpp_data.pipeline.stage import Stage, StageContext
from cpp_data.schemas.generations import write_schema
from cpp_data.stages.lib import keys
from cpp_data.schemas.shard_writer import SPLITS, ShardParams, ShardWriter
from cpp_data.stages.lib.inputs import license_parts

SHARD_COLUMNS = ["text", "doc_id", "source_repo", "source_commit", "source_path", "text_sha256", "raw_sha256",
                 "license_spdx",
                 "license_source", "license_confidence", "license_family", "size_bytes", "n_lines",
                 "max_line_length", "unique_line_ratio", "comment_share", "byte_entropy", "is_vendored",
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


def _ensure_validation(tmp: Path, nb: int, first: tuple[int, str, str] | None, bucket_schema: pa.Schema) -> None:
    """A split by hash leaves a small corpus with no validation document (a build that cannot be verified or
    trained with validation). Then the training file nearest the split line, `first` = (hash, repo, path), moves
    to validation with all its versions, so no file lands on both sides; deterministic like the hash split."""
    _, repo, path = first
    moved = []
    for b in range(nb):
        f = tmp / f"train-{b:05d}.parquet"
        if not f.exists():
            continue
        t = pq.read_table(f)
        mask = pa.compute.and_(pa.compute.equal(t.column("source_repo"), repo),
                               pa.compute.equal(t.column("source_path"), path))
        if not pa.compute.any(mask).as_py():
            continue
        moved.append((b, t.filter(mask)))
        rest = t.filter(pa.compute.invert(mask))
        if rest.num_rows:
            pq.write_table(rest, f, compression="none")
        else:
            f.unlink()
    for b, t in moved:
        pq.write_table(t, tmp / f"valid-{b:05d}.parquet", compression="none")


class Shards(Stage):
    name = "shards"
    version = 3
    scope = "corpus"
    inputs = ("license", "near_dedup")
    Params = ShardParams

    summary_counts = {"documents": "documents", "train_documents": "train_documents",
                      "valid_documents": "valid_documents", "shards": "shards", "shard_bytes": "shard_bytes",
                      "text_bytes": "text_bytes", "moved_to_valid": "moved_to_valid"}
    publishes = ("shards",)

    def run(self, ctx: StageContext) -> dict:
        p: ShardParams = self.params
        schema = write_schema(p.generation, SHARD_COLUMNS + HISTORY_COLUMNS.get(p.generation, []))
        removed = keys.read_removed(ctx.input("near_dedup").path / "removed_keys.parquet")
        parts = license_parts(ctx)
        footers = [pq.read_metadata(x) for x in parts]
        total_bytes = sum(md.row_group(i).total_byte_size for md in footers for i in range(md.num_row_groups))
        # at most max_buckets writers are open at once in pass 1 (file-descriptor limits)
        nb = min(p.max_buckets, max(1, math.ceil(total_bytes / p.bucket_bytes)))
        tmp = ctx.out / "_buckets"
        tmp.mkdir(exist_ok=True)
        bucket_schema = schema.append(pa.field("_key", pa.uint64()))
        writers: dict[tuple[str, int], pq.ParquetWriter] = {}
        width = np.uint64(-(-2**64 // nb)) if nb > 1 else None  # exact integer ceiling of 2^64 / nb
        seen_docs = valid_docs = 0
        first: tuple[int, str, str] | None = None
        for part in tqdm(parts, desc=f"{ctx.label}: route", unit="part", leave=False,
                         disable=not ctx.executor.progress):
            table, split, order_key, place = _prepare(pq.read_table(part), removed, p, schema)
            seen_docs += table.num_rows
            valid_docs += int(split.sum())
            if (~split).any():  # the training file nearest the split line, in case validation stays empty
                i = int(np.argmin(np.where(split, np.uint64(2**64 - 1), place)))
                cand = (int(place[i]), table.column("source_repo")[i].as_py(), table.column("source_path")[i].as_py())
                first = cand if first is None or cand < first else first
            table = table.append_column("_key", pa.array(order_key, type=pa.uint64()))
            bucket = (order_key // width).astype(np.int64) if nb > 1 else np.zeros(len(order_key), dtype=np.int64)
            for s_name, mask in (("valid", split), ("train", ~split)):
                for b in np.unique(bucket[mask]):
                    sub = table.filter(pa.array(mask & (bucket == b)))
                    if (s_name, b) not in writers:
                        writers[(s_name, b)] = pq.ParquetWriter(tmp / f"{s_name}-{b:05d}.parquet", bucket_schema,
                                                                compression="none")
                    writers[(s_name, b)].write_table(sub)
        for w in writers.values():
            w.close()
        moved_to_valid = None
        if valid_docs == 0 and seen_docs >= 2 and first is not None:
            _ensure_validation(tmp, nb, first, bucket_schema)
            moved_to_valid = f"{first[1]}:{first[2]}"

        shard_dir = ctx.out / "shards"
        shard_dir.mkdir(exist_ok=True)
        files, rows, text_bytes = [], {}, 0
        for s_name in SPLITS:
            out = ShardWriter(shard_dir, s_name, schema, p)
            n = 0
            for b in range(nb):
                f = tmp / f"{s_name}-{b:05d}.parquet"
                if not f.exists():
                    continue
                t = pq.read_table(f)
                t = t.take(pa.compute.sort_indices(t, sort_keys=[("_key", "ascending"), ("doc_id", "ascending")]))
                out.write(t.drop(["_key"]))
                n += t.num_rows
                text_bytes += int(pa.compute.sum(t.column("size_bytes")).as_py() or 0)
                f.unlink()
            files += out.close()
            rows[s_name] = n
        tmp.rmdir()
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
