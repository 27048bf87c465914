"""How much GPU memory a training step takes, and from that whether to checkpoint activations.

`--activation-checkpointing auto` (the default) turns it on only where a step would not fit the card without it:
recomputing every block in the backward costs about a third more compute, so it is worth it only where memory
decides. The estimate, per micro batch of `tokens` tokens, for the presets' GPTs under bf16 autocast:
  weights, gradients and AdamW's two moments in fp32:  16 bytes per parameter
  the logits and their gradient in bf16:               4 x vocabulary bytes per token
  what one block keeps for its backward:              (12 d + 2 f) bytes per token (hidden d, MLP f), per layer
  CUDA's and cuBLAS's workspaces:                      1 GiB
The last three were read off the compiled plain model on an H100 (gpt-125m, vocabulary 65,536: 13.7 GiB more at
65,536 tokens a micro batch than at 32,768, 30.4 GiB in all at 65,536, bench/results/gpu-h100-prototype.jsonl;
the count above gives 13.6 and 30.3).
With checkpointing a block keeps only its fp32 input (4 d bytes per token) and one block at a time is rebuilt.
"""

from __future__ import annotations

import torch

from cpp_data.harness.presets import SIZES, ModelSize
from cpp_data.pipeline.foundation.errors import BadInput

CHOICES = ("auto", "on", "off")
HEADROOM = 0.85  # of the card: the allocator's fragmentation, cuBLAS workspaces, the compiler's autotuning


def parameter_count(size: ModelSize, vocab_size: int) -> int:
    """Parameters of a preset's GPT (tied embedding, biases, two LayerNorms per block and a final one)."""
    d, f = size.hidden_size, size.ffn_hidden_size
    block = (4 * d * d + 4 * d) + (2 * d * f + f + d) + 4 * d
    return vocab_size * d + size.num_layers * block + 2 * d


def step_bytes(size: ModelSize, vocab_size: int, tokens: int, recompute: bool) -> int:
    """Estimated peak bytes of a training step with micro batches of `tokens` tokens (see the module's note)."""
    d, f, layers = size.hidden_size, size.ffn_hidden_size, size.num_layers
    block = (12 * d + 2 * f) * tokens
    kept = layers * 4 * d * tokens + block if recompute else layers * block
    return 16 * parameter_count(size, vocab_size) + 4 * vocab_size * tokens + kept + 2**30


def activation_checkpointing(setting: str, model: str, vocab_size: int, tokens: int, device: torch.device) -> bool:
    """Whether to checkpoint activations: `on`/`off` as given; `auto`: on a CUDA device whose memory the step
    would not fit without it (never on CPU, where memory is the host's)."""
    if setting not in CHOICES:
        raise BadInput(f"unknown activation checkpointing {setting!r}; known: {', '.join(CHOICES)}")
    if setting != "auto":
        return setting == "on"
    if device.type != "cuda":
        return False
    card = torch.cuda.get_device_properties(device).total_memory
    return step_bytes(SIZES[model], vocab_size, tokens, recompute=False) > HEADROOM * card
