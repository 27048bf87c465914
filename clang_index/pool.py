"""Run one function per translation unit, each in its own process, with a timeout and a memory cap.

Threads deadlocked on hung TUs in the reference design, and a pool of reused workers cannot kill one task: here
every TU gets a fresh forkserver process, killed at `timeout_s` (status "timeout") and capped with RLIMIT_AS; a
worker that dies is recorded as "crashed". Nothing a TU does can hang or stop the run.

Test hook: CLANG_INDEX_TEST_HOOK="hang:SUBSTR" (or "crash:SUBSTR") makes the worker of every TU whose path
contains SUBSTR sleep forever (or abort) before it starts; a hanging worker first makes a temporary file
(`cpp-data-hung-*`), as libclang does for a TU's preamble. The tests use it to prove the handling above.
"""

from __future__ import annotations

import multiprocessing as mp
import multiprocessing.connection
import os
import resource
import sys
import tempfile
import time
import types
from collections import deque
from contextlib import contextmanager, nullcontext
from typing import Any, Callable, Iterator

from cpp_data.clang_index.compile_db import CompileCommand
from cpp_data.pipeline.foundation.lifetime import die_with_parent

HOOK_ENV = "CLANG_INDEX_TEST_HOOK"
# Imported once by the forkserver, so that a TU's process starts with them (it unpickles its function from them)
PRELOAD = ["cpp_data.clang_index.pool", "cpp_data.clang_index.walker", "cpp_data.clang_index.definitions"]



def _child(conn: mp.connection.Connection, fn: Callable[..., dict], args: tuple, max_mb: int | None,
           hook: str | None, scratch: str) -> None:
    """Worker process body: cap the address space, run fn(*args), send the result (or the exception) back. If the
    process that asked is gone (an interrupted build), there is no one to answer: exit quietly. Temporary files
    (libclang's and the module cache of clang_index/walker.py) go under `scratch`, which run_pool removes, so a
    worker killed at its timeout leaves none behind."""
    die_with_parent()  # its parent, the forkserver, exits when the worker that asked for this TU dies
    os.environ["TMPDIR"] = tempfile.tempdir = scratch
    if max_mb:
        resource.setrlimit(resource.RLIMIT_AS, (max_mb << 20, max_mb << 20))
    if hook == "hang":
        tempfile.mkstemp(prefix="cpp-data-hung-")
        time.sleep(10 ** 6)
    elif hook == "crash":
        os.abort()
    try:
        res = fn(*args)
    except BaseException as e:  # MemoryError under the cap, bugs: a recorded crash, not a lost worker
        res = {"status": "crashed", "error_messages": [f"{type(e).__name__}: {e}"]}
    try:
        conn.send(res)
        conn.close()
    except OSError:  # BrokenPipeError: the requesting worker was stopped while this TU ran
        pass



@contextmanager
def _main_left_out() -> Iterator[None]:
    """While a TU's process is started: `__main__` is an empty module, so the process does not run the build's
    main script again.

    Why: a forkserver child is prepared from the parent's data, which names the parent's main script, and the
    child imports it as `__mp_main__` before its task (Python 3.11's forkserver never preloads it: it looks for a
    key the preparation data does not have). For the `cpp-data` command that is its CLI and what that imports,
    for a bench script more: 0.5 s before each TU's parse in bench/tu_cache_incremental.py, which was a sixth of
    a parsed TU's time. A TU's process runs functions of this package only (pickled by reference), so it needs
    nothing of the main script (a function of the main script itself still gets it: run_pool leaves `__main__`
    as it is then). The forkserver writes the preparation data when the process starts, so the swap lasts only
    that long."""
    main = sys.modules["__main__"]
    sys.modules["__main__"] = types.ModuleType("__main__")
    try:
        yield
    finally:
        sys.modules["__main__"] = main


def run_pool(fn: Callable[..., dict], commands: list[CompileCommand], extra: tuple, workers: int, timeout_s: float,
             max_rss_mb: int | None, per_command: list[tuple] | None = None) -> list[dict]:
    """Run fn(cmd, *extra) for each command (fn(cmd, *extra, *per_command[i]) with `per_command`), each in a
    fresh forkserver process; results in input order, each with 'file', 'status'
    (ok|errors|timeout|crashed|missing_file), 'seconds' (wall, including process start)."""
    hook_kind, _, hook_sub = os.environ.get(HOOK_ENV, "").partition(":")
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(PRELOAD)  # no effect once this process's forkserver runs
    with tempfile.TemporaryDirectory(prefix="cpp-data-tus-") as scratch:
        results: list[dict | None] = [None] * len(commands)
        pending = deque(range(len(commands)))
        running: dict[int, tuple[Any, Any, float]] = {}  # index -> (process, connection, start time)
        while pending or running:
            while pending and len(running) < workers:
                i = pending.popleft()
                if not os.path.isfile(commands[i].file):
                    results[i] = {"file": commands[i].file, "status": "missing_file", "seconds": 0.0}
                    continue
                r, w = ctx.Pipe(duplex=False)
                hook = hook_kind if hook_sub and hook_sub in commands[i].file else None
                args = (commands[i], *extra, *(per_command[i] if per_command is not None else ()))
                p = ctx.Process(target=_child, args=(w, fn, args, max_rss_mb, hook, scratch), daemon=True)
                with _main_left_out() if fn.__module__ != "__main__" else nullcontext():
                    p.start()
                w.close()
                running[i] = (p, r, time.monotonic())
            if not running:
                continue
            wait_s = max(0.0, min(t0 + timeout_s for _, _, t0 in running.values()) - time.monotonic())
            ready = set(mp.connection.wait([x for p, r, _ in running.values() for x in (r, p.sentinel)], wait_s))
            for i, (p, r, t0) in list(running.items()):
                res = None
                if r in ready or p.sentinel in ready:
                    try:
                        res = r.recv() if r.poll() else None
                    except (EOFError, OSError):
                        res = None
                    p.join(5)
                    if res is None:
                        res = {"status": "crashed", "error_messages": [f"worker exit code {p.exitcode}"]}
                elif time.monotonic() - t0 >= timeout_s:
                    res = {"status": "timeout", "error_messages": [f"killed after {timeout_s:g}s"]}
                if res is not None:
                    if p.is_alive():
                        p.kill()
                        p.join()
                    r.close()
                    del running[i]
                    results[i] = {**res, "file": commands[i].file, "seconds": time.monotonic() - t0}
    return results  # type: ignore[return-value]

