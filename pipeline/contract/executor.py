"""What a stage knows of where its work runs: the executor's settings (`ExecutorConfig`), the `Executor` it is
handed to run datatrove tasks on, and a per-source stage's tasks (`SourceTasks`). The engines themselves
(local processes, Ray, Slurm) live in the runner (pipeline/runner/executors/); a stage never imports them, as a
datatrove block never imports an executor.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Protocol


@dataclass(frozen=True)
class ExecutorConfig:
    kind: str = "local"  # local | ray | slurm
    workers: int = 2
    ray_address: str | None = None
    slurm: dict[str, Any] = field(default_factory=dict)  # partition, time, qos, cpus_per_task, mem_per_cpu_gb,
    # sbatch_args ({option: value}, account among them), poll_s
    ray: dict[str, Any] = field(default_factory=dict)  # cpus_per_task, mem_per_cpu_gb, resources ({name: amount})
    progress: bool = True



class Executor(Protocol):
    """Runs a stage's datatrove steps where the build runs them (pipeline/runner/executors/executor.py)."""

    @property
    def config(self) -> ExecutorConfig:
        """The settings the build runs with (where, how many workers, progress shown or not)."""
        ...

    def run(self, pipeline: list, tasks: int, logging_dir: Path, label: str) -> dict[str, int]:
        """Run `pipeline` as `tasks` datatrove tasks; the merged step statistics as {"<step>.<stat>": total}."""
        ...

    def run_sources(self, units: list[SourceTasks], logging_dir: Path, label: str) -> list[dict[str, Any]]:
        """Run the tasks of several sources' SourceTasks as one executor run; each unit's counts, in order."""
        ...


@dataclass
class SourceTasks:
    """One source's datatrove work in a per-source stage: `tasks` ranks of `pipeline`, logging to
    `logging_dir`; `finish(stats)` turns the merged step statistics into the stage's counts once all are done."""

    pipeline: list
    tasks: int
    logging_dir: Path
    finish: Callable[[dict[str, int]], dict[str, Any]]

    def run(self, executor: Executor, label: str) -> dict[str, Any]:
        """Run this source alone (a stage run outside the runner's batching) and return its counts."""
        return executor.run_sources([self], self.logging_dir / "batch", label)[0]


def tokenizer_threads(cfg: ExecutorConfig, beside: bool = False) -> int:
    """tokenizers' threads (pipeline/foundation/threads.py) in a task's process, or, with `beside`, in a process of the
    driver's machine that runs while a stage's tasks do (the tokenizer's training): the cores over the processes
    that share them. A Ray or Slurm task has its `cpus_per_task`; only a local executor's tasks (and those of a
    Ray started for the run) share the driver's machine with a process beside them."""
    from cpp_data.pipeline.foundation.threads import cpu_count

    if not beside:
        if cfg.kind == "local":
            return max(1, cpu_count() // cfg.workers)
        return max(1, int((cfg.ray if cfg.kind == "ray" else cfg.slurm).get("cpus_per_task", 1)))
    sharing = cfg.workers if cfg.kind == "local" or (cfg.kind == "ray" and not cfg.ray_address) else 0
    return max(1, cpu_count() // (sharing + 1))


def stat_total(stats: dict[str, int], name: str) -> int:
    """The total of stat `name` over every step of a collect_stats result (its keys are "<step>.<stat>")."""
    return int(sum(v for k, v in stats.items() if k.rsplit(".", 1)[-1] == name))
