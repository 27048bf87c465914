"""Running per-document work (datatrove pipeline steps) on datatrove's executors.

- local: LocalPipelineExecutor, `workers` processes on this machine (the default).
- ray: RayPipelineExecutor on the cluster at `ray_address`, or a local Ray started for the run.
- slurm: SlurmPipelineExecutor; submits a job array and waits until every task has completed (the output
  directory must be on a filesystem the compute nodes share).
One datatrove task per input file; a task writes whole files named by its rank, and datatrove records finished
ranks under `completions/`, so a killed stage reruns only its unfinished tasks.
"""

from __future__ import annotations

import functools
import os
import sys
import threading
import time
from contextlib import contextmanager, nullcontext, suppress
from copy import deepcopy
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from datatrove.executor import LocalPipelineExecutor
from datatrove.utils.stats import PipelineStats
from tqdm import tqdm

from cpp_data.pipeline.errors import BadInput
from cpp_data.pipeline.lifetime import die_with_parent
from cpp_data.pipeline.task_watch import TaskDeathWatch, record_task_process


@dataclass(frozen=True)
class ExecutorConfig:
    kind: str = "local"  # local | ray | slurm
    workers: int = 2
    ray_address: str | None = None
    slurm: dict[str, Any] = field(default_factory=dict)  # partition, time, qos, cpus_per_task, mem_per_cpu_gb,
    # sbatch_args ({option: value}, account among them), poll_s
    ray: dict[str, Any] = field(default_factory=dict)  # cpus_per_task, mem_per_cpu_gb, resources ({name: amount})
    progress: bool = True


def quiet_datatrove() -> None:
    """Keep datatrove's per-step INFO logging out of the terminal (it stays in each task's log file)."""
    from loguru import logger

    remember_loguru_lib_dirs()
    logger.remove()
    _add_terminal_handler("WARNING")


def _add_terminal_handler(level: str) -> None:
    """One line per record at `level` or above, never a traceback with local variables: a failing task's
    exception reaches the CLI, which prints it as one line (the traceback with --debug); its full log stays in
    the task's log file."""
    from loguru import logger

    logger.add(sys.stderr, level=level, format=lambda record: "{level}: {message}\n", backtrace=False,
               diagnose=False, filter=lambda record: record["exception"] is None)


_TASK_LOG_FORMAT = "{time:YYYY-MM-DD HH:mm:ss.SSS} | {level: <8} | {name}:{function}:{line} - {message}"


def task_logger(logging_dir, rank: int, local_rank: int = 0, node_rank: int = -1):
    """datatrove's add_task_logger (datatrove/utils/logging.py) with a quiet terminal: the task's log file gets
    every record, as datatrove writes it; the terminal only errors, one line each, and no exception.

    Why: datatrove gives the terminal a handler with loguru's defaults and logs a failing task's exception
    through it, so any task that raised (a full disk, a cache directory removed under a running build) printed
    its traceback with the local variables of every frame (tables, paths, the pipeline) above the CLI's one-line
    error. Written here because add_task_logger has no option for its terminal handler; `use_task_logger`
    puts it where datatrove's executors look for it. Same signature and file as datatrove's (close_task_logger
    closes the file it returns)."""
    from loguru import logger

    logger.remove()
    logfile = logging_dir.open(f"logs/task_{rank:05d}.log", "w")
    _add_terminal_handler("ERROR")
    prefix = f"[NODE {node_rank}] " if node_rank != -1 else ""
    # catch=False: a write that fails (a full disk) raises in the task, which then fails as the stage's one
    # line ("no space left ... run again"); loguru's default printed 'Logging error in Loguru Handler' with a
    # traceback for every record, up to 228 lines on the user's terminal
    logger.add(logfile, colorize=False, level="DEBUG", format=prefix + _TASK_LOG_FORMAT, catch=False)
    logger.info(f"Launching pipeline for {rank=}")
    return logfile


def use_task_logger() -> None:
    """Make datatrove's executors set up each task's logging with `task_logger`: they call the
    add_task_logger their own modules imported (the base executor's for local and Slurm tasks, the Ray
    executor's for Ray tasks), so it is replaced there. Called in the process that runs the tasks, just before
    they run, not at import."""
    import datatrove.executor.base as base

    base.add_task_logger = task_logger
    if (ray_module := sys.modules.get("datatrove.executor.ray")) is not None:
        ray_module.add_task_logger = task_logger


