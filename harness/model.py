"""The harness's models: `build_model` gives the plain-PyTorch GPT (harness/plain_model.py, `impl="plain"`) or
megatron-core's GPTModel with the local (no TransformerEngine) layer spec (`impl="megatron"`): the same model
family Megatron trains, with no fused kernels to install, and the oracle the plain model is checked against.

In the megatron-core model the spec's core attention is swapped for harness/attention.SDPAAttention (PyTorch's
kernels) unless `attention="local"` keeps megatron-core's unfused DotProductAttention; both compute the same
function (tests/test_harness.py compares them)."""

from __future__ import annotations

from dataclasses import asdict
from typing import cast

import torch
import torch.nn.functional as F

from cpp_data.harness.presets import SIZES
from cpp_data.pipeline.foundation.errors import BadInput

ATTENTION = ("sdpa", "local")
IMPLS = ("plain", "megatron")


def _trace_friendly_row_parallel_linear() -> None:
    """RowParallelLinear.forward (megatron-core 0.16) asks for its tensor-parallel group with `tp_group=None`,
    so every call warns "tp_group is None, using default tp group" on rank 0. torch.compile cannot trace a
    warning: each of the two RowParallelLinears per layer broke the graph, one of them inside the attention's
    offloading `with` block, which sends that whole frame back to eager. Here the lookup gives the same default
    group without the warning (tensor_parallel.layers calls it through its module globals, so replacing the
    name there changes nothing else)."""
    from megatron.core import parallel_state
    from megatron.core.tensor_parallel import layers

    def group(tp_group=None, is_expert=False, check_initialized=True):
        if tp_group is not None or not parallel_state.is_initialized():
            return tp_group
        if is_expert:
            return parallel_state.get_expert_tensor_parallel_group(check_initialized=check_initialized)
        return parallel_state.get_tensor_model_parallel_group(check_initialized=check_initialized)

    layers.get_tensor_model_parallel_group_if_none = group


def _gelu_tanh(x: torch.Tensor) -> torch.Tensor:
    """The MLP's activation: GeLU in its tanh approximation, the function megatron-core's fused bias-GeLU computes
    (fusions/fused_bias_gelu.py, what Megatron-LM runs on GPUs), as a plain expression after the bias add.
    megatron-core's fusion is an autograd.Function whose backward returns one gradient for input and bias;
    compiled, inductor recomputes the tanh for each of the two, which makes bias-GeLU slower than the
    reference's (bench/results/gpu-h200-profile.txt); from this expression it derives the backward itself. It is
    also the same function on CPU, where megatron-core's fusion is off and its default F.gelu (the exact, erf
    form) would run instead."""
    return F.gelu(x, approximate="tanh")


def _rope_from_table() -> None:
    """megatron-core's unfused RoPE (rope_utils._apply_rotary_pos_emb_bshd) takes the angles (fp32 [s, 1, 1, d])
    and computes cos and sin of them in every layer, for queries and keys. Compiled, inductor fuses those cos/sin
    into the rotation's elementwise kernels and recomputes them, with the angles' arange, per element of q and k,
    forward and backward: a visible share of the backward in a GPU profile.
    Here the model's rotary module hands out a table of cos and sin computed once (`_CosSinTable`), and the
    attention's `apply_rotary_pos_emb` (a module global of megatron.core.transformer.attention, so nothing else
    changes) rotates with it: the same values megatron-core would compute (cos and sin of the same fp32 angles,
    cast to the queries' dtype), loaded instead of recomputed. Any other angles (a last dimension that is not
    twice the head's, packed 'thd' layouts, YaRN's mscale) go to megatron-core's own function. Alone, it changes
    tokens/s by nothing measurable (bench/results/gpu-h200-speed.json, call 8)."""
    from megatron.core.models.common.embeddings import rope_utils
    from megatron.core.transformer import attention

    original = rope_utils.apply_rotary_pos_emb

    def apply(t, freqs, config, cu_seqlens=None, mscale=1.0, cp_group=None):
        if freqs.shape[-1] != 2 * t.shape[-1] or cu_seqlens is not None or mscale != 1.0:
            return original(t, freqs, config, cu_seqlens=cu_seqlens, mscale=mscale, cp_group=cp_group)
        cos, sin = freqs.to(t.dtype).chunk(2, dim=-1)
        x1, x2 = t.chunk(2, dim=-1)
        return t * cos + torch.cat((-x2, x1), dim=-1) * sin  # rope_utils._rotate_half, not interleaved

    attention.apply_rotary_pos_emb = apply


