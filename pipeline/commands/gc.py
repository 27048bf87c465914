"""`cpp-data gc`: remove old builds and the cache entries no kept build needs.

Kept, always: the build LATEST names and the one PROMOTED names (a training launch may point at either); then
the newest `keep` builds of each schema generation (by creation time). Every other sealed build goes, with its
exports, verify receipt and report. A cache entry (cache/<stage>/<fingerprint>/) stays when a kept build's
manifest lists it among its stages, so rebuilding a kept build is still "nothing to do"; the rest go. Entries
still being written (`.partial`, left by an interrupted build) stay: the next build resumes from them. The
per-TU index cache (OUT/shared/tus/) keeps the results a remaining semantics entry used. The
output lock is held throughout, so no build runs meanwhile; a build another command is reading (verify,
export, train, ...: outlock.hold_for_reading) is kept by this gc, and said so. Nothing is removed with `dry_run`.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
from dataclasses import dataclass, field
from pathlib import Path

from cpp_data.pipeline.foundation.errors import BadInput
from cpp_data.pipeline.runner.outlock import OutputLock, lock_for_removal
from cpp_data.schemas.manifest import named_build, sealed_builds


@dataclass
class GcResult:
    kept_builds: list[str] = field(default_factory=list)
    removed_builds: list[str] = field(default_factory=list)
    removed_entries: list[str] = field(default_factory=list)  # cache/<stage>/<fingerprint>
    removed_bytes: int = 0
    in_use: list[str] = field(default_factory=list)  # builds a reader held: kept by this gc
    tu_results_removed: int = 0  # OUT/shared/tus/ results no kept semantics entry used
    tu_cache_note: str = ""  # why the per-TU cache was left as it is, when it was


def _size(path: Path) -> int:
    if path.is_file() or path.is_symlink():
        return path.lstat().st_size
    total = 0
    for root, _, files in os.walk(path):
        total += sum(os.lstat(os.path.join(root, f)).st_size for f in files)
    return total


def _remove(path: Path) -> None:
    """Remove a file or a tree whose files and directories were made read-only (published builds)."""
    def writable_then_retry(func, p, _exc):
        os.chmod(os.path.dirname(p), stat.S_IRWXU)
        if os.path.isdir(p):
            os.chmod(p, stat.S_IRWXU)
        func(p)

    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, onerror=writable_then_retry)
    else:
        path.unlink()


def collect_garbage(out: Path, keep: int = 2, dry_run: bool = False, wait: bool = False) -> GcResult:
    if keep < 1:
        raise ValueError("--keep must be at least 1")
    out = Path(out)
    result = GcResult()
    with OutputLock(out, wait=wait):
        builds = _readable_builds(out)
        keep_names = _kept_names(out, builds, keep)
        held = [] if dry_run else _lock_doomed(builds, keep_names, result)
        try:
            for path in _doomed(out, builds, keep_names, result):
                if path.exists() or path.is_symlink():
                    result.removed_bytes += _size(path)
                    if not dry_run:
                        _remove(path)
            _prune_tu_cache(out, result, dry_run)
        finally:
            for fd in held:
                os.close(fd)
    return result


def _readable_builds(out: Path) -> list[tuple[Path, dict]]:
    """Every sealed build with its manifest; BadInput when one's manifest is missing or damaged, since which cache
    entries it needs is then unknown, and removing any could take what it holds."""
    builds = sealed_builds(out)
    damaged = [d for d, m in builds if m is None]
    if damaged:
        raise BadInput(f"{damaged[0] / 'manifest.json'}: missing or damaged (cpp-data validate {damaged[0]} says "
                       f"more); restore it or remove that build, then run gc again")
    return [(d, m) for d, m in builds if m is not None]


def _kept_names(out: Path, builds: list[tuple[Path, dict]], keep: int) -> set[str]:
    """LATEST, PROMOTED and the newest `keep` builds of each schema generation."""
    keep_names = {name for name in (named_build(out, "LATEST"), named_build(out, "PROMOTED")) if name is not None}
    by_generation: dict[str, list] = {}
    for d, m in builds:
        by_generation.setdefault(m.get("schema_generation", "?"), []).append((m.get("created_at", ""), d.name))
    for entries in by_generation.values():
        keep_names.update(name for _, name in sorted(entries, reverse=True)[:keep])
    return keep_names


def _lock_doomed(builds: list[tuple[Path, dict]], keep_names: set[str], result: GcResult) -> list[int]:
    """The exclusive locks of the builds about to go (released once they are gone); a build another command is
    reading cannot be locked, and is kept with what it needs (added to keep_names)."""
    held = []
    for d, _ in builds:
        if d.name not in keep_names:
            fd = lock_for_removal(d)
            if fd is None:
                result.in_use.append(d.name)
                keep_names.add(d.name)
            else:
                held.append(fd)
    return held


def _doomed(out: Path, builds: list[tuple[Path, dict]], keep_names: set[str], result: GcResult) -> list[Path]:
    """What goes: every build not kept, with its exports, verify receipt and report, and every cache entry no kept
    build lists among its stages (an interrupted build's .partial entries stay for its resume)."""
    needed: set[tuple[str, str]] = set()
    doomed: list[Path] = []
    for d, m in builds:
        if d.name in keep_names:
            result.kept_builds.append(d.name)
            needed.update((s["stage"], s["fingerprint"]) for s in m.get("stages", []))
        else:
            result.removed_builds.append(d.name)
            doomed += [d, out / "exports" / d.name, out / "verify" / f"{d.name}.json",
                       out / "reports" / f"{d.name}.html"]
    for stage_dir in sorted((out / "cache").iterdir()) if (out / "cache").is_dir() else []:
        for entry in sorted(stage_dir.iterdir()) if stage_dir.is_dir() else []:
            if entry.is_dir() and not entry.name.endswith(".partial") and (stage_dir.name, entry.name) not in needed:
                result.removed_entries.append(f"cache/{stage_dir.name}/{entry.name}")
                doomed.append(entry)
    return doomed


def _prune_tu_cache(out: Path, result: GcResult, dry_run: bool) -> None:
    """Remove the per-TU cache's results (OUT/shared/tus/) that no semantics cache entry still here used (each
    lists them in tu_cache_used.json); left as it is when an entry has no such list (written by an older
    version, or a killed run's .partial entry), since what that one needs is then unknown."""
    from cpp_data.clang_index.tu_cache import USED_FILE, prune

    tus = out / "shared" / "tus"
    if not tus.is_dir():
        return
    needed: set[str] = set()
    for entry in sorted((out / "cache" / "semantics").iterdir()) if (out / "cache" / "semantics").is_dir() else []:
        if entry.is_dir() and not (dry_run and f"cache/semantics/{entry.name}" in result.removed_entries):
            try:
                needed.update(json.loads((entry / USED_FILE).read_text()))
            except (OSError, ValueError):
                result.tu_cache_note = (f"per-TU cache kept whole: {entry} does not list the TUs it used (a "
                                        f"killed build's entry, or one an older version wrote)")
                return
    pruned = prune(tus, needed, dry_run)
    result.tu_results_removed = pruned.results
    result.removed_bytes += pruned.bytes


def format_result(r: GcResult, dry_run: bool) -> str:
    verb = "would remove" if dry_run else "removed"
    lines = [f"{verb} build {name}" for name in r.removed_builds]
    lines.append(f"{verb} {len(r.removed_builds)} build(s) and {len(r.removed_entries)} cache entr"
                 f"{'y' if len(r.removed_entries) == 1 else 'ies'}: {r.removed_bytes / 1e6:.1f} MB")
    lines.append(f"{verb} {r.tu_results_removed} per-TU index result(s) no kept build used (shared/tus)")
    if r.tu_cache_note:
        lines.append(r.tu_cache_note)
    lines.append(f"kept {len(r.kept_builds)} build(s): {', '.join(r.kept_builds) or 'none'}")
    if r.in_use:
        lines.append(f"kept because another command is reading them (run gc again later): {', '.join(r.in_use)}")
    return "\n".join(lines)
