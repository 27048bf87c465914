"""One build at a time per output directory: an exclusive POSIX record lock (lockf) on OUT/.lock. And no
published build removed while a command reads it (`hold_for_reading`, `lock_for_removal`).

The lock dies with its process (the kernel drops it), so a killed build never leaves a stale lock. It is a
POSIX lock, not flock: forked children (datatrove's multiprocess Manager server, for one) would inherit a flock
and keep an output directory locked after the build itself was killed; record locks are not inherited.
"""

from __future__ import annotations

import fcntl
import json
import os
import time
from datetime import datetime, timezone
from pathlib import Path

from cpp_data.pipeline.errors import BadInput, Locked


class BuildLocked(Locked):
    """Another process holds the output directory."""


class OutputLock:
    def __init__(self, out: Path, wait: bool = False, poll_s: float = 1.0):
        self.path = Path(out) / ".lock"
        self.wait = wait
        self.poll_s = poll_s
        self._fd: int | None = None

    def __enter__(self) -> "OutputLock":
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        while True:
            try:
                fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except (BlockingIOError, PermissionError):
                if not self.wait:
                    holder = self._holder(fd)
                    os.close(fd)
                    raise BuildLocked(
                        f"{self.path.parent}: another build is running ({holder}); "
                        f"wait for it, or pass --wait to queue behind it"
                    ) from None
                time.sleep(self.poll_s)
        os.ftruncate(fd, 0)
        info = {"pid": os.getpid(), "started": datetime.now(timezone.utc).isoformat(timespec="seconds")}
        os.write(fd, json.dumps(info).encode())
        self._fd = fd
        return self

    @staticmethod
    def _holder(fd: int) -> str:
        try:
            info = json.loads(os.pread(fd, 4096, 0) or b"{}")
            return f"pid {info.get('pid')}, started {info.get('started')}"
        except (OSError, ValueError):
            return "holder unknown"

    def __exit__(self, *exc) -> None:
        if self._fd is not None:
            fcntl.lockf(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None


_READING: list[int] = []  # the directory descriptors hold_for_reading keeps open until the process exits


def hold_for_reading(build: Path) -> None:
    """Keep `cpp-data gc` from removing a published build while this process reads it (verify, export, train,
    show, diff, ...): a shared flock on the build's directory, held until the process exits. gc takes the
    exclusive lock without waiting and keeps a build it cannot lock (lock_for_removal). Without it, gc removed a
    build verify was reading, and eight gates failed on FileNotFoundError. flock, not lockf: a directory
    opens read-only, and lockf's locks need a writable file. BadInput when gc removed the build while this
    waited for its lock."""
    try:
        fd = os.open(build, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:  # not a directory this can open: the command's own checks say what is wrong with it
        return
    fcntl.flock(fd, fcntl.LOCK_SH)  # waits only while gc removes this very build
    if not os.path.isdir(build):
        os.close(fd)
        raise BadInput(f"{build}: removed by cpp-data gc while this command waited to read it")
    _READING.append(fd)


def lock_for_removal(build: Path) -> int | None:
    """An open descriptor of `build` holding its exclusive flock (close it once the build is removed), or None
    while a reader holds it (hold_for_reading): gc then keeps the build."""
    fd = os.open(build, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd
