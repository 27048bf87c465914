"""How the tokenizer trainer's memory grows with the text it trains on: what `tokenizer.sample_bytes` bounds.

For each size, a fresh process trains the cpp-data tokenizer (train_cpp_tokenizer: the band, 65,536 ids, the
stage's settings) on the first SIZE megabytes of C/C++ files under Debian's header trees (Boost, Qt 5, Eigen,
POCO, JUCE; sorted paths, files over 1 MB and non-UTF-8 files skipped) and reports its peak RSS
(getrusage) and wall time. The largest size is all of such text those trees hold. The trainer keeps a
count of every distinct pre-token and its pair statistics in memory, so its peak follows the sample, not the
corpus.

    .venv/bin/python bench/tokenizer_memory.py --sizes 16 32 64 128 166

Needs apt-get install libboost-dev qtbase5-dev libeigen3-dev libpoco-dev juce-modules-source for the larger
sizes. Writes bench/results/tokenizer_memory.{json,md}.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TREES = ["/usr/include/boost", "/usr/include/x86_64-linux-gnu/qt5", "/usr/include/eigen3", "/usr/include/Poco",
         "/usr/share/juce/modules"]
SUFFIXES = (".h", ".hpp", ".hxx", ".hh", ".ipp", ".tcc", ".c", ".cc", ".cpp", ".inl")


def texts(limit: int, seen: list[int]) -> Iterator[str]:
    for root in TREES:
        for d, dirs, files in sorted(os.walk(root)):
            dirs.sort()
            for f in sorted(files):
                path = os.path.join(d, f)
                if not f.endswith(SUFFIXES) or os.path.islink(path):
                    continue
                try:
                    text = Path(path).read_text(encoding="utf-8")
                except (UnicodeDecodeError, OSError):
                    continue
                if len(text) > 1_000_000:
                    continue
                seen[0] += len(text.encode("utf-8"))
                yield text
                if seen[0] >= limit:
                    return


def one(size_mb: float) -> dict:
    """Train on `size_mb` MB in this process; its peak RSS and time."""
    from cpp_data.tokenizer.band import load_band
    from cpp_data.tokenizer.train import train_cpp_tokenizer

    seen = [0]
    t0 = time.monotonic()
    tok = train_cpp_tokenizer(texts(int(size_mb * 1e6), seen), load_band(None), 65_536, cap_to_corpus=True)
    return {"requested_mb": size_mb, "text_mb": round(seen[0] / 1e6, 1), "seconds": round(time.monotonic() - t0, 1),
            "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
            "vocab_size": tok.get_vocab_size()}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", type=float, nargs="+", default=[16, 32, 64, 128, 166])
    ap.add_argument("--one", type=float, help=argparse.SUPPRESS)  # a single size, in this process
    ap.add_argument("--results", type=Path, default=REPO / "bench" / "results")
    a = ap.parse_args(argv)
    if a.one is not None:
        print(json.dumps(one(a.one)))
        return
    rows = []
    for size in a.sizes:
        proc = subprocess.run([sys.executable, __file__, "--one", str(size)], capture_output=True, text=True)
        if proc.returncode != 0:
            raise SystemExit(proc.stderr[-2000:])
        rows.append(json.loads(proc.stdout.strip().splitlines()[-1]))
        r = rows[-1]
        print(f"{r['text_mb']} MB of text: peak RSS {r['peak_rss_mib']} MiB, {r['seconds']} s", flush=True)
    a.results.mkdir(parents=True, exist_ok=True)
    (a.results / "tokenizer_memory.json").write_text(json.dumps({"runs": rows}, indent=1) + "\n")
    lines = ["# Tokenizer trainer memory by training text (65,536 ids, one process per size)", "",
             "| text MB | peak RSS MiB | seconds |", "|---|---|---|"]
    lines += [f"| {r['text_mb']} | {r['peak_rss_mib']} | {r['seconds']} |" for r in rows]
    (a.results / "tokenizer_memory.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
