"""The per-TU cache across consecutive commits: how much of a source is parsed again when its pin moves.

    PYTHONPATH=... .venv/bin/python bench/tu_cache_incremental.py REPO COMMIT0 COMMIT1 [COMMIT2 ...] \
        [--workers 2] [--out DIR] [--name NAME] [--verify] [--written-out]

Runs the semantics stage (configure, inferred commands, index: what a build runs) on the git repository REPO at
COMMIT0 with an empty cache, then at each later commit in turn with the cache the earlier runs filled, as a
scheduled build whose pin moved by one commit would. Per commit: TUs, TUs reused and parsed, the parse seconds
(the TUs' worker seconds), the stage's index seconds and its whole seconds, each against the cold full index of
COMMIT0 (without the cache every commit costs a full index). `--verify` also indexes each later commit without the
cache and checks the tables are byte for byte the same. Writes DIR/tu_cache_incremental[-NAME].{json,md}.

`--written-out`: for a snapshot that lacks some blobs (a partial mirror, whose `git fetch` fails), each commit's
tree is written out with `git cat-file`, the missing blobs left out and counted, and indexed as a directory.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from cpp_data.pipeline.contract.executor import ExecutorConfig
from cpp_data.pipeline.contract.stage import StageContext
from cpp_data.pipeline.runner.cache import checksum_outputs
from cpp_data.pipeline.runner.executors.executor import DatatroveExecutor
from cpp_data.pipeline.runner.sources import SourceSpec, lock_sources
from cpp_data.stages.lib.repo_files import BlobReader
from cpp_data.stages.semantics import Semantics, SemanticsParams

KEYS = ("tus", "tus_clean", "tus_with_errors", "tus_reused", "tus_parsed", "tus_walked_again", "tu_seconds",
        "index_seconds", "semantics_seconds", "database")


def write_out(repo: str, commit: str, into: Path) -> int:
    """The files of `commit` under `into`, those whose blob the snapshot lacks left out; returns how many. The
    tree is listed here without sizes: repo_files.tree_entries asks `git ls-tree -l`, which cannot size a missing
    blob."""
    listing = subprocess.run(["git", "-C", repo, "ls-tree", "-r", "-z", commit], check=True,
                             capture_output=True).stdout.decode()
    blobs, missing = BlobReader(Path(repo)), 0
    try:
        for entry in filter(None, listing.split("\0")):
            meta, path = entry.split("\t", 1)
            mode, kind, oid = meta.split()
            if kind != "blob" or mode == "120000":  # submodules and symlinks
                continue
            data = blobs.read_present(oid)
            if data is None:
                missing += 1
                continue
            (into / path).parent.mkdir(parents=True, exist_ok=True)
            (into / path).write_bytes(data)
    finally:
        blobs.close()
    return missing


def run(repo: str, ref: str | None, out: Path, shared: Path | None, workers: int, label: str) -> dict:
    """The semantics stage on `repo` (a git repository at `ref`, or a directory with `ref` None)."""
    [source] = lock_sources([SourceSpec(name="bench", url=repo, ref=ref)])
    out.mkdir(parents=True)
    ctx = StageContext(out=out, inputs={}, source=source, label=f"semantics[{label[:8]}]", shared=shared,
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
    ap.add_argument("--written-out", action="store_true", help="write each commit's tree out of a partial snapshot")
    ap.add_argument("--name", help="the repository's name in the report and the results' file names")
    a = ap.parse_args(argv)
    if len(a.commits) < 2:
        print("error: give at least two commits", file=sys.stderr)
        return 2
    work = Path(tempfile.mkdtemp(prefix="tu-cache-bench-"))
    rows = []
    try:
        for k, commit in enumerate(a.commits):
            where, ref, extra = a.repo, commit, {}
            if a.written_out:
                where, ref = str(work / "trees" / commit), None
                extra = {"blobs_missing": write_out(a.repo, commit, Path(where))}
            row = {"commit": commit, **extra,
                   **run(where, ref, work / f"run{k}", work / "shared", a.workers, commit)}
            if a.verify and k:
                run(where, ref, work / f"fresh{k}", None, a.workers, commit)
                row["same_tables_as_a_fresh_index"] = tables(work / f"run{k}") == tables(work / f"fresh{k}")
            if a.written_out:
                shutil.rmtree(where)
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
    stem = f"tu_cache_incremental-{a.name}" if a.name else "tu_cache_incremental"
    (Path(a.out) / f"{stem}.json").write_text(json.dumps(
        {"repo": a.repo, "workers": a.workers, "runs": rows}, indent=1) + "\n")
    (Path(a.out) / f"{stem}.md").write_text(report(a, rows))
    print(report(a, rows))
    return 0


def report(a, rows: list[dict]) -> str:
    lines = [f"# Per-TU cache across consecutive commits of {a.name or Path(a.repo).name}", "",
             f"`bench/tu_cache_incremental.py {a.repo} {' '.join(c[:8] for c in a.commits)} --workers {a.workers}"
             f"{f' --name {a.name}' if a.name else ''}{' --written-out' if a.written_out else ''}`",
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
