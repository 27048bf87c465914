"""ledger: the provenance ledger, one row per file seen, whatever happened to it (docs/DESIGN.md sections 1, 4, 5).

Rows, per source in name order: files collect skipped, files the license stage refused (undecodable, then
refused by the license policy), files the filter and decontamination rejected, then kept files; finally every
exact duplicate (cluster id: its SHA-256, similarity 1) and every near duplicate (cluster id, estimated
similarity) with its keeper. Answers "did this dataset contain file X at version Y, and if not, why?" with
one query.
"""

from __future__ import annotations

import os
import shutil
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from datatrove.pipeline.base import PipelineStep

from cpp_data.pipeline.contract.stage import PER_DOCUMENT, Stage, StageContext
from cpp_data.schemas.artifacts import LEDGER, REJECTION, rule_of
from cpp_data.schemas.provenance import IDENTITY, LICENSE, LICENSE_EVIDENCE, RAW_SHA256, SIZE_BYTES, TEXT_SHA256, names
from cpp_data.stages.lib import keys
from cpp_data.stages.lib.shard_tasks import WORK


@dataclass(frozen=True)
class LedgerParams:
    pass


def _ledger_rows(t: pa.Table, **given) -> pa.Table:
    """LEDGER rows for the rows of `t`: each column from `given` (an array, or one value for every row), else
    t's column of that name, else nulls."""
    n = t.num_rows
    columns = {}
    for f in LEDGER:
        value = given[f.name] if f.name in given else t.column(f.name) if f.name in t.column_names else None
        if value is None or isinstance(value, (str, int, float)):
            value = pa.array([value] * n, f.type)
        columns[f.name] = value
    return pa.table(columns, schema=LEDGER)


def _from_rejections(t: pa.Table) -> pa.Table:
    return _ledger_rows(t)


def _from_duplicates(t: pa.Table, decision: str, cluster_id, similarity, evidence: dict) -> pa.Table:
    """Ledger rows of removed duplicates (exact: cluster = text SHA-256, similarity 1; near: as computed)."""
    identities = zip(*(t.column(f.name).to_pylist() for f in IDENTITY))
    return _ledger_rows(t, decision=decision, reason=decision, cluster_id=cluster_id, similarity=similarity,
                        license_evidence=pa.array([evidence.get(k) for k in identities], pa.string()))


_KEPT = names(*IDENTITY, TEXT_SHA256, RAW_SHA256, SIZE_BYTES, *LICENSE, LICENSE_EVIDENCE)


def _kept_rows(t: pa.Table) -> pa.Table:
    return _ledger_rows(t, decision="kept", reason="")


_EVIDENCE = pa.schema([*IDENTITY, LICENSE_EVIDENCE])


class SourceRows(PipelineStep):
    """Task r: the ledger rows of source r (skipped, rejected, kept) as ledger-r.parquet, one row group per
    table it took them from, and the license evidence of its removed duplicates as evidence-r.parquet."""

    type = "📒 - LEDGER"
    name = "ledger"

    def __init__(self, sources: list[dict[str, str]], removed: Path, work: Path, per_document: tuple[str, ...]):
        super().__init__()
        self.sources, self.removed, self.work = sources, Path(removed), Path(work)
        self.per_document = tuple(per_document)  # the per-document stages, in order: the last one's parts are kept

    def run(self, data, rank: int = 0, world_size: int = 1):
        dirs = {k: Path(v) for k, v in self.sources[rank].items()}
        removed = keys.read_removed(self.removed)
        writer = pq.ParquetWriter(self.work / f".ledger-{rank:05d}.tmp", LEDGER, compression="none")
        evidence = []

        def emit(table: pa.Table) -> None:
            if table.num_rows:
                writer.write_table(table)
                self.stat_update("rows", value=table.num_rows)

        emit(_from_rejections(pq.read_table(dirs["collect"] / "skipped.parquet")))
        for stage in self.per_document:
            for f in sorted(dirs[stage].glob("rejected-*.parquet")):
                emit(_from_rejections(pq.read_table(f).cast(REJECTION)))
        for f in sorted(dirs[self.per_document[-1]].glob("part-*.parquet")):
            t = pq.read_table(f, columns=_KEPT)
            gone = keys.contains(removed, keys.table_keys(t))
            evidence.append(t.filter(pa.array(gone)).select(_EVIDENCE.names))
            emit(_kept_rows(t.filter(pa.array(~gone))))
        writer.close()
        os.replace(self.work / f".ledger-{rank:05d}.tmp", self.work / f"ledger-{rank:05d}.parquet")
        pq.write_table(pa.concat_tables(evidence).cast(_EVIDENCE) if evidence else _EVIDENCE.empty_table(),
                       self.work / f"evidence-{rank:05d}.parquet")
        return
        yield


class Ledger(Stage):
    name = "ledger"
    version = 7
    scope = "corpus"
    inputs = ("collect", PER_DOCUMENT, "exact_dedup", "near_dedup")
    Params = LedgerParams

    summary_counts = {"decisions": "decisions", "refused_by_rule": "reasons"}
    publishes = ("ledger",)

    def run(self, ctx: StageContext) -> dict:
        """Per source a datatrove task writes its rows; the driver appends them, row group by row group, to
        ledger.parquet in source order (a copy of small columns), then the duplicates' rows."""
        dup = pq.read_table(ctx.input("exact_dedup").path / "duplicates.parquet")
        near = pq.read_table(ctx.input("near_dedup").path / "near_duplicates.parquet")
        by_source = {stage: {a.source: str(a.path) for a in ctx.inputs[stage]}
                     for stage in ("collect", *ctx.per_document)}
        sources = [{stage: by_source[stage][name] for stage in by_source}
                   for name in sorted(by_source["collect"], key=str)]
        work = ctx.out / WORK
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir()
        ctx.executor.run([SourceRows(sources, ctx.input("near_dedup").path / "removed_keys.parquet", work,
                                     ctx.per_document)],
                      len(sources), work / "_datatrove", f"{ctx.label}: rows")
        writer = pq.ParquetWriter(ctx.out / "ledger.parquet", LEDGER, compression="zstd")
        decisions: Counter = Counter()
        reasons: Counter = Counter()

        def emit(table: pa.Table) -> None:
            if table.num_rows:
                writer.write_table(table)
                for d, r in zip(table.column("decision").to_pylist(), table.column("reason").to_pylist()):
                    decisions[d] += 1
                    if d != "kept":
                        reasons[f"{d}:{rule_of(r)}"] += 1

        evidence: dict[tuple, str | None] = {}  # (source_repo, source_commit, source_path) -> license evidence
        for r in range(len(sources)):
            rows = pq.ParquetFile(work / f"ledger-{r:05d}.parquet")
            for g in range(rows.num_row_groups):
                emit(rows.read_row_group(g))
            ev = pq.read_table(work / f"evidence-{r:05d}.parquet")
            evidence.update(zip(zip(*(ev.column(c).to_pylist() for c in _EVIDENCE.names[:3])),
                                ev.column("license_evidence").to_pylist()))
        emit(_from_duplicates(dup, "exact_duplicate", pa.array(dup.column("text_sha256").to_pylist(), pa.string()),
                              pa.array([1.0] * dup.num_rows, pa.float32()), evidence))
        emit(_from_duplicates(near, "near_duplicate", near.column("cluster_id"), near.column("similarity"), evidence))
        writer.close()
        shutil.rmtree(work, ignore_errors=True)
        return {"rows": sum(decisions.values()), "decisions": dict(sorted(decisions.items())),
                "reasons": dict(sorted(reasons.items()))}
