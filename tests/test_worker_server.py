"""The local executor's forkserver starts when the first stage begins (executors/local.start_worker_server), so its
imports overlap the driver's work, and every run's tasks then go to processes forked from that same server:
a pool with two workers or more, one process of its own with one worker
(executors.run_in_one_worker), so the build's own process never runs a task."""

import json
import subprocess
import sys

import pytest

SCRIPT = """
import json, os, sys
from pathlib import Path
import multiprocess.forkserver as fs
from datatrove.pipeline.base import PipelineStep
from cpp_data.pipeline.foundation.errors import BadInput
from cpp_data.pipeline.contract.executor import ExecutorConfig
from cpp_data.pipeline.runner.executors.local import start_worker_server
from cpp_data.pipeline.runner.executors.run import run_datatrove


class Record(PipelineStep):
    name, type = "record", "record"
    def __init__(self, out):
        super().__init__()
        self.out = out
    def run(self, data, rank=0, world_size=1):
        Path(self.out, f"{rank}.json").write_text(json.dumps([os.getpid(), os.getppid()]))
        yield from ()


class Fail(PipelineStep):
    name, type = "fail", "fail"
    def __init__(self, how):
        super().__init__()
        self.how = how
    def run(self, data, rank=0, world_size=1):
        if self.how == "raise":
            raise BadInput(f"bad.cc: task {rank} refused it")
        os.kill(os.getpid(), 9)  # a crash in native code, as the build's process would see it
        yield from ()


def ran(root, name, workers):
    out = root / name
    out.mkdir(parents=True)
    run_datatrove(ExecutorConfig(workers=workers, progress=False), [Record(str(out))], 3, root / f"logs-{name}", name)
    return sorted(json.loads(p.read_text()) for p in out.glob("*.json"))


def main():
    root = Path(sys.argv[1])
    start_worker_server(ExecutorConfig(kind="ray", workers=2, progress=False))  # Ray starts its own workers
    before = fs._forkserver._forkserver_pid
    start_worker_server(ExecutorConfig(workers=1, progress=False))
    started = fs._forkserver._forkserver_pid
    one, two = ran(root, "one", 1), ran(root, "two", 2)
    errors = {}
    for how in ("raise", "die"):
        try:
            run_datatrove(ExecutorConfig(workers=1, progress=False), [Fail(how)], 2, root / f"logs-{how}", how)
        except BaseException as exc:
            errors[how] = [type(exc).__name__, str(exc)]
    print(json.dumps({"before": before, "started": started, "now": fs._forkserver._forkserver_pid,
                      "driver": os.getpid(), "one": one, "two": two, "errors": errors}))


if __name__ == "__main__":  # datatrove's pool imports this script in its workers
    main()
"""


