"""The speed target as a ratio: this checkout's v6 build against an older revision's, in interleaved pairs on
one corpus, on the same machine and day.

Why a ratio: on one machine the same code's MB/s moves from one day to the next by more than most changes gain,
and issue 15's target was set as a multiple of the baseline's speed. Only builds run side by side can say how
much faster the code got. The default baseline, 372a03c, is the last commit before the first one that names
issue 15: in it, structure, token_columns, the export and packing run in the build's own process.

How: `git worktree add --detach` checks the revision out under --work. A package directory maps that
checkout's folders under `cpp_data` the way its pyproject.toml's package-dir does (symlinks). The old
build runs with that directory first on PYTHONPATH, so both builds use this checkout's virtual environment
and `cpp-data` entry point; the older revision must run with this checkout's dependencies. Each pair runs both
builds on bench/scale.py's corpus of that scale, the old one first in odd pairs and second in even ones,
watched by bench/scale.py's sampler (`measure`: the same MB/s of C/C++ collected over the build's own time less
semantics, peaks, CPU and idle core-seconds, output digest). Why alternate: in an A/A test (a checkout against
its own commit) the build that runs second is the faster in most pairs, so a fixed order biases the ratio
(bench/results/speed-ab-aa-oldfirst.md, old build always first; bench/results/speed-ab-aa.md, alternating).
`--against HEAD` in a clean checkout runs that test (the checked-out copy is labelled "(worktree)").

    .venv/bin/python bench/speed_ab.py [--against 372a03c] [--scale 2] [--workers 2] [--pairs 3]
        [--work /tmp/cpp-data-scale] [--name speed-ab] [--overwrite]

Prints each pair's MB/s and their ratio, and writes bench/results/<--name>.{json,md}. Each code's output
digest must be the same in every pair, else the script says so (exit 1).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import scale  # noqa: E402  (bench/scale.py: the corpus, the watched build and its figures)

REPO = scale.REPO
BASELINE = "372a03c"


def resolve(rev: str) -> str:
    """`rev`'s full commit in this repository; exits with a one-line error where it names none."""
    got = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--verify", f"{rev}^{{commit}}"],
                         capture_output=True, text=True)
    if got.returncode:
        raise SystemExit(f"--against {rev}: not a commit of {REPO} ({got.stderr.strip()})")
    return got.stdout.strip()


def check_out(rev: str, work: Path) -> tuple[Path, str]:
    """(a package directory whose cpp_data is revision `rev`'s, rev's full commit), from a detached worktree
    of this repository at work/tree-<commit>."""
    commit = resolve(rev)
    tree, pkg = work / f"tree-{commit[:12]}", work / f"pkg-{commit[:12]}"
    remove(tree)
    subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", "-f", str(tree), commit], check=True,
                   capture_output=True)
    dirs = tomllib.loads((tree / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
    shutil.rmtree(pkg, ignore_errors=True)
    (pkg / "cpp_data").mkdir(parents=True)
    for name, folder in dirs.items():
        parts = name.split(".")
        if parts == ["cpp_data"]:  # the namespace root: its own files, copied
            for f in (tree / folder).iterdir():
                if f.is_file():
                    shutil.copy(f, pkg / "cpp_data" / f.name)
        elif len(parts) == 2 and parts[0] == "cpp_data":
            (pkg / "cpp_data" / parts[1]).symlink_to(tree / folder, target_is_directory=True)
    return pkg, commit


def remove(tree: Path) -> None:
    """Drop the worktree at `tree` (if any) from this repository and the disk."""
    subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(tree)], capture_output=True)
    shutil.rmtree(tree, ignore_errors=True)
    subprocess.run(["git", "-C", str(REPO), "worktree", "prune"], capture_output=True)


def head() -> str:
    """This checkout's commit, with "+dirty" when tracked files differ from it (what the new build runs)."""
    commit = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    dirty = subprocess.run(["git", "-C", str(REPO), "status", "--porcelain", "--untracked-files=no"],
                           capture_output=True, text=True).stdout.strip()
    return commit + ("+dirty" if dirty else "")