class _CosSinTable(torch.nn.Module):
    """GPTModel's rotary module, handing out cos and sin of its angles ([s, 1, 1, 2 d], fp32) instead of the angles
    (see _rope_from_table); a buffer outside the state dict, so checkpoints are unchanged."""

    def __init__(self, rope, seq_length: int, head_dim: int, device: torch.device):
        super().__init__()
        self.get_rotary_seq_len = rope.get_rotary_seq_len
        rope.inv_freq = rope.inv_freq.to(device)
        angles = rope.get_freqs_non_repeated(seq_length)
        angles = torch.cat((angles, angles), dim=-1)  # as RotaryEmbedding.get_emb lays them out
        if rope.rotary_interleaved or angles.shape[-1] != head_dim:
            raise ValueError("the cos/sin table is for non-interleaved RoPE over the whole head")
        self.register_buffer("cos_sin", torch.cat((angles.cos(), angles.sin()), dim=-1)[:, None, None, :],
                             persistent=False)

    def forward(self, max_seq_len: int, offset: int = 0, packed_seq: bool = False, cp_group=None):
        cos_sin = cast(torch.Tensor, self.cos_sin)  # a buffer (register_buffer)
        return cos_sin[offset:offset + max_seq_len]


def layer_spec(attention: str = "sdpa"):
    """megatron-core's local GPT layer spec, with the harness's core attention unless `attention="local"`."""
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec

    if attention not in ATTENTION:
        raise BadInput(f"unknown attention {attention!r}; known: {', '.join(ATTENTION)}")
    spec = get_gpt_layer_local_spec()  # a new spec object per call: changing it touches no other model
    if attention == "sdpa":
        from cpp_data.harness.attention import SDPAAttention

        spec.submodules.self_attention.submodules.core_attention = SDPAAttention
    return spec


def build_model(size: str, vocab_size: int, seq_length: int, device: torch.device, attention: str = "sdpa",
                impl: str = "megatron", recompute: bool = False):
    """(model, megatron-core's TransformerConfig or None) of a preset on `device`, in fp32 (bf16 comes from
    autocast); `recompute`: activation checkpointing, every layer recomputed in the backward."""
    if size not in SIZES:
        raise BadInput(f"unknown model size {size!r}; known: {', '.join(SIZES)}")
    if impl not in IMPLS:
        raise BadInput(f"unknown model implementation {impl!r}; known: {', '.join(IMPLS)}")
    if impl == "plain":
        if attention != "sdpa":
            raise BadInput(f"attention {attention!r} is megatron-core's own: it needs --model-impl megatron")
        from cpp_data.harness.plain_model import PlainGPT

        plain = PlainGPT(SIZES[size], vocab_size, seq_length)
        plain.recompute = recompute
        return plain.to(device), None
    return _megatron_model(size, vocab_size, seq_length, device, attention, recompute)


def _megatron_model(size: str, vocab_size: int, seq_length: int, device: torch.device, attention: str,
                    recompute: bool):
    from megatron.core.models.gpt.gpt_model import GPTModel
    from megatron.core.transformer.transformer_config import TransformerConfig

    s = SIZES[size]
    cuda = device.type == "cuda"
    if recompute and not cuda:  # its checkpoint saves and restores the CUDA RNG state
        raise BadInput("megatron-core's activation checkpointing runs on CUDA only; on CPU use --model-impl plain")
    _trace_friendly_row_parallel_linear()
    _rope_from_table()
    config = TransformerConfig(
        **asdict(s), use_cpu_initialization=not cuda, params_dtype=torch.float32,
        hidden_dropout=0.0, attention_dropout=0.0, gradient_accumulation_fusion=False,
        # bias+dropout+add fused by megatron-core's jit_fuser (torch.compile) on CUDA only; bias+GeLU see _gelu_tanh
        bias_activation_fusion=False, activation_func=_gelu_tanh, bias_dropout_fusion=cuda,
        apply_rope_fusion=False, masked_softmax_fusion=False, persist_layer_norm=False,
        pipeline_dtype=torch.float32,
        **({"recompute_granularity": "full", "recompute_method": "uniform", "recompute_num_layers": 1}
           if recompute else {}))
    model = GPTModel(config=config, transformer_layer_spec=layer_spec(attention), vocab_size=vocab_size,
                     max_sequence_length=seq_length, position_embedding_type="rope",
                     share_embeddings_and_output_weights=True)
    model = model.to(device)
    model.rotary_pos_emb = _CosSinTable(model.rotary_pos_emb, seq_length, config.kv_channels, device)
    return model, config


def count_parameters(model) -> int:
    return sum(p.numel() for p in model.parameters())
