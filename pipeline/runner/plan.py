"""`cpp-data plan` (and `build --dry-run`): what a build would do, and why, running nothing.

Each stage instance is `cached` when its sealed cache entry exists (its fingerprint matches), else `run`. A
stage after one that runs cannot be fingerprinted before its input exists (fingerprints hash the inputs'
bytes, pipeline/runner/dag.py): it is listed as `run`, and the build will still reuse it if that input comes out
byte for byte the same. The reason for a run comes from comparing what its fingerprint hashes
(`fingerprint_of`, kept in stage.json and the manifest) with the same stage instance of the build it compares
with (LATEST when it is of the same recipe, else the newest build of the recipe in OUT): the stage's code or
version, a parameter (old and new value), the source's pin, the sources' settings (weights, decontamination
references), or an input stage that runs again. Without an earlier build, or when the entry only left the
cache (`cpp-data gc`), it says so. Nothing is written.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from cpp_data.pipeline.foundation.fsutil import is_sealed
from cpp_data.pipeline.runner.dag import Runner, fingerprint_payload


def compared_build(out: Path, version: str) -> tuple[str, dict] | None:
    """(name, manifest) of the build a plan compares with: OUT/builds/LATEST when it is of recipe `version` (the
    build the last `build` published or found up to date, what OUT means to every other command), else the
    newest sealed build of the recipe by creation time. LATEST first, because the newest by time may be a build
    LATEST does not name, and a plan against it would list changes against a build no command reads."""
    from cpp_data.schemas.manifest import named_build, sealed_builds

    found = [(m.get("created_at", ""), d.name, m) for d, m in sealed_builds(out)
             if m is not None and d.name.startswith(f"{version}-")]  # a damaged manifest compares with nothing
    if not found:
        return None
    latest = named_build(out, "LATEST")
    chosen = next((f for f in found if f[1] == latest), None) or max(found)
    return chosen[1], chosen[2]


def _changed_params(old: dict, new: dict) -> list[str]:
    return [f"{k} {old.get(k)!r} -> {new.get(k)!r}" for k in sorted({*old, *new}) if old.get(k) != new.get(k)]


def _inputs_run(names: list[str]) -> str:
    if len(names) == 1:
        return f"input {names[0]} runs again (reused if its output is byte-identical)"
    return f"inputs {', '.join(names)} run again (reused if their outputs are byte-identical)"


def _reason(task, before: dict | None, runs: set[str], compared_with: str | None) -> str:
    if before is None:
        return "new: no earlier build of this recipe in OUT" if compared_with is None else \
            f"new: not in build {compared_with}"
    old = before.get("fingerprint_of")
    if before.get("fingerprint") == task.fingerprint:
        return "its output left the cache (cpp-data gc, or a build that was never published); runs again"
    payload = task.payload or fingerprint_payload(task.stage, task.source, {}, task.settings)
    new = json.loads(json.dumps(payload))  # as the record stored it: tuples are lists there
    ran = sorted({dep for dep, tasks in task.inputs.items() if any(t.label in runs for t in tasks)})
    if not old:  # an earlier build that kept only params and version: say what those show
        old = {"version": before.get("version"), "params": before.get("params") or {}}
        why = []
        if old["version"] != new.get("version"):
            why.append(f"stage version {old['version']} -> {new.get('version')}")
        changed = _changed_params(old["params"], new.get("params") or {})
        if changed:
            why.append("params: " + "; ".join(changed))
        if ran:
            why.append(_inputs_run(ran))
        return "; ".join(why) or f"its code, pin or settings differ from build {compared_with}"
    why = []
    if old.get("version") != new.get("version"):
        why.append(f"stage version {old.get('version')} -> {new.get('version')}")
    if old.get("code") != new.get("code"):
        why.append("its code or a library that shapes its bytes changed")
    changed = _changed_params(old.get("params") or {}, new.get("params") or {})
    if changed:
        why.append("params: " + "; ".join(changed))
    if old.get("source") != new.get("source"):
        o, n = old.get("source") or {}, new.get("source") or {}
        moved = [f"{k} {str(o.get(k))[:12]} -> {str(n.get(k))[:12]}" for k in sorted({*o, *n}) if o.get(k) != n.get(k)]
        why.append("source pin: " + "; ".join(moved))
    if old.get("settings") != new.get("settings"):
        why.append("settings outside the recipe changed (source weights, decontamination references or a frozen "
                   "tokenizer's content)")
    if ran:
        why.append(_inputs_run(ran))
    elif old.get("inputs") != new.get("inputs"):
        why.append("an input's output changed")
    return "; ".join(why) or "fingerprint differs"


def plan(runner: Runner) -> dict[str, Any]:
    """{"compared_with": build name or None, "stages": [{label, stage, source, action, reason}]}."""
    previous = compared_build(runner.out, runner.recipe.version)
    records = {}
    if previous:
        for r in previous[1].get("stages", []):
            records[(r["stage"], r.get("source"))] = r
    runs: set[str] = set()
    rows = []
    for task in runner.tasks:
        source = task.source.name if task.source else None
        row = {"label": task.label, "stage": task.name, "source": source}
        sealed = task.fingerprint is not None and is_sealed(task.directory(runner.out))
        if runner.after_only(task):
            rows.append({**row, "action": "skipped", "reason": f"after --only {runner.only}"})
            continue
        if runner.only is not None and task.name != runner.only and not sealed:
            rows.append({**row, "action": "missing", "reason": f"an input of --only {runner.only}, not built: "
                                                               f"the build would stop here; run it without --only"})
            continue
        if sealed and runner.forced(task):
            flag = (f"--only {runner.only}" if runner.only else f"--from {runner.from_stage}" if runner.from_stage
                    else "--force")
            runs.add(task.label)
            rows.append({**row, "action": "run", "reason": f"{flag}: runs again although cached"})
            continue
        if sealed:
            rows.append({**row, "action": "cached", "reason": ""})
            continue
        reason = _reason(task, records.get((task.name, source)), runs, previous[0] if previous else None)
        runs.add(task.label)
        rows.append({**row, "action": "run", "reason": reason})
    return {"recipe": runner.recipe.version, "out": str(runner.out),
            "compared_with": previous[0] if previous else None, "stages": rows,
            "cached": sum(r["action"] == "cached" for r in rows), "run": sum(r["action"] == "run" for r in rows),
            "publish": _publish(runner) if not runs and runner.only is None else None,
            "damaged_manifests": damaged_manifests(runner.out)}


def _publish(runner: Runner) -> str | None:
    """What a build would publish when every stage is cached: nothing (None, the published build is whole), a
    new build from the cache, or the published one again because it is damaged."""
    from cpp_data.pipeline.runner.build import build_damage, find_build

    if any(t.fingerprint is None for t in runner.tasks):
        return None
    existing = find_build(runner.out, runner.recipe.version, runner.build_fingerprint())
    if existing is None:
        return "every stage is cached; the build would publish a new build from the cache"
    problem = build_damage(existing)
    return f"build {existing.name} is damaged ({problem}); the build would publish it again" if problem else None


def damaged_manifests(out: Path) -> list[str]:
    """The sealed builds of OUT whose manifest is missing or damaged (a plan compares with none of them)."""
    from cpp_data.schemas.manifest import sealed_builds

    return [d.name for d, m in sealed_builds(out) if m is None]


def format_plan(p: dict[str, Any]) -> str:
    lines = [f"plan: recipe {p['recipe']} in {p['out']}"
             + (f" (compared with build {p['compared_with']})" if p["compared_with"] else " (no earlier build)")]
    width = max((len(r["label"]) for r in p["stages"]), default=10)
    for r in p["stages"]:
        lines.append(f"  {r['action']:<7} {r['label']:<{width}}  {r['reason']}".rstrip())
    missing = sum(r["action"] == "missing" for r in p["stages"])
    for name in p.get("damaged_manifests") or []:
        lines.append(f"  build {name}: its manifest.json is missing or damaged; not compared with")
    if p.get("publish"):
        lines.append(f"  {p['publish']}")
    lines.append(f"{p['cached']} cached, {p['run']} to run; nothing was run"
                 + (f"; {missing} input(s) of --only not built, so the build would stop" if missing else
                    "" if p["run"] or p.get("publish") else " (the build is up to date)"))
    return "\n".join(lines)