def short(commit: str) -> str:
    """A commit's first 7 hex digits, keeping a "+dirty" mark."""
    return commit[:7] + commit[40:]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--against", default=BASELINE, help=f"the older revision (default {BASELINE})")
    ap.add_argument("--scale", type=int, default=2, help="bench/scale.py's corpus: 1, 2 or 4 (default 2)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--work", type=Path, default=Path("/tmp/cpp-data-scale"))
    ap.add_argument("--results", type=Path, default=REPO / "bench" / "results")
    ap.add_argument("--name", default="speed-ab", help="results file stem")
    ap.add_argument("--overwrite", action="store_true", help="replace <--name>.{json,md} when they exist")
    a = ap.parse_args(argv)
    if a.pairs < 1 or a.workers < 1:
        ap.error("--pairs and --workers must be at least 1")
    taken = [f for f in (a.results / f"{a.name}.json", a.results / f"{a.name}.md") if f.exists()]
    if taken and not a.overwrite:  # said before the builds, not after them: results of earlier runs are kept
        ap.error(f"{taken[0]} exists: give another --name, or --overwrite to replace it")
    new = head()
    base = scale.default_bytes()
    sources = scale.corpus(a.scale, base, a.work)
    pkg, old = check_out(a.against, a.work)
    # --against this checkout's own clean commit measures the method's own noise (an A/A test): the checked-out
    # copy gets its own label, else both builds' runs and digests would be pooled under one
    old_label = short(old) + (" (worktree)" if old == new else "")
    old_env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(pkg), *filter(None, [os.environ.get("PYTHONPATH")])])}
    runs, ratios = [], []
    try:
        for pair in range(1, a.pairs + 1):
            builds = {}
            order = ((old_label, old_env), (short(new), None))
            for label, env in order if pair % 2 else order[::-1]:  # odd pairs old first, even pairs new first
                r = scale.measure(sources, a.work / "out-ab", a.workers, [], base * a.scale, env)
                r.update(code=label, pair=pair, scale=a.scale)
                runs.append(r)
                builds[env is None] = r
            o, n = builds[False], builds[True]
            ratios.append(n["mb_per_s_all_but_semantics"] / o["mb_per_s_all_but_semantics"])
            print(f"pair {pair}: {o['code']} {o['mb_per_s_all_but_semantics']} MB/s ({o['wall_seconds']} s), "
                  f"{n['code']} {n['mb_per_s_all_but_semantics']} MB/s ({n['wall_seconds']} s): "
                  f"{ratios[-1]:.2f}x", flush=True)
    finally:
        remove(a.work / f"tree-{old[:12]}")
        shutil.rmtree(pkg, ignore_errors=True)
    digests = {c: sorted({r["output_digest"] for r in runs if r["code"] == c}) for c in (old_label, short(new))}
    a.results.mkdir(parents=True, exist_ok=True)
    (a.results / f"{a.name}.json").write_text(json.dumps({"against": old, "head": new, "scale": a.scale,
                                                          "workers": a.workers, "runs": runs,
                                                          "cpus": os.cpu_count()}, indent=1) + "\n")
    (a.results / f"{a.name}.md").write_text(_markdown(runs, ratios, old_label, short(new), a, digests))
    print(f"wrote {a.results / a.name}.{{json,md}}")
    unstable = [c for c, d in digests.items() if len(d) != 1]
    if unstable:
        print(f"the output digest changed between pairs for {', '.join(unstable)}: {digests}", file=sys.stderr)
        return 1
    return 0


def _markdown(runs: list[dict], ratios: list[float], old: str, new: str, a, digests: dict) -> str:
    lines = [f"# v6 build speed, {new} against {old}, {a.scale}x corpus, {a.workers} workers ({os.cpu_count()} CPUs)",
             "", "Interleaved pairs, the older revision first in odd pairs and second in even ones "
             "(bench/speed_ab.py). "
             "MB/s is of C/C++ collected over the build's own time less semantics.", "",
             "| pair | code | MB/s | wall s | CPU s of the build's processes | idle core-s "
             "| largest process (VmHWM) MiB | output digest |",
             "|---|---|---|---|---|---|---|---|"]
    for r in runs:
        lines.append(f"| {r['pair']} | {r['code']} | {r['mb_per_s_all_but_semantics']} | {r['wall_seconds']} | "
                     f"{sum(r['cpu_seconds'].values()):.1f} | {sum(r['idle_core_seconds'].values()):.1f} | "
                     f"{r['high_water_mib_any_process']} | {r['output_digest']} |")
    lines += ["", "Ratio per pair (new over old MB/s): " + ", ".join(f"{x:.2f}x" for x in ratios)
              + f"; output digests per code: {digests}", "", "Stage seconds:", "",
              "| stage | " + " | ".join(f"{r['code']} #{r['pair']}" for r in runs) + " |",
              "|---|" + "---|" * len(runs)]
    stages = sorted({k for r in runs for k in r["stage_seconds"]},
                    key=lambda k: -max(r["stage_seconds"].get(k, 0) for r in runs))
    for k in stages:
        lines.append(f"| {k} | " + " | ".join(f"{r['stage_seconds'].get(k, 0):.1f}" for r in runs) + " |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
