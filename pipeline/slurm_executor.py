"""datatrove's Slurm executor, its tasks logging as the local executor's do.

A Slurm task runs `launch_pickled_pipeline`, which loads this executor and calls `_run_for_rank`; the override
puts executors.task_logger in place first, so datatrove no longer logs a failing task's traceback with every
frame's local variables into the job's output (the task's log file has the traceback; the build, waiting on
the job array, names the tasks that did not complete). A module of its own because importing datatrove's Slurm
executor is only needed when Slurm is chosen, and the class must be importable by name where the task
unpickles it.
"""

from __future__ import annotations

from datatrove.executor.slurm import SlurmPipelineExecutor

from cpp_data.pipeline.executors import TaskLoggerMixin


class SlurmExecutor(TaskLoggerMixin, SlurmPipelineExecutor):
    """SlurmPipelineExecutor whose tasks log through executors.task_logger."""
