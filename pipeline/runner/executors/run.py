"""Running per-document work (datatrove pipeline steps) on datatrove's executors.

- local: LocalPipelineExecutor, `workers` processes on the build's own machine (the default).
- ray: RayPipelineExecutor on the cluster at `ray_address`, or a local Ray started for the run.
- slurm: SlurmPipelineExecutor; submits a job array and waits until every task has completed (the output
  directory must be on a filesystem the compute nodes share).
One datatrove task per input file; a task writes whole files named by its rank, and datatrove records finished
ranks under `completions/`, so a killed stage reruns only its unfinished tasks.
"""

from __future__ import annotations

import os
import sys
import threading
from contextlib import nullcontext
from pathlib import Path
from typing import Any

from tqdm import tqdm

from cpp_data.pipeline.contract.executor import ExecutorConfig, tokenizer_threads
from cpp_data.pipeline.foundation.errors import BadInput
from cpp_data.pipeline.runner.executors.local import QuietLocalExecutor, run_in_one_worker, start_worker_server
from cpp_data.pipeline.runner.executors.task_logging import quiet_datatrove
from cpp_data.pipeline.runner.executors.task_setup import DieWithParent, count_nodes
from cpp_data.pipeline.runner.executors.task_watch import TaskDeathWatch


def _progress(logging_dir: Path, tasks: int, label: str, enabled: bool) -> tuple[threading.Event, threading.Thread]:
    stop = threading.Event()

    def poll() -> None:
        done_dir = logging_dir / "completions"
        with tqdm(total=tasks, desc=label, unit="task", disable=not enabled, leave=False) as bar:
            while not stop.wait(0.5):
                n = len(os.listdir(done_dir)) if done_dir.is_dir() else 0
                bar.update(n - bar.n)
            n = len(os.listdir(done_dir)) if done_dir.is_dir() else 0
            bar.update(n - bar.n)

    thread = threading.Thread(target=poll, daemon=True)
    thread.start()
    return stop, thread


def make_executor(cfg: ExecutorConfig, pipeline: list, tasks: int, logging_dir: Path, label: str):
    """Build the datatrove executor for `cfg` (not yet run)."""
    steps = [DieWithParent(logging_dir, tokenizer_threads(cfg)), *pipeline]
    if cfg.kind == "local":
        start_worker_server(cfg)  # already running when the runner started it with the stage
        # Even a single task runs in a worker, so the driver never takes a task's peak (the structure stage's
        # one graph task of a large repository is a build's largest process). With one worker, the tasks run in
        # the process that calls run(), which run_datatrove makes a worker of its own (run_in_one_worker); with
        # more, in a pool (QuietLocalExecutor.run), even for a single task.
        workers = 1 if cfg.workers == 1 else max(2, min(cfg.workers, tasks))
        return QuietLocalExecutor(steps, tasks=tasks, workers=workers, logging_dir=str(logging_dir))
    if cfg.kind == "ray":
        from cpp_data.pipeline.runner.executors.ray import RayExecutor, check_ray_cluster, ray_task_resources

        check_ray_cluster(cfg)
        cpus, mem, resources = ray_task_resources(cfg)
        return RayExecutor(steps, tasks=tasks, workers=cfg.workers, logging_dir=str(logging_dir),
                           cpus_per_task=cpus, mem_per_cpu_gb=mem,
                           ray_remote_kwargs={"resources": resources} if resources else None)
    if cfg.kind == "slurm":
        from cpp_data.pipeline.runner.executors.slurm import SlurmExecutor, check_script_values

        opts = dict(cfg.slurm)
        opts.pop("poll_s", None)
        check_script_values(opts)
        in_venv = sys.prefix != sys.base_prefix
        default_venv = os.path.join(sys.prefix, "bin", "activate") if in_venv else None
        return SlurmExecutor(
            steps, tasks=tasks, workers=cfg.workers if cfg.workers > 0 else -1,
            time=opts.pop("time", "04:00:00"), partition=opts.pop("partition", "cpu"), qos=opts.pop("qos", "normal"),
            logging_dir=str(logging_dir), job_name=f"cpp-data-{label}".replace("[", "-").replace("]", ""),
            venv_path=opts.pop("venv_path", default_venv),
            cpus_per_task=opts.pop("cpus_per_task", 1), mem_per_cpu_gb=opts.pop("mem_per_cpu_gb", 2),
            sbatch_args=opts.pop("sbatch_args", None), **opts,
        )
    raise BadInput(f"unknown executor {cfg.kind!r}; use local, ray or slurm")


def run_datatrove(cfg: ExecutorConfig, pipeline: list, tasks: int, logging_dir: Path, label: str) -> dict[str, int]:
    """Run `pipeline` as `tasks` datatrove tasks and return the merged step statistics as flat counts."""
    if tasks == 0:
        return {}
    logging_dir = Path(logging_dir)
    executor = make_executor(cfg, pipeline, tasks, logging_dir, label)
    stop, thread = _progress(logging_dir, tasks, label, cfg.progress and cfg.kind != "slurm")
    watch = TaskDeathWatch(logging_dir, label) if cfg.kind == "local" else nullcontext()
    try:
        with watch:  # a pool worker that dies mid-task would leave run() waiting forever
            if cfg.kind == "local" and cfg.workers == 1:
                run_in_one_worker(executor, label)
            else:
                executor.run()
        if cfg.kind == "slurm":
            from cpp_data.pipeline.runner.executors.slurm import wait_for_slurm

            wait_for_slurm(executor, tasks, label, float(cfg.slurm.get("poll_s", 30)))
    finally:
        stop.set()
        thread.join()
        quiet_datatrove()  # datatrove re-adds its default stderr logger after in-process tasks
    incomplete = executor.get_incomplete_ranks()
    if incomplete:
        raise RuntimeError(f"{label}: {len(incomplete)} of {tasks} tasks did not complete; see {logging_dir}/logs")
    count_nodes(logging_dir)
    return collect_stats(logging_dir)


def collect_stats(logging_dir: Path) -> dict[str, int]:
    """Sum the per-task datatrove stats files into {"<step>.<stat>": total}."""
    import json

    totals: dict[str, Any] = {}
    for path in sorted((Path(logging_dir) / "stats").glob("*.json")):
        for step in json.loads(path.read_text()):
            name = step.get("name", "step")
            for key, value in step.get("stats", {}).items():
                total = value.get("total") if isinstance(value, dict) else value
                if isinstance(total, (int, float)):
                    totals[f"{name}.{key}"] = totals.get(f"{name}.{key}", 0) + total
    return totals
