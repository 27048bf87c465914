"""The local engine: datatrove's LocalPipelineExecutor without its per-task costs, its workers forked warm from
one forkserver per build process, and a one-worker run kept out of the build's own process."""

from __future__ import annotations

import functools
import os
import threading
from contextlib import contextmanager, nullcontext, suppress
from copy import deepcopy

from datatrove.executor import LocalPipelineExecutor
from datatrove.utils.stats import PipelineStats

from cpp_data.pipeline.contract.executor import ExecutorConfig
from cpp_data.pipeline.runner.executors.task_logging import TaskLoggerMixin, quiet_datatrove
from cpp_data.pipeline.runner.executors.task_setup import bind_children_to_this_process


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
        terminal (task_logger lets none) and a "k/n tasks completed" log line. That is a fixed cost per task and
        per run, and a build is many small runs. Here the executor is pickled once per run and handed to each
        worker when it starts; a task unpickles its own copy. With one worker the tasks run one after another in
        this process, each on a deep copy of the pipeline, as datatrove does."""
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


# What every task imports: the local executor's workers fork from one forkserver per build process, so with
# these loaded there once, a worker starts warm. That is the base libraries, pandas and pyarrow.dataset (pyarrow
# imports them lazily, on a task's first Table.from_pylist or read_table), and every stage module, since
# unpickling a task's pipeline imports its stage's module and what that imports (tree-sitter, detect-secrets,
# tokenizers, datasketch). Loaded once in the forkserver, these imports cost a build one load instead of one per
# worker, pandas the largest of them.
WORKER_PRELOAD = ["numpy", "pyarrow", "pyarrow.parquet", "pyarrow.compute", "pyarrow.dataset", "pandas",
                  "datatrove.pipeline.base", "datasketch", "cpp_data.stages.lib.shard_tasks"]


def start_worker_server(cfg: ExecutorConfig) -> None:
    """Start the local executor's forkserver, preloading WORKER_PRELOAD and every stage module. The runner calls
    this when a stage is about to run (make_executor calls it again, a no-op then), rather than leaving it to
    the first executor run: its start returns at once, and the server then imports the preloaded modules in its
    own process, which would otherwise hold up the build's first datatrove run (filter's) on one core. Started
    with the first stage to run, that import overlaps the driver's own work before it (collect, fingerprints,
    source locks). Idempotent; nothing to do for a Ray or Slurm executor, whose workers are not this machine's
    children."""
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


def _run_executor(executor, conn) -> None:
    """In the worker: run the executor and send back None, or the exception that ended the run. What a task
    forks dies with the worker, so a worker killed mid-task leaves nothing holding the pipe."""
    import multiprocess

    # A process the forkserver made would start its own children through a forkserver of its own, a new
    # interpreter each (datatrove's Manager would be one, which QuietLocalExecutor.run does not start); forked
    # from this process, a child starts at once.
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
    for the stages after it; with the tasks in the build's own process, its high-water mark grows with the
    corpus and stays well above any process of a two-worker build (docs/SCALING.md, memory). A task that
    crashes its process (a segfault in a parser) ends the run with an error naming the task (TaskDeathWatch)
    instead of killing the build."""
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
