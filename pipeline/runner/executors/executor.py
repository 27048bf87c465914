"""The Executor a stage is handed (pipeline/contract/executor.py): datatrove's engines, as the build's
ExecutorConfig chooses them. The runner makes one per stage instance; a stage calls `run` or `run_sources` and
never learns which engine ran its tasks."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cpp_data.pipeline.contract.executor import ExecutorConfig, SourceTasks
from cpp_data.pipeline.runner.executors.run import run_datatrove
from cpp_data.pipeline.runner.executors.source_batch import run_sources


@dataclass(frozen=True)
class DatatroveExecutor:
    config: ExecutorConfig

    def run(self, pipeline: list, tasks: int, logging_dir: Path, label: str) -> dict[str, int]:
        return run_datatrove(self.config, pipeline, tasks, logging_dir, label)

    def run_sources(self, units: list[SourceTasks], logging_dir: Path, label: str) -> list[dict[str, Any]]:
        return run_sources(self.config, units, logging_dir, label)