def test_every_run_forks_its_task_processes_from_the_server_started_before_it(tmp_path):
    script = tmp_path / "server.py"
    script.write_text(SCRIPT)
    proc = subprocess.run([sys.executable, str(script), str(tmp_path / "run")], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got["before"] is None  # Ray: nothing started
    assert got["started"] and got["now"] == got["started"]  # the runs used the server, not a new one
    server, driver = got["started"], got["driver"]
    # one worker: the three tasks ran one after another in one process the server forked, not in the driver
    assert len({pid for pid, _ in got["one"]}) == 1 and got["one"][0][0] != driver
    assert {parent for _, parent in got["one"]} == {server}
    # two workers: a pool the server forked
    assert {parent for _, parent in got["two"]} == {server} and driver not in {pid for pid, _ in got["two"]}
    # what ends a one-worker run reaches the build's process: the task's own error, or the death of its process
    assert got["errors"]["raise"] == ["BadInput", "bad.cc: task 0 refused it"]
    kind, text = got["errors"]["die"]
    assert kind in ("RuntimeError", "TaskProcessDied") and "die" in text and "died" in text


FAILING_TASK = """
import sys
from pathlib import Path
from cpp_data.pipeline.contract.executor import ExecutorConfig
from cpp_data.pipeline.runner.executors.run import run_datatrove


def step(data, rank=0, world_size=1):
    held = "a local variable's value"
    raise OSError(f"disk full in task {rank} ({len(held)})")
    yield


if __name__ == "__main__":
    try:
        run_datatrove(ExecutorConfig(workers=int(sys.argv[2]), progress=False), [step], 2, Path(sys.argv[1]), "failing")
    except Exception as exc:
        print(f"error: {type(exc).__name__}: {exc}")
"""


def test_a_failing_task_prints_no_traceback_and_logs_it_to_its_file(tmp_path):
    """datatrove logs a task's exception to the terminal with loguru's defaults: the traceback with every frame's
    local variables. executors/task_logging.task_logger keeps the terminal to the build's one-line error; the task's
    log file
    still has the traceback."""
    script = tmp_path / "failing.py"
    script.write_text(FAILING_TASK)
    for workers in (1, 2):
        logs = tmp_path / f"logs-{workers}"
        proc = subprocess.run([sys.executable, str(script), str(logs), str(workers)], capture_output=True,
                              text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert proc.stdout.startswith("error: OSError: disk full in task"), proc.stdout
        assert "Traceback" not in proc.stderr and "a local variable" not in proc.stderr, proc.stderr[-3000:]
        logged = "".join(f.read_text() for f in sorted((logs / "logs").glob("task_*.log")))
        assert "Traceback" in logged and "disk full in task" in logged


FRESH_COPIES = """
import json, sys
from pathlib import Path
from datatrove.pipeline.base import PipelineStep
from cpp_data.pipeline.contract.executor import ExecutorConfig
from cpp_data.pipeline.runner.executors.run import run_datatrove


def total(stat):  # datatrove writes a stat updated once as its value, else as a dict of aggregates
    return stat if isinstance(stat, (int, float)) else stat["total"]


class Count(PipelineStep):
    name, type = "count", "count"
    def __init__(self):
        super().__init__()
        self.runs = 0  # state a task leaves in its copy of the pipeline
    def run(self, data, rank=0, world_size=1):
        self.runs += 1
        self.stat_update("runs_of_this_copy", value=self.runs)
        yield from ()


if __name__ == "__main__":
    root, got = Path(sys.argv[1]), {}
    for workers in (1, 2):
        logs = root / f"logs-{workers}"
        first = run_datatrove(ExecutorConfig(workers=workers, progress=False), [Count()], 7, logs, "count")
        again = run_datatrove(ExecutorConfig(workers=workers, progress=False), [Count()], 7, logs, "count")
        per_task = [json.loads((logs / "stats" / f"{r:05d}.json").read_text()) for r in range(7)]
        got[workers] = {"first": first, "again": again, "completions": len(list((logs / "completions").iterdir())),
                        "per_task": [total(s[-1]["stats"]["runs_of_this_copy"]) for s in per_task],
                        "stats_json": (logs / "stats.json").is_file()}
    print(json.dumps(got))
"""


def test_every_task_runs_a_fresh_copy_of_the_pipeline_and_completed_tasks_are_skipped(tmp_path):
    """QuietLocalExecutor.run pickles the executor once per run, not once per task as datatrove's pool did, so
    the copy each task runs must still be its own: a step's state (here a counter) never carries from one task
    to the next in the same worker, or the stats would add up to more than one per task."""
    script = tmp_path / "fresh.py"
    script.write_text(FRESH_COPIES)
    proc = subprocess.run([sys.executable, str(script), str(tmp_path)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    for workers in ("1", "2"):
        run = got[workers]
        assert run["per_task"] == [1] * 7, (workers, run)
        assert run["first"]["count: count.runs_of_this_copy"] == 7, run
        assert run["completions"] == 7 and run["stats_json"], run
        # nothing ran again: the stats of the finished tasks
        assert run["again"]["count: count.runs_of_this_copy"] == 7, run


def test_a_task_log_that_cannot_be_written_fails_the_task_without_loguru_tracebacks(capfd):
    """A full disk under a task's log file: loguru's default handler printed 'Logging error in Loguru Handler'
    and a traceback for every record (30 to 228 lines); the write's OSError now reaches the task instead."""
    import errno

    from loguru import logger

    from cpp_data.pipeline.runner.executors.task_logging import task_logger

    class FullDisk:
        def write(self, text):
            raise OSError(errno.ENOSPC, "No space left on device")

        def flush(self):
            pass

    class Folder:
        def open(self, path, mode):
            return FullDisk()

    try:
        with pytest.raises(OSError, match="No space left"):
            task_logger(Folder(), rank=0)
    finally:
        logger.remove()
    assert "Logging error" not in capfd.readouterr().err


def test_a_task_process_whose_build_is_gone_ends_without_a_traceback(capfd):
    """A build killed with SIGKILL leaves its task process to finish; the pipe back to the build is then broken.
    The one-worker process (executors._run_executor) ends quietly, without a BrokenPipeError traceback, with the
    run's result and with the run's exception alike. A real pipe whose reader is closed."""
    import multiprocess

    from cpp_data.pipeline.runner.executors.local import _run_executor

    class Done:
        def run(self):
            return None

    class Fails:
        def run(self):
            raise ValueError("a task failed")

    for executor in (Done(), Fails()):
        receive, send = multiprocess.Pipe(duplex=False)
        receive.close()
        _run_executor(executor, send)  # raised BrokenPipeError before
    out, err = capfd.readouterr()
    assert "Traceback" not in out + err and "BrokenPipe" not in out + err
