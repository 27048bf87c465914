"""The harness's default GPT, in plain PyTorch: the function of megatron-core's GPTModel as harness/model.py
configures it, with its parameter names, so a state dict moves between the two (less megatron-core's empty
`_extra_state` entries: harness/checkpoint.load_weights) and `--model-impl megatron` stays the oracle.

The model, nanoGPT's layout under megatron-core's names: a word embedding (no position embedding: RoPE),
pre-LayerNorm blocks (eps 1e-5) with biases, linear_qkv laid out per head as [q | k | v] (megatron-core's
grouping with one query per group), RoPE non-interleaved over the whole head at the row's offsets 0..s-1 (cos and
sin in fp32, cast to the queries' dtype, as harness/model._rope_from_table), softmax scale 1/sqrt(head dim), a
tanh-GeLU MLP, the output layer tied to the embedding; megatron-core's initialisation (normal, std 0.02; the
two projections into the residual stream 0.02/sqrt(2 layers); biases 0).

Why it exists: the same model through megatron-core ran at 0.86-0.92 of a plain PyTorch GPT's tokens/s on one
GPU (bench/results/gpu-h100-prototype.jsonl); megatron-core's layers are built for tensor and pipeline
parallelism the harness does not use, and what torch.compile makes of them is slower. Compiled, this model is
compiled region by region (`compile_regions`): one block, which all layers share, and the loss head, so the first
step pays one block's compilation instead of the whole model's.
"""

from __future__ import annotations

import math
from typing import Any, cast

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

from cpp_data.harness.attention import Documents, attend, documents
from cpp_data.harness.presets import ModelSize


class _Names(nn.Module):
    """A level of megatron-core's module tree that holds only other modules (self_attention, mlp, ...)."""


class Block(nn.Module):
    """One transformer layer: x + attention(LN(x)), then + MLP(LN(x))."""

    def __init__(self, size: ModelSize):
        super().__init__()
        d, f = size.hidden_size, size.ffn_hidden_size
        self.heads = size.num_attention_heads
        self.input_layernorm = nn.LayerNorm(d, eps=1e-5)
        self.self_attention = _Names()
        self.self_attention.linear_proj = nn.Linear(d, d)  # megatron-core registers it before linear_qkv
        self.self_attention.linear_qkv = nn.Linear(d, 3 * d)
        self.pre_mlp_layernorm = nn.LayerNorm(d, eps=1e-5)
        self.mlp = _Names()
        self.mlp.linear_fc1 = nn.Linear(d, f)
        self.mlp.linear_fc2 = nn.Linear(f, d)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, docs: Documents | None) -> torch.Tensor:
        b, s, d = x.shape
        hd = d // self.heads
        attn, mlp = cast(Any, self.self_attention), cast(Any, self.mlp)
        q, k, v = attn.linear_qkv(self.input_layernorm(x)).view(b, s, self.heads, 3 * hd).split(hd, dim=-1)
        cos, sin = cos.to(q.dtype), sin.to(q.dtype)
        # v.contiguous(): q and k are RoPE's fresh tensors, v a strided slice of linear_qkv's output; compiled,
        # inductor's flex_attention got such mixed layouts wrong on CPU (torch 2.13, tests/test_attention_paths.py)
        q, k, v = (t.transpose(1, 2) for t in (_rope(q, cos, sin), _rope(k, cos, sin), v.contiguous()))
        y = attend(q, k, v, docs, 1.0 / math.sqrt(hd)).transpose(1, 2).reshape(b, s, d)
        x = x + attn.linear_proj(y)
        return x + mlp.linear_fc2(F.gelu(mlp.linear_fc1(self.pre_mlp_layernorm(x)), approximate="tanh"))


