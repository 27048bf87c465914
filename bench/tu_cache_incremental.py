"""The per-TU cache across consecutive commits: how much of a source is parsed again when its pin moves.

    PYTHONPATH=... .venv/bin/python bench/tu_cache_incremental.py REPO COMMIT0 COMMIT1 [COMMIT2 ...] \
        [--workers 2] [--out DIR] [--verify]

Runs the semantics stage (configure, inferred commands, index: what a build runs) on the git repository REPO at
COMMIT0 with an empty cache, then at each later commit in turn with the cache the earlier runs filled, as a
scheduled build whose pin moved by one commit would. Per commit: TUs, TUs reused and parsed, the parse seconds
(the TUs' worker seconds), the stage's index seconds and its whole seconds, each against the cold full index of
COMMIT0 (without the cache every commit costs a full index). `--verify` also indexes each later commit without the
cache and checks the tables are byte for byte the same. Writes DIR/tu_cache_incremental.{json,md}.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path

from cpp_data.pipeline.contract.executor import ExecutorConfig
from cpp_data.pipeline.contract.stage import StageContext
from cpp_data.pipeline.runner.cache import checksum_outputs
from cpp_data.pipeline.runner.executors.executor import DatatroveExecutor
from cpp_data.pipeline.runner.sources import SourceSpec, lock_sources
from cpp_data.stages.semantics import Semantics, SemanticsParams

KEYS = ("tus", "tus_clean", "tus_with_errors", "tus_reused", "tus_parsed", "tus_walked_again", "tu_seconds",
        "index_seconds", "semantics_seconds", "database")


def run(repo: str, commit: str, out: Path, shared: Path | None, workers: int) -> dict:
    [source] = lock_sources([SourceSpec(name="bench", url=repo, ref=commit)])
    out.mkdir(parents=True)
    ctx = StageContext(out=out, inputs={}, source=source, label=f"semantics[{commit[:8]}]", shared=shared,
                       executor=DatatroveExecutor(ExecutorConfig(kind="local", workers=workers, progress=False)))
    counts = Semantics(SemanticsParams(tu_cache=shared is not None)).run(ctx)
    return {k: counts.get(k) for k in KEYS}


def tables(out: Path) -> dict:
    return {k: v for k, v in checksum_outputs(out).items() if k.endswith(".parquet")}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("repo")
    ap.add_argument("commits", nargs="+")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--out", default="bench/results")
    ap.add_argument("--verify", action="store_true")
    a = ap.parse_args(argv)
    if len(a.commits) < 2:
        print("error: give at least two commits", file=sys.stderr)
        return 2
    work = Path(tempfile.mkdtemp(prefix="tu-cache-bench-"))
    rows = []
    try:
        for k, commit in enumerate(a.commits):
            row = {"commit": commit, **run(a.repo, commit, work / f"run{k}", work / "shared", a.workers)}
            if a.verify and k:
                run(a.repo, commit, work / f"fresh{k}", None, a.workers)
                row["same_tables_as_a_fresh_index"] = tables(work / f"run{k}") == tables(work / f"fresh{k}")
            rows.append(row)
            print(json.dumps(row), flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    cold = rows[0]
    for r in rows[1:]:
        r["parsed_share"] = round(r["tus_parsed"] / max(1, r["tus"]), 4)
        r["parse_seconds_share"] = round(r["tu_seconds"] / max(1e-9, cold["tu_seconds"]), 4)
        r["index_seconds_share"] = round(r["index_seconds"] / max(1e-9, cold["index_seconds"]), 4)
        r["stage_seconds_share"] = round(r["semantics_seconds"] / max(1e-9, cold["semantics_seconds"]), 4)
    Path(a.out).mkdir(parents=True, exist_ok=True)
    (Path(a.out) / "tu_cache_incremental.json").write_text(json.dumps(
        {"repo": a.repo, "workers": a.workers, "runs": rows}, indent=1) + "\n")
    (Path(a.out) / "tu_cache_incremental.md").write_text(report(a, rows))
    print(report(a, rows))
    return 0


def report(a, rows: list[dict]) -> str:
    lines = [f"# Per-TU cache across consecutive commits of {Path(a.repo).name}", "",
             f"`bench/tu_cache_incremental.py {a.repo} {' '.join(c[:8] for c in a.commits)} --workers {a.workers}`",
             "", "The first commit is indexed with an empty cache (what every commit costs without the cache); "
             "each later one with the cache the runs before it filled.", "",
             "| commit | TUs | clean | reused | parsed | parsed share | parse s | parse s vs cold | index s | "
             "index s vs cold | stage s | stage s vs cold |", "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['commit'][:8]} | {r['tus']} | {r['tus_clean']} | {r['tus_reused']} | {r['tus_parsed']} | "
                     f"{r.get('parsed_share', 1.0):.1%} | {r['tu_seconds']:.1f} | "
                     f"{r.get('parse_seconds_share', 1.0):.1%} | {r['index_seconds']:.1f} | "
                     f"{r.get('index_seconds_share', 1.0):.1%} | {r['semantics_seconds']:.1f} | "
                     f"{r.get('stage_seconds_share', 1.0):.1%} |")
    checked = [r["commit"][:8] for r in rows if r.get("same_tables_as_a_fresh_index")]
    if checked:
        lines += ["", f"Tables byte for byte the same as an index without the cache: {', '.join(checked)}."]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    raise SystemExit(main())
