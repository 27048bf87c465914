"""Our Megatron export against Megatron-LM's own tools/preprocess_data.py, on the same JSONL, in one run.

    .venv/bin/python bench/export_vs_megatron.py CORPUS.jsonl TOKENIZER_DIR --megatron-lm PATH [--workers 2]
    .venv/bin/python bench/export_vs_megatron.py --from-build out/builds/NAME --megatron-lm PATH

CORPUS is JSONL with a "text" field per line (`--from-build` writes one from a build's shards and takes the
build's tokenizer). Both sides use the same HuggingFace tokenizer directory (tokenizer.json +
tokenizer_config.json), `--append-eod` semantics and the same worker count: Megatron-LM's `--workers N`
processes, our `encode_batch` on N threads. Each side runs as its own process under /usr/bin/time (wall time,
peak RSS). The token streams are then compared document by document through megatron-core's IndexedDataset;
the run fails if any differ. Issue 6's target: at least 1.5x faster with identical tokens.

Megatron-LM's tools are not on PyPI: pass a checkout (tag core_v0.16.1 matches megatron-core 0.16.1). Without
one the benchmark says so and exits 0 having run only our side.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

OURS = """
import os, sys, time
os.environ["RAYON_NUM_THREADS"] = sys.argv[4]
from cpp_data.stages.lib.export_megatron import jsonl_token_arrays, write_indexed
from cpp_data.tokenizer.files import load_tokenizer, tokenizer_info
info = tokenizer_info(sys.argv[2])
tok = load_tokenizer(sys.argv[2])
r = write_indexed(__import__("pathlib").Path(sys.argv[3]), jsonl_token_arrays(sys.argv[1], tok), info["vocab_size"],
                  info["roles"]["eos"])
print(r["documents"], r["tokens"])
"""


def timed(cmd: list[str], env: dict | None = None) -> dict:
    with tempfile.NamedTemporaryFile("r", suffix=".time") as tf:
        proc = subprocess.run(["/usr/bin/time", "-f", "%e %M", "-o", tf.name, *cmd], capture_output=True, text=True,
                              env=env)
        if proc.returncode != 0:
            raise SystemExit(f"{cmd[0:3]} failed ({proc.returncode}):\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}")
        wall, rss_kb = Path(tf.name).read_text().split()[-2:]
    return {"seconds": float(wall), "peak_rss_mb": round(int(rss_kb) / 1024, 1)}


def jsonl_from_build(build: Path, dest: Path) -> Path:
    from cpp_data.schemas.reader import iter_build_shards

    with open(dest, "w", encoding="utf-8") as f:
        for table in iter_build_shards(build, columns_wanted=["text"]):
            for text in table.column("text").to_pylist():
                f.write(json.dumps({"text": text}, ensure_ascii=False) + "\n")
    return dest


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("corpus", type=Path, nargs="?")
    ap.add_argument("tokenizer", type=Path, nargs="?")
    ap.add_argument("--from-build", type=Path)
    ap.add_argument("--megatron-lm", type=Path, help="a Megatron-LM checkout (tools/preprocess_data.py)")
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="export-bench-"))
    if args.from_build:
        args.corpus = jsonl_from_build(args.from_build, work / "corpus.jsonl")
        args.tokenizer = args.from_build / "tokenizer"
    if not (args.corpus and args.tokenizer):
        ap.error("give CORPUS and TOKENIZER, or --from-build")
    mb = args.corpus.stat().st_size / 1e6
    result = {"corpus": str(args.corpus), "corpus_mb": round(mb, 2), "workers": args.workers}
    ours = timed([sys.executable, "-c", OURS, str(args.corpus), str(args.tokenizer), str(work / "ours"),
                  str(args.workers)])
    result["ours"] = ours
    print(f"ours      {ours['seconds']:7.2f} s  {mb / ours['seconds']:6.2f} MB/s  peak RSS {ours['peak_rss_mb']} MB",
          file=sys.stderr)
    script = args.megatron_lm / "tools" / "preprocess_data.py" if args.megatron_lm else None
    if script is None or not script.is_file():
        print("no Megatron-LM checkout given (--megatron-lm PATH with tools/preprocess_data.py): ran our side only",
              file=sys.stderr)
        print(json.dumps(result))
        return 0
    env = {**os.environ, "PYTHONPATH": ""}
    theirs = timed([sys.executable, str(script), "--input", str(args.corpus), "--output-prefix", str(work / "mlm"),
                    "--tokenizer-type", "HuggingFaceTokenizer", "--tokenizer-model", str(args.tokenizer),
                    "--append-eod", "--workers", str(args.workers)], env=env)
    result["megatron_lm"] = theirs
    print(f"Megatron  {theirs['seconds']:7.2f} s  {mb / theirs['seconds']:6.2f} MB/s  peak RSS "
          f"{theirs['peak_rss_mb']} MB", file=sys.stderr)
    from megatron.core.datasets.indexed_dataset import IndexedDataset

    a, b = IndexedDataset(str(work / "ours")), IndexedDataset(str(work / "mlm_text_document"))
    if len(a) != len(b):
        raise SystemExit(f"document counts differ: ours {len(a)}, Megatron-LM {len(b)}")
    differ = [i for i in range(len(a)) if not (a[i].astype("int64") == b[i].astype("int64")).all()
              or len(a[i]) != len(b[i])]
    result.update(documents=len(a), tokens=int(a.sequence_lengths.sum()), differing_documents=len(differ),
                  dtype_ours=a.index.dtype.__name__, dtype_megatron_lm=b.index.dtype.__name__,
                  speedup=round(theirs["seconds"] / ours["seconds"], 2))
    print(f"speedup {result['speedup']}x (target >= 1.5x); documents {len(a):,}; differing token streams "
          f"{len(differ)}", file=sys.stderr)
    print(json.dumps(result))
    return 1 if differ else 0


if __name__ == "__main__":
    raise SystemExit(main())
