"""The tasks of several sources as one executor run (pipeline/runner/executors/source_batch.py): each source's steps
see the rank
and world size they would alone, its stats and completion markers land in its own logging directory, and a
task whose source marker exists is not run again, whatever the batch."""

import json
import subprocess
import sys

# Three sources of 3, 1 and 2 tasks on the local executor's pool of two processes. Each task writes which
# (rank, world size) its source's steps saw and the process it ran in, and counts one "seen" stat.
BATCH = """
import json, os, sys
from pathlib import Path
from datatrove.pipeline.base import PipelineStep
from cpp_data.pipeline.contract.executor import ExecutorConfig
from cpp_data.pipeline.contract.executor import SourceTasks
from cpp_data.pipeline.runner.executors.source_batch import run_sources


class Record(PipelineStep):
    name, type = "record", "record"
    def __init__(self, out):
        super().__init__()
        self.out = out
    def run(self, data, rank=0, world_size=1):
        self.stat_update("seen")
        Path(self.out, f"{rank}.json").write_text(json.dumps([rank, world_size, os.getpid()]))
        yield from ()

def main():
    root = Path(sys.argv[1])
    skip = json.loads(sys.argv[2])  # [source, rank] pairs to mark done beforehand
    units = []
    for name, tasks in (("a", 3), ("b", 1), ("c", 2)):
        out = root / name
        out.mkdir(parents=True, exist_ok=True)
        units.append(SourceTasks([Record(str(out))], tasks, out / "_datatrove",
                                 lambda stats, out=out: {"files": len(list(out.glob("*.json"))), **stats}))
    for name, rank in skip:
        marker = root / name / "_datatrove" / "completions" / f"{rank:05d}"
        marker.parent.mkdir(parents=True, exist_ok=True)
        marker.touch()
    counts = run_sources(ExecutorConfig(workers=2, progress=False), units, root / "batch", "test[3 sources]")
    print(json.dumps({"counts": counts, "driver": os.getpid()}))


if __name__ == "__main__":  # datatrove's pool imports this script in its workers
    main()
"""


def _run(tmp_path, skip=()):
    script = tmp_path / "batch.py"
    script.write_text(BATCH)
    proc = subprocess.run([sys.executable, str(script), str(tmp_path / "run"), json.dumps(list(skip))],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _seen(tmp_path, name):
    return {int(p.stem): json.loads(p.read_text()) for p in (tmp_path / "run" / name).glob("*.json")}


def test_each_source_sees_its_own_ranks_and_keeps_its_own_records(tmp_path):
    result = _run(tmp_path)
    for name, tasks in (("a", 3), ("b", 1), ("c", 2)):
        seen = _seen(tmp_path, name)
        assert sorted(seen) == list(range(tasks))
        assert all(world == tasks for _, world, _ in seen.values())  # the source's world size, not 6
        logs = tmp_path / "run" / name / "_datatrove"
        assert sorted(p.name for p in (logs / "completions").iterdir()) == [f"{r:05d}" for r in range(tasks)]
        assert len(list((logs / "stats").glob("*.json"))) == tasks
    assert [c["files"] for c in result["counts"]] == [3, 1, 2]
    assert [c["record: record.seen"] for c in result["counts"]] == [3, 1, 2]  # each source's stats, not the batch's
    pids = {pid for name in "abc" for _, _, pid in _seen(tmp_path, name).values()}
    assert result["driver"] not in pids  # the tasks ran in the pool's processes
    batch = tmp_path / "run" / "batch"
    assert len(list((batch / "completions").iterdir())) == 6  # one executor run of all six tasks


def test_a_task_its_source_marked_done_does_not_run_again(tmp_path):
    result = _run(tmp_path, skip=[("a", 1), ("c", 0)])
    assert sorted(_seen(tmp_path, "a")) == [0, 2]
    assert sorted(_seen(tmp_path, "c")) == [1]
    assert sorted(_seen(tmp_path, "b")) == [0]
    assert [c["files"] for c in result["counts"]] == [2, 1, 1]


class _Heavy:
    """A step's worth of state: what a source's pipeline carries (paths, parameters, a loaded table)."""

    def __init__(self, payload: str):
        self.payload = payload


def test_a_task_carries_paths_not_every_sources_steps(tmp_path):
    """datatrove's local pool pickles the whole pipeline with each task it hands out. The batch step spills
    each source's steps to a file once, so a task's pickle holds paths, not every source's steps (a pickle per
    task that would grow with the number of sources). Each task still gets steps of its own."""
    from multiprocess.reduction import ForkingPickler

    from cpp_data.pipeline.runner.executors.source_batch import SourceDispatch

    units = [([_Heavy(f"{i:02d}" + "x" * 100_000)], 2, str(tmp_path / f"s{i}")) for i in range(50)]
    whole = len(ForkingPickler.dumps(SourceDispatch(units)))
    spilled = SourceDispatch(units, tmp_path / "batch")
    first = bytes(ForkingPickler.dumps(spilled))
    again = bytes(ForkingPickler.dumps(spilled))  # the files are written once
    assert whole > 50 * 100_000 and len(first) < 20_000 and first == again, (whole, len(first))
    assert len(list((tmp_path / "batch" / "units").glob("*.dill"))) == 50
    copy = ForkingPickler.loads(first)
    a, b = copy._unit(7)[0][0], copy._unit(7)[0][0]
    assert a is not b and a.payload.startswith("07x") and copy._unit(7)[1:] == (2, str(tmp_path / "s7"))
