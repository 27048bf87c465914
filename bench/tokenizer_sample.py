"""What training the tokenizer on a bounded sample costs in compression: bytes per token on held-out documents
for tokenizers trained on every candidate document and on seeded samples of a few budgets.

The training texts, the held-out set and the sample are the tokenizer stage's own (stages/lib/tokenizer_training.py:
candidate_bytes, training_texts with the fraction the stage would use for that `sample_bytes`); held-out
documents are the validation split plus the training files the stage holds out. Same vocabulary size and band.

    .venv/bin/python bench/tokenizer_sample.py BUILD --budgets 20e6 45e6 [--vocab-size 65536]

Writes bench/results/tokenizer_sample.{json,md}.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from cpp_data.schemas.reader import resolve_build, shard_files
from cpp_data.stages.lib.tokenizer_training import candidate_bytes, iter_documents, training_texts
from cpp_data.stages.tokenizer import TokenizerParams
from cpp_data.tokenizer import sample
from cpp_data.tokenizer.band import load_band
from cpp_data.tokenizer.train import train_cpp_tokenizer

REPO = Path(__file__).resolve().parent.parent


def heldout_texts(build: Path, heldout_fraction: float) -> list[str]:
    texts = [r["text"] for r in iter_documents(shard_files(build, "valid"), ["text"])]
    for r in iter_documents(shard_files(build, "train"), ["text", "source_repo", "source_path"]):
        if sample.tokenizer_heldout(r["source_repo"], r["source_path"], heldout_fraction):
            texts.append(r["text"])
    return texts


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("build", type=Path)
    ap.add_argument("--budgets", type=float, nargs="+", default=[20e6, 45e6])
    ap.add_argument("--vocab-size", type=int, default=TokenizerParams.vocab_size)
    ap.add_argument("--results", type=Path, default=REPO / "bench" / "results")
    a = ap.parse_args(argv)
    build = resolve_build(a.build)
    p = TokenizerParams(vocab_size=a.vocab_size)
    band = load_band(None)
    train = shard_files(build, "train")
    candidates, total = candidate_bytes(train, p.heldout_fraction)
    held = heldout_texts(build, p.heldout_fraction)
    held_bytes = sum(len(t.encode()) for t in held)
    rows = []
    for budget in [float(total)] + sorted(a.budgets):
        fraction = min(1.0, budget / total)
        taken: list = []
        t0 = time.monotonic()
        tok = train_cpp_tokenizer(training_texts(train, p.heldout_fraction, fraction, p.sample_seed, taken), band,
                                  p.vocab_size, min_frequency=p.min_frequency, cap_to_corpus=False)
        seconds = time.monotonic() - t0
        tokens = sum(len(e.ids) for e in tok.encode_batch_fast(held, add_special_tokens=False))
        rows.append({"budget_bytes": int(budget), "fraction": round(fraction, 4), "documents": len(taken),
                     "bytes": sum(b for _, b in taken), "train_seconds": round(seconds, 1),
                     "heldout_bytes_per_token": round(held_bytes / tokens, 4)})
        print(rows[-1], flush=True)
    full = rows[0]["heldout_bytes_per_token"]
    for r in rows:
        r["compression_vs_all"] = round(r["heldout_bytes_per_token"] / full, 4)
    a.results.mkdir(parents=True, exist_ok=True)
    out = {"build": build.name, "candidate_documents": candidates, "candidate_bytes": total,
           "heldout_documents": len(held), "heldout_bytes": held_bytes, "vocab_size": p.vocab_size, "runs": rows}
    (a.results / "tokenizer_sample.json").write_text(json.dumps(out, indent=1) + "\n")
    lines = [f"# Tokenizer trained on a sample vs on everything ({build.name}, vocab {p.vocab_size:,})", "",
             f"Held out: {len(held):,} documents, {held_bytes / 1e6:.1f} MB. Candidates: {candidates:,} documents, "
             f"{total / 1e6:.1f} MB.", "",
             "| budget MB | fraction | documents | MB trained on | train s | held-out bytes/token | vs all |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['budget_bytes'] / 1e6:.0f} | {r['fraction']} | {r['documents']:,} | "
                     f"{r['bytes'] / 1e6:.1f} | {r['train_seconds']} | {r['heldout_bytes_per_token']} | "
                     f"{r['compression_vs_all']} |")
    (a.results / "tokenizer_sample.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