def remember_loguru_lib_dirs() -> None:
    """Make loguru work out its library directories once per process and sys.path, not for every handler.

    loguru's Logger.add builds an ExceptionFormatter, whose constructor asks sysconfig for 4 paths of every
    install scheme (4 to 8 ms on this machine); datatrove adds three handlers per task and quiet_datatrove one
    more, which was 2.2% of the profile samples of a 60 MB build (docs/SCALING.md). The directories depend
    only on sys.path, so the answer is kept per sys.path. Hand-written because loguru has no setting for it;
    if a loguru release drops the private method, this does nothing."""
    from loguru import _better_exceptions

    formatter = getattr(_better_exceptions, "ExceptionFormatter", None)
    compute = getattr(formatter, "_get_lib_dirs", None)
    if compute is None or getattr(compute, "remembered", False):
        return
    known: dict[tuple[str, ...], list[str]] = {}

    def lib_dirs() -> list[str]:
        key = tuple(sys.path)
        if key not in known:
            known[key] = compute()
        return list(known[key])

    lib_dirs.remembered = True
    formatter._get_lib_dirs = staticmethod(lib_dirs)


def bind_children_to_this_process() -> None:
    """Every child this process forks from now on dies with it (pool workers and what a task forks would
    otherwise outlive a killed build). Processes started by exec (git, the forkserver) are not affected."""
    os.register_at_fork(after_in_child=die_with_parent)


class DieWithParent:
    """A first pipeline step: binds the task's process to its parent's life, gives Arrow the build's allocator
    (pipeline/allocator.py: a Ray or Slurm worker does not inherit the driver's environment) and tokenizers its
    share of the cores (pipeline/threads.py), loguru its remembered library directories (the task's later
    handlers), records which node runs the task (`nodes/<rank>` under the logging directory: the Ray node's IP
    and id, else the host name), then passes data through."""

    def __init__(self, logging_dir: Path | None = None, threads: int = 0):
        self.logging_dir = logging_dir
        self.threads = threads  # tokenizers' threads in the task's process; 0: left as they are

    def __call__(self, data, rank: int = 0, world_size: int = 1):
        from cpp_data.pipeline.allocator import use_system_allocator
        from cpp_data.pipeline.threads import limit_tokenizer_threads

        die_with_parent()
        use_system_allocator()
        if self.threads:
            limit_tokenizer_threads(self.threads)
        remember_loguru_lib_dirs()
        if self.logging_dir is not None:
            nodes = Path(self.logging_dir) / "nodes"
            nodes.mkdir(parents=True, exist_ok=True)
            (nodes / f"{rank:05d}").write_text(task_node())
            record_task_process(self.logging_dir, rank)  # pipeline/task_watch.py
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


def _count_nodes(logging_dir: Path) -> dict[str, int]:
    out: dict[str, int] = {}
    for f in sorted((Path(logging_dir) / "nodes").glob("*")):
        node = f.read_text()
        out[node] = out.get(node, 0) + 1
    for node, n in out.items():
        TASKS_PER_NODE[node] = TASKS_PER_NODE.get(node, 0) + n
    return out


class TaskLoggerMixin:
    """For a datatrove executor class: its tasks set up their logging with `task_logger` (errors as one line on
    the terminal, tracebacks in the task's log file). Listed before the executor class, so `_run_for_rank`, which
    runs in the task's own process on every executor, puts it in place before datatrove's runs."""

    def _run_for_rank(self, rank, local_rank=0, node_rank=-1):
        use_task_logger()
        return super()._run_for_rank(rank, local_rank, node_rank)


