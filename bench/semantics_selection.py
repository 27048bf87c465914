"""What parsing only what is kept, each main file once and each file walked once, saves: the semantics stage of
real repositories built twice in one run, every TU walking everything (before) and the stage as it runs now
(after), with the license, quality and decontamination stages deciding what is kept.

    PYTHONPATH=... .venv/bin/python bench/semantics_selection.py NAME=GIT_DIR@COMMIT [...] [--workers 2] \
        [--skip-globs GLOB ...] [--out bench/results]

Each build runs the v6 recipe cut to semantics (and what it reads), the per-TU cache off, so both sides parse.
Before: `semantics.only_kept=false semantics.walk_once=false`. Per source: TUs parsed, the TUs' worker
seconds, the stage's seconds, kept sources matched to a command, and whether the functions found in kept files
are the same on both sides (USRs; the TU credited with a header's function may differ). `--skip-globs` adds a
third build, the defaults plus `semantics.skip_globs`, for what skipping tests or benchmarks saves and costs in
coverage. Writes OUT/semantics_selection.{json,md}.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import pyarrow.parquet as pq

from cpp_data.pipeline.runner.recipe import cut_recipe

SIDES = {"before": ["--set", "semantics.only_kept=false", "--set", "semantics.walk_once=false"], "after": []}


def build(sources: Path, recipe: Path, out: Path, extra: list[str], workers: int) -> None:
    """One `cpp-data build` of the cut recipe, the per-TU cache off."""
    cmd = [sys.executable, "-m", "cpp_data.pipeline.cli", "build", "--recipe", str(recipe), "--sources",
           str(sources), "--out", str(out), "--workers", str(workers), "--no-progress",
           "--set", "semantics.tu_cache=false", *extra]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"build failed ({proc.returncode}): {proc.stderr.strip()[-2000:]}")


def per_source(out: Path) -> dict[str, dict]:
    """{source: its semantics counts and the USRs of functions in kept files}."""
    kept: dict[str, set[str]] = {}
    for meta in (out / "cache" / "decontaminate").glob("*/stage.json"):
        source = json.loads(meta.read_text())["source"]
        kept[source] = {p for part in meta.parent.glob("part-*.parquet")
                        for p in pq.read_table(part, columns=["source_path"]).column("source_path").to_pylist()}
    rows = {}
    for meta in (out / "cache" / "semantics").glob("*/stage.json"):
        stage = json.loads(meta.read_text())
        source, counts = stage["source"], stage["counts"]
        found = [r for r in pq.read_table(meta.parent / "functions.parquet").to_pylist()
                 if r["file"] in kept.get(source, set())]
        spans = {f"{r['file']}:{r['start_offset']}:{r['end_offset']}": "= default" in r["text"] for r in found}
        rows[source] = {**{k: counts.get(k) for k in ("tus", "tus_not_kept", "tus_for_kept_headers",
                                                       "duplicate_commands", "tus_walked_again", "tu_seconds",
                                                       "semantics_seconds", "database", "source_files",
                                                       "files_matched_to_compile_command")},
                        "kept_files": len(kept.get(source, ())), "kept_functions": sorted({r["usr"] for r in found}),
                        "kept_definitions": spans}
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("repos", nargs="+", help="NAME=GIT_DIR@COMMIT")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--out", default="bench/results")
    ap.add_argument("--skip-globs", nargs="*", default=[], help="a third side: the defaults plus these skip_globs")
    ap.add_argument("--work", help="the folder of the builds (default: a new temporary one); a side whose build "
                                   "is already there is read, not built again")
    a = ap.parse_args(argv)
    work = Path(a.work) if a.work else Path(tempfile.mkdtemp(prefix="semantics-selection-"))
    lines = []
    for spec in a.repos:
        name, rest = spec.split("=", 1)
        url, commit = rest.rsplit("@", 1)
        lines += ["[[source]]", f'name = "{name}"', f'url = "{url}"', f'ref = "{commit}"', ""]
    sources = work / "sources.toml"
    sources.write_text("\n".join(lines))
    recipe = work / "recipe" / "v6.toml"
    recipe.parent.mkdir(exist_ok=True)
    cut_recipe("v6", ["shards", "ledger", "semantics"], recipe)
    result: dict[str, dict] = {}
    sides = dict(SIDES)
    if a.skip_globs:
        sides["skip"] = ["--set", f"semantics.skip_globs={json.dumps(a.skip_globs)}"]
    for side, extra in sides.items():
        if not (work / side / "builds" / "LATEST").is_file():
            build(sources, recipe, work / side, extra, a.workers)
        result[side] = per_source(work / side)
    write(result, Path(a.out), a)
    return 0


def compare(b: dict, f: dict) -> dict:
    """Definitions (file and extent) in kept files found before and not after, and how many of those are
    `= default` members (a defaulted member is a definition in a TU that uses it); functions by USR too (a
    unity TU or a module unit gives one definition other USRs)."""
    before, after = b.get("kept_definitions") or {}, f["kept_definitions"]
    missing = [k for k in before if k not in after]
    return {"definitions_before": len(before), "definitions_after": len(after),
            "definitions_missing_after": len(missing), "missing_defaulted": sum(before[k] for k in missing),
            "definitions_new_after": sum(1 for k in after if k not in before),
            "usrs_before": len(b.get("kept_functions") or ()), "usrs_after": len(f["kept_functions"])}


def write(result: dict, out: Path, a: argparse.Namespace) -> None:
    """The JSON (every count; definitions and functions as counts) and the Markdown table, before -> after."""
    rows = []
    md = ["# Parsing what is kept, each file walked once (semantics stage, real repositories)", "",
          f"`bench/semantics_selection.py {' '.join(a.repos)} --workers {a.workers}"
          + (f" --skip-globs {' '.join(repr(g) for g in a.skip_globs)}`" if a.skip_globs else "`"), "",
          "Per-TU cache off on both sides. Before: every TU of the database, every TU walking every project file "
          "it reads. After: the stage's defaults. Definitions: functions in kept files by file and extent.", "",
          "| source | kept files | TUs before | TUs after | not kept | for kept headers | walked again | "
          "TU s before | TU s after | stage s before | stage s after | kept sources matched | "
          "definitions before | after | missing after (= default) |",
          "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for source in sorted(result["after"]):
        b, f = result["before"].get(source, {}), result["after"][source]
        c = compare(b, f)
        rows.append({"source": source, **c,
                     "before": {k: v for k, v in b.items() if k not in ("kept_functions", "kept_definitions")},
                     "after": {k: v for k, v in f.items() if k not in ("kept_functions", "kept_definitions")}})
        md.append(f"| {source} | {f['kept_files']} | {b.get('tus')} | {f['tus']} | {f['tus_not_kept']} | "
                  f"{f['tus_for_kept_headers']} | {f['tus_walked_again']} | {b.get('tu_seconds')} | "
                  f"{f['tu_seconds']} | {b.get('semantics_seconds')} | {f['semantics_seconds']} | "
                  f"{f['files_matched_to_compile_command']}/{f['source_files']} | {c['definitions_before']} | "
                  f"{c['definitions_after']} | {c['definitions_missing_after']} ({c['missing_defaulted']}) |")
    if "skip" in result:
        md += skip_table(result, a.skip_globs)
        rows.append({"skip_globs": a.skip_globs,
                     "skip": {src: {k: v for k, v in r.items() if k not in ("kept_functions", "kept_definitions")}
                              for src, r in result["skip"].items()}})
    out.mkdir(parents=True, exist_ok=True)
    (out / "semantics_selection.json").write_text(json.dumps(rows, indent=1) + "\n")
    (out / "semantics_selection.md").write_text("\n".join(md) + "\n")
    print("\n".join(md))


def skip_table(result: dict, globs: list[str]) -> list[str]:
    """The defaults against the defaults plus skip_globs: TUs, stage seconds, coverage, definitions found."""
    md = ["", f"With `semantics.skip_globs={json.dumps(globs)}` on top of the defaults:", "",
          "| source | TUs | TUs skipping | stage s | stage s skipping | kept sources matched | matched skipping | "
          "kept definitions | kept definitions skipping |", "|---|---|---|---|---|---|---|---|---|"]
    for source in sorted(result["after"]):
        f, k = result["after"][source], result["skip"].get(source, {})
        md.append(f"| {source} | {f['tus']} | {k.get('tus')} | {f['semantics_seconds']} | "
                  f"{k.get('semantics_seconds')} | {f['files_matched_to_compile_command']}/{f['source_files']} | "
                  f"{k.get('files_matched_to_compile_command')}/{k.get('source_files')} | "
                  f"{len(f['kept_definitions'])} | {len(k.get('kept_definitions') or ())} |")
    return md


if __name__ == "__main__":
    sys.exit(main())
