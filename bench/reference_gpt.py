"""A plain-PyTorch GPT of the harness's shape: the speed the GPU gives, for bench/gpu_harness.py to compare with.

Written for this comparison and nothing else (nanoGPT's layout): token embedding tied to the output layer,
pre-LayerNorm blocks with biases, RoPE on queries and keys, `scaled_dot_product_attention(is_causal=True)`
(FlashAttention), a 4x GeLU MLP, bf16 autocast over fp32 weights, fused AdamW, torch.compile. The shape is
the harness preset's (harness/presets.py), so the parameter count equals the harness's megatron-core GPTModel.

It reads the same packed rows as the harness, straight from the .bin (rows are seq_length ids back to back,
docs/FORMATS.md), in order; it does not cut attention at document boundaries, so it is an upper bound for the
harness on packed rows, which does.

usage: python bench/reference_gpt.py PREFIX --model gpt-125m --seq-length 2048 --batch-size 32 \
           --micro-batch-size 16 --steps 40 [--compile] [--json OUT.json]
"""

from __future__ import annotations

import argparse
import json
import struct
import sys
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "harness"))
from presets import PEAK_BF16_FLOPS, SIZES, flops_per_token  # noqa: E402  (the harness's presets, torch-free,

# without installing cpp_data: the same FLOP count and peak as the harness's MFU)

# Megatron .idx header: 9-byte magic, <Q version, <B dtype code (docs/FORMATS.md)
DTYPES = {1: np.uint8, 2: np.int8, 3: np.int16, 4: np.int32, 5: np.int64, 6: np.float64, 7: np.float32,
          8: np.uint16}


def read_tokens(prefix: str) -> np.ndarray:
    with open(prefix + ".idx", "rb") as f:
        head = f.read(18)
    code = struct.unpack("<B", head[17:18])[0]
    return np.memmap(prefix + ".bin", dtype=DTYPES[code], mode="r")


def rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate halves (Megatron's non-interleaved RoPE): x [b, h, s, d]."""
    a, b = x.chunk(2, dim=-1)
    return x * cos + torch.cat([-b, a], dim=-1) * sin


class Block(nn.Module):
    def __init__(self, d: int, heads: int, ffn: int):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc1, self.fc2 = nn.Linear(d, ffn), nn.Linear(ffn, d)

    def forward(self, x, cos, sin):
        b, s, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, s, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(rope(q, cos, sin), rope(k, cos, sin), v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(b, s, d))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, size: str, vocab: int, seq: int):
        super().__init__()
        s = SIZES[size]
        d, self.heads = s.hidden_size, s.num_attention_heads
        self.emb = nn.Embedding(vocab, d)
        self.blocks = nn.ModuleList(Block(d, s.num_attention_heads, s.ffn_hidden_size) for _ in range(s.num_layers))
        self.ln = nn.LayerNorm(d)
        hd = d // s.num_attention_heads
        inv = 1.0 / (10000 ** (torch.arange(0, hd, 2).float() / hd))
        ang = torch.outer(torch.arange(seq).float(), inv)
        ang = torch.cat([ang, ang], dim=-1)
        self.register_buffer("cos", ang.cos()[None, None], persistent=False)
        self.register_buffer("sin", ang.sin()[None, None], persistent=False)
        for p in self.parameters():
            if p.dim() >= 2:
                nn.init.normal_(p, std=0.02)

    def forward(self, idx, targets):
        x = self.emb(idx)
        for blk in self.blocks:
            x = blk(x, self.cos, self.sin)
        logits = self.ln(x) @ self.emb.weight.t()
        return F.cross_entropy(logits.float().view(-1, logits.size(-1)), targets.reshape(-1))


def run(prefix: str, model: str, seq: int, batch: int, micro: int, steps: int, compile_: bool,
        vocab: int) -> dict:
    torch.manual_seed(0)
    torch.backends.cuda.matmul.allow_tf32 = True
    dev = torch.device("cuda")
    tokens = read_tokens(prefix)
    rows = len(tokens) // (seq + 1)
    net = GPT(model, vocab, seq).to(dev)
    params = sum(p.numel() for p in net.parameters())
    opt = torch.optim.AdamW(net.parameters(), lr=6e-4, betas=(0.9, 0.95), weight_decay=0.1, fused=True)
    step_fn = torch.compile(net) if compile_ else net
    accum = batch // micro
    times, losses, row = [], [], 0
    torch.cuda.reset_peak_memory_stats()
    for _ in range(steps):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        for _ in range(accum):
            idx = np.stack([tokens[(row + i) % rows * (seq + 1):][:seq + 1] for i in range(micro)]).astype(np.int64)
            row += micro
            x = torch.from_numpy(idx).pin_memory().to(dev, non_blocking=True)
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = step_fn(x[:, :-1], x[:, 1:]) / accum
            loss.backward()
        torch.nn.utils.clip_grad_norm_(net.parameters(), 1.0)
        opt.step()
        losses.append(loss.item() * accum)  # waits for the step
        times.append(time.perf_counter() - t0)
    warm = times[len(times) // 4:] if len(times) >= 8 else times[1:]  # after compilation and warm-up
    rate = batch * seq * len(warm) / sum(warm)
    flops = flops_per_token(params, model, seq)
    peak = next((v for k, v in PEAK_BF16_FLOPS.items() if k in torch.cuda.get_device_name(0)), None)
    return {"impl": "reference", "compiled": compile_, "model": model, "parameters": params, "seq_length": seq,
            "batch_size": batch, "micro_batch_size": micro, "steps": steps, "tokens_per_s": round(rate, 1),
            "flops_per_token": flops, "mfu": round(rate * flops / peak, 4) if peak else None,
            "max_memory_gib": round(torch.cuda.max_memory_allocated() / 2**30, 2),
            "first_loss": round(losses[0], 4), "last_loss": round(losses[-1], 4),
            "device_name": torch.cuda.get_device_name(0), "torch": torch.__version__}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("prefix", help="a Megatron bin/idx prefix (packed rows)")
    ap.add_argument("--model", default="gpt-125m", choices=sorted(SIZES))
    ap.add_argument("--vocab-size", type=int, default=65536)
    ap.add_argument("--seq-length", type=int, default=2048)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--micro-batch-size", type=int, default=16)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--compile", action="store_true")
    ap.add_argument("--json", type=Path, help="append the result as one JSON line")
    a = ap.parse_args()
    r = run(a.prefix, a.model, a.seq_length, a.batch_size, a.micro_batch_size, a.steps, a.compile, a.vocab_size)
    print(json.dumps(r))
    if a.json:
        with open(a.json, "a") as f:
            f.write(json.dumps(r) + "\n")


if __name__ == "__main__":
    main()