class QuietLocalExecutor(TaskLoggerMixin, LocalPipelineExecutor):
    """LocalPipelineExecutor whose tasks log to their log files only (task_logger: errors as one line on the
    terminal, no tracebacks)."""

    def _run_for_rank(self, rank, local_rank=0, node_rank=-1):
        try:
            return super()._run_for_rank(rank, local_rank=local_rank, node_rank=node_rank)
        finally:
            quiet_datatrove()  # datatrove's task logger teardown re-adds a DEBUG stderr handler

    def run(self):
        """datatrove's LocalPipelineExecutor.run without its per-task costs: the same tasks, each with a fresh
        copy of the pipeline, the same completion markers, stats files and stats.json.

        Why: datatrove's pool sends every task the executor pickled anew with three Manager proxies (a queue of
        local ranks, a counter and a lock, which each task's process connects to and authenticates with), and
        starts a Manager process per run, all for a local rank that only decides which task may log to the
        terminal (task_logger lets none) and a "k/n tasks completed" log line. That was 6.5 ms of wall time per
        task with two workers, and about 90 ms per run on tasks that do nothing (170 tasks in 17 runs make a
        60 MB build). Here the executor is pickled once per run and handed to each worker when it starts; a task
        unpickles its own copy, as each did from its message before. With one worker the tasks run one after
        another in this process, each on a deep copy of the pipeline, as datatrove does."""
        if self.depends:
            return super().run()
        self._launched = True
        ranks = self.get_incomplete_ranks(range(self.local_rank_offset, self.local_rank_offset + self.local_tasks))
        if not ranks:
            return None
        self.save_executor_as_json()
        if self.workers == 1:
            pipeline, stats = self.pipeline, []
            try:
                for rank in ranks:
                    self.pipeline = deepcopy(pipeline)
                    stats.append(self._run_for_rank(rank))
            finally:
                self.pipeline = pipeline
        else:
            import multiprocess
            from multiprocess.reduction import ForkingPickler

            blob = bytes(ForkingPickler.dumps(self))
            ctx = multiprocess.get_context(self.start_method)
            with _quiet_pool_class()(min(self.workers, len(ranks)), initializer=_hold_executor, initargs=(blob,),
                                     context=ctx) as pool:
                stats = list(pool.imap_unordered(_run_held_rank, ranks))
        total = sum(stats, start=PipelineStats())
        with self.logging_dir.open("stats.json", "wt") as f:
            total.save_to_disk(f)
        return total


@functools.cache
def _quiet_pool_class():
    """multiprocess's Pool whose workers end quietly when the build's process is gone (_quiet_pool_worker)."""
    from multiprocess.pool import Pool, worker

    class QuietPool(Pool):
        @staticmethod
        def Process(ctx, *args, **kwds):
            if kwds.get("target") is worker:
                kwds["target"] = _quiet_pool_worker
            return ctx.Process(*args, **kwds)

    return QuietPool


def _quiet_pool_worker(*args, **kwds) -> None:
    """multiprocess.pool.worker, returning quietly when the pipe back to the build's process is broken: the build
    was killed (SIGKILL from a user or a scheduler), and a task that finished after it has no one to tell.
    Without this, each worker printed two tracebacks (its result, then the error about sending it), 70 lines on
    the terminal for a build killed in its filter stage."""
    from multiprocess.pool import worker

    try:
        worker(*args, **kwds)
    except _BUILD_GONE:
        pass


# what writing to the pipe back to the build's process raises once that process is gone
_BUILD_GONE = (BrokenPipeError, ConnectionResetError)


_HELD_EXECUTOR: list[bytes] = []  # in a pool worker of QuietLocalExecutor.run: its run's executor, pickled


def _hold_executor(blob: bytes) -> None:
    _HELD_EXECUTOR[:] = [blob]


def _run_held_rank(rank: int):
    from multiprocess.reduction import ForkingPickler

    return ForkingPickler.loads(_HELD_EXECUTOR[0])._run_for_rank(rank)


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


def _ensure_ray(cfg: ExecutorConfig) -> None:
    import ray

    if ray.is_initialized():
        return
    if cfg.ray_address:
        ray.init(address=cfg.ray_address, log_to_driver=False, logging_level="WARNING")
    else:
        ray.init(num_cpus=cfg.workers, log_to_driver=False, logging_level="WARNING", include_dashboard=False)


def _ray_task(cfg: ExecutorConfig) -> tuple[float, float, dict[str, float]]:
    """(cpus_per_task, mem_per_cpu_gb, custom resources) that each Ray task reserves."""
    return cfg.ray.get("cpus_per_task", 1), cfg.ray.get("mem_per_cpu_gb", 0.5), cfg.ray.get("resources") or {}


