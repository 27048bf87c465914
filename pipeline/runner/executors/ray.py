"""datatrove's Ray executor, made to fail with a reason where it would wait forever.

datatrove (0.10) starts each Ray task from a thread of its own: the thread creates a placement group, waits
until it is placed, starts the task's `RankWorker` actors, asks them for their node's IP, and only then hands
the task to the run loop through a `Future`. When any of that raises (an actor that cannot start, a
`runtime_env` Ray cannot set up, such as a `working_dir` that does not exist), the exception stays in the
thread's own future and the `Future` the run loop polls is never resolved: the build waits forever, printing
nothing. A placement group that no node of the cluster can hold (a `resources` name or a memory the cluster
does not have) is never placed either, with the same result.

So, around datatrove's executor rather than instead of it (its run loop, resubmission of crashed tasks and
completion records stay datatrove's):
- `check_feasible` refuses, before anything is submitted, a task that no alive node has the resources for,
  naming what one task asks and what each node offers;
- `SurfacingTaskManager` resolves the run loop's `Future` with the submitting thread's exception, so the loop
  lets that task go (datatrove logs it) and ends; `RayExecutor.run` then runs the unfinished ranks again, a
  bounded number of times (a worker that could not start in time on a loaded node is a passing failure), and
  raises `RaySubmitFailed` with the first exception if ranks still did not run.
"""

from __future__ import annotations

import logging
import threading
from concurrent.futures import Future

from datatrove.executor.ray import RayPipelineExecutor, RayTaskManager

from cpp_data.pipeline.contract.executor import ExecutorConfig
from cpp_data.pipeline.foundation.errors import BadInput, CheckFailed
from cpp_data.pipeline.runner.executors.task_logging import TaskLoggerMixin

GIB = 1024 ** 3
_RUN = threading.local()  # the failures list of the RayExecutor.run on this thread; read by the task manager


class RaySubmitFailed(CheckFailed):
    """Ray could not start some of a stage's tasks, after retries."""


class SurfacingTaskManager(RayTaskManager):
    """datatrove's task manager, whose handed-out `Future` fails when its submitting thread fails (instead of
    never being resolved), recording the exception for `RayExecutor.run`."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.failures: list[BaseException] = getattr(_RUN, "failures", [])

    def submit_task(self, executor_ref, ranks_to_submit: list[int], remote_options: dict) -> Future:
        handed = super().submit_task(executor_ref, ranks_to_submit, remote_options)
        submitting = self.pg_futures[-1]  # the thread's future, appended by the call above

        def surface(done: Future) -> None:
            error = done.exception()
            if error is not None and not handed.done():
                _remove_placement_groups(error)
                self.failures.append(error)
                handed.set_exception(error)

        submitting.add_done_callback(surface)
        return handed


def _remove_placement_groups(error: BaseException) -> None:
    """Remove the placement group a failed submission created. datatrove removes a task's group only when
    the task ends, so a submission that failed after creating one would hold its CPUs until the driver exits,
    and the retry's groups would never be placed (seen: the second attempt waited on `pg.ready()`). The group
    is a local of the submitting function, which the exception's traceback still holds."""
    import ray
    from ray.util.placement_group import PlacementGroup

    tb = error.__traceback__
    while tb is not None:
        for value in list(tb.tb_frame.f_locals.values()):
            if isinstance(value, PlacementGroup):
                try:
                    ray.util.remove_placement_group(value)
                except Exception:  # already gone
                    pass
        tb = tb.tb_next


class RayExecutor(TaskLoggerMixin, RayPipelineExecutor):
    """RayPipelineExecutor with `SurfacingTaskManager`, rerunning unfinished ranks up to `attempts` times; its
    tasks log as the local executor's do (executors/task_logging.task_logger: no traceback on the driver's terminal)."""

    attempts = 3

    def run(self) -> None:
        import datatrove.executor.ray as datatrove_ray

        # datatrove's run() builds its manager from this module-level name; ours only adds the callback above
        datatrove_ray.RayTaskManager = SurfacingTaskManager
        failures: list[BaseException] = []
        _RUN.failures = failures
        try:
            for _ in range(self.attempts):
                failures.clear()
                super().run()
                if not failures or not self.get_incomplete_ranks():
                    return
        finally:
            del _RUN.failures
        first = failures[0]
        message = str(first).strip().splitlines()[0] if str(first).strip() else type(first).__name__
        raise RaySubmitFailed(f"Ray could not start {len(self.get_incomplete_ranks())} of {self.world_size} tasks "
                              f"after {self.attempts} attempts: {type(first).__name__}: {message}")


