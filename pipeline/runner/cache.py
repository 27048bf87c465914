"""Checksummed stage outputs: a cache entry is verified before it is reused, and a build never shares bytes
with the cache.

Sealing records every output file of a stage (its path, size and XXH3-128 digest) in the entry's
`stage.json` under `outputs`; datatrove's own bookkeeping (`_datatrove/`: task logs, stats, completion
markers, which hold timings) and the tasks' scratch (`_work/`) are left out. Before reuse the runner checks each
recorded file's size and digest
and that no file went missing or appeared: a bit flip, a truncated file, or a file rewritten as valid Parquet
with other text all make the entry damaged, and the stage runs again. XXH3 because this runs over every cached
byte on every build, and XXH3 hashes an order of magnitude faster per core than SHA-256 (the manifest keeps
SHA-256 for users); xxhash is already a dependency (datatrove needs it). The same check is why an entry's
stage.json and _COMPLETE are written without fsync: after a power loss a torn or empty record reads as damage
and the stage runs again, where an fsync per record (most of a build's fsyncs) waits for the journal to commit
the stage's Parquet writes too. A published build's manifest and the builds/ pointers keep their fsync.

Publishing copies files out of the cache (a reflink where the filesystem can share blocks copy-on-write,
else a plain copy) rather than hard-linking them: a hard link is one inode, so damage to either side reaches
the other, and a published build would silently change under its manifest. A copy costs disk once per build;
in exchange a build stays whole whatever happens to the cache, and the cache check above can fix the cache.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

import xxhash

from cpp_data.pipeline.foundation.fsutil import hash_file

# datatrove's task logs, stats and completions, and the tasks' intermediate files (stages/lib/shard_tasks.py):
# bookkeeping and scratch, not outputs
SCRATCH = ("_datatrove", "_work")
META = ("stage.json", "_COMPLETE")
_FICLONE = 0x40049409  # ioctl: share the source's blocks copy-on-write (btrfs, XFS, bcachefs)


def file_digest(path: Path) -> str:
    return hash_file(xxhash.xxh3_128(), path, 1 << 22).hexdigest()


def output_files(directory: Path) -> list[str]:
    """Relative paths of a stage directory's output files, sorted (scratch and metadata left out)."""
    out = []
    for root, dirs, files in os.walk(directory):
        rel_root = Path(root).relative_to(directory)
        if rel_root == Path("."):
            dirs[:] = [d for d in dirs if d not in SCRATCH]
        for name in files:
            rel = (rel_root / name).as_posix()
            if rel not in META:
                out.append(rel)
    return sorted(out)


def checksum_outputs(directory: Path) -> dict[str, list]:
    """{relative path: [bytes, xxh3-128 hex]} for every output file of a stage directory."""
    return {rel: [(directory / rel).stat().st_size, file_digest(directory / rel)] for rel in output_files(directory)}


def outputs_digest(recorded: dict[str, list]) -> str:
    """One SHA-256 over a sealed entry's recorded outputs (paths, sizes, XXH3 digests): what a downstream stage's
    fingerprint hashes of this input, so that an input rebuilt to the same bytes changes nothing downstream."""
    return hashlib.sha256(json.dumps(recorded, sort_keys=True).encode()).hexdigest()


def damage(directory: Path, recorded: dict[str, list] | None) -> str | None:
    """None when the directory holds exactly the recorded outputs, byte for byte; else one line saying what is
    wrong with the first damaged file."""
    if recorded is None:
        return "no output checksums recorded (written by an older cpp-data)"
    present = set(output_files(directory))
    for rel in sorted(set(recorded) - present):
        return f"{rel} is missing"
    for rel in sorted(present - set(recorded)):
        return f"{rel} was not part of the sealed output"
    for rel, (size, digest) in sorted(recorded.items()):
        path = directory / rel
        actual = path.stat().st_size
        if actual != size:
            return f"{rel} has {actual:,} bytes, sealed with {size:,}"
        if file_digest(path) != digest:
            return f"{rel} does not match its sealed checksum"
    return None


def copy_file(src: Path, dst: Path) -> None:
    """Copy `src` to `dst` sharing no writable bytes: a reflink where the filesystem supports it, else a copy."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    try:
        import fcntl

        with open(src, "rb") as fi, open(dst, "wb") as fo:
            fcntl.ioctl(fo.fileno(), _FICLONE, fi.fileno())
        return
    except (OSError, ImportError):
        pass
    shutil.copyfile(src, dst)