def _check_reachable(address: str, timeout_s: float = 10.0) -> None:
    """A --ray-address whose head does not answer: ray.init retries it for minutes, printing 'Failed to connect
    to GCS' every ~40 s and never giving up in a build, so the head's port is tried once here first."""
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
    for it: otherwise datatrove's Ray executor would wait forever for a placement (pipeline/ray_executor.py)."""
    import ray

    from cpp_data.pipeline.ray_executor import check_feasible, task_bundle

    if cfg.ray_address and cfg.ray_address != "auto":
        _check_reachable(cfg.ray_address)
    _ensure_ray(cfg)
    check_feasible(task_bundle(*_ray_task(cfg)), ray.nodes(), cfg.ray_address or "a local Ray")


# What every task imports: the local executor's workers fork from one forkserver per build process, so with
# these loaded there once, a worker starts warm. That is the base libraries, pandas and pyarrow.dataset (pyarrow
# imports them lazily, on a task's first Table.from_pylist or read_table: 0.3 s per worker), and every stage
# module, since unpickling a task's pipeline imports its stage's module and what that imports (tree-sitter,
# detect-secrets, tokenizers, datasketch). Measured on a 60 MB v6 build with 2 workers: workers spent 14 CPU-s
# importing, 6 of them in pandas, when each loaded its own; the forkserver's one load costs 2.3 s.
WORKER_PRELOAD = ["numpy", "pyarrow", "pyarrow.parquet", "pyarrow.compute", "pyarrow.dataset", "pandas",
                  "datatrove.pipeline.base", "datasketch", "cpp_data.stages.lib.shard_tasks"]


def start_worker_server(cfg: ExecutorConfig) -> None:
    """Start the local executor's forkserver, preloading WORKER_PRELOAD and every stage module. The runner calls
    this when a stage is about to run (make_executor calls it again, a no-op then), rather than leaving it to
    the first executor run: its start returns at once, and the server then imports the preloaded modules in its
    own process (0.8 s on this machine, 2.3 s on a slower one), which used to hold up the build's first
    datatrove run (filter's) on one core. Started with the first stage to run, that import overlaps the
    driver's own work before it (collect, fingerprints, source locks). Idempotent; nothing to do for a Ray or
    Slurm executor, whose workers are not this machine's children."""
    if cfg.kind != "local":
        return
    import pkgutil

    import multiprocess
    import multiprocess.forkserver

    import cpp_data.stages

    stage_modules = [f"cpp_data.stages.{m.name}" for m in pkgutil.iter_modules(cpp_data.stages.__path__)
                     if not m.ispkg]
    # no effect once the forkserver runs, which is fine
    multiprocess.set_forkserver_preload(WORKER_PRELOAD + stage_modules)
    started_here = _STARTED_IN == [os.getpid()]  # then ensure_running() is a no-op, and SIGINT stays as it is
    with nullcontext() if started_here else sigint_ignored_by_children():
        multiprocess.forkserver.ensure_running()
    _STARTED_IN[:] = [os.getpid()]


_STARTED_IN: list[int] = []  # the process that started the forkserver (a forked child must start its own)


@contextmanager
def sigint_ignored_by_children():
    """SIGINT ignored while the forkserver starts, so that it and every process it makes (workers, their
    Managers, libclang's TU processes, forkservers of their own) inherit SIG_IGN, which survives fork and exec
    alike. Ctrl-C reaches the terminal's whole process group: each worker would raise KeyboardInterrupt wherever
    it was (in a task, in the forkserver's preload imports) and print a traceback, while the build's process,
    which handles its own, stops the pool and says one line (pipeline/cli.py).

    Used once per build process, when the server starts: a SIGINT sent to the process while its disposition is
    SIG_IGN can be discarded, and doing this on every stage's call (a no-op once the server runs) lost a Ctrl-C
    in tests/test_resume.py under pytest-xdist. SIGINT is blocked in this thread around the switch, so one
    directed at it stays pending; another of the process's threads can still take and drop one in that moment
    (the kernel gives a process's signal to any thread not blocking it), so a Ctrl-C in the first instant of
    the first stage may need pressing again. Blocking alone is not enough: the forkserver is started through
    _posixsubprocess, which clears the signal mask. Only from the main thread, where handlers can be set;
    elsewhere, nothing changes."""
    import signal

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    blocked = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    handler = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, handler)
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked)