def task_bundle(cpus_per_task: float, mem_per_cpu_gb: float, resources: dict[str, float]) -> dict[str, float]:
    """The resources one task's placement group asks for, as datatrove's Ray executor asks them."""
    return {"CPU": float(cpus_per_task), "memory": float(int(mem_per_cpu_gb * cpus_per_task * GIB)),
            **{k: float(v) for k, v in resources.items()}}


def check_feasible(bundle: dict[str, float], nodes: list[dict], where: str) -> None:
    """Raise BadInput unless some alive node of `nodes` (ray.nodes()) has every resource of `bundle`."""
    alive = [n for n in nodes if n.get("Alive")]
    if any(all(n.get("Resources", {}).get(k, 0.0) >= v for k, v in bundle.items() if v > 0) for n in alive):
        return

    def show(res: dict[str, float]) -> str:
        return ", ".join(f"{k}={v / GIB:.1f} GiB" if k == "memory" else f"{k}={v:g}" for k, v in sorted(res.items())
                         if k == "memory" or not k.startswith(("node:", "object_store")))

    offers = "; ".join(f"{n.get('NodeManagerAddress', '?')}: {show(n.get('Resources', {}))}" for n in alive)
    raise BadInput(f"ray: no node of the cluster at {where} can run a task, which asks {show(bundle)} "
                   f"(nodes: {offers or 'none alive'}); ask less with --ray-cpus-per-task, --ray-mem-per-cpu or "
                   f"--ray-resource, or add a node that has it")


def _ensure_ray(cfg: ExecutorConfig) -> None:
    import ray

    if ray.is_initialized():
        return
    if cfg.ray_address:
        ray.init(address=cfg.ray_address, log_to_driver=False, logging_level=logging.WARNING)
    else:
        ray.init(num_cpus=cfg.workers, log_to_driver=False, logging_level=logging.WARNING, include_dashboard=False)


def ray_task_resources(cfg: ExecutorConfig) -> tuple[float, float, dict[str, float]]:
    """(cpus_per_task, mem_per_cpu_gb, custom resources) that each Ray task reserves."""
    return cfg.ray.get("cpus_per_task", 1), cfg.ray.get("mem_per_cpu_gb", 0.5), cfg.ray.get("resources") or {}


def _check_reachable(address: str, timeout_s: float = 10.0) -> None:
    """A --ray-address whose head does not answer: ray.init retries it for minutes, printing 'Failed to connect
    to GCS' again and again and never giving up in a build, so the head's port is tried once here first."""
    import socket

    host, _, port = address.removeprefix("ray://").rpartition(":")
    host = host.strip("[]")  # an IPv6 literal
    if not host or not port.isdigit():
        raise BadInput(f"--ray-address {address}: not HOST:PORT (the head's GCS port, 6379 by default)")
    try:
        socket.create_connection((host, int(port)), timeout=timeout_s).close()
    except OSError as exc:
        raise BadInput(f"--ray-address {address}: no Ray head answers there ({exc.strerror or exc}); start one "
                       f"with `ray start --head` or give its address") from None


def check_ray_cluster(cfg: ExecutorConfig) -> None:
    """Join (or start) the build's Ray and raise BadInput unless one of its nodes can hold a task as `cfg` asks
    for it: otherwise datatrove's Ray executor would wait forever for a placement (pipeline/runner/executors/ray.py)."""
    import ray

    if cfg.ray_address and cfg.ray_address != "auto":
        _check_reachable(cfg.ray_address)
    _ensure_ray(cfg)
    check_feasible(task_bundle(*ray_task_resources(cfg)), ray.nodes(), cfg.ray_address or "a local Ray")
