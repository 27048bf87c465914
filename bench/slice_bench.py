"""Time the first slice (collect -> license -> filter -> exact dedup -> shards -> ledger) on a corpus.

    .venv/bin/python bench/slice_bench.py sources/debian.toml [--workers 2] [--keep DIR]

Runs a cold `cpp-data build --version v6` into a fresh output directory and prints wall time, C/C++ MB/s,
peak RSS of the largest process (the CLI or any datatrove worker) and each stage's seconds. Results are
printed as one JSON line too, for bench/results/.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("sources", type=Path)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--keep", type=Path, help="output directory to keep (default: a temporary one)")
    args = ap.parse_args()
    out = args.keep or Path(tempfile.mkdtemp(prefix="cpp-data-bench-"))
    cmd = [sys.executable, "-m", "cpp_data.pipeline.cli", "build", "--version", "v6", "--sources",
           str(args.sources), "--out", str(out), "--workers", str(args.workers), "--no-progress", "--force"]
    t0 = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.monotonic() - t0
    if proc.returncode != 0:
        print(proc.stdout, proc.stderr, file=sys.stderr)
        return proc.returncode
    peak_mb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    build = out / "builds" / (out / "builds" / "LATEST").read_text().strip()
    manifest = json.loads((build / "manifest.json").read_text())
    collected = sum(s["counts"].get("bytes_collected", 0) for s in manifest["stages"] if s["stage"] == "collect")
    per_stage: dict[str, float] = {}
    for s in manifest["stages"]:
        per_stage[s["stage"]] = round(per_stage.get(s["stage"], 0) + (s["seconds"] or 0), 2)
    result = {
        "corpus": str(args.sources), "workers": args.workers, "wall_s": round(wall, 2),
        "cpp_mb": round(collected / 1e6, 2), "mb_per_s": round(collected / 1e6 / wall, 2),
        "peak_rss_mb": round(peak_mb, 1), "documents": manifest["totals"]["documents"], "stage_s": per_stage,
    }
    print(f"corpus {args.sources}: {result['cpp_mb']} MB of C/C++ in {result['wall_s']} s "
          f"= {result['mb_per_s']} MB/s, peak RSS {result['peak_rss_mb']} MB, {result['documents']} documents")
    for stage, s in per_stage.items():
        print(f"  {stage:<12} {s:>8.2f} s")
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
