"""How many threads the tokenizers library may start in a build's processes.

tokenizers runs `encode_batch` and the BPE trainer's counting on a Rust thread pool (rayon) as wide as the
machine. A build already keeps every core busy with its own processes: `workers` task processes, and the
tokenizer's training process beside structure's tasks (Stage.runs_beside). So a full-width pool in each process
is a second set of threads on the same cores, and the trainer's parallel counting keeps a word-count map per
thread on top of the merged one. Sized to the process's share of the cores, the pools lower the trainer's peak
memory and the build's wall time (docs/SCALING.md, the tokenizer). The tokens and the trained tokenizer do not
depend on it.

A process's share is the cores over the processes that run at once (`executors.tokenizer_threads`); with one
thread the library's parallelism is switched off (TOKENIZERS_PARALLELISM=false), else its pool is sized
(RAYON_NUM_THREADS, read when the pool starts: a process's first parallel call). A user's own value of either
variable is kept.
"""

from __future__ import annotations

import os

SWITCH = "TOKENIZERS_PARALLELISM"
POOL = "RAYON_NUM_THREADS"
_ours: dict[str, str] = {}  # what this module set, so a later build in the same process may change it


def cpu_count() -> int:
    """The cores this process may run on (its affinity, not the machine's count)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def limit_tokenizer_threads(threads: int) -> None:
    """Let tokenizers use at most `threads` threads in this process and the processes it starts (at least one),
    unless the user set the variable concerned."""
    wanted = {SWITCH: "false" if threads <= 1 else None, POOL: str(threads) if threads > 1 else None}
    for name, value in wanted.items():
        current = os.environ.get(name)
        if current is not None and _ours.get(name) != current:
            continue  # the user's
        if value is None:
            os.environ.pop(name, None)
            _ours.pop(name, None)
        else:
            os.environ[name] = _ours[name] = value
