"""The datatrove tasks of every source of a per-source stage, run as one executor run.

A per-source stage (filter, decontaminate, license) splits each source into tasks, one per collected part.
Run one source at a time, a build waits for each source's last task while the other workers idle, and pays an
executor's start (a process pool and a manager process, or a Ray submission) per source: with the 2x corpus of
bench/scale.py cut into 35 repositories, filter took 14.5 s and license 10.7 s against 6.3 and 3.6 s with the
same text in 5 repositories. A corpus grows by repositories, so this cost grows with it.

So the runner hands this module the stage's `SourceTasks` of every source that has to run, and it runs them as
one datatrove run: global rank r is task j of source i, in source order (`SourceDispatch`). Each source keeps
what it had when it ran alone:
- its steps run with rank j and world size n_i, so they write the same files with the same bytes;
- its step statistics go to `stats/<j>.json` and its completion marker to `completions/<j>` under the source's
  own logging directory, so its counts come out the same and a killed run resumes per source, whatever other
  sources the next run batches it with (a task whose source marker exists does nothing).
The batch's own logging directory holds datatrove's bookkeeping of the global ranks: task logs, the node and
process records the task watch and the per-node counts read.

Hand-written because datatrove runs one pipeline over one rank space; it has no notion of several pipelines
sharing an executor run.
"""

from __future__ import annotations

import bisect
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from datatrove.pipeline.base import PipelineStep

from cpp_data.pipeline.executors import ExecutorConfig, collect_stats, run_datatrove


@dataclass
class SourceTasks:
    """One source's datatrove work in a per-source stage: `tasks` ranks of `pipeline`, logging to
    `logging_dir`; `finish(stats)` turns the merged step statistics into the stage's counts once all are done."""

    pipeline: list
    tasks: int
    logging_dir: Path
    finish: Callable[[dict[str, int]], dict[str, Any]]

    def run(self, cfg: ExecutorConfig, label: str) -> dict[str, Any]:
        """Run this source alone (a stage run outside the runner's batching) and return its counts."""
        return run_sources(cfg, [self], self.logging_dir / "batch", label)[0]


class SourceDispatch(PipelineStep):
    """Global rank r runs task j of source i: that source's steps with (j, n_i), then its stats and completion
    marker under its logging directory."""

    name = "sources"
    type = "cpp-data"

    def __init__(self, units: list[tuple[list, int, str]]):
        super().__init__()
        self.units = units  # (steps, tasks, logging directory) per source, in order
        self.starts = []  # first global rank of each source
        total = 0
        for _, tasks, _ in units:
            self.starts.append(total)
            total += tasks
        self.total = total

    def locate(self, rank: int) -> tuple[int, int]:
        """(source index, that source's rank) of global rank `rank`."""
        if not 0 <= rank < self.total:
            raise IndexError(f"rank {rank} outside the batch's {self.total} tasks")
        i = bisect.bisect_right(self.starts, rank) - 1
        return i, rank - self.starts[i]

    def run(self, data, rank: int = 0, world_size: int = 1):
        from datatrove.utils.stats import PipelineStats

        i, j = self.locate(rank)
        steps, tasks, logging_dir = self.units[i]
        logs = Path(logging_dir)
        done = logs / "completions" / f"{j:05d}"
        if not done.exists():
            piped = data
            for step in steps:
                piped = step(piped, j, tasks)
            if piped is not None:
                deque(piped, maxlen=0)
            (logs / "stats").mkdir(parents=True, exist_ok=True)
            with open(logs / "stats" / f"{j:05d}.json", "w") as f:
                PipelineStats(steps).save_to_disk(f)
            done.parent.mkdir(parents=True, exist_ok=True)
            done.touch()
        yield from ()


def run_sources(cfg: ExecutorConfig, units: list[SourceTasks], logging_dir: Path, label: str) -> list[dict]:
    """Run the tasks of every unit as one executor run logging to `logging_dir`; return each unit's counts
    (its `finish` over its own step statistics), in order. A unit without tasks only finishes."""
    working = [u for u in units if u.tasks > 0]
    if working:
        dispatch = SourceDispatch([(u.pipeline, u.tasks, str(u.logging_dir)) for u in working])
        run_datatrove(cfg, [dispatch], dispatch.total, logging_dir, label)
    return [u.finish(collect_stats(u.logging_dir) if u.tasks else {}) for u in units]
