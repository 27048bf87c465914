"""How datatrove's tasks log: every record in the task's log file, errors as one line on the terminal, never a
traceback with every frame's local variables (a failing task's exception reaches the CLI, which prints it as one
line). Used by every engine's executor class (TaskLoggerMixin)."""

from __future__ import annotations

import sys


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
        ray_module.add_task_logger = task_logger  # type: ignore[attr-defined]  # datatrove's own name, replaced


def remember_loguru_lib_dirs() -> None:
    """Make loguru work out its library directories once per process and sys.path, not for every handler.

    loguru's Logger.add builds an ExceptionFormatter, whose constructor asks sysconfig for 4 paths of every
    install scheme; datatrove adds three handlers per task and quiet_datatrove one more, which makes it a
    visible part of a build's profile. The directories depend only on sys.path, so the answer is kept per
    sys.path. Hand-written because loguru has no setting for it; if a loguru release drops the private method,
    this does nothing."""
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

    lib_dirs.remembered = True  # type: ignore[attr-defined]  # marks the replacement: installed once
    formatter._get_lib_dirs = staticmethod(lib_dirs)  # type: ignore[union-attr]  # loguru's private method


class TaskLoggerMixin:
    """For a datatrove executor class: its tasks set up their logging with `task_logger` (errors as one line on
    the terminal, tracebacks in the task's log file). Listed before the executor class, so `_run_for_rank`, which
    runs in the task's own process on every executor, puts it in place before datatrove's runs."""

    def _run_for_rank(self, rank, local_rank=0, node_rank=-1):
        use_task_logger()
        return super()._run_for_rank(rank, local_rank, node_rank)