def tokenizer_threads(cfg: ExecutorConfig, beside: bool = False) -> int:
    """tokenizers' threads (pipeline/threads.py) in a task's process, or, with `beside`, in a process of the
    driver's machine that runs while a stage's tasks do (the tokenizer's training): the cores over the processes
    that share them. A Ray or Slurm task has its `cpus_per_task`; only a local executor's tasks (and those of a
    Ray started for the run) share the driver's machine with a process beside them."""
    from cpp_data.pipeline.threads import cpu_count

    if not beside:
        if cfg.kind == "local":
            return max(1, cpu_count() // cfg.workers)
        return max(1, int((cfg.ray if cfg.kind == "ray" else cfg.slurm).get("cpus_per_task", 1)))
    sharing = cfg.workers if cfg.kind == "local" or (cfg.kind == "ray" and not cfg.ray_address) else 0
    return max(1, cpu_count() // (sharing + 1))


def make_executor(cfg: ExecutorConfig, pipeline: list, tasks: int, logging_dir: Path, label: str):
    """Build the datatrove executor for `cfg` (not yet run)."""
    steps = [DieWithParent(logging_dir, tokenizer_threads(cfg)), *pipeline]
    if cfg.kind == "local":
        start_worker_server(cfg)  # already running when the runner started it with the stage
        # Even a single task runs in a worker, so the driver never takes a task's peak: the structure stage's
        # one graph task of a 92 MB repository took the driver to 576 MiB (bench/scale.py's 4x corpus). With
        # one worker, the tasks run in the process that calls run(), which run_datatrove makes a worker of its
        # own (run_in_one_worker); with more, in a pool (QuietLocalExecutor.run), even for a single task.
        workers = 1 if cfg.workers == 1 else max(2, min(cfg.workers, tasks))
        return QuietLocalExecutor(steps, tasks=tasks, workers=workers, logging_dir=str(logging_dir))
    if cfg.kind == "ray":
        from cpp_data.pipeline.ray_executor import RayExecutor

        check_ray_cluster(cfg)
        cpus, mem, resources = _ray_task(cfg)
        return RayExecutor(steps, tasks=tasks, workers=cfg.workers, logging_dir=str(logging_dir),
                           cpus_per_task=cpus, mem_per_cpu_gb=mem,
                           ray_remote_kwargs={"resources": resources} if resources else None)
    if cfg.kind == "slurm":
        from cpp_data.pipeline.slurm_executor import SlurmExecutor

        opts = dict(cfg.slurm)
        opts.pop("poll_s", None)
        _check_script_values(opts)
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


def _check_script_values(opts: dict[str, Any]) -> None:
    """BadInput when a Slurm option (or an sbatch argument's key or value) holds a control character: each is
    written into the job script, where a line break starts a shell line of its own, and that line runs. The
    CLI checks its flags the same way; this holds for callers of the Python API too."""
    values = [(k, v) for k, v in opts.items() if k != "sbatch_args"]
    values += [(f"sbatch_args.{k}", f"{k}={v}") for k, v in (opts.get("sbatch_args") or {}).items()]
    for key, value in values:
        if isinstance(value, str) and any(ord(c) < 32 or ord(c) == 127 for c in value):
            raise BadInput(f"slurm option {key} {value!r}: holds a control character (a line break, a tab, ...); "
                           f"a value written into the Slurm job script must be one plain line")


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
            _wait_for_slurm(executor, tasks, label, float(cfg.slurm.get("poll_s", 30)))
    finally:
        stop.set()
        thread.join()
        quiet_datatrove()  # datatrove re-adds its default stderr logger after in-process tasks
    incomplete = executor.get_incomplete_ranks()
    if incomplete:
        raise RuntimeError(f"{label}: {len(incomplete)} of {tasks} tasks did not complete; see {logging_dir}/logs")
    _count_nodes(logging_dir)
    return collect_stats(logging_dir)


def _run_executor(executor, conn) -> None:
    """In the worker: run the executor and send back None, or the exception that ended the run. What a task
    forks dies with the worker, so a worker killed mid-task leaves nothing holding the pipe."""
    import multiprocess

    # A process the forkserver made would start its own children through a forkserver of its own, a new
    # interpreter each (seen in the process tree for datatrove's Manager, which QuietLocalExecutor.run no longer
    # starts); forked from this process, a child starts at once.
    multiprocess.set_start_method("fork", force=True)
    bind_children_to_this_process()
    outcome: BaseException | None = None
    try:
        executor.run()  # its PipelineStats stay behind: run_datatrove reads the stats files the run wrote
    except BaseException as exc:  # noqa: BLE001 - handed to the build's process, which raises it
        outcome = exc
    try:
        conn.send(outcome)
    except _BUILD_GONE:
        pass  # the build's process is gone (killed): no one to tell, and no traceback (_quiet_pool_worker)
    except Exception:  # an exception that does not pickle: its text still goes back
        with suppress(*_BUILD_GONE):
            conn.send(RuntimeError(f"{type(outcome).__name__}: {outcome}"))
    finally:
        conn.close()


def run_in_one_worker(executor, label: str) -> None:
    """Run a one-worker local executor's tasks, one after another, in one process forked from the build's
    forkserver (start_worker_server) rather than in the build's own process, where datatrove would run them.
    The process is not a pool's (a pool's workers are daemons, and datatrove's run starts a Manager process),
    so the exception that ends the run comes back through a pipe and is raised here.

    Why: each task's peak then ends with its run, as with two workers, instead of staying in the build's heap
    for the stages after it. With the tasks in the build's process, its high-water mark on bench/scale.py's
    corpora was 679, 748 and 858 MiB at 1x, 2x and 4x (1.26x; docs/SCALING.md), against 317 to 400 MiB for
    any process with two workers. A task that crashes its process (a segfault in a parser) ends the run with
    an error naming the task (TaskDeathWatch) instead of killing the build."""
    import multiprocess

    ctx = multiprocess.get_context("forkserver")
    receive, send = ctx.Pipe(duplex=False)
    worker = ctx.Process(target=_run_executor, args=(executor, send), name="cpp-data tasks")
    worker.start()
    send.close()
    try:
        error = receive.recv()
    except EOFError:  # the process ended without a word: killed, or a crash in native code
        worker.join()
        raise RuntimeError(f"{label}: the process running its tasks died (exit code {worker.exitcode}); "
                           f"see {executor.logging_dir.path}/logs") from None
    finally:
        receive.close()
    worker.join()
    if error is not None:
        raise error


def _wait_for_slurm(executor, tasks: int, label: str, poll_s: float) -> None:
    """Wait until every task completed; fail once the job left the queue with tasks still incomplete."""
    import subprocess

    while incomplete := executor.get_incomplete_ranks():
        queued = subprocess.run(["squeue", "-h", "-j", str(executor.job_id)], capture_output=True, text=True)
        if not queued.stdout.strip():  # squeue exits 1 ("Invalid job id") once a job is purged
            raise RuntimeError(f"{label}: Slurm job {executor.job_id} ended with {len(incomplete)}/{tasks} tasks "
                               f"incomplete; see the Slurm logs under {executor.slurm_logs_folder}")
        print(f"{label}: waiting for {len(incomplete)}/{tasks} Slurm tasks (job {executor.job_id})", file=sys.stderr)
        time.sleep(poll_s)


_CACHE: dict[Any, dict[Any, Any]] = {}


def worker_cache(key: Any, make, kind: str = "", keep: int | None = None):
    """One object per worker process and key (a tokenizer loaded once for all the tasks a worker runs). With
    `keep`, at most that many objects of this `kind` stay, the least recently used going first (a source's
    semantic index: a worker meets many sources)."""
    cache = _CACHE.setdefault(kind, {})
    if key in cache:
        cache[key] = cache.pop(key)  # most recently used last
    else:
        cache[key] = make()
        while keep is not None and len(cache) > keep:
            cache.pop(next(iter(cache)))
    return cache[key]


def stat_total(stats: dict[str, int], name: str) -> int:
    """The total of stat `name` over every step of a collect_stats result (its keys are "<step>.<stat>")."""
    return int(sum(v for k, v in stats.items() if k.rsplit(".", 1)[-1] == name))


def collect_stats(logging_dir: Path) -> dict[str, int]:
    """Sum the per-task datatrove stats files into {"<step>.<stat>": total}."""
    import json

    totals: dict[str, int] = {}
    for path in sorted((Path(logging_dir) / "stats").glob("*.json")):
        for step in json.loads(path.read_text()):
            name = step.get("name", "step")
            for key, value in step.get("stats", {}).items():
                total = value.get("total") if isinstance(value, dict) else value
                if isinstance(total, (int, float)):
                    totals[f"{name}.{key}"] = totals.get(f"{name}.{key}", 0) + total
    return totals
