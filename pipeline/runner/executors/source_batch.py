"""The datatrove tasks of every source of a per-source stage, run as one executor run.

A per-source stage (license, filter, decontaminate) splits each source into tasks, one per collected part.
Run one source at a time, a build waits for each source's last task while the other workers idle, and pays an
executor's start (a process pool and a manager process, or a Ray submission) per source, so the same text cut
into more repositories takes longer (docs/SCALING.md, repositories). A corpus grows by repositories, so this
cost grows with it.

So the runner hands this module the stage's `SourceTasks` of every source that has to run, and it runs them as
one datatrove run: global rank r is task j of source i, in source order (`SourceDispatch`). Each source keeps
what it had when it ran alone:
- its steps run with rank j and world size n_i, so they write the same files with the same bytes;
- its step statistics go to `stats/<j>.json` and its completion marker to `completions/<j>` under the source's
  own logging directory, so its counts come out the same and a killed run resumes per source, whatever other
  sources the next run batches it with (a task whose source marker exists does nothing).
The batch's own logging directory holds datatrove's bookkeeping of the global ranks: task logs, the node and
process records the task watch and the per-node counts read.

The steps of every source travel to the tasks once, as files (`SourceDispatch.__getstate__`): datatrove's
local executor pickles its whole pipeline with every task it hands a worker, and this step holds every
source's steps, so pickled whole, each task would cost the process that hands out the tasks a pickle of all
of them: a cost per task that grows with the number of sources, paid once per task.

Hand-written because datatrove runs one pipeline over one rank space; it has no notion of several pipelines
sharing an executor run.
"""

from __future__ import annotations

import bisect
import hashlib
import os
from collections import deque
from pathlib import Path

from datatrove.pipeline.base import PipelineStep

from cpp_data.pipeline.contract.executor import ExecutorConfig, SourceTasks
from cpp_data.pipeline.runner.executors.run import collect_stats, run_datatrove


class SourceDispatch(PipelineStep):
    """Global rank r runs task j of source i: that source's steps with (j, n_i), then its stats and completion
    marker under its logging directory."""

    name = "sources"
    type = "cpp-data"

    def __init__(self, units: list[tuple[list, int, str]], spill_dir: Path | None = None):
        super().__init__()
        self.units = units  # (steps, tasks, logging directory) per source, in order
        self.spill_dir = str(spill_dir) if spill_dir is not None else None
        self.spilled: list[str] | None = None  # the file of each unit, once pickled
        self.starts = []  # first global rank of each source
        total = 0
        for _, tasks, _ in units:
            self.starts.append(total)
            total += tasks
        self.total = total

    def __getstate__(self) -> dict:
        """What a pickle of this step carries: with a spill directory, the paths of files holding each source's
        unit (written once, each named by its content) instead of the units themselves."""
        state = self.__dict__.copy()
        if self.spill_dir is None:
            return state
        if self.spilled is None:
            from multiprocess.reduction import ForkingPickler  # the pickler the local pool would have used

            paths = []
            for unit in self.units:
                data = bytes(ForkingPickler.dumps(unit))
                path = Path(self.spill_dir) / "units" / f"{hashlib.sha256(data).hexdigest()[:24]}.dill"
                if not path.exists():
                    path.parent.mkdir(parents=True, exist_ok=True)
                    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
                    tmp.write_bytes(data)
                    os.replace(tmp, path)
                paths.append(str(path))
            self.spilled = paths
        state["spilled"] = self.spilled
        state["units"] = None
        return state

    def _unit(self, i: int) -> tuple[list, int, str]:
        """Source i's (steps, tasks, logging directory): read afresh from its spill file where the pickle carried
        only paths, so every task runs steps of its own, as it would from a pickle of the whole pipeline."""
        if self.units is not None:
            return self.units[i]
        from multiprocess.reduction import ForkingPickler

        return ForkingPickler.loads(Path(self.spilled[i]).read_bytes())

    def locate(self, rank: int) -> tuple[int, int]:
        """(source index, that source's rank) of global rank `rank`."""
        if not 0 <= rank < self.total:
            raise IndexError(f"rank {rank} outside the batch's {self.total} tasks")
        i = bisect.bisect_right(self.starts, rank) - 1
        return i, rank - self.starts[i]

    def run(self, data, rank: int = 0, world_size: int = 1):
        from datatrove.utils.stats import PipelineStats

        i, j = self.locate(rank)
        steps, tasks, logging_dir = self._unit(i)
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
        dispatch = SourceDispatch([(u.pipeline, u.tasks, str(u.logging_dir)) for u in working], logging_dir)
        run_datatrove(cfg, [dispatch], dispatch.total, logging_dir, label)
    return [u.finish(collect_stats(u.logging_dir) if u.tasks else {}) for u in units]
