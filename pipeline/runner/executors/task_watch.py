"""Fail a stage whose local task process died, instead of waiting for it forever.

datatrove's local executor runs tasks on a `multiprocess` Pool. When a worker process dies in the middle of a
task (a native library's segfault, the kernel's OOM killer, a stray `kill -9`), the Pool starts a new worker
but the task's result never comes, and the driver waits on it forever, printing nothing.

Each task's process records `pids/<rank>` under the stage's datatrove logging directory as it starts
(`record_task_process`, from the pipeline's first step). While the tasks run, `TaskDeathWatch` polls, once a
second, the ranks that have a pid file and no completion marker: a process that is gone, a zombie, or whose
pid now names a younger process is dead. Seen dead twice in a row (so a pool that is being shut down after
another failure is not mistaken for a death), the watch interrupts the driver's main thread with SIGUSR1,
whose handler raises `TaskProcessDied` where the driver waits. datatrove's `with Pool(...)` then terminates
the other workers on its way out. The stage fails naming the task and its log; the tasks that completed
keep their markers, so running the build again resumes with the rest (Stage.resumable_tasks).

The watch works only in the main thread, where Python runs signal handlers; the runner's stages that use an
executor run there (only the tokenizer's training runs beside them, and it is a process of its own).
"""

from __future__ import annotations

import os
import shutil
import signal
import threading
from pathlib import Path
from typing import Any

from cpp_data.pipeline.foundation.errors import CheckFailed


class TaskProcessDied(CheckFailed):
    """A task's process ended before its task completed."""


def _start_time(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (/proc/PID/stat field 22), None if it is gone or a
    zombie: with the pid, it tells one process from a later one given the same pid."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2:].split()  # after "pid (comm) ": state is field 3, starttime field 22
    return None if fields[0] in ("Z", "X") else fields[19]


def record_task_process(logging_dir: Path, rank: int) -> None:
    """Write `pids/<rank>`: this process's pid and start time (called in the task's own process)."""
    if not Path("/proc/self/stat").exists():
        return
    pids = Path(logging_dir) / "pids"
    pids.mkdir(parents=True, exist_ok=True)
    tmp = pids / f".{rank:05d}.{os.getpid()}"
    tmp.write_text(f"{os.getpid()} {_start_time(os.getpid())}")
    os.replace(tmp, pids / f"{rank:05d}")


class TaskDeathWatch:
    """Context manager around a local executor's run(): raises TaskProcessDied in the main thread when a task's
    process dies before its task completes."""

    def __init__(self, logging_dir: Path, label: str, poll_s: float = 1.0):
        self.logging_dir = Path(logging_dir)
        self.label = label
        self.poll_s = poll_s
        self.died: tuple[int, int] | None = None  # (rank, pid)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._previous: Any = None  # the SIGUSR1 handler to put back

    def __enter__(self) -> "TaskDeathWatch":
        if threading.current_thread() is not threading.main_thread() or not Path("/proc/self/stat").exists():
            return self  # no signal handlers outside the main thread: the watch stays off
        shutil.rmtree(self.logging_dir / "pids", ignore_errors=True)  # a killed earlier run's pids mean nothing
        self._previous = signal.signal(signal.SIGUSR1, self._raise)
        self._thread = threading.Thread(target=self._watch, name=f"task-watch {self.label}", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        if self._thread is None:
            return
        self._stop.set()
        self._thread.join()
        signal.signal(signal.SIGUSR1, self._previous)
        self._thread = None

    def _dead(self) -> list[tuple[int, int]]:
        """(rank, pid) of each task whose process is gone and whose completion marker is missing."""
        dead = []
        pids, completions = self.logging_dir / "pids", self.logging_dir / "completions"
        completed = set(os.listdir(completions)) if completions.is_dir() else set()
        for f in sorted(pids.iterdir()) if pids.is_dir() else ():
            if f.name.startswith(".") or f.name in completed:
                continue
            rank = int(f.name)
            done = completions / f.name
            try:
                pid, start = f.read_text().split()
            except (OSError, ValueError):
                continue
            if _start_time(int(pid)) != start and not done.exists():  # checked again: it may just have finished
                dead.append((rank, int(pid)))
        return dead

    def _watch(self) -> None:
        seen: set[tuple[int, int]] = set()
        while not self._stop.wait(self.poll_s):
            dead = self._dead()
            confirmed = [d for d in dead if d in seen]
            seen = set(dead)
            if confirmed and not self._stop.is_set():
                self.died = confirmed[0]
                signal.pthread_kill(threading.main_thread().ident or 0, signal.SIGUSR1)
                return

    def _raise(self, signum, frame) -> None:
        if self.died is None or self._stop.is_set():
            return
        rank, pid = self.died
        log = self.logging_dir / "logs" / f"task_{rank:05d}.log"
        raise TaskProcessDied(
            f"{self.label}: task {rank}'s process (pid {pid}) died before the task completed (a crash in native "
            f"code, or killed: the kernel's OOM killer says so in dmesg); its log: {log}. The tasks that "
            f"completed are kept: run the build again to resume")
