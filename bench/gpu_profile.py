"""Where a training step's GPU time goes: the harness (compiled, packed rows) and the plain-PyTorch reference,
each profiled over a few micro batches after warm-up, kernels ranked by CUDA time.

usage (on the GPU machine): python bench/gpu_profile.py LAUNCH_JSON [--micro-batch-size 16]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, str(Path(__file__).resolve().parent))


def _profile(step, label: str, warm: int = 6, measured: int = 4) -> None:
    for _ in range(warm):
        step()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(measured):
            step()
        torch.cuda.synchronize()
    events = prof.key_averages()
    total = sum(e.self_device_time_total for e in events) / measured / 1e3
    print(f"== {label}: {total:.1f} ms of kernels per micro batch")
    print(events.table(sort_by="self_cuda_time_total", row_limit=22, max_name_column_width=70))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("launch_spec", type=Path)
    ap.add_argument("--micro-batch-size", type=int, default=16)
    a = ap.parse_args()
    from cpp_data.harness.data import build_datasets, dataset_of
    from cpp_data.harness.model import build_model
    from cpp_data.harness.train import _forward_loss, _init_distributed, _loss
    from cpp_data.schemas.launch_spec import load_launch_spec

    dev = torch.device("cuda", 0)
    torch.cuda.set_device(dev)
    spec = load_launch_spec(a.launch_spec)
    seq, mb = spec["seq_length"], a.micro_batch_size
    _init_distributed(dev, 0)
    train, _ = build_datasets(spec, dataset_of(spec, "packed"), seq, 1, 20 * mb, 0, Path("/tmp/prof-cache"),
                              attention_mask=False)
    batches = [{k: torch.stack([train[i][k] for i in range(j * mb, (j + 1) * mb)]).pin_memory()
                for k in ("tokens", "position_ids", "labels", "loss_mask")} for j in range(10)]
    model, _ = build_model("gpt-125m", spec["vocab_size"], seq, dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    fwd = torch.compile(_forward_loss)
    it = iter(range(10**9))

    def harness_step():
        loss = _loss(model, batches[next(it) % 10], dev, True, fwd)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    _profile(harness_step, "harness (compiled, packed rows, document segments)")

    import reference_gpt

    net = reference_gpt.GPT("gpt-125m", spec["vocab_size"], seq).to(dev)
    ropt = torch.optim.AdamW(net.parameters(), lr=1e-4, fused=True)
    cnet = torch.compile(net)
    toks = [b["tokens"].to(dev) for b in batches]

    def reference_step():
        x = toks[next(it) % 10]
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = cnet(x, x)
        loss.backward()
        ropt.step()
        ropt.zero_grad(set_to_none=True)

    _profile(reference_step, "reference (compiled, causal)")


if __name__ == "__main__":
    main()
