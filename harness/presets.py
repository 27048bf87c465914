"""The harness's presets as plain data (no torch import): model sizes and training defaults, and the same as
Megatron-LM flags (megatron_flags), which the launch spec records (schemas/launch_spec.py) so that a
Megatron-LM launch can use the settings of a harness run."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class ModelSize:
    num_layers: int
    hidden_size: int
    num_attention_heads: int
    ffn_hidden_size: int


SIZES = {
    "tiny": ModelSize(2, 64, 4, 256),            # CPU tests: seconds per dozen steps
    "small": ModelSize(4, 256, 4, 1024),
    "gpt-125m": ModelSize(12, 768, 12, 3072),    # ~85M in the blocks + vocab x 768 tied embeddings
    "gpt-350m": ModelSize(24, 1024, 16, 4096),
}


@dataclass
class TrainConfig:
    """A harness run's settings; the defaults are the harness's training preset."""

    launch_spec: Path
    out: Path
    model: str = "tiny"
    steps: int = 50
    batch_size: int = 8  # sequences per optimizer step
    micro_batch_size: int | None = None  # sequences per forward/backward (default: batch_size); must divide it
    seq_length: int | None = None  # default: the spec's
    lr: float = 3e-3
    min_lr_ratio: float = 0.1
    warmup: int = 10
    weight_decay: float = 0.1
    grad_clip: float = 1.0
    seed: int = 1234
    device: str = "auto"
    log_every: int = 10
    eval_every: int = 0  # 0: only at the end
    eval_batches: int = 4
    save_every: int = 0  # 0: only at the end
    num_workers: int = 0
    stop_after: int | None = None  # stop (checkpointed) after this step; rerun to resume (a scheduler's slot)
    data: str | None = None  # "packed" or "documents"; default: the launch spec's default_dataset
    lane: str | None = None  # the launch spec's lane to train on; default: its curriculum's first
    init_from: Path | None = None  # a checkpoint (or a run directory) whose model weights a new run starts from
    max_positions: int | None = None  # the model's longest sequence; a longer lane is refused
    attention: str = "sdpa"  # "sdpa" (harness/attention.py) or "local" (megatron-core's unfused attention)
    model_impl: str | None = None  # "plain" (harness/plain_model.py) or "megatron"; default: plain, megatron for local
    activation_checkpointing: str = "auto"  # "auto" (where the card needs it, harness/memory.py), "on" or "off"
    compile: bool = False  # torch.compile the model (CUDA; the first steps pay the compilation)
    eval_data: str | None = None  # evaluate on this dataset's validation split instead (e.g. "documents")


# dense bf16 peak FLOP/s, from NVIDIA's data sheets: the denominator of MFU
PEAK_BF16_FLOPS = {"H200": 989e12, "H100": 989e12, "A100": 312e12}


def flops_per_token(parameters: int, size: str, seq_length: int) -> int:
    """Training FLOPs per token, the PaLM paper's convention (appendix B): 6 N + 12 L d s.

    N counts every parameter once (the tied embedding once: its lookup is no matmul, its use as the output
    layer is); 6 N is the forward and backward matmuls of the weights; 12 L d s is the attention's two
    matmuls (scores and context) forward and backward, counted over the full s x s square as is the
    convention, although causal attention computes about half of it. MFU = tokens/s x this / peak FLOP/s."""
    s = SIZES[size]
    return 6 * parameters + 12 * s.num_layers * s.hidden_size * seq_length


def model_args(size) -> list[str]:
    """A harness model preset (harness/model.ModelSize) as pretrain_gpt.py flags (no dropout, RoPE, tied
    embeddings: the harness's GPTModel)."""
    return ["--num-layers", str(size.num_layers), "--hidden-size", str(size.hidden_size),
            "--num-attention-heads", str(size.num_attention_heads), "--ffn-hidden-size", str(size.ffn_hidden_size),
            "--position-embedding-type", "rope", "--hidden-dropout", "0", "--attention-dropout", "0"]


def train_args(c) -> list[str]:
    """The harness's training defaults (harness/train.TrainConfig) as pretrain_gpt.py flags."""
    return ["--micro-batch-size", str(c.micro_batch_size or c.batch_size), "--global-batch-size", str(c.batch_size),
            "--train-iters", str(c.steps), "--lr", str(c.lr), "--min-lr", f"{c.lr * c.min_lr_ratio:g}",
            "--lr-decay-style", "cosine", "--lr-warmup-iters", str(c.warmup), "--lr-decay-iters", str(c.steps),
            "--weight-decay", str(c.weight_decay), "--adam-beta1", "0.9", "--adam-beta2", "0.95",
            "--clip-grad", str(c.grad_clip), "--seed", str(c.seed)]


def megatron_flags() -> tuple[dict[str, list[str]], list[str]]:
    """(every model preset's flags, the training defaults' flags): what launch.json's model_args and
    train_args hold."""
    return {k: model_args(v) for k, v in SIZES.items()}, train_args(TrainConfig(launch_spec=Path("."), out=Path(".")))
