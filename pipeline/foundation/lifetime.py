"""A process's life bound to its parent's, on its own so that light processes (libclang's TU workers, the
tokenizer's trainer) can use it without importing the executors' dependencies (datatrove)."""

from __future__ import annotations

import sys


def die_with_parent() -> None:
    """Ask Linux to kill this process when its parent dies (PR_SET_PDEATHSIG; for a process started from a
    thread, when that thread ends), so a killed build leaves no writer or indexer behind. Nothing elsewhere."""
    if sys.platform.startswith("linux"):
        import ctypes
        import signal

        try:
            ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        except OSError:
            pass