def _rope(t: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate halves (megatron-core's non-interleaved RoPE): t [b, s, heads, dim], cos/sin [s, 1, dim]."""
    t1, t2 = t.chunk(2, dim=-1)
    return t * cos + torch.cat((-t2, t1), dim=-1) * sin


def head_loss(x: torch.Tensor, norm: nn.LayerNorm, weight: torch.Tensor, labels: torch.Tensor,
              loss_mask: torch.Tensor) -> torch.Tensor:
    """Mean next-token cross-entropy over loss_mask from the last block's output: final LayerNorm, the tied output
    layer, the loss in fp32. Compiled, the bf16 logits' cast and log-softmax fuse into one pass over the logits."""
    logits = F.linear(norm(x), weight)
    losses = F.cross_entropy(logits.float().flatten(0, 1), labels.flatten(), reduction="none")
    mask = loss_mask.flatten().float()
    return (losses * mask).sum() / mask.sum().clamp(min=1)


class PlainGPT(nn.Module):
    """GPT of a harness preset (harness/presets.SIZES) for rows of up to `seq_length` tokens."""

    def __init__(self, size: ModelSize, vocab_size: int, seq_length: int, rotary_base: int = 10000):
        super().__init__()
        d, heads = size.hidden_size, size.num_attention_heads
        self.embedding = _Names()
        self.embedding.word_embeddings = nn.Embedding(vocab_size, d)
        self.decoder = _Names()
        self.decoder.layers = nn.ModuleList(Block(size) for _ in range(size.num_layers))
        self.decoder.final_layernorm = nn.LayerNorm(d, eps=1e-5)
        hd = d // heads
        inv = 1.0 / (rotary_base ** (torch.arange(0, hd, 2, dtype=torch.float32) / hd))
        angles = torch.outer(torch.arange(seq_length, dtype=torch.float32), inv)
        angles = torch.cat([angles, angles], dim=-1)[:, None, :]  # [s, 1, hd], as megatron-core lays them out
        self.register_buffer("cos", angles.cos(), persistent=False)
        self.register_buffer("sin", angles.sin(), persistent=False)
        self.recompute = False  # activation checkpointing per block (harness/memory.py decides)
        self._head_loss: Any = head_loss
        self._init_weights(size.num_layers)

    def _init_weights(self, layers: int) -> None:
        for name, p in self.named_parameters():
            if p.dim() >= 2:
                into_residual = name.endswith(("linear_proj.weight", "linear_fc2.weight"))
                nn.init.normal_(p, std=0.02 / math.sqrt(2 * layers) if into_residual else 0.02)
            elif name.endswith("bias"):
                nn.init.zeros_(p)

    def compile_regions(self) -> None:
        """torch.compile each block in place (one compiled graph serves every layer: same code, parameters as
        inputs) and the loss head; parameter names and the state dict stay as they are."""
        for block in cast(Any, self.decoder).layers:
            block.compile()
        self._head_loss = torch.compile(head_loss)

    def hidden(self, input_ids: torch.Tensor, position_ids: torch.Tensor, docs: Documents | None) -> torch.Tensor:
        """The last block's output [b, s, d]."""
        decoder = cast(Any, self.decoder)
        x = cast(Any, self.embedding).word_embeddings(input_ids)
        s = input_ids.shape[1]
        cos, sin = cast(torch.Tensor, self.cos)[:s], cast(torch.Tensor, self.sin)[:s]
        for block in decoder.layers:
            if self.recompute and torch.is_grad_enabled():
                x = checkpoint(block, x, cos, sin, docs, use_reentrant=False)
            else:
                x = block(x, cos, sin, docs)
        return x

    def forward(self, input_ids: torch.Tensor, position_ids: torch.Tensor, labels: torch.Tensor | None = None,
                loss_mask: torch.Tensor | None = None, attention_mask: torch.Tensor | None = None,
                isolate: bool = False) -> torch.Tensor:
        """The mean loss over loss_mask when `labels` are given (the training step: through forward, so that
        DistributedDataParallel sees it), else the logits [b, s, vocab]. Documents are kept apart by `isolate`
        (packed rows: from the position ids) or by a Megatron mask ([b, 1, s, s], True = masked out, as GPTDataset
        builds it); else attention is causal over whole rows."""
        docs = documents(position_ids) if isolate else (
            Documents(mask=~attention_mask) if attention_mask is not None else None)
        x = self.hidden(input_ids, position_ids, docs)
        decoder, weight = cast(Any, self.decoder), cast(Any, self.embedding).word_embeddings.weight
        if labels is None:
            return F.linear(decoder.final_layernorm(x), weight)
        if loss_mask is None:
            loss_mask = torch.ones_like(labels)
        return self._head_loss(x, decoder.final_layernorm, weight, labels, loss_mask)
