"""`cpp-data status`: what an output directory holds, written where schedulers and people can read it.

status/current.json and status/current.md are rewritten atomically on every call; status/changelog.jsonl gets
one line only when the status changed since the last line.
"""

from __future__ import annotations

import hashlib
import json
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from cpp_data.pipeline.foundation.fsutil import atomic_write_json, atomic_write_text, is_sealed
from cpp_data.pipeline.runner.sources import SourcesError, read_lock
from cpp_data.schemas.manifest import named_build


def _mtime(path: Path) -> str:
    return datetime.fromtimestamp(path.stat().st_mtime, timezone.utc).isoformat(timespec="seconds")


def collect_status(out: Path) -> dict[str, Any]:
    out = Path(out)
    sources = []
    if (out / "sources.lock").is_file():
        try:
            sources = [{"name": s.name, "url": s.url, "ref": s.requested_ref, "commit": s.commit}
                       for s in read_lock(out / "sources.lock")]
        except SourcesError:
            pass
    builds = []
    for d in sorted((out / "builds").glob("*")) if (out / "builds").is_dir() else []:
        if not d.is_dir():
            continue
        entry: dict[str, Any] = {"name": d.name, "complete": is_sealed(d)}
        if entry["complete"]:
            try:
                m = json.loads((d / "manifest.json").read_text())
                m["schema_generation"], m["created_at"]  # noqa: B018 - the keys status needs
            except (OSError, ValueError, KeyError, TypeError) as exc:
                entry.update(complete=False, broken=f"manifest.json unreadable: {type(exc).__name__}: {exc}"
                             .splitlines()[0], created_at=_mtime(d))
                builds.append(entry)
                continue
            entry.update(generation=m["schema_generation"], created_at=m["created_at"], **m.get("totals", {}))
            receipt = out / "verify" / f"{d.name}.json"  # written by `cpp-data verify`
            if receipt.is_file():
                r = json.loads(receipt.read_text())
                entry["last_verify"] = ("passed" if r.get("passed") else "failed: " + ", ".join(
                    g["name"] for g in r.get("gates", []) if not g.get("ok"))) + f" ({r.get('verified_at')})"
            else:
                entry["last_verify"] = None
        builds.append(entry)
    builds.sort(key=lambda b: (b.get("created_at") or _mtime(out / "builds" / b["name"]), b["name"]))
    stages: dict[str, dict[str, int]] = {}
    cache = out / "cache"
    for stage_dir in sorted(cache.iterdir()) if cache.is_dir() else []:
        sealed = sum(1 for d in stage_dir.iterdir() if is_sealed(d))
        partial = sum(1 for d in stage_dir.iterdir() if d.name.endswith(".partial"))
        stages[stage_dir.name] = {"sealed": sealed, "in_progress_or_killed": partial}
    latest, promoted = named_build(out, "LATEST"), named_build(out, "PROMOTED")
    generations: dict[str, dict] = {}  # the newest complete build of each generation
    for b in builds:
        if b["complete"]:
            g = generations.get(b["generation"])
            if g is None or b["created_at"] >= g["created_at"]:
                generations[b["generation"]] = {k: b.get(k) for k in ("name", "created_at", "documents",
                                                                      "train_documents", "valid_documents",
                                                                      "tokens", "last_verify")}
    return {"out": str(out.resolve()), "sources": sources, "builds": builds, "latest": latest,
            "promoted": promoted, "generations": dict(sorted(generations.items())), "stages": stages,
            "tu_cache": _tu_cache(out)}


def _tu_cache(out: Path) -> dict[str, int]:
    """The per-TU index cache every build of OUT shares (OUT/shared/tus/): results, manifests, bytes."""
    from cpp_data.clang_index.tu_cache import size

    tus = out / "shared" / "tus"
    return size(tus) if tus.is_dir() else {"results": 0, "manifests": 0, "bytes": 0}


def render_md(status: dict[str, Any]) -> str:
    lines = [f"# cpp-data status: {status['out']}", "", f"Latest build: {status['latest'] or 'none'}",
             f"Promoted (passed verify): {status.get('promoted') or 'none'}", "",
             "## Generations", "", "| generation | newest build | documents | tokens | last verify |",
             "|---|---|---|---|---|"]
    lines += [f"| {g} | {v['name']} | {v.get('documents') or '-'} | {v.get('tokens') or '-'} | "
              f"{v.get('last_verify') or '-'} |" for g, v in status.get("generations", {}).items()]
    lines += ["",
             "## Sources", "", "| name | ref | commit |", "|---|---|---|"]
    lines += [f"| {s['name']} | {s['ref'] or '-'} | `{s['commit'][:17]}` |" for s in status["sources"]]
    lines += ["", "## Builds (oldest first)", "", "| build | created | generation | documents | train | valid | "
              "last verify |", "|---|---|---|---|---|---|---|"]
    for b in status["builds"]:
        if b.get("broken"):
            lines.append(f"| {b['name']} | {b.get('created_at', '-')} | BROKEN: {b['broken']} | | | | |")
            continue
        lines.append(f"| {b['name']} | {b.get('created_at', '-')} | {b.get('generation', '-')} | "
                     f"{b.get('documents', '-')} | {b.get('train_documents', '-')} | "
                     f"{b.get('valid_documents', '-')} | {b.get('last_verify') or '-'} |")
    lines += ["", "## Stage cache", "", "| stage | sealed | partial |", "|---|---|---|"]
    lines += [f"| {k} | {v['sealed']} | {v['in_progress_or_killed']} |" for k, v in status["stages"].items()]
    tus = status.get("tu_cache") or {}
    lines += ["", f"Per-TU index cache (shared/tus): {tus.get('results', 0)} results, "
              f"{tus.get('bytes', 0) / 1e6:.1f} MB (`cpp-data gc` removes those no kept build used)"]
    return "\n".join(lines) + "\n"


def write_status(out: Path) -> dict[str, Any]:
    out = Path(out)
    status = collect_status(out)
    digest = hashlib.sha256(json.dumps(status, sort_keys=True).encode()).hexdigest()
    now = datetime.now(timezone.utc).isoformat(timespec="seconds")
    atomic_write_json(out / "status" / "current.json", {**status, "updated_at": now, "digest": digest})
    atomic_write_text(out / "status" / "current.md", render_md(status))
    log = out / "status" / "changelog.jsonl"
    last = None
    if log.is_file():
        lines = log.read_text().splitlines()
        last = json.loads(lines[-1]).get("digest") if lines else None
    if last != digest:
        with open(log, "a") as f:
            f.write(json.dumps({"at": now, "digest": digest, "latest": status["latest"],
                                "builds": len(status["builds"])}) + "\n")
    return status
