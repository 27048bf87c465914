"""Does a model learn better from semantic chunks than from whole files cut across rows? gpt-125m trained on the
same number of tokens from (a) a build's whole-file documents packed into rows of 4,096 (documents longer than a
row cut into pieces) and (b) its 4k chunk lane packed the same way, both evaluated on the same held-out files,
each file as its own chunks (loss on the chunks' bodies; context prefixes carry no loss in training or eval).

Two steps, because the GPU machine has neither the build nor cpp-data's dependencies:

  prepare (here):  python bench/chunks_vs_files.py prepare BUILD --whole EXPORT --out bundle.npz
      BUILD: a v6 build with a 4k lane; EXPORT: `cpp-data export packed BUILD --seq-length 4096 --fim-rate 0`.
      Writes the training rows of both (uint16 ids; per token a bit: context or not) cut to the same token
      count, and the validation split's 4k chunks (ids and context lengths).
  run (GPU):       python bench/chunks_vs_files.py run bundle.npz --tokens N --json out.json [--plot out.png]
      Trains the harness's gpt-125m (harness/plain_model.py: bf16, compiled, documents kept apart by
      flex_attention) twice from the same initial weights and data order seed, evaluating both on the
      held-out chunks every `--eval-every` steps; writes the curves and the final losses. Needs torch and the
      cpp_data harness on the path (bench/gpu_issue58.sh stages them).

FIM is off on both sides (it is drawn per epoch at training time, and would only add noise to the comparison).
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path

import numpy as np

SEQ = 4096


# ---- prepare -------------------------------------------------------------------------------------------------
COLUMNS = ("input_ids", "target_ids", "doc_ids", "loss_mask")


def _rows(files: list[Path]) -> tuple[np.ndarray, ...]:
    """(input ids, target ids, doc ids, loss mask), each [n, SEQ], of packed Parquet files, in order."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    t = pa.concat_tables([pq.read_table(f, columns=list(COLUMNS)) for f in files])
    return tuple(np.stack([np.asarray(x, np.int32) for x in t.column(c).to_numpy(zero_copy_only=False)])
                 for c in COLUMNS)


def prepare(build: Path, whole: Path, out: Path) -> None:
    a = _rows(sorted(whole.glob("train-*.parquet")))
    b = _rows(sorted((build / "packed" / "4k").glob("train-*.parquet")))
    n = min(len(a[0]), len(b[0]))
    eval_ids, eval_ctx = _eval_chunks(build)
    vocab = json.loads((build / "tokenizer" / "cpp_tokenizer.json").read_text())["vocab_size"]
    if vocab > 65536:
        raise SystemExit(f"{build}: a vocabulary of {vocab} ids does not fit uint16")
    if max(int(a[2].max()), int(b[2].max())) > 255:
        raise SystemExit("a row holds more than 255 documents: doc ids do not fit uint8")
    # targets are the next token of the same document (derived on the GPU); masks as bits: the bundle must fit
    # the 64 MiB a device call carries
    np.savez_compressed(out, **{f"{k}_{name}": arr for k, rows in (("a", a), ("b", b)) for name, arr in (
                                ("ids", rows[0][:n].astype(np.uint16)), ("doc", rows[2][:n].astype(np.uint8)),
                                ("mask", np.packbits(rows[3][:n].astype(bool), axis=1)))},
                        pad=np.array(_pad(build)),
                        eval_ids=np.concatenate(eval_ids).astype(np.uint16),
                        eval_len=np.array([len(x) for x in eval_ids], np.int32), eval_ctx=np.array(eval_ctx, np.int32),
                        vocab=np.array(vocab))
    print(f"{out}: {n} rows each ({n * SEQ:,} tokens); whole-file rows {len(a[0])}, chunk rows {len(b[0])}; "
          f"{len(eval_ids)} held-out chunks")


def _pad(build: Path) -> int:
    return json.loads((build / "tokenizer" / "cpp_tokenizer.json").read_text())["roles"]["pad"]


def _eval_chunks(build: Path) -> tuple[list[np.ndarray], list[int]]:
    import pyarrow.parquet as pq

    t = pq.read_table(sorted((build / "lanes" / "4k").glob("valid-*.parquet")), columns=["token_ids", "context_length"])
    return ([np.asarray(x, np.int32) for x in t.column("token_ids").to_pylist()],
            t.column("context_length").to_pylist())


# ---- run (GPU) -----------------------------------------------------------------------------------------------
def run(args) -> None:
    import torch

    from cpp_data.harness.plain_model import PlainGPT
    from cpp_data.harness.presets import SIZES

    torch.backends.cuda.matmul.allow_tf32 = True
    data = {k: v for k, v in np.load(args.bundle).items()}
    rows = args.tokens // SEQ
    results = {"tokens": rows * SEQ, "card": torch.cuda.get_device_name(0), "torch": torch.__version__,
               "model": "gpt-125m (harness/plain_model.py)", "batch": args.batch, "lr": args.lr, "runs": {}}
    for name in ("a", "b"):
        torch.manual_seed(0)
        model = PlainGPT(SIZES["gpt-125m"], int(data["vocab"]), SEQ).cuda()
        model.compile_regions()
        results["runs"][name] = train_one(model, data, name, rows, args)
        print(json.dumps({name: results["runs"][name]["final_eval"]}), flush=True)
        Path(args.json).write_text(json.dumps(results, indent=2) + "\n")
    if args.plot:
        plot(results, args.plot)


