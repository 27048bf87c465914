"""Where a training step's GPU time goes, and what candidate changes buy (issue 16), on the GPU machine.

  python bench/gpu_profile.py LAUNCH_JSON attention
      the attention kernels alone, forward + backward on one batch's real document segments (32 x 2048,
      12 heads of 64, bf16): FlashAttention-2 varlen (the harness's kernel until issue 60), cuDNN varlen
      (cudnn_varlen below), cuDNN causal over whole rows (the reference's, no document boundaries), and their
      gradients' agreement
  python bench/gpu_profile.py LAUNCH_JSON harness|reference [--micro-batch-size N] [--patch NAME] [--profile]
      whole steps of global batch 32 (every micro batch new data, as in training) timed with the GPU
      synchronised, tokens/s and peak memory as one JSON line; --profile adds the kernels of two steps by
      CUDA time per micro batch
Patches are experiments, applied here and nowhere else:
  megatron-rope   megatron-core's own RoPE (cos/sin recomputed per layer), as the harness had it before
  megatron-bias-gelu  megatron-core's fused bias-GeLU autograd.Function, as the harness had it before
(The harness profiled is megatron-core's GPTModel, `--model-impl megatron`. Its cudnn-varlen and cudnn-aten patches,
which swapped the kernel of its former varlen path, went with that path in issue 60: git history has them.)
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections import defaultdict
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, str(Path(__file__).resolve().parent))

BATCH, WARM_STEPS, TIMED_STEPS = 32, 4, 10


# ---- cuDNN's varlen attention as a custom op (torch's own varlen_attn only reaches FlashAttention-2) ----
_LSE = {}  # the logsumexp layout cuDNN returns for ragged inputs, learned by probe() on the device


def probe(device) -> dict:
    """Run cuDNN's ragged forward once on a tiny input to learn its outputs' layouts (for the fake kernel)."""
    if not _LSE:
        t, h, d = 96, 2, 64
        q = torch.randn(t, h, d, device=device, dtype=torch.bfloat16)
        cu = torch.tensor([0, 40, 96], device=device, dtype=torch.int32)
        r = torch.ops.aten._cudnn_attention_forward(q, q, q, None, cu, cu, 56, 56, True, 0.0, True, False, scale=0.1)
        lse = r[1]
        _LSE.update(shape=[{t: "tokens", h: "heads"}.get(s, s) for s in lse.shape], lse_shape=list(lse.shape),
                    lse_stride=list(lse.stride()), seed=(list(r[6].shape), str(r[6].device), str(r[6].dtype)),
                    offset=(list(r[7].shape), str(r[7].device), str(r[7].dtype)))
    return _LSE


@torch.library.custom_op("cpp_data_bench::cudnn_varlen", mutates_args=())
def cudnn_varlen(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu: torch.Tensor, max_len: int,
                 scale: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    r = torch.ops.aten._cudnn_attention_forward(q, k, v, None, cu, cu, max_len, max_len, True, 0.0, True, False,
                                                scale=scale)
    return r[0], r[1], r[6].clone(), r[7].clone()  # output, logsumexp, philox seed and offset (no dropout)


@cudnn_varlen.register_fake
def _(q, k, v, cu, max_len, scale):
    shape = [{"tokens": q.shape[0], "heads": q.shape[1]}.get(s, s) for s in _LSE["shape"]]
    seed = q.new_empty((), dtype=torch.int64)
    return torch.empty_like(q), q.new_empty(shape, dtype=torch.float32), seed, torch.empty_like(seed)


@torch.library.custom_op("cpp_data_bench::cudnn_varlen_bwd", mutates_args=())
def cudnn_varlen_bwd(g: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor,
                     lse: torch.Tensor, seed: torch.Tensor, offset: torch.Tensor, cu: torch.Tensor, max_len: int,
                     scale: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    # attn_bias None: the dispatcher passes an undefined tensor (no bias)
    dq, dk, dv = torch.ops.aten._cudnn_attention_backward(g.contiguous(), q, k, v, out, lse, seed, offset, None, cu,
                                                          cu, max_len, max_len, 0.0, True, scale=scale)
    return dq, dk, dv


@cudnn_varlen_bwd.register_fake
def _(g, q, k, v, out, lse, seed, offset, cu, max_len, scale):
    return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)


def _setup(ctx, inputs, output):
    q, k, v, cu, max_len, scale = inputs
    ctx.save_for_backward(q, k, v, output[0], output[1], output[2], output[3], cu)
    ctx.max_len, ctx.scale = max_len, scale


def _backward(ctx, g, *_):
    q, k, v, out, lse, seed, offset, cu = ctx.saved_tensors
    dq, dk, dv = cudnn_varlen_bwd(g, q, k, v, out, lse, seed, offset, cu, ctx.max_len, ctx.scale)
    return dq, dk, dv, None, None, None


cudnn_varlen.register_autograd(_backward, setup_context=_setup)


def cudnn_varlen_attn(q, k, v, cu_q, cu_k, max_q, max_k, scale=None, is_causal=True):
    """varlen_attn's signature, on cuDNN (causal only), through the custom op above."""
    return cudnn_varlen(q, k, v, cu_q, max_q, scale)[0]


