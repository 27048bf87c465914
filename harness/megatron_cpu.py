"""Two small patches that let megatron-core's GPTModel train on CPU.

megatron-core assumes CUDA in two places the local layer spec reaches: rotary embeddings and parameter init call
`torch.cuda.current_device()`, and the tensor-parallel RNG tracker forks a CUDA RNG state. On CPU the first is
pointed at "cpu" and the second becomes a no-op context (there is one model-parallel rank, so there is no
per-rank RNG stream to keep apart). Nothing is patched when CUDA is available.
"""

from __future__ import annotations

import contextlib

import torch

_applied = False


def quiet_missing_fast_kernels() -> None:
    """Drop the four warnings megatron-core's optimizer modules give on import that Transformer Engine and Apex are
    not installed: true of every CPU machine, and nothing a user of verify or train can act on."""
    import warnings

    warnings.filterwarnings("ignore", message="Transformer Engine and Apex are not installed", category=UserWarning)


def apply_cpu_patches() -> None:
    global _applied
    if _applied or torch.cuda.is_available():
        return
    from megatron.core.tensor_parallel import random as tp_random

    torch.cuda.current_device = lambda: "cpu"  # type: ignore[assignment,return-value]  # on purpose: a device name
    tp_random.CudaRNGStatesTracker.fork = lambda self, name=None: contextlib.nullcontext()
    _applied = True
