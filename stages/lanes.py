"""lanes: the build's training units, one shard set per length lane (schemas/lanes.py, docs/CHUNKS.md).

Reads the whole-document shards with their token ids (token_columns) and writes, for each lane of the recipe,
`lanes/<lane>/{train,valid}-NNNNN.parquet` and `lanes/<lane>/shards.json` (the files, and the lane's kind,
sequence length, budget, rows and tokens per split). A chunk lane (`chunked`) holds every document cut into
semantic chunks of at most the lane's budget (stages/lib/chunking.py); a file lane holds whole files grouped
with what they include (stages/lib/lane_groups.py). Every row keeps its document's provenance and
per-character columns aligned with its own text (stages/lib/lane_rows.py). The megatron_export and
packed_rows stages export each lane at its own sequence length.

Tasks (stages/lib/lane_tasks.py): per chunk lane, one per slice of `rows_per_task` documents; per file lane, the
driver plans the groups in one pass over a few columns, then one task per run of about `members_per_task`
files; then one writing task per lane and split. The bytes do not depend on the slicing or the workers.
"""

from __future__ import annotations

import json
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from cpp_data.pipeline.contract.stage import Stage, StageContext
from cpp_data.pipeline.foundation.errors import BadInput
from cpp_data.pipeline.foundation.fsutil import atomic_write_json
from cpp_data.schemas.lanes import KINDS, budget, lane_dir, ordered, seq_length
from cpp_data.schemas.reader import shard_files
from cpp_data.schemas.shard_writer import ShardParams
from cpp_data.stages.lib.chunking import MIN_ROOM
from cpp_data.stages.lib.lane_groups import plan_groups, read_plan_docs
from cpp_data.stages.lib.lane_rows import ChunkSettings
from cpp_data.stages.lib.lane_tasks import CutLanes, RouteRows, WriteLaneSplit, route_plan
from cpp_data.stages.lib.shard_tasks import WORK, plan_slices
from cpp_data.tokenizer.files import load_tokenizer
from cpp_data.tokenizer.pretokenizer import encode_in_parts


@dataclass(frozen=True)
class LanesParams:
    bounds: ClassVar[dict] = {"max_context": (0, 0.9), "min_fill": (0, 1), "rows_per_task": (1, None),
                              "members_per_task": (1, None), "docs_per_shard": (1, None),
                              "row_group_size": (1, None), "row_group_bytes": (0, None)}
    generation: str = "v6"
    lanes: tuple[str, ...] = ("4k", "16k", "64k")  # by sequence length: 4k is 4,096 tokens
    chunked: tuple[str, ...] = ("4k",)  # lanes of semantic chunks; the others hold whole files grouped
    max_context: float = 0.25  # the most of a chunk's budget its context prefix may take
    min_fill: float = 0.25  # a chunk ends at a poorer boundary rather than fill less than this of its room
    rows_per_task: int = 256  # documents per chunking task
    members_per_task: int = 512  # files per grouping task
    docs_per_shard: int = 50_000
    row_group_size: int = 1024
    row_group_bytes: int = 4 * 2**20
    compression: str = "zstd"
    compression_level: int | None = 3

    def check(self) -> str | None:
        """Lane names that say a length, chunked lanes among the lanes, room for a body after the context."""
        if not self.lanes:
            return "lanes must name at least one lane (like 4k)"
        try:
            lengths = {lane: seq_length(lane) for lane in self.lanes}
        except BadInput as exc:
            return str(exc)
        if len(set(lengths.values())) < len(self.lanes):
            return f"lanes {list(self.lanes)} name one length twice"
        for lane in self.lanes:
            room = budget(lane) - int(self.max_context * budget(lane))
            if room < MIN_ROOM:
                return (f"lane {lane}: a budget of {budget(lane)} tokens leaves {room} for a chunk's body after a "
                        f"context of up to {int(self.max_context * budget(lane))} (max_context "
                        f"{self.max_context}); a chunk needs at least {MIN_ROOM}: lower max_context or use a "
                        f"longer lane")
        stray = [lane for lane in self.chunked if lane not in lengths]
        if stray:
            return f"chunked lane(s) {stray} are not among lanes {list(self.lanes)}"
        return None

    def kind(self, lane: str) -> str:
        return KINDS[0] if lane in self.chunked else KINDS[1]


