"""The local executor's forkserver starts when the first stage begins (executors.start_worker_server), so its
imports overlap the driver's work, and the executor's pools then fork their workers from that same server."""

import json
import subprocess
import sys

SCRIPT = """
import json, os, sys
from pathlib import Path
import multiprocess.forkserver as fs
from datatrove.pipeline.base import PipelineStep
from cpp_data.pipeline.executors import ExecutorConfig, run_datatrove, start_worker_server


class Parent(PipelineStep):
    name, type = "parent", "record"
    def __init__(self, out):
        super().__init__()
        self.out = out
    def run(self, data, rank=0, world_size=1):
        Path(self.out, f"{rank}.json").write_text(json.dumps(os.getppid()))
        yield from ()


def main():
    root = Path(sys.argv[1])
    start_worker_server(ExecutorConfig(workers=1, progress=False))  # tasks run in this process: no server
    start_worker_server(ExecutorConfig(kind="ray", workers=2, progress=False))  # Ray starts its own workers
    before = fs._forkserver._forkserver_pid
    start_worker_server(ExecutorConfig(workers=2, progress=False))
    started = fs._forkserver._forkserver_pid
    out = root / "parents"
    out.mkdir(parents=True)
    run_datatrove(ExecutorConfig(workers=2, progress=False), [Parent(str(out))], 2, root / "logs", "test")
    parents = sorted(json.loads(p.read_text()) for p in out.glob("*.json"))
    print(json.dumps({"before": before, "started": started, "now": fs._forkserver._forkserver_pid,
                      "parents": parents}))


if __name__ == "__main__":  # datatrove's pool imports this script in its workers
    main()
"""


def test_the_workers_fork_from_the_server_started_before_the_first_run(tmp_path):
    script = tmp_path / "server.py"
    script.write_text(SCRIPT)
    proc = subprocess.run([sys.executable, str(script), str(tmp_path / "run")], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got["before"] is None  # one worker, or Ray: nothing started
    assert got["started"] and got["now"] == got["started"]  # the run used the server, not a new one
    assert got["parents"] == [got["started"]] * 2  # both tasks' processes were forked by it
