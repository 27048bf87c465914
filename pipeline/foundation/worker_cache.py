"""One object per worker process and key: what a task loads once for every task its process runs."""

from __future__ import annotations

from typing import Any

_CACHE: dict[Any, dict[Any, Any]] = {}


def worker_cache(key: Any, make, kind: str = "", keep: int | None = None):
    """One object per worker process and key (a tokenizer loaded once for all the tasks a worker runs). With
    `keep`, at most that many objects of this `kind` stay, the least recently used going first (a source's
    semantic index: a worker meets many sources)."""
    cache = _CACHE.setdefault(kind, {})
    if key in cache:
        cache[key] = cache.pop(key)  # most recently used last
    else:
        cache[key] = make()
        while keep is not None and len(cache) > keep:
            cache.pop(next(iter(cache)))
    return cache[key]
