"""On the GPU: the harness's CUDA paths compute what megatron-core's own attention computes (issue 60).

Real packed rows (an export's cpp_packed_train_e0, position ids restarting after every EOD as GPTDataset makes them):
  attention  flex_attention with the document BlockMask in bf16 (the training path) against fp32 SDPA with the
             explicit document mask: relative error of out, dq, dk, dv, beside SDPA's own bf16 masked kernel's
  fp32       gpt-125m, same weights, 2 rows: the plain model and megatron-core's GPTModel with the harness's
             attention against megatron-core's unfused attention with the explicit mask (the gold): loss and the
             relative error of all gradients (TF32 off)
  bf16       the plain model as `cpp-data train --compile` runs it (bf16 autocast, TF32, compiled block by block),
             with and without activation checkpointing, and megatron-core's with its own checkpointing (eager),
             against the gold
Each result is one JSON line (device name and torch version included).
usage: python bench/gpu_exactness.py EXPORT_DIR --json OUT.jsonl      (--device cpu --size tiny: a dry run of the
       script itself on CPU, where flex_attention has no backward and megatron-core no checkpointing)
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from reference_gpt import read_tokens  # noqa: E402

SEQ = 2048


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a.double() - b.double()).norm() / b.double().norm().clamp(min=1e-30)).item()


def rows(export: Path, count: int, dev: torch.device) -> dict:
    """`count` packed rows of several documents each (the first rows with 3 or more and under 5% EOD padding), as
    GPTDataset's samples: tokens, labels, loss_mask (no loss on EOD inputs nor on a row's last label),
    position_ids (restarting after every EOD)."""
    eod = json.loads((export / "launch.json").read_text())["eod"]
    flat = np.asarray(read_tokens(str(export / "cpp_packed_train_e0")), dtype=np.int64)
    n = (len(flat) - 1) // SEQ
    table = flat[:n * SEQ].reshape(n, SEQ)
    is_eod = table == eod
    several = np.flatnonzero((is_eod[:, :-1].sum(1) >= 2) & (is_eod.mean(1) < 0.05))[:count]
    if len(several) < count:
        raise SystemExit(f"{export}: fewer than {count} rows of several documents")
    tokens = torch.from_numpy(table[several])
    labels = torch.from_numpy(np.stack([flat[r * SEQ + 1:(r + 1) * SEQ + 1] for r in several]))
    start = torch.cat([torch.ones(count, 1, dtype=torch.bool), tokens[:, :-1] == eod], dim=1)
    idx = torch.arange(SEQ).expand(count, SEQ)
    last_start = torch.where(start, idx, torch.zeros_like(idx)).cummax(dim=1).values
    mask = (tokens != eod).float()
    mask[:, -1] = 0
    out = {"tokens": tokens, "labels": labels, "loss_mask": mask, "position_ids": idx - last_start}
    return {k: v.to(dev) for k, v in out.items()}


def emit(path: Path, rec: dict) -> None:
    card = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"
    rec = {**rec, "device_name": card, "torch": torch.__version__}
    print(json.dumps(rec), flush=True)
    with open(path, "a") as f:
        f.write(json.dumps(rec) + "\n")


def attention(batch: dict, out: Path) -> None:
    from cpp_data.harness.attention import Documents, attend, documents
    from cpp_data.harness.doc_mask import doc_dense_mask, doc_ids

    pos = batch["position_ids"]
    b, s, h, d = pos.shape[0], SEQ, 12, 64
    g = torch.Generator(device=pos.device).manual_seed(0)
    q, k, v = (torch.randn(b, h, s, d, device=pos.device, generator=g, dtype=torch.bfloat16).requires_grad_()
               for _ in range(3))
    go = torch.randn(b, h, s, d, device=pos.device, generator=g, dtype=torch.bfloat16)
    mask = doc_dense_mask(doc_ids(pos))
    errs = {}
    gold = None
    for name, dtype, docs in (("gold", torch.float32, Documents(mask=mask)), ("flex", torch.bfloat16, documents(pos)),
                              ("sdpa-bf16-mask", torch.bfloat16, Documents(mask=mask))):
        qi, ki, vi = (t.detach().to(dtype).requires_grad_() for t in (q, k, v))
        o = attend(qi, ki, vi, docs, d ** -0.5)
        res = [o, *torch.autograd.grad(o, (qi, ki, vi), go.to(dtype))]
        if gold is None:
            gold = res
            continue
        errs[name] = [round(rel(a, w), 6) for a, w in zip(res, gold)]
    emit(out, {"what": "attention, packed rows, vs fp32 SDPA with the document mask: rel err of out, dq, dk, dv",
               "rows": b, "seq": s, "documents": int((pos == 0).sum()), "block_mask": documents(pos).block_mask
               is not None, **errs})


def _grads(model) -> dict:
    return {n: p.grad.detach().float().clone() for n, p in model.named_parameters()}


def _run(model, forward, batch: dict, isolate: bool, autocast: bool, attention_mask=None) -> tuple[float, dict]:
    model.zero_grad(set_to_none=True)
    loss = forward(model, batch["tokens"], batch["position_ids"], attention_mask, batch["labels"],
                   batch["loss_mask"], isolate, autocast)
    loss.backward()
    return loss.item(), _grads(model)


def models(batch: dict, out: Path, size: str) -> None:
    from cpp_data.harness.checkpoint import load_weights
    from cpp_data.harness.doc_mask import doc_dense_mask, doc_ids
    from cpp_data.harness.loss import megatron_loss, plain_loss
    from cpp_data.harness.model import build_model
    from cpp_data.harness.train import init_distributed

    dev = batch["tokens"].device
    if dev.type == "cpu":
        from cpp_data.harness.megatron_cpu import apply_cpu_patches

        apply_cpu_patches()
    init_distributed(dev, 0)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.manual_seed(0)
    vocab = 65536

    def make(impl: str, attention: str = "sdpa", recompute: bool = False):
        m, _ = build_model(size, vocab, SEQ, dev, attention=attention, impl=impl, recompute=recompute)
        load_weights(m, state)
        return m

    gold_model, _ = build_model(size, vocab, SEQ, dev, attention="local", impl="megatron")
    state = {k: v.detach().clone() for k, v in gold_model.state_dict().items() if torch.is_tensor(v)}
    explicit = ~doc_dense_mask(doc_ids(batch["position_ids"]))
    gold_loss, gold = _run(gold_model, megatron_loss, batch, False, False, attention_mask=explicit)
    del gold_model
    keys = sorted(gold)

    def compare(path: str, loss: float, grads: dict) -> None:
        a = torch.cat([grads[k].flatten() for k in keys])
        r = torch.cat([gold[k].flatten() for k in keys])
        emit(out, {"what": f"{size} loss and gradients vs megatron-core's attention with the explicit mask (fp32)",
                   "path": path, "loss": loss, "gold_loss": gold_loss,
                   "loss_rel_diff": abs(loss - gold_loss) / gold_loss,
                   "grad_rel_err": rel(a, r), "worst_param_grad_rel_err": max(rel(grads[k], gold[k]) for k in keys)})

    compare("plain, flex, fp32", *_run(make("plain"), plain_loss, batch, True, False))
    compare("megatron-core + harness attention, flex, fp32", *_run(make("megatron"), megatron_loss, batch, True, False))
    torch.backends.cuda.matmul.allow_tf32 = True  # as training runs
    compiled = make("plain")
    compiled.compile_regions()
    compare("plain, bf16, compiled (as cpp-data train --compile)", *_run(compiled, plain_loss, batch, True, True))
    checkpointed = make("plain", recompute=True)
    checkpointed.compile_regions()
    compare("plain, bf16, compiled, activation checkpointing", *_run(checkpointed, plain_loss, batch, True, True))
    if dev.type == "cuda":
        compare("megatron-core, bf16, its activation checkpointing",
                *_run(make("megatron", recompute=True), megatron_loss, batch, True, True))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("export", type=Path, help="a packed export of 2048-token rows (launch.json, cpp_packed_train_e0)")
    ap.add_argument("--json", type=Path, required=True)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--size", default="gpt-125m")
    a = ap.parse_args()
    dev = torch.device(a.device)
    batch = rows(a.export, 2, dev)  # one shape for all: flex_attention's bf16 kernel compiles once
    attention(batch, a.json)
    models(batch, a.json, a.size)


if __name__ == "__main__":
    main()
