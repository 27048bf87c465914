"""The lanes stage's datatrove tasks: cut the documents into every lane's rows, then write each lane's splits
(docs/CHUNKS.md).

Cut tasks, every lane's in one run: a chunk lane's task is a slice of the whole-file shards
(shard_tasks.plan_slices) cut into chunks of the lane's budget; a file lane's task is a run of its groups
(stages/lib/lane_groups.py), each whole files joined or one file cut into chunks, reading the row groups its
groups' members live in once each. Each writes one piece. Write tasks, one per (lane, split): the split's
pieces in order into rolled shard files (schemas/shard_writer.ShardWriter), so the bytes depend only on the
rows' order, never on the slicing, the number of workers or the executor.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from datatrove.pipeline.base import PipelineStep

from cpp_data.pipeline.foundation.worker_cache import worker_cache
from cpp_data.schemas.reader import read_row_group
from cpp_data.schemas.shard_writer import ShardParams, ShardWriter
from cpp_data.stages.lib.lane_rows import ChunkSettings, LaneRows
from cpp_data.stages.lib.shard_tasks import read_piece, write_piece
from cpp_data.stages.lib.token_mirror import token_byte_lengths
from cpp_data.tokenizer.files import load_tokenizer


def _builder(tokenizer: str, generation: str) -> LaneRows:
    tok, lengths = worker_cache(("tokenizer", tokenizer), lambda: _load(tokenizer))
    return LaneRows(tok, lengths, generation)


def _load(tokenizer: str) -> tuple:
    tok = load_tokenizer(Path(tokenizer))
    return tok, token_byte_lengths(tok)


def _report(step: PipelineStep, builder: LaneRows, rows: pa.Table) -> None:
    step.stat_update("rows", value=rows.num_rows)
    for name, value in builder.chunk_stats.items():
        step.stat_update(name, value=value)


class CutLanes(PipelineStep):
    """Task r: job r of work/cuts.json, into its piece file: {"lane", "chunk": [file, row group, start, stop]}
    (a slice of the shards cut into chunks) or {"lane", "groups": [...]} (a run of a file lane's groups)."""

    type = "✂️ - LANES"
    name = "cut"

    def __init__(self, src: Path, files: list[str], work: Path, tokenizer: Path, generation: str,
                 settings: dict[str, ChunkSettings]):
        super().__init__()
        self.src, self.files, self.work = Path(src), files, Path(work)
        self.tokenizer, self.generation, self.settings = str(tokenizer), generation, settings

    def run(self, data, rank: int = 0, world_size: int = 1):
        job = json.loads((self.work / "cuts.json").read_text())[rank]
        builder = _builder(self.tokenizer, self.generation)
        settings = self.settings[job["lane"]]
        if "chunk" in job:
            f, rg, start, stop = job["chunk"]
            pf = pq.ParquetFile(self.src / self.files[f], page_checksum_verification=True)
            rows = builder.chunk_rows(read_row_group(pf, rg).slice(start, stop - start), settings)
        else:
            tables = self._row_groups(job["groups"])
            rows = pa.concat_tables([self._group_rows(builder, settings, g, tables) for g in job["groups"]])
        write_piece(rows, Path(job["piece"]))
        _report(self, builder, rows)
        return
        yield

    def _row_groups(self, groups: list[dict]) -> dict[tuple[int, int], pa.Table]:
        """Every row group the groups' members live in, read once."""
        wanted = sorted({(f, rg) for g in groups for f, rg, _ in g["members"]})
        out: dict[tuple[int, int], pa.Table] = {}
        files: dict[int, pq.ParquetFile] = {}
        for f, rg in wanted:
            if f not in files:
                files[f] = pq.ParquetFile(self.src / self.files[f], page_checksum_verification=True)
            out[(f, rg)] = read_row_group(files[f], rg)
        return out

    def _group_rows(self, builder: LaneRows, settings: ChunkSettings, group: dict,
                    tables: dict[tuple[int, int], pa.Table]) -> pa.Table:
        members = [tables[(f, rg)].slice(r, 1) for f, rg, r in group["members"]]
        if group["kind"] == "chunks":
            return builder.chunk_rows(members[0], settings)
        return _fitting_groups(builder, settings, members)


def _fitting_groups(builder: LaneRows, settings: ChunkSettings, members: list[pa.Table]) -> pa.Table:
    """The members as one group row; a group whose exact count runs over the budget (the planner counts each
    file's tokens apart) gives up its last member to a group of its own, until each fits."""
    row = builder.group_row_table(members)
    if len(members) == 1 or len(row.column("token_ids")[0]) <= settings.budget:
        return row
    return pa.concat_tables([_fitting_groups(builder, settings, members[:-1]),
                             _fitting_groups(builder, settings, members[-1:])])


class WriteLaneSplit(PipelineStep):
    """Task k: job k of work/writes.json ({lane, split, pieces, out}): the pieces, in order, into the lane's
    shard files of that split, and their listing (work/written/k.json)."""

    type = "✂️ - WRITE"
    name = "write"

    def __init__(self, work: Path, params: ShardParams):
        super().__init__()
        self.work, self.params = Path(work), params

    def run(self, data, rank: int = 0, world_size: int = 1):
        job = json.loads((self.work / "writes.json").read_text())[rank]
        out = Path(job["out"])
        out.mkdir(parents=True, exist_ok=True)
        writer: ShardWriter | None = None
        tokens = 0
        for piece in job["pieces"]:
            path = Path(piece)
            if not path.is_file():
                continue
            table = read_piece(path)
            if writer is None:
                writer = ShardWriter(out, job["split"], table.schema, self.params, kind="lane_shard", prefix="")
            writer.write(table)
            tokens += int(np.diff(table.column("token_ids").combine_chunks().offsets.to_numpy()).sum())
        files = writer.close() if writer is not None else []
        listing = [{**f, "path": f["path"].lstrip("/")} for f in files]
        (self.work / "written").mkdir(exist_ok=True)
        (self.work / "written" / f"{rank:05d}.json").write_text(json.dumps({"files": listing, "tokens": tokens}))
        self.stat_update("rows", value=sum(f["rows"] for f in listing))
        return
        yield
