"""What parsing only what is kept, each main file once and each file walked once, saves: the semantics stage of
real repositories built twice in one run, every TU walking everything (before) and the stage as it runs now
(after), with the license, quality and decontamination stages deciding what is kept.

    PYTHONPATH=... .venv/bin/python bench/semantics_selection.py NAME=GIT_DIR@COMMIT [...] [--workers 2] \
        [--out bench/results]

Each build runs the v6 recipe cut to semantics (and what it reads), the per-TU cache off, so both sides parse.
Before: `semantics.only_kept=false semantics.walk_once=false`. Per source: TUs parsed, the TUs' worker
seconds, the stage's seconds, and whether the functions found in kept files are the same on both sides (USRs;
the TU credited with a header's function may differ). Writes OUT/semantics_selection.{json,md}.
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
        usrs = {r["usr"] for r in pq.read_table(meta.parent / "functions.parquet").to_pylist()
                if r["file"] in kept.get(source, set())}
        rows[source] = {**{k: counts.get(k) for k in ("tus", "tus_not_kept", "tus_for_kept_headers",
                                                       "duplicate_commands", "tus_walked_again", "tu_seconds",
                                                       "semantics_seconds", "database")},
                        "kept_files": len(kept.get(source, ())), "kept_functions": sorted(usrs)}
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("repos", nargs="+", help="NAME=GIT_DIR@COMMIT")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--out", default="bench/results")
    a = ap.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="semantics-selection-"))
    lines = []
    for spec in a.repos:
        name, rest = spec.split("=", 1)
        url, commit = rest.rsplit("@", 1)
        lines += ["[[source]]", f'name = "{name}"', f'url = "{url}"', f'ref = "{commit}"', ""]
    sources = work / "sources.toml"
    sources.write_text("\n".join(lines))
    recipe = work / "recipe" / "v6.toml"
    recipe.parent.mkdir()
    cut_recipe("v6", ["shards", "ledger", "semantics"], recipe)
    result: dict[str, dict] = {}
    for side, extra in SIDES.items():
        build(sources, recipe, work / side, extra, a.workers)
        result[side] = per_source(work / side)
    write(result, Path(a.out), a)
    return 0


def write(result: dict, out: Path, a: argparse.Namespace) -> None:
    """The JSON (every count, functions as counts) and the Markdown table, before -> after per source."""
    rows = []
    md = ["# Parsing what is kept, each file walked once (semantics stage, real repositories)", "",
          f"`bench/semantics_selection.py {' '.join(a.repos)} --workers {a.workers}`", "",
          "Per-TU cache off on both sides. Before: every TU of the database, every TU walking every project file "
          "it reads. After: the stage's defaults.", "",
          "| source | kept files | TUs before | TUs after | not kept | for kept headers | walked again | "
          "TU s before | TU s after | stage s before | stage s after | kept functions same |",
          "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for source in sorted(result["after"]):
        b, f = result["before"].get(source, {}), result["after"][source]
        same = b.get("kept_functions") == f["kept_functions"]
        missing = len(set(b.get("kept_functions") or ()) - set(f["kept_functions"]))
        extra = len(set(f["kept_functions"]) - set(b.get("kept_functions") or ()))
        rows.append({"source": source, "before": {**b, "kept_functions": len(b.get("kept_functions") or ())},
                     "after": {**f, "kept_functions": len(f["kept_functions"])},
                     "kept_functions_missing_after": missing, "kept_functions_new_after": extra})
        md.append(f"| {source} | {f['kept_files']} | {b.get('tus')} | {f['tus']} | {f['tus_not_kept']} | "
                  f"{f['tus_for_kept_headers']} | {f['tus_walked_again']} | {b.get('tu_seconds')} | "
                  f"{f['tu_seconds']} | {b.get('semantics_seconds')} | {f['semantics_seconds']} | "
                  f"{'yes' if same else f'no: {missing} missing, {extra} new'} |")
    out.mkdir(parents=True, exist_ok=True)
    (out / "semantics_selection.json").write_text(json.dumps(rows, indent=1) + "\n")
    (out / "semantics_selection.md").write_text("\n".join(md) + "\n")
    print("\n".join(md))


if __name__ == "__main__":
    sys.exit(main())
