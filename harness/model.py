"""GPT configurations of the harness, built as megatron-core GPTModels with the local (no TransformerEngine)
layer spec: the same model family Megatron trains, with no fused kernels to install.

The spec's core attention is swapped for harness/attention.SDPAAttention (PyTorch's FlashAttention and
variable-length kernels) unless `attention="local"` keeps megatron-core's unfused DotProductAttention; both
compute the same function (tests/test_harness.py compares them)."""

from __future__ import annotations

from dataclasses import asdict

import torch

from cpp_data.harness.presets import SIZES
from cpp_data.pipeline.errors import BadInput

ATTENTION = ("sdpa", "local")


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


def build_model(size: str, vocab_size: int, seq_length: int, device: torch.device, attention: str = "sdpa"):
    from megatron.core.models.gpt.gpt_model import GPTModel
    from megatron.core.transformer.transformer_config import TransformerConfig

    if size not in SIZES:
        raise BadInput(f"unknown model size {size!r}; known: {', '.join(SIZES)}")
    s = SIZES[size]
    cuda = device.type == "cuda"
    _trace_friendly_row_parallel_linear()
    config = TransformerConfig(
        **asdict(s), use_cpu_initialization=not cuda, params_dtype=torch.float32,
        hidden_dropout=0.0, attention_dropout=0.0, gradient_accumulation_fusion=False,
        # bias+GeLU and bias+dropout+add fused by megatron-core's jit_fuser (torch.compile) on CUDA only
        bias_activation_fusion=cuda, bias_dropout_fusion=cuda,
        apply_rope_fusion=False, masked_softmax_fusion=False, persist_layer_norm=False,
        pipeline_dtype=torch.float32)
    model = GPTModel(config=config, transformer_layer_spec=layer_spec(attention), vocab_size=vocab_size,
                     max_sequence_length=seq_length, position_embedding_type="rope",
                     share_embeddings_and_output_weights=True)
    return model.to(device), config


def count_parameters(model) -> int:
    return sum(p.numel() for p in model.parameters())
