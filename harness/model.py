"""GPT configurations of the harness, built as megatron-core GPTModels with the local (no TransformerEngine)
layer spec: the same model family Megatron trains, with no fused kernels to install."""

from __future__ import annotations

from dataclasses import asdict

import torch

from cpp_data.harness.presets import SIZES
from cpp_data.pipeline.errors import BadInput


def build_model(size: str, vocab_size: int, seq_length: int, device: torch.device):
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
    from megatron.core.models.gpt.gpt_model import GPTModel
    from megatron.core.transformer.transformer_config import TransformerConfig

    if size not in SIZES:
        raise BadInput(f"unknown model size {size!r}; known: {', '.join(SIZES)}")
    s = SIZES[size]
    config = TransformerConfig(
        **asdict(s), use_cpu_initialization=device.type == "cpu", params_dtype=torch.float32,
        hidden_dropout=0.0, attention_dropout=0.0, gradient_accumulation_fusion=False, bias_dropout_fusion=False,
        apply_rope_fusion=False, masked_softmax_fusion=False, persist_layer_norm=False,
        pipeline_dtype=torch.float32)
    model = GPTModel(config=config, transformer_layer_spec=get_gpt_layer_local_spec(), vocab_size=vocab_size,
                     max_sequence_length=seq_length, position_embedding_type="rope",
                     share_embeddings_and_output_weights=True)
    return model.to(device), config


def count_parameters(model) -> int:
    return sum(p.numel() for p in model.parameters())
