"""One card's lanes report (issue 60): the reference and the harness at each row length, from one device call.

Reads RESULTS/lanes.jsonl (bench/reference_gpt.py's lines, and `cpp-data train`'s summary.json with "run":
"harness") and RESULTS/exactness.jsonl (bench/gpu_exactness.py), and writes RESULTS/gpu_harness-<card>.json:
the card, torch, and per length: each side's tokens/s, MFU and peak memory, the ratio harness / reference and
the target it is held to, and the rows' documents.

MFU: tokens/s x FLOPs per token / the card's dense bf16 peak, FLOPs per token as harness/presets.flops_per_token
counts them (6 N + 12 L d s: attention over the whole s x s square, PaLM's convention), the same count on both
sides, so the MFU ratio is the tokens/s ratio. At long rows that count is far above what either side computes
(causal attention skips half the square, document isolation all but the documents' own triangles), so
`mfu_weights` gives the weights' share alone (6 N), which is a lower bound comparable across lengths.
usage: python bench/gpu_harness_report.py RESULTS_DIR EXPORTS_DIR
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "harness"))
from presets import PEAK_BF16_FLOPS  # noqa: E402

TARGETS = {2048: 0.92}  # the same-call ratio each length must reach (issue 60); other lengths 0.9
OTHER_TARGET = 0.9


def documents_per_row(export: Path, seq: int) -> dict:
    """Median and mean number of documents per row of an export's training rows (a document starts after each
    EOD, as GPTDataset's reset_position_ids has it), and the share of ids that are EOD padding or ends."""
    from reference_gpt import read_tokens

    eod = json.loads((export / "launch.json").read_text())["eod"]
    flat = np.asarray(read_tokens(str(export / "cpp_packed_train_e0")))
    rows = flat[:len(flat) // seq * seq].reshape(-1, seq)
    docs = 1 + (rows[:, :-1] == eod).sum(1)
    return {"rows": len(rows), "documents_per_row_median": float(np.median(docs)),
            "documents_per_row_mean": round(float(docs.mean()), 1), "eod_share": round(float((rows == eod).mean()), 4)}


def side(rec: dict, harness: bool) -> dict:
    """One side's numbers, from reference_gpt.py's line or the harness's summary.json."""
    rate = rec["tokens_per_s_mean"] if harness else rec["tokens_per_s"]
    peak = next((v for k, v in PEAK_BF16_FLOPS.items() if k in rec["device_name"]), None)
    weights = round(rate * 6 * rec["parameters"] / peak, 4) if rate and peak else None
    out = {"tokens_per_s": rate, "mfu": rec["mfu"], "mfu_weights": weights, "max_memory_gib": rec["max_memory_gib"]}
    out.update({k: rec[k] for k in ("micro_batch_size", "steps", "flops_per_token")})
    if harness:
        out.update({k: rec[k] for k in ("model_impl", "activation_checkpointing", "attention", "final_loss")})
    else:
        out["last_loss"] = rec["last_loss"]
    return out


def lanes(records: list[dict], exports: Path) -> list[dict]:
    by_seq: dict[int, dict] = {}
    for rec in records:
        harness = rec.get("run") == "harness"
        by_seq.setdefault(rec["seq_length"], {})["harness" if harness else "reference"] = side(rec, harness)
        by_seq[rec["seq_length"]]["batch_size"] = rec["batch_size"]
    out = []
    for seq, lane in sorted(by_seq.items()):
        ref, har = lane.get("reference"), lane.get("harness")
        target = TARGETS.get(seq, OTHER_TARGET)
        ratio = round(har["tokens_per_s"] / ref["tokens_per_s"], 4) if ref and har and har["tokens_per_s"] else None
        data = documents_per_row(exports / str(seq), seq) if (exports / str(seq) / "launch.json").is_file() else None
        out.append({"seq_length": seq, "batch_size": lane["batch_size"], "tokens_per_step": lane["batch_size"] * seq,
                    "reference": ref, "harness": har, "ratio": ratio, "target": target,
                    "meets_target": ratio >= target if ratio is not None else None, "rows": data})
    return out


def card_name(name: str) -> str:
    for short in ("H200", "H100", "A100"):
        if short in name:
            return short.lower()
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")


def main() -> None:
    results, exports = Path(sys.argv[1]), Path(sys.argv[2])
    records = [json.loads(line) for line in (results / "lanes.jsonl").read_text().splitlines() if line.strip()]
    exact_path = results / "exactness.jsonl"
    exactness = [json.loads(line) for line in exact_path.read_text().splitlines()] if exact_path.is_file() else []
    if not records:
        raise SystemExit("no lanes recorded")
    first = records[0]
    report = {"what": "bench/gpu_harness.sh lanes: bench/reference_gpt.py (causal attention over whole rows, an "
                      "upper bound) and `cpp-data train` (documents kept apart), gpt-125m, bf16, compiled, same "
                      "call, one process at a time, on the same packed rows",
              "card": first["device_name"], "torch": first["torch"], "model": first["model"],
              "mfu_counts": "6 N + 12 L d s FLOPs per token (PaLM appendix B); mfu_weights: 6 N alone",
              "lanes": lanes(records, exports), "exactness": exactness}
    out = results / f"gpu_harness-{card_name(first['device_name'])}.json"
    out.write_text(json.dumps(report, indent=1) + "\n")
    for lane in report["lanes"]:
        ref, har = lane["reference"] or {}, lane["harness"] or {}
        print(f"seq {lane['seq_length']:>6}: reference {ref.get('tokens_per_s')} tok/s {ref.get('max_memory_gib')} GiB,"
              f" harness {har.get('tokens_per_s')} tok/s {har.get('max_memory_gib')} GiB, ratio {lane['ratio']}"
              f" (target {lane['target']})")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
