"""ledger: the provenance ledger, one row per file seen, whatever happened to it (docs/DESIGN.md sections 1, 4, 5).

Rows, per source in name order: files collect skipped, files the filter rejected, files the license policy
refused, then kept files; finally every exact duplicate (cluster id: its SHA-256, similarity 1) and every near
duplicate (cluster id, estimated similarity) with its keeper. Answers "did this dataset contain
file X at version Y, and if not, why?" with one query.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.parquet as pq

from cpp_data.pipeline.stage import Stage, StageContext
from cpp_data.schemas.artifacts import LEDGER, REJECTION
from cpp_data.stages.lib import keys


@dataclass(frozen=True)
class LedgerParams:
    pass


def _from_rejections(t: pa.Table) -> pa.Table:
    n = t.num_rows
    return pa.table({
        "source_repo": t.column("source_repo"), "source_commit": t.column("source_commit"),
        "source_path": t.column("source_path"), "raw_sha256": t.column("raw_sha256"),
        "text_sha256": pa.nulls(n, pa.string()), "size_bytes": t.column("size_bytes"),
        "license_spdx": t.column("license_spdx"), "license_source": t.column("license_source"),
        "confidence": t.column("confidence"), "decision": t.column("decision"), "reason": t.column("reason"),
        "keeper_repo": pa.nulls(n, pa.string()), "keeper_path": pa.nulls(n, pa.string()),
        "cluster_id": pa.nulls(n, pa.string()), "similarity": pa.nulls(n, pa.float32()),
        "license_evidence": t.column("license_evidence"),
    }, schema=LEDGER)


def _from_duplicates(t: pa.Table, decision: str, cluster_id, similarity, evidence: dict) -> pa.Table:
    """Ledger rows of removed duplicates (exact: cluster = text SHA-256, similarity 1; near: as computed)."""
    n = t.num_rows
    return pa.table({
        "source_repo": t.column("source_repo"), "source_commit": t.column("source_commit"),
        "source_path": t.column("source_path"), "raw_sha256": t.column("raw_sha256"),
        "text_sha256": t.column("text_sha256"), "size_bytes": t.column("size_bytes"),
        "license_spdx": t.column("license_spdx"), "license_source": t.column("license_source"),
        "confidence": t.column("confidence"), "decision": pa.array([decision] * n, pa.string()),
        "reason": pa.array([decision] * n, pa.string()), "keeper_repo": t.column("keeper_repo"),
        "keeper_path": t.column("keeper_path"), "cluster_id": cluster_id, "similarity": similarity,
        "license_evidence": pa.array([evidence.get(k) for k in zip(*(t.column(c).to_pylist()
                                                                      for c in ("source_repo", "source_commit", "source_path")))],
                                     pa.string()),
    }, schema=LEDGER)


class Ledger(Stage):
    name = "ledger"
    version = 5
    scope = "corpus"
    inputs = ("collect", "filter", "decontaminate", "license", "exact_dedup", "near_dedup")
    Params = LedgerParams

    summary_counts = {"decisions": "decisions", "refused_by_rule": "reasons"}
    publishes = ("ledger",)

    def run(self, ctx: StageContext) -> dict:
        dup = pq.read_table(ctx.input("exact_dedup").path / "duplicates.parquet")
        near = pq.read_table(ctx.input("near_dedup").path / "near_duplicates.parquet")
        removed = keys.read_removed(ctx.input("near_dedup").path / "removed_keys.parquet")
        by_source = {stage: {a.source: a.path for a in ctx.inputs[stage]} for stage in ("collect", "filter", "decontaminate",
                                                                                     "license")}
        writer = pq.ParquetWriter(ctx.out / "ledger.parquet", LEDGER, compression="zstd")
        decisions: Counter = Counter()
        reasons: Counter = Counter()
        evidence: dict[tuple, str | None] = {}  # (source_repo, source_commit, source_path) -> license evidence, for duplicates' rows

        def emit(table: pa.Table) -> None:
            if table.num_rows:
                writer.write_table(table)
                for d, r in zip(table.column("decision").to_pylist(), table.column("reason").to_pylist()):
                    decisions[d] += 1
                    if d != "kept":
                        reasons[f"{d}:{r}"] += 1

        for source in sorted(by_source["collect"]):
            emit(_from_rejections(pq.read_table(by_source["collect"][source] / "skipped.parquet")))
            for stage in ("filter", "decontaminate", "license"):
                for f in sorted(by_source[stage][source].glob("rejected-*.parquet")):
                    emit(_from_rejections(pq.read_table(f).cast(REJECTION)))
            cols = ["source_repo", "source_commit", "source_path", "text_sha256", "raw_sha256", "size_bytes",
                    "license_spdx", "license_source", "license_confidence", "license_evidence"]
            for f in sorted(by_source["license"][source].glob("part-*.parquet")):
                t = pq.read_table(f, columns=cols)
                gone = keys.contains(removed, keys.table_keys(t))
                for i in gone.nonzero()[0]:
                    evidence[(t.column("source_repo")[i].as_py(), t.column("source_commit")[i].as_py(),
                              t.column("source_path")[i].as_py())] = t.column("license_evidence")[i].as_py()
                t = t.filter(pa.array(~gone))
                n = t.num_rows
                emit(pa.table({
                    "source_repo": t.column("source_repo"), "source_commit": t.column("source_commit"),
                    "source_path": t.column("source_path"), "raw_sha256": t.column("raw_sha256"),
                    "text_sha256": t.column("text_sha256"), "size_bytes": t.column("size_bytes"),
                    "license_spdx": t.column("license_spdx"), "license_source": t.column("license_source"),
                    "confidence": t.column("license_confidence"), "decision": pa.array(["kept"] * n),
                    "reason": pa.array([""] * n), "keeper_repo": pa.nulls(n, pa.string()),
                    "keeper_path": pa.nulls(n, pa.string()), "cluster_id": pa.nulls(n, pa.string()),
                    "similarity": pa.nulls(n, pa.float32()), "license_evidence": t.column("license_evidence"),
                }, schema=LEDGER))
        emit(_from_duplicates(dup, "exact_duplicate", pa.array(dup.column("text_sha256").to_pylist(), pa.string()),
                              pa.array([1.0] * dup.num_rows, pa.float32()), evidence))
        emit(_from_duplicates(near, "near_duplicate", near.column("cluster_id"), near.column("similarity"), evidence))
        writer.close()
        return {"rows": sum(decisions.values()), "decisions": dict(sorted(decisions.items())),
                "reasons": dict(sorted(reasons.items()))}