class Lanes(Stage):
    name = "lanes"
    libraries = ('pyarrow', 'numpy', 'tokenizers', 'tree_sitter', 'tree_sitter_cpp')
    version = 1
    scope = "corpus"
    inputs = ("token_columns", "tokenizer")
    resumable_tasks = True
    Params = LanesParams

    summary_counts = {"lanes": "lanes"}
    publishes = ("lanes",)

    def run(self, ctx: StageContext) -> dict:
        p: LanesParams = self.params
        src = ctx.input("token_columns").path
        tokenizer = ctx.input("tokenizer").path / "tokenizer"
        work = ctx.out / WORK
        (work / "pieces").mkdir(parents=True, exist_ok=True)
        lanes = ordered(list(p.lanes))
        settings = {lane: ChunkSettings(budget(lane), p.max_context, p.min_fill) for lane in lanes}
        t0 = time.monotonic()
        cuts: list[dict] = []
        for lane in lanes:
            plan = self._chunk_jobs if p.kind(lane) == "chunks" else self._group_jobs
            cuts += plan(src, tokenizer, work, lane, settings[lane])
        _write_once(work / "cuts.json", cuts)
        files = [e["path"] for e in json.loads((src / "shards.json").read_text())["files"]]
        routes = route_plan(cuts)
        _write_once(work / "routes.json", routes)
        if routes:
            ctx.executor.run([RouteRows(src, files, work)], len(routes), work / "_datatrove" / "route",
                             f"{ctx.label}: route")
        ctx.executor.run([CutLanes(src, files, work, tokenizer, p.generation, settings)],
                         len(cuts), work / "_datatrove" / "cut", f"{ctx.label}: cut")
        t1 = time.monotonic()
        report = self._write(ctx, work, lanes, cuts)
        shutil.rmtree(work, ignore_errors=True)
        return {"lanes": report, "seconds": {"plan_and_cut": round(t1 - t0, 2),
                                             "write": round(time.monotonic() - t1, 2)}}

    def _chunk_jobs(self, src: Path, tokenizer: Path, work: Path, lane: str, settings: ChunkSettings) -> list[dict]:
        """A chunk lane's cut jobs: one per slice of the shards, in shard order."""
        listing = json.loads((src / "shards.json").read_text())["files"]
        return [{"lane": lane, "split": listing[s.file]["split"], "chunk": [s.file, s.row_group, s.start, s.stop],
                 "piece": str(work / "pieces" / f"{lane}-{k:05d}.arrow")}
                for k, s in enumerate(plan_slices(src, listing, self.params.rows_per_task))]

    def _group_jobs(self, src: Path, tokenizer: Path, work: Path, lane: str, settings: ChunkSettings) -> list[dict]:
        """A file lane's cut jobs: its groups planned per split, in runs of about members_per_task files."""
        tok = load_tokenizer(tokenizer)
        headers: dict[str, int] = {}

        def header_tokens(path: str) -> int:
            if path not in headers:
                headers[path] = len(encode_in_parts(tok, [f"// File: {path}\n"])[0])
            return headers[path]

        index = {f.name: i for i, f in enumerate(shard_files(src))}
        jobs: list[dict] = []
        for split in ("train", "valid"):
            files = shard_files(src, split)
            docs = list(read_plan_docs(files))
            for d in docs:
                d.place = (index[files[d.place[0]].name], d.place[1], d.place[2])
            groups = plan_groups(docs, settings.budget, header_tokens)
            for a, b in _task_ranges(groups, self.params.members_per_task):
                jobs.append({"lane": lane, "split": split, "groups": groups[a:b],
                             "piece": str(work / "pieces" / f"{lane}-{split}-{len(jobs):05d}.arrow")})
        return jobs

    def _write(self, ctx: StageContext, work: Path, lanes: list[str], cuts: list[dict]) -> dict:
        """Every lane's splits from their pieces, in one run of writing tasks; each lane's shards.json."""
        p: LanesParams = self.params
        jobs = [{"lane": lane, "split": split, "out": str(ctx.out / lane_dir(lane)),
                 "pieces": [c["piece"] for c in cuts if c["lane"] == lane and c["split"] == split]}
                for lane in lanes for split in ("train", "valid")]
        atomic_write_json(work / "writes.json", jobs, durable=False)
        shard_params = ShardParams(generation=p.generation, docs_per_shard=p.docs_per_shard,
                                   row_group_size=p.row_group_size, row_group_bytes=p.row_group_bytes,
                                   compression=p.compression, compression_level=p.compression_level)
        ctx.executor.run([WriteLaneSplit(work, shard_params)], len(jobs), work / "_datatrove" / "write",
                         f"{ctx.label}: write")
        written = [json.loads((work / "written" / f"{k:05d}.json").read_text()) for k in range(len(jobs))]
        report = {}
        for lane in lanes:
            mine = [(job, w) for job, w in zip(jobs, written) if job["lane"] == lane]
            counts = {job["split"]: {"rows": sum(f["rows"] for f in w["files"]), "tokens": w["tokens"]}
                      for job, w in mine}
            if not counts["train"]["rows"]:
                raise BadInput(f"lane {lane}: no training document came out (the build kept no document for "
                               f"training: every file was skipped, refused or a duplicate, or went to validation); "
                               f"nothing is published")
            record = {"lane": lane, "kind": p.kind(lane), "seq_length": seq_length(lane), "budget": budget(lane),
                      "generation": p.generation, "splits": counts, "files": [f for _, w in mine for f in w["files"]]}
            atomic_write_json(ctx.out / lane_dir(lane) / "shards.json", record)
            report[lane] = {k: v for k, v in record.items() if k != "files"}
        return report


def _write_once(path: Path, value) -> None:
    """The cut plan: written once; a resumed stage must find the one its finished tasks were part of."""
    text = json.dumps(value)
    if path.exists() and path.read_text() != text:
        raise RuntimeError(f"{path}: the task plan changed under a resumed stage")
    path.write_text(text)


def _task_ranges(groups: list[dict], per_task: int) -> list[list[int]]:
    """Runs [a, b) of groups holding about `per_task` files each."""
    tasks: list[list[int]] = []
    a, members = 0, 0
    for i, g in enumerate(groups):
        if i > a and members + len(g["members"]) > per_task:
            tasks.append([a, i])
            a, members = i, 0
        members += len(g["members"])
    if a < len(groups):
        tasks.append([a, len(groups)])
    return tasks
