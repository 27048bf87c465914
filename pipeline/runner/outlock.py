"""One build at a time per output directory: an exclusive flock held on the directory OUT itself. And no
published build removed while a command reads it (`hold_for_reading`, `lock_for_removal`).

Why the directory and not a lock file: a lock on a file is a lock on that file's inode, so `rm OUT/.lock`
during a build let a second build create a new file, lock it, and run beside the first in the same cache
entries. The directory cannot be removed while a build writes into it, so every build that opens OUT sees the
same lock. `OUT/.lock` holds the holder's pid and start time while the lock is held, for the message a
refused build prints, and is removed when the lock is released; deleting it changes nothing.

The lock dies with its process (the kernel drops it), so a killed build never leaves a stale lock. A flock
belongs to the open file description, which forked children share: the descriptor is opened close-on-exec, so
exec'd children (git, the executors' forkservers, Ray) never hold it, and the children the build forks directly
die with it (executors/task_setup.bind_children_to_this_process) and close the descriptor as they start
(`_close_held_in_child`), so no child ever holds the lock in the build's place.
"""

from __future__ import annotations

import fcntl
import json
import os
import time
from datetime import datetime, timezone
from pathlib import Path

from cpp_data.pipeline.foundation.errors import BadInput, CheckFailed, Locked

HOLDER = ".lock"  # the holder's pid and start time, while the lock is held


_HELD: set[int] = set()  # descriptors of output directories this process holds locked


def _close_held_in_child() -> None:
    """In a child forked from a process holding an output lock: close the lock's descriptors, so that the child
    (a pool worker, a forked task) never holds the directory's lock in the parent's place."""
    for fd in _HELD:
        try:
            os.close(fd)
        except OSError:
            pass
    _HELD.clear()


os.register_at_fork(after_in_child=_close_held_in_child)


class BuildLocked(Locked):
    """Another process holds the output directory."""


class LockLost(CheckFailed):
    """The output directory this process locked has left its path (removed or replaced)."""


class OutputLock:
    def __init__(self, out: Path, wait: bool = False, poll_s: float = 1.0):
        self.out = Path(out)
        self.path = self.out / HOLDER
        self.wait = wait
        self.poll_s = poll_s
        self._fd: int | None = None

    def __enter__(self) -> "OutputLock":
        self.out.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.out, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if not self.wait:
                    os.close(fd)
                    raise BuildLocked(
                        f"{self.out}: another build is running ({self._holder()}); "
                        f"wait for it, or pass --wait to queue behind it"
                    ) from None
                time.sleep(self.poll_s)
        self._fd = fd
        _HELD.add(fd)
        info = {"pid": os.getpid(), "started": datetime.now(timezone.utc).isoformat(timespec="seconds")}
        tmp = self.path.with_name(f"{HOLDER}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(info))
        os.replace(tmp, self.path)
        return self

    def _holder(self) -> str:
        try:
            info = json.loads(self.path.read_text() or "{}")
            return f"pid {info.get('pid')}, started {info.get('started')}"
        except (OSError, ValueError):
            return "holder unknown"

    def check(self) -> None:
        """Raise LockLost unless OUT is still the directory this process locked: before anything is sealed
        or published, so a build whose output directory was moved or replaced stops instead of writing beside
        another build's."""
        if self._fd is None:
            return
        held = os.fstat(self._fd)
        try:
            now = os.stat(self.out)
        except OSError:
            now = None
        if now is None or (now.st_dev, now.st_ino) != (held.st_dev, held.st_ino):
            raise LockLost(f"{self.out}: the output directory was removed or replaced while this build ran; "
                           f"nothing more is published from this run (run the build again)")

    def __exit__(self, *exc) -> None:
        if self._fd is not None:
            try:
                if json.loads(self.path.read_text()).get("pid") == os.getpid():
                    self.path.unlink()
            except (OSError, ValueError):
                pass
            _HELD.discard(self._fd)
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None


_READING: list[int] = []  # the directory descriptors hold_for_reading keeps open until the process exits


def hold_for_reading(build: Path) -> None:
    """Keep `cpp-data gc` from removing a published build while this process reads it (verify, export, train,
    show, diff, ...): a shared flock on the build's directory, held until the process exits. gc takes the
    exclusive lock without waiting and keeps a build it cannot lock (lock_for_removal); without it, gc could
    remove a build verify is reading, failing its gates on FileNotFoundError. flock, not lockf: a directory
    opens read-only, and lockf's locks need a writable file. BadInput when gc removed the build while this
    waited for its lock."""
    try:
        fd = os.open(build, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
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