def cudnn_aten_attn(q, k, v, cu_q, cu_k, max_q, max_k, scale=None, is_causal=True):
    """varlen_attn's signature, on cuDNN, calling the aten op straight (its own autograd formula, as nested
    tensors' SDPA does)."""
    return torch.ops.aten._cudnn_attention_forward(q, k, v, None, cu_q, cu_k, max_q, max_k, True, 0.0, is_causal,
                                                   False, scale=scale)[0]


# ---- data ----
def _batches(spec, micro: int, count: int) -> list[dict]:
    from cpp_data.harness.data import build_datasets, dataset_of

    train, _ = build_datasets(spec, dataset_of(spec, "packed"), spec["seq_length"], 1, count * micro, 0,
                              Path("/tmp/prof-cache"), attention_mask=False)
    keys = ("tokens", "position_ids", "labels", "loss_mask")
    return [{k: torch.stack([train[i][k] for i in range(j * micro, (j + 1) * micro)]).pin_memory() for k in keys}
            for j in range(count)]


def _varlen():
    """(torch's varlen_attn, how it is told 'causal'): torch 2.10 and 2.11 take `is_causal`, later releases a
    sliding window, where (-1, 0) is causal."""
    import inspect

    from torch.nn.attention.varlen import varlen_attn

    params = inspect.signature(varlen_attn).parameters
    return varlen_attn, ({"is_causal": True} if "is_causal" in params else {"window_size": (-1, 0)})


# ---- the attention kernels alone ----
def attention(spec, dev) -> None:
    from cpp_data.harness.attention import document_segments

    varlen_attn, causal = _varlen()

    b, s, h, d = BATCH, spec["seq_length"], 12, 64
    batches = _batches(spec, b, 6)
    print("cuDNN ragged layouts:", probe(dev))
    torch.manual_seed(0)
    base = [torch.randn(b * s, h, d, device=dev, dtype=torch.bfloat16) for _ in range(3)]
    grad = torch.randn(b * s, h, d, device=dev, dtype=torch.bfloat16)
    scale = 1 / math.sqrt(d)

    def run(fn, cu):
        q, k, v = (t.clone().requires_grad_() for t in base)
        out = fn(q, k, v, cu)
        out.backward(grad)
        return out, q.grad, k.grad, v.grad

    fns = {
        "fa2-varlen": lambda q, k, v, cu: varlen_attn(q, k, v, cu, cu, s, s, scale=scale, **causal),
        "cudnn-varlen": lambda q, k, v, cu: cudnn_varlen_attn(q, k, v, cu, cu, s, s, scale=scale),
        "cudnn-aten": lambda q, k, v, cu: cudnn_aten_attn(q, k, v, cu, cu, s, s, scale=scale),
        "cudnn-causal-rows (no segments)": lambda q, k, v, cu: torch.nn.functional.scaled_dot_product_attention(
            *(t.view(b, s, h, d).transpose(1, 2) for t in (q, k, v)), is_causal=True, scale=scale
        ).transpose(1, 2).reshape(b * s, h, d),
    }
    cus = [document_segments(x["position_ids"]).to(dev) for x in batches]
    print("documents per batch of 32 rows:", [len(c) - 1 for c in cus])
    ref = run(fns["fa2-varlen"], cus[0])
    for name, fn in fns.items():
        try:
            got = run(fn, cus[0])
            if "segments" not in name:
                errs = [((a.float() - r.float()).abs().max() / r.float().abs().max()).item() for a, r in zip(got, ref)]
                print(f"{name}: max |diff| / max |fa2| for out, dq, dk, dv: {[f'{e:.2e}' for e in errs]}")
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            run(fn, cus[1])  # a new document count: cuDNN builds a plan for it
            torch.cuda.synchronize()
            first = time.perf_counter() - t0
            times = []
            for _ in range(3):
                for cu in cus[:4]:
                    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    e0.record()
                    run(fn, cu)
                    e1.record()
                    torch.cuda.synchronize()
                    times.append(e0.elapsed_time(e1))
            print(f"{name}: forward+backward {sorted(times)[len(times) // 2]:.2f} ms per 32 x {s} "
                  f"(median of {len(times)}; first call on a new segment count {first * 1e3:.0f} ms)")
        except Exception as e:  # an experiment: report and go on
            print(f"{name}: failed: {type(e).__name__}: {str(e)[:300]}")