def positions(doc):
    """Position ids restarting where the segment id changes (padding is a segment of its own)."""
    import torch

    change = torch.ones_like(doc, dtype=torch.bool)
    change[:, 1:] = doc[:, 1:] != doc[:, :-1]
    idx = torch.arange(doc.shape[1], device=doc.device).expand_as(doc)
    start = torch.where(change, idx, torch.zeros_like(idx)).cummax(dim=1).values
    return idx - start


def _batch(data, name: str, idx: np.ndarray):
    """Input ids, targets (the next token of the same document, PAD where there is none), positions, mask."""
    import torch

    ids = torch.from_numpy(data[f"{name}_ids"][idx].astype(np.int64)).cuda()
    doc = torch.from_numpy(data[f"{name}_doc"][idx].astype(np.int64)).cuda()
    mask = torch.from_numpy(np.unpackbits(data[f"{name}_mask"][idx], axis=1)[:, :SEQ].astype(np.float32)).cuda()
    tgt = torch.full_like(ids, int(data["pad"]))
    same = (doc[:, 1:] == doc[:, :-1]) & (doc[:, :-1] > 0)
    tgt[:, :-1] = torch.where(same, ids[:, 1:], tgt[:, :-1])
    return ids, tgt, positions(doc), mask


def train_one(model, data, name: str, rows: int, args) -> dict:
    import torch

    total = len(data[f"{name}_ids"])
    order = np.random.default_rng(1).permutation(rows) % total
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.95), weight_decay=0.1, fused=True)
    steps = rows // args.batch
    curve, t0 = [], time.time()
    for step in range(steps):
        lr = args.lr * min(1.0, (step + 1) / 50) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * step / steps)))
        for g in opt.param_groups:
            g["lr"] = lr
        ids, tgt, pos, mask = _batch(data, name, order[step * args.batch:(step + 1) * args.batch])
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(ids, pos, labels=tgt, loss_mask=mask, isolate=True)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if (step + 1) % args.eval_every == 0 or step + 1 == steps:
            curve.append({"step": step + 1, "tokens": (step + 1) * args.batch * SEQ, "train_loss": loss.item(),
                          "eval_loss": evaluate(model, data), "seconds": round(time.time() - t0, 1)})
            print(name, curve[-1], flush=True)
    return {"curve": curve, "final_eval": curve[-1]["eval_loss"], "steps": steps}


def evaluate(model, data, batch: int = 8) -> float:
    """Mean loss per body token over the held-out chunks, each alone at the start of a row of its own."""
    import torch

    ids, lengths, ctx = data["eval_ids"].astype(np.int64), data["eval_len"], data["eval_ctx"]
    starts = np.concatenate([[0], np.cumsum(lengths)])
    total, count = 0.0, 0.0
    model.eval()
    with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
        for a in range(0, len(lengths), batch):
            ks = range(a, min(a + batch, len(lengths)))
            row, tgt, doc, mask = (np.zeros((len(ks), SEQ), np.int64) for _ in range(4))
            for r, k in enumerate(ks):
                seq = ids[starts[k]:starts[k + 1]]
                row[r, :len(seq)], tgt[r, :len(seq) - 1], doc[r, :len(seq)] = seq, seq[1:], 1
                mask[r, max(ctx[k] - 1, 0):len(seq) - 1] = 1
            n = float(mask.sum())
            t = [torch.from_numpy(x).cuda() for x in (row, tgt, doc, mask)]
            loss = model(t[0], positions(t[2]), labels=t[1], loss_mask=t[3].float(), isolate=True)
            total, count = total + loss.item() * n, count + n
    model.train()
    return round(total / count, 4)


def plot(results: dict, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    labels = {"a": "whole files, rows of 4,096", "b": "4k chunk lane"}
    for name, r in results["runs"].items():
        ax.plot([c["tokens"] / 1e6 for c in r["curve"]], [c["eval_loss"] for c in r["curve"]], marker="o",
                label=f"{labels[name]} (final {r['final_eval']:.3f})")
    ax.set_xlabel("training tokens (M)")
    ax.set_ylabel("held-out loss per body token")
    ax.set_title(f"gpt-125m, {results['card']}")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("prepare")
    p.add_argument("build", type=Path)
    p.add_argument("--whole", type=Path, required=True)
    p.add_argument("--out", type=Path, required=True)
    r = sub.add_parser("run")
    r.add_argument("bundle", type=Path)
    r.add_argument("--tokens", type=int, default=20_000_000)
    r.add_argument("--batch", type=int, default=16)
    r.add_argument("--lr", type=float, default=6e-4)
    r.add_argument("--eval-every", type=int, default=50)
    r.add_argument("--json", required=True)
    r.add_argument("--plot")
    args = ap.parse_args()
    if args.cmd == "prepare":
        prepare(args.build, args.whole, args.out)
    else:
        run(args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
