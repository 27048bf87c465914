"""A fast core attention for megatron-core's local layer spec, on PyTorch's own attention kernels.

megatron-core's local spec computes attention unfused (DotProductAttention: scores as a [b, heads, s, s]
tensor, masked softmax, a second matmul), and its fused path needs TransformerEngine, whose wheels are far
larger than anything the harness can carry to a GPU machine. This module is a drop-in `core_attention` for
the spec (same constructor and forward contract as DotProductAttention: query/key/value [s, b, heads, dim]
in, context [s, b, heads * dim] out) that calls PyTorch's kernels instead:

- no mask (`attention_mask=None`, causal spec): `scaled_dot_product_attention(is_causal=True)`, which picks
  FlashAttention on CUDA;
- document segments (`packed_seq_params.cu_seqlens_q`, packed rows whose documents must not see each other):
  on CUDA, `torch.nn.attention.varlen.varlen_attn`, FlashAttention over the batch flattened to one stream cut
  at every document start, causal within each document (nothing of another document is read at all); on CPU
  (no varlen kernel) the same segments as a boolean mask for SDPA;
- an explicit Megatron mask ([b, 1, s, s], True = masked out, as GPTDataset builds it): SDPA with that mask.

Why segments rather than a mask for packed rows: a [b, 1, s, s] mask is built per sample on the data loader's
CPU and moved to the GPU every step, and it rules FlashAttention out (SDPA falls back to the memory-efficient
kernel, which reads the mask); segments are b x (documents + 1) integers and keep FlashAttention.
bench/results/gpu-h200-*.json measures the three paths. docs/DESIGN.md section 10 gives the loss rule.
"""

from __future__ import annotations

import inspect
import math

import torch
import torch.nn.functional as F


def document_segments(position_ids: torch.Tensor) -> torch.Tensor:
    """cu_seqlens (int32, [documents + 1]) of a batch of packed rows flattened row after row.

    With `reset_position_ids`, GPTDataset restarts position ids at 0 after every EOD, and every row starts at
    0, so a document starts exactly where the position id is 0."""
    flat = position_ids.reshape(-1)
    starts = torch.nonzero(flat == 0).reshape(-1)
    end = torch.tensor([flat.numel()], dtype=starts.dtype, device=starts.device)
    return torch.cat([starts, end]).to(torch.int32)


def segments_mask(cu_seqlens: torch.Tensor, batch: int, seq: int) -> torch.Tensor:
    """The boolean mask ([b, 1, s, s], True = may attend) of segments: causal, and within one document."""
    total = batch * seq
    doc = torch.zeros(total, dtype=torch.int64, device=cu_seqlens.device)
    doc[cu_seqlens[1:-1].long()] = 1
    doc = doc.cumsum(0).view(batch, seq)
    same = doc[:, :, None] == doc[:, None, :]
    causal = torch.ones(seq, seq, dtype=torch.bool, device=cu_seqlens.device).tril()
    return (same & causal)[:, None]


def _varlen():
    """(varlen_attn, how it is told 'causal') where this torch has it, else None. torch 2.10 and 2.11 take
    `is_causal`, later releases a sliding window, where (-1, 0) is causal."""
    try:
        from torch.nn.attention.varlen import varlen_attn
    except ImportError:
        return None
    params = inspect.signature(varlen_attn).parameters
    if "is_causal" in params:
        return varlen_attn, {"is_causal": True}
    if "window_size" in params:
        return varlen_attn, {"window_size": (-1, 0)}
    return None


class SDPAAttention(torch.nn.Module):
    """core_attention for megatron-core's local GPT layer spec (harness/model.py puts it there)."""

    def __init__(self, config, layer_number: int, attn_mask_type=None, attention_type: str = "self",
                 attention_dropout: float | None = None, softmax_scale: float | None = None,
                 cp_comm_type: str | None = None, pg_collection=None):
        super().__init__()
        if config.context_parallel_size != 1 or config.tensor_model_parallel_size != 1:
            raise ValueError("SDPAAttention runs without tensor or context parallelism")
        self.config = config
        self.head_dim = config.kv_channels
        self.softmax_scale = softmax_scale or 1.0 / math.sqrt(self.head_dim)
        self.dropout = config.attention_dropout if attention_dropout is None else attention_dropout
        self.gqa = config.num_query_groups != config.num_attention_heads
        self.varlen = _varlen()

    def forward(self, query, key, value, attention_mask, attn_mask_type=None, attention_bias=None,
                packed_seq_params=None):
        if attention_bias is not None:
            raise ValueError("SDPAAttention takes no attention bias")
        s, b, h, d = query.shape
        p = self.dropout if self.training else 0.0
        if query.is_cuda and torch.is_autocast_enabled("cuda"):  # megatron-core's RoPE returns fp32 queries/keys
            dtype = torch.get_autocast_dtype("cuda")
            query, key, value = query.to(dtype), key.to(dtype), value.to(dtype)
        cu = packed_seq_params.cu_seqlens_q if packed_seq_params is not None else None
        if cu is not None and query.is_cuda and self.varlen is not None and p == 0.0:
            varlen_attn, causal = self.varlen
            flat = [t.transpose(0, 1).reshape(b * s, t.shape[2], d) for t in (query, key, value)]
            out = varlen_attn(*flat, cu, cu, s, s, scale=self.softmax_scale, **causal)
            # contiguous [s, b, h * d]: a transposed view would turn linear_proj's matmul into a batched one of
            # s tiny [b, h * d] products, slow on a GPU (bench/results/gpu-h200-profile.txt)
            return out.view(b, s, h * d).transpose(0, 1).contiguous()
        q, k, v = (t.permute(1, 2, 0, 3) for t in (query, key, value))  # [b, heads, s, dim]
        if cu is not None:
            mask, causal = segments_mask(cu, b, s), False
        elif attention_mask is not None:
            mask, causal = ~attention_mask, False
        else:
            mask, causal = None, True
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=p, is_causal=causal,
                                             scale=self.softmax_scale, enable_gqa=self.gqa)
        return out.permute(2, 0, 1, 3).reshape(s, b, h * d)
