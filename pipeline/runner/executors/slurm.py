"""datatrove's Slurm executor, its tasks logging as the local executor's do.

A Slurm task runs `launch_pickled_pipeline`, which loads this executor and calls `_run_for_rank`; the override
puts executors/task_logging.task_logger in place first, so datatrove does not log a failing task's traceback
with every frame's local variables into the job's output (the task's log file has the traceback; the build,
waiting on the job array, names the tasks that did not complete). A module of its own because importing
datatrove's Slurm executor is only needed when Slurm is chosen, and the class must be importable by name where
the task unpickles it.
"""

from __future__ import annotations

import sys
import time
from typing import Any

from datatrove.executor.slurm import SlurmPipelineExecutor

from cpp_data.pipeline.foundation.errors import BadInput
from cpp_data.pipeline.runner.executors.task_logging import TaskLoggerMixin


class SlurmExecutor(TaskLoggerMixin, SlurmPipelineExecutor):
    """SlurmPipelineExecutor whose tasks log through executors/task_logging.task_logger."""


def check_script_values(opts: dict[str, Any]) -> None:
    """BadInput when a Slurm option (or an sbatch argument's key or value) holds a control character: each is
    written into the job script, where a line break starts a shell line of its own, and that line runs. The
    CLI checks its flags the same way; this holds for callers of the Python API too."""
    values = [(k, v) for k, v in opts.items() if k != "sbatch_args"]
    values += [(f"sbatch_args.{k}", f"{k}={v}") for k, v in (opts.get("sbatch_args") or {}).items()]
    for key, value in values:
        if isinstance(value, str) and any(ord(c) < 32 or ord(c) == 127 for c in value):
            raise BadInput(f"slurm option {key} {value!r}: holds a control character (a line break, a tab, ...); "
                           f"a value written into the Slurm job script must be one plain line")


def wait_for_slurm(executor, tasks: int, label: str, poll_s: float) -> None:
    """Wait until every task completed; fail once the job left the queue with tasks still incomplete."""
    import subprocess

    while incomplete := executor.get_incomplete_ranks():
        queued = subprocess.run(["squeue", "-h", "-j", str(executor.job_id)], capture_output=True, text=True)
        if not queued.stdout.strip():  # squeue exits 1 ("Invalid job id") once a job is purged
            raise RuntimeError(f"{label}: Slurm job {executor.job_id} ended with {len(incomplete)}/{tasks} tasks "
                               f"incomplete; see the Slurm logs under {executor.slurm_logs_folder}")
        print(f"{label}: waiting for {len(incomplete)}/{tasks} Slurm tasks (job {executor.job_id})", file=sys.stderr)
        time.sleep(poll_s)
