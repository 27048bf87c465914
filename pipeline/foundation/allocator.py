"""Which allocator Arrow uses in a build's processes: glibc's (Arrow's "system" pool), not mimalloc.

pyarrow's default pool on Linux is mimalloc, which keeps memory a process freed for its next allocation. A
build's processes each run one large step after another (a row group decoded, a repository's call graph
joined, a block packed), so what mimalloc keeps is the previous step's peak on top of the next one's. With the
system pool the largest processes (the structure stage's graph step above all) peak lower, at the same wall
time (docs/SCALING.md, memory). The output bytes do not depend on the allocator.

A user's own ARROW_DEFAULT_MEMORY_POOL is kept. The variable is set in the environment too, so the processes a
build starts (the local executor's workers, the tokenizer's training process) start with the same pool; a
task on Ray or Slurm sets it again when it starts (executors.DieWithParent).
"""

from __future__ import annotations

import functools
import os

POOL_VARIABLE = "ARROW_DEFAULT_MEMORY_POOL"


def use_system_allocator() -> str:
    """Make `POOL_VARIABLE`'s pool (glibc's unless the user chose one) Arrow's default pool in this process and
    in the processes it starts; returns the pool's name."""
    import pyarrow as pa

    name = os.environ.setdefault(POOL_VARIABLE, "system")
    make = getattr(pa, f"{name}_memory_pool", None)
    if make is None:  # a name this pyarrow does not know: leave Arrow's own choice
        return pa.default_memory_pool().backend_name
    if pa.default_memory_pool().backend_name != name:
        try:
            pa.set_memory_pool(make())
        except NotImplementedError:  # a pool this build of Arrow left out (jemalloc on some platforms)
            return pa.default_memory_pool().backend_name
    return name


def give_back_freed_memory() -> None:
    """Hand the heap's freed pages back to the kernel (glibc's malloc_trim), between the steps of a long task.

    glibc keeps freed memory in its heap for the next malloc, and two kinds of step do not get it back:
    - a task that writes a file row group after row group (a shard file's merge, a packed file) allocates and
      frees large buffers of varying sizes each time, from several threads (several heaps), so without a trim
      its peak grows with the number of row groups in the file;
    - after a step of large numpy or Arrow buffers comes one of many small Python objects, which Python takes
      from arenas it maps itself, not from that heap: the structure stage's graph task, whose join frees its
      arrays before the edges become Python strings and dicts.
    Called between such steps. Hand-written: neither Arrow's system pool nor Python exposes malloc_trim. Does
    nothing off glibc."""
    trim = _malloc_trim()
    if trim is not None:
        trim(0)


@functools.lru_cache(maxsize=1)
def _malloc_trim():
    """glibc's malloc_trim, None off glibc (looked up once per process)."""
    import ctypes
    import sys

    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL("libc.so.6").malloc_trim
    except (OSError, AttributeError):  # musl or another libc
        return None
