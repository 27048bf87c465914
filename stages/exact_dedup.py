"""exact_dedup: one copy per SHA-256 of the normalized file, across every source (docs/DESIGN.md section 5).

Memory stays bounded: the (small) key columns of every document are first hash-partitioned by SHA-256 into
buckets of at most `rows_per_bucket` rows on disk, then each bucket is sorted by (sha256, canonical rank) and
every row after the first of its group is a removed copy. Canonical keeper: the upstream copy over a vendored
one, then a permissive license, then the larger repository (collected bytes), then the smallest (repo, path).
Output: duplicates.parquet (DUPLICATE rows, each with its keeper).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from cpp_data.pipeline.contract.stage import DOCUMENTS, Stage, StageContext
from cpp_data.schemas.artifacts import DUPLICATE
from cpp_data.schemas.provenance import IDENTITY, LICENSE, LICENSE_FAMILY, RAW_SHA256, SIZE_BYTES, TEXT_SHA256, names
from cpp_data.stages.lib.inputs import document_parts

_COLS = names(*IDENTITY, TEXT_SHA256, RAW_SHA256, SIZE_BYTES) + ["is_vendored"] + names(*LICENSE, LICENSE_FAMILY)
_DUPLICATE_PROVENANCE = (*IDENTITY, TEXT_SHA256, RAW_SHA256, SIZE_BYTES, *LICENSE)


@dataclass(frozen=True)
class ExactDedupParams:
    bounds: ClassVar[dict] = {"rows_per_bucket": (1, None)}
    rows_per_bucket: int = 1_000_000


class ExactDedup(Stage):
    name = "exact_dedup"
    version = 4
    scope = "corpus"
    inputs = ("collect", DOCUMENTS)
    Params = ExactDedupParams

    summary_counts = {"exact_duplicates": "duplicates_removed", "exact_duplicate_bytes": "duplicate_bytes",
                      "largest_duplicate_clusters": "largest_clusters"}

    def run(self, ctx: StageContext) -> dict:
        repo_bytes = {a.source: a.counts.get("bytes_collected", 0) for a in ctx.inputs["collect"]}
        parts = document_parts(ctx)
        total = sum(pq.ParquetFile(p).metadata.num_rows for p in parts)
        nb = max(1, math.ceil(total / self.params.rows_per_bucket))
        tmp = ctx.out / "_buckets"
        tmp.mkdir()
        writers: dict[int, pq.ParquetWriter] = {}
        for part in parts:
            table = pq.read_table(part, columns=_COLS)
            buckets = np.array([int(s[:8], 16) % nb for s in table.column("text_sha256").to_pylist()])
            for b in np.unique(buckets):
                sub = table.filter(pa.array(buckets == b))
                if b not in writers:
                    writers[b] = pq.ParquetWriter(tmp / f"{b:05d}.parquet", sub.schema, compression="none")
                writers[b].write_table(sub)
        for w in writers.values():
            w.close()

        out = pq.ParquetWriter(ctx.out / "duplicates.parquet", DUPLICATE, compression="zstd")
        removed = removed_bytes = clusters = 0
        largest: list[tuple[int, str, str, str]] = []
        for b in sorted(writers):
            t = pq.read_table(tmp / f"{b:05d}.parquet")
            rank = pa.table({
                "text_sha256": t.column("text_sha256"),
                "vendored": t.column("is_vendored"),
                "not_permissive": pc.not_equal(t.column("license_family"), "permissive"),
                "neg_repo_bytes": pa.array([-repo_bytes.get(s, 0) for s in t.column("source_repo").to_pylist()]),
                "source_repo": t.column("source_repo"),
                "source_path": t.column("source_path"),
                "source_commit": t.column("source_commit"),
            })
            order = pc.sort_indices(rank, sort_keys=[(c, "ascending") for c in rank.column_names])
            t = t.take(order)
            shas = t.column("text_sha256").to_numpy(zero_copy_only=False)
            starts = np.flatnonzero(np.r_[True, shas[1:] != shas[:-1]])
            sizes = np.diff(np.r_[starts, len(shas)])
            rows = []
            src, path = t.column("source_repo").to_pylist(), t.column("source_path").to_pylist()
            for start, size in zip(starts, sizes):
                if size < 2:
                    continue
                clusters += 1
                largest.append((int(size), shas[start], src[start], path[start]))
                for i in range(start + 1, start + size):
                    row = {f.name: t.column(f.name)[i].as_py() for f in _DUPLICATE_PROVENANCE}
                    row.update(keeper_repo=src[start], keeper_path=path[start], cluster_size=int(size))
                    rows.append(row)
                    removed_bytes += row["size_bytes"]
            removed += len(rows)
            if rows:
                out.write_table(pa.Table.from_pylist(rows, schema=DUPLICATE))
        out.close()
        for f in tmp.iterdir():
            f.unlink()
        tmp.rmdir()
        largest.sort(key=lambda x: (-x[0], x[2], x[3]))
        return {
            "documents_in": total,
            "buckets": nb,
            "clusters": clusters,
            "duplicates_removed": removed,
            "duplicate_bytes": removed_bytes,
            "largest_clusters": [{"size": n, "text_sha256": s[:16], "keeper": f"{r}:{p}"}
                                 for n, s, r, p in largest[:5]],
        }
