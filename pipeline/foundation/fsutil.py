"""Atomic writes and sealed directories: a reader never sees half a file or an unsealed directory."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

from cpp_data.pipeline.foundation.errors import BadInput

COMPLETE = "_COMPLETE"


def hash_file(hasher, path: Path, chunk: int = 1 << 20):
    """Feed a file's bytes to `hasher` (anything with update(): hashlib, xxhash) in chunks; returns `hasher`."""
    with open(path, "rb") as f:
        while block := f.read(chunk):
            hasher.update(block)
    return hasher


def _umask() -> int:
    """The process umask, read without changing it (Linux reports it in /proc; elsewhere set and restore)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except OSError:
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def atomic_write_bytes(path: Path, data: bytes, durable: bool = True) -> None:
    """Write `data` to `path` via a temporary file in the same directory, fsync (unless not `durable`), then
    rename. The rename makes the write atomic against a killed process; the fsync makes it survive a power
    loss. Cache entries skip it (pipeline/runner/cache.py: their outputs are verified before reuse, so a torn entry
    runs again). An fsync waits for the journal to commit everything else written, so one issued behind a
    stage's Parquet writes costs far more than its own bytes; that is why the many small cache records skip it."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, 0o666 & ~_umask())  # mkstemp makes 0600; published files must be readable like any other
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            if durable:
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_text(path: Path, text: str, durable: bool = True) -> None:
    atomic_write_bytes(path, text.encode("utf-8"), durable)


def atomic_write_json(path: Path, obj, durable: bool = True) -> None:
    atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=True) + "\n", durable)


def seal(directory: Path, final: Path, durable: bool = True) -> None:
    """Mark `directory` complete and move it to `final` in one rename (replacing an older `final`)."""
    atomic_write_text(Path(directory) / COMPLETE, "", durable)
    final = Path(final)
    old = None
    if final.exists():
        old = final.with_name(f"{final.name}.old-{os.getpid()}")
        os.replace(final, old)
    os.replace(directory, final)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def is_sealed(directory: Path) -> bool:
    return (Path(directory) / COMPLETE).is_file()


def read_versioned_json(path: Path, fmt: str, missing: str = "missing") -> dict:
    """A JSON file whose "format" key must equal `fmt`; ValueError names the file and the problem."""
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise BadInput(f"{path}: {missing}") from None
    except json.JSONDecodeError as exc:
        raise BadInput(f"{path}: not valid JSON ({exc})") from None
    if not isinstance(data, dict) or data.get("format") != fmt:
        got = data.get("format") if isinstance(data, dict) else None
        raise BadInput(f"{path}: format {got!r}, expected {fmt!r}")
    return data