# ---- whole steps ----
def _kernels(prof, micro_batches: int) -> None:
    per = defaultdict(lambda: [0.0, 0])
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            per[e.name][0] += e.device_time_total
            per[e.name][1] += 1
    total = sum(t for t, _ in per.values()) / micro_batches / 1e3
    print(f"   {total:.1f} ms of kernels per micro batch; by kernel (ms per micro batch, calls per micro batch):")
    for name, (t, n) in sorted(per.items(), key=lambda kv: -kv[1][0])[:30]:
        print(f"   {t / micro_batches / 1e3:7.2f}  {n / micro_batches:5.0f}  {name[:120]}")


def steps(spec, dev, impl: str, micro: int, patch: str | None, prof_: bool, out: Path | None) -> None:
    from cpp_data.harness.loss import megatron_loss, micro_batch_loss
    from cpp_data.harness.model import build_model
    from cpp_data.harness.presets import PEAK_BF16_FLOPS, flops_per_token
    from cpp_data.harness.train import init_distributed

    accum = BATCH // micro
    batches = _batches(spec, micro, (WARM_STEPS + TIMED_STEPS) * accum)
    seq, vocab = spec["seq_length"], spec["vocab_size"]
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.manual_seed(0)
    if impl == "harness":
        init_distributed(dev, 0)
        if patch == "megatron-rope":
            from megatron.core.models.common.embeddings import rope_utils
            from megatron.core.transformer import attention as mattn

            import cpp_data.harness.model as hm
            hm._rope_from_table = lambda: None
            hm._CosSinTable = lambda rope, *a: rope
            mattn.apply_rotary_pos_emb = rope_utils.apply_rotary_pos_emb
        model, config = build_model("gpt-125m", vocab, seq, dev)
        if patch == "megatron-bias-gelu":
            config.bias_activation_fusion = True  # megatron-core's fused bias-GeLU autograd.Function
            for layer in model.decoder.layers:
                layer.mlp.activation_func = torch.nn.functional.gelu
        fwd = torch.compile(megatron_loss)

        def micro_step(batch):
            micro_batch_loss(model, batch, dev, True, fwd).div(accum).backward()
    else:
        import reference_gpt

        model = reference_gpt.GPT("gpt-125m", vocab, seq).to(dev)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
        cnet = torch.compile(model)

        def micro_step(batch):
            x = batch["tokens"].to(dev, non_blocking=True)
            y = batch["labels"].to(dev, non_blocking=True)
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = cnet(x, y) / accum
            loss.backward()

    it = iter(batches)

    def step(data=None):
        opt.zero_grad(set_to_none=True)
        for _ in range(accum):
            micro_step(next(data or it))
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()

    t0 = time.perf_counter()
    for _ in range(WARM_STEPS):
        step()
    torch.cuda.synchronize()
    warm_s = time.perf_counter() - t0
    torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    for _ in range(TIMED_STEPS):
        step()
    torch.cuda.synchronize()
    dt = time.perf_counter() - t0
    params = sum(p.numel() for p in model.parameters())
    rate = BATCH * seq * TIMED_STEPS / dt
    fpt = flops_per_token(params, "gpt-125m", seq)
    peak = next(v for k, v in PEAK_BF16_FLOPS.items() if k in torch.cuda.get_device_name(0))
    rec = {"impl": impl, "patch": patch, "micro_batch_size": micro, "tokens_per_s": round(rate, 1),
           "mfu": round(rate * fpt / peak, 4), "step_ms": round(dt / TIMED_STEPS * 1e3, 1),
           "max_memory_gib": round(torch.cuda.max_memory_allocated() / 2**30, 2), "warm_s": round(warm_s, 1),
           "parameters": params, "torch": torch.__version__}
    print(json.dumps(rec))
    if out:
        with open(out, "a") as f:
            f.write(json.dumps(rec) + "\n")
    if prof_:
        again = iter(batches)
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            for _ in range(2):
                step(again)
            torch.cuda.synchronize()
        print(f"== {impl}{' + ' + patch if patch else ''}, compiled, micro batch {micro}:")
        _kernels(prof, 2 * accum)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("launch_spec", type=Path)
    ap.add_argument("what", choices=("attention", "harness", "reference"))
    ap.add_argument("--micro-batch-size", type=int, default=32)
    ap.add_argument("--patch", choices=("megatron-rope", "megatron-bias-gelu"))
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--json", type=Path)
    a = ap.parse_args()
    from cpp_data.schemas.launch_spec import load_launch_spec

    dev = torch.device("cuda", 0)
    torch.cuda.set_device(dev)
    spec = load_launch_spec(a.launch_spec)
    if a.what == "attention":
        attention(spec, dev)
    else:
        steps(spec, dev, a.what, a.micro_batch_size, a.patch, a.profile, a.json)


if __name__ == "__main__":
    main()
