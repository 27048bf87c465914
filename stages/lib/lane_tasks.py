"""The lanes stage's datatrove tasks: cut the documents into every lane's rows, then write each lane's splits
(docs/CHUNKS.md).

Route tasks, one per row group of the whole-file shards that a file lane's group reads: the row group read once,
and for every cut task that needs rows of it, those rows into a scratch file of that task's. A file lane groups
a repository's files by include order, and the shards are shuffled, so a task's members live in every row
group: without routing each task would decode the whole corpus, and the stage would cost tasks x corpus.

Cut tasks, every lane's in one run: a chunk lane's task is a slice of the whole-file shards
(shard_tasks.plan_slices) cut into chunks of the lane's budget; a file lane's task is a run of its groups
(stages/lib/lane_groups.py), each whole files joined or one file cut into chunks, reading its routed rows.
Each writes one piece. Write tasks, one per (lane, split): the split's pieces in order into rolled shard
files (schemas/shard_writer.ShardWriter), so the bytes depend only on the rows' order, never on the slicing,
the number of workers or the executor.
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


def route_plan(cuts: list[dict]) -> list[dict]:
    """The route tasks of a cut plan: per row group (file, row group) that a file lane's group reads, in order,
    each cut task that needs rows of it with those rows, sorted."""
    needs: dict[tuple[int, int], list[list]] = {}
    for k, job in enumerate(cuts):
        for place, rows in rows_by_row_group(job.get("groups", ())).items():
            needs.setdefault(place, []).append([k, rows])
    return [{"file": f, "row_group": rg, "takers": takers} for (f, rg), takers in sorted(needs.items())]


def rows_by_row_group(groups) -> dict[tuple[int, int], list[int]]:
    """The rows the groups' members are, per (file, row group), sorted: what a cut task is routed, in the order
    its routed file holds them."""
    wanted: dict[tuple[int, int], set[int]] = {}
    for g in groups:
        for f, rg, r in g["members"]:
            wanted.setdefault((f, rg), set()).add(r)
    return {place: sorted(rows) for place, rows in sorted(wanted.items())}


def routed_path(work: Path, job: int, f: int, rg: int) -> Path:
    return work / "routed" / f"{job:05d}-{f:05d}-{rg:05d}.arrow"


class RouteRows(PipelineStep):
    """Task r: route r of work/routes.json: its row group read once, and each taker's rows into its file."""

    type = "✂️ - LANES"
    name = "route"

    def __init__(self, src: Path, files: list[str], work: Path):
        super().__init__()
        self.src, self.files, self.work = Path(src), files, Path(work)

    def run(self, data, rank: int = 0, world_size: int = 1):
        route = json.loads((self.work / "routes.json").read_text())[rank]
        f, rg = route["file"], route["row_group"]
        pf = pq.ParquetFile(self.src / self.files[f], page_checksum_verification=True)
        table = read_row_group(pf, rg)
        (self.work / "routed").mkdir(exist_ok=True)
        for k, rows in route["takers"]:
            write_piece(table.take(pa.array(rows, pa.int64())), routed_path(self.work, k, f, rg))
        self.stat_update("rows", value=sum(len(rows) for _, rows in route["takers"]))
        return
        yield


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
            tables = self._routed(rank, job["groups"])
            rows = pa.concat_tables([self._group_rows(builder, settings, g, tables) for g in job["groups"]])
        write_piece(rows, Path(job["piece"]))
        _report(self, builder, rows)
        return
        yield

    def _routed(self, rank: int, groups: list[dict]) -> dict[tuple[int, int, int], pa.Table]:
        """Every member of the groups as a one-row table, from the rows routed to this task (route_plan)."""
        out: dict[tuple[int, int, int], pa.Table] = {}
        for (f, rg), rows in rows_by_row_group(groups).items():
            table = read_piece(routed_path(self.work, rank, f, rg))
            for i, r in enumerate(rows):
                out[(f, rg, r)] = table.slice(i, 1)
        return out

    def _group_rows(self, builder: LaneRows, settings: ChunkSettings, group: dict,
                    members_by_place: dict[tuple[int, int, int], pa.Table]) -> pa.Table:
        members = [members_by_place[(f, rg, r)] for f, rg, r in group["members"]]
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
