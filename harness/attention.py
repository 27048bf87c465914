"""The harness's attention, on PyTorch's own kernels, for both models (harness/plain_model.py, harness/model.py).

`attend(q, k, v, docs, scale)` takes queries, keys and values as [b, heads, s, dim] and a batch's `Documents`:
- none (whole rows are one sequence: the documents export, or a reference run): causal
  `scaled_dot_product_attention`, which picks cuDNN or FlashAttention on CUDA;
- packed rows on CUDA: flex_attention with the rows' document BlockMask (harness/doc_mask.py), compiled into
  one Triton kernel that skips the blocks no query may see: isolating documents makes attention cheaper, not
  dearer (at 65,536 tokens a row it computes 1.3% of causal attention's blocks);
- packed rows on CPU, a row length that is not a whole number of blocks, or an explicit Megatron mask: SDPA
  with the boolean mask (CPU has no flex_attention backward).

Both models build the Documents once per forward (from the position ids, inside the compiled region) and hand
the same object to every layer. FlashAttention-2's variable-length kernel, which the harness ran before, is
gone: on the same rows flex_attention with this BlockMask was faster at every length measured (per layer,
forward and backward, on an H100: 3.45 ms vs 3.84 at 32 x 2048, 6.02 vs 6.31 at 4 x 16,384, 2.52 vs 9.47 at
1 x 65,536; bench/results/gpu-h100-prototype.jsonl, taken with this module's prototype).
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import torch
import torch.nn.functional as F
from torch.nn.attention.flex_attention import BlockMask, flex_attention

from cpp_data.harness.doc_mask import doc_block_mask, doc_dense_mask, doc_ids, fits_blocks


class Documents(NamedTuple):
    """How one batch keeps its documents apart: a BlockMask (flex_attention) or a boolean mask (SDPA, [b, 1, s, s],
    True = may attend). Exactly one is set. A NamedTuple: torch.compile traces its construction and takes it as an
    input like any tuple."""

    block_mask: BlockMask | None = None
    mask: torch.Tensor | None = None


def documents(position_ids: torch.Tensor) -> Documents:
    """The Documents of packed rows whose position ids restart at every document (GPTDataset's reset_position_ids)."""
    doc = doc_ids(position_ids)
    if position_ids.is_cuda and fits_blocks(position_ids.shape[-1]):
        return Documents(block_mask=doc_block_mask(doc))
    return Documents(mask=doc_dense_mask(doc))


_compiled_flex: Any = None


def flex(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, block_mask: BlockMask, scale: float) -> torch.Tensor:
    """flex_attention as a fused kernel: traced as it is inside a compiled model, compiled on its own when called
    eagerly on CUDA (eager flex_attention is an unfused reference that builds the whole score matrix), and left
    eager on CPU (tests: forward only; flex_attention has no CPU backward)."""
    global _compiled_flex
    if torch.compiler.is_compiling() or not q.is_cuda:
        return flex_attention(q, k, v, block_mask=block_mask, scale=scale)
    if _compiled_flex is None:
        _compiled_flex = torch.compile(flex_attention, dynamic=False)
    return _compiled_flex(q, k, v, block_mask=block_mask, scale=scale)


def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, docs: Documents | None, scale: float) -> torch.Tensor:
    """Causal attention of q, k, v [b, heads, s, dim], within documents when `docs` says so; out [b, heads, s, dim]."""
    if docs is None:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale)
    if docs.block_mask is not None:
        return flex(q, k, v, docs.block_mask, scale)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=docs.mask, scale=scale)


def document_segments(position_ids: torch.Tensor) -> torch.Tensor:
    """cu_seqlens (int32, [documents + 1]) of a batch of packed rows flattened row after row: megatron-core's way of
    naming packed documents (PackedSeqParams), which SDPAAttention still accepts."""
    flat = position_ids.reshape(-1)
    starts = torch.nonzero(flat == 0).reshape(-1)
    end = torch.tensor([flat.numel()], dtype=starts.dtype, device=starts.device)
    return torch.cat([starts, end]).to(torch.int32)


def segments_mask(cu_seqlens: torch.Tensor, batch: int, seq: int) -> torch.Tensor:
    """The boolean mask ([b, 1, s, s], True = may attend) of segments: causal, and within one document."""
    total = batch * seq
    doc = torch.zeros(total, dtype=torch.int64, device=cu_seqlens.device)
    doc[cu_seqlens[1:-1].long()] = 1
    return doc_dense_mask(doc.cumsum(0).view(batch, seq))


class SDPAAttention(torch.nn.Module):
    """core_attention for megatron-core's local GPT layer spec (harness/model.py puts it there): the same constructor
    and forward contract as megatron-core's DotProductAttention (query/key/value [s, b, heads, dim] in, context
    [s, b, heads * dim] out), computed by `attend`. Which documents: `packed_seq_params.documents` (the harness's
    DocumentParams), else megatron-core's cu_seqlens, else an explicit Megatron mask ([b, 1, s, s], True = masked
    out), else causal over the whole row."""

    def __init__(self, config, layer_number: int, attn_mask_type=None, attention_type: str = "self",
                 attention_dropout: float | None = None, softmax_scale: float | None = None,
                 cp_comm_type: str | None = None, pg_collection=None):
        super().__init__()
        if config.context_parallel_size != 1 or config.tensor_model_parallel_size != 1:
            raise ValueError("SDPAAttention runs without tensor or context parallelism")
        if config.num_query_groups != config.num_attention_heads:
            raise ValueError("SDPAAttention takes one key/value head per query head")
        if (config.attention_dropout if attention_dropout is None else attention_dropout) != 0.0:
            raise ValueError("SDPAAttention runs without attention dropout")
        self.softmax_scale = softmax_scale or 1.0 / math.sqrt(config.kv_channels)

    def forward(self, query, key, value, attention_mask, attn_mask_type=None, attention_bias=None,
                packed_seq_params=None):
        if attention_bias is not None:
            raise ValueError("SDPAAttention takes no attention bias")
        s, b, h, d = query.shape
        if query.is_cuda and torch.is_autocast_enabled("cuda"):  # megatron-core's RoPE returns fp32 queries/keys
            dtype = torch.get_autocast_dtype("cuda")
            query, key, value = query.to(dtype), key.to(dtype), value.to(dtype)
        # value is a strided slice of linear_qkv's output, query and key RoPE's fresh tensors: compiled, inductor's
        # flex_attention got such mixed layouts wrong on CPU (torch 2.13, tests/test_attention_paths.py); one
        # layout for all three avoids it
        value = value.contiguous()
        docs = _documents_of(packed_seq_params, attention_mask, b, s)
        q, k, v = (t.permute(1, 2, 0, 3) for t in (query, key, value))  # [b, heads, s, dim]
        out = attend(q, k, v, docs, self.softmax_scale)
        # contiguous [s, b, h * d]: a transposed view would turn linear_proj's matmul into a batched one of s tiny
        # [b, h * d] products (1.7 ms per layer at b = 16 on an H200, bench/results/gpu-h200-profile.txt)
        return out.permute(2, 0, 1, 3).reshape(s, b, h * d)


def _documents_of(packed_seq_params, attention_mask, b: int, s: int) -> Documents | None:
    """The Documents SDPAAttention is handed, in whichever of megatron-core's forms it comes."""
    docs = getattr(packed_seq_params, "documents", None)
    if docs is not None:
        return docs
    cu = getattr(packed_seq_params, "cu_seqlens_q", None)
    if cu is not None:
        return Documents(mask=segments_mask(cu, b, s))
    if attention_mask is not None:
        return Documents(mask=~attention_mask)
    return None
