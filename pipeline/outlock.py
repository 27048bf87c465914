"""One build at a time per output directory: an exclusive POSIX record lock (lockf) on OUT/.lock.

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

from cpp_data.pipeline.errors import Locked


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
