"""What every datatrove task does first, on any engine (DieWithParent), and where tasks ran (the build summary's
tasks per node)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from cpp_data.pipeline.foundation.lifetime import die_with_parent
from cpp_data.pipeline.runner.executors.task_logging import remember_loguru_lib_dirs
from cpp_data.pipeline.runner.executors.task_watch import record_task_process


def bind_children_to_this_process() -> None:
    """Every child this process forks from now on dies with it (pool workers and what a task forks would
    otherwise outlive a killed build). Processes started by exec (git, the forkserver) are not affected."""
    os.register_at_fork(after_in_child=die_with_parent)


class DieWithParent:
    """A first pipeline step: binds the task's process to its parent's life, gives Arrow the build's allocator
    (pipeline/foundation/allocator.py: a Ray or Slurm worker does not inherit the driver's environment) and tokenizers
    its
    share of the cores (pipeline/foundation/threads.py), loguru its remembered library directories (the task's later
    handlers), records which node runs the task (`nodes/<rank>` under the logging directory: the Ray node's IP
    and id, else the host name), then passes data through."""

    def __init__(self, logging_dir: Path | None = None, threads: int = 0):
        self.logging_dir = logging_dir
        self.threads = threads  # tokenizers' threads in the task's process; 0: left as they are

    def __call__(self, data, rank: int = 0, world_size: int = 1):
        from cpp_data.pipeline.foundation.allocator import use_system_allocator
        from cpp_data.pipeline.foundation.threads import limit_tokenizer_threads

        die_with_parent()
        use_system_allocator()
        if self.threads:
            limit_tokenizer_threads(self.threads)
        remember_loguru_lib_dirs()
        if self.logging_dir is not None:
            nodes = Path(self.logging_dir) / "nodes"
            nodes.mkdir(parents=True, exist_ok=True)
            (nodes / f"{rank:05d}").write_text(task_node())
            record_task_process(self.logging_dir, rank)  # pipeline/runner/executors/task_watch.py
        return data


def task_node() -> str:
    """The node this process runs on: `ray:<ip>/<node id, 8 hex>` inside a Ray worker, else `host:<name>`."""
    import socket

    if "ray" in sys.modules:
        import ray

        if ray.is_initialized():
            ctx = ray.get_runtime_context()
            return f"ray:{ray.util.get_node_ip_address()}/{ctx.get_node_id()[:8]}"
    return f"host:{socket.gethostname()}"


# Tasks per node of every datatrove run of this process, for the build summary ({node: tasks}).
TASKS_PER_NODE: dict[str, int] = {}


def count_nodes(logging_dir: Path) -> dict[str, int]:
    out: dict[str, int] = {}
    for f in sorted((Path(logging_dir) / "nodes").glob("*")):
        node = f.read_text()
        out[node] = out.get(node, 0) + 1
    for node, n in out.items():
        TASKS_PER_NODE[node] = TASKS_PER_NODE.get(node, 0) + n
    return out
