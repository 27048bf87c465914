"""The process group the harness trains in: torchrun's ranks, or one process with its own loopback rendezvous, and
megatron-core's model-parallel state (one tensor- and one pipeline-parallel rank), which GPTDataset and GPTModel
read."""

from __future__ import annotations

import os
import socket

import torch


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def world() -> tuple[int, int, int]:
    """(rank, world size, local rank) as torchrun sets them; (0, 1, 0) in a plain process."""
    return (int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1)),
            int(os.environ.get("LOCAL_RANK", 0)))


def init_distributed(device: torch.device, seed: int) -> None:
    import torch.distributed as dist
    from megatron.core import parallel_state

    backend = "nccl" if device.type == "cuda" else "gloo"
    if not dist.is_initialized():
        if world()[1] > 1:  # torchrun: its rendezvous
            dist.init_process_group(backend, init_method="env://")
        else:  # one process: its own loopback rendezvous, whatever MASTER_PORT says
            dist.init_process_group(backend, rank=0, world_size=1, init_method=f"tcp://127.0.0.1:{_free_port()}")
    if not parallel_state.model_parallel_is_initialized():
        parallel_state.initialize_model_parallel(tensor_model_parallel_size=1, pipeline_model_parallel_size=1)
    if device.type == "cuda":
        from megatron.core.tensor_parallel.random import model_parallel_cuda_manual_seed

        model_parallel_cuda_manual_seed(seed)


def close_distributed() -> None:
    """Undo init_distributed: megatron-core's model-parallel groups, then the process group. For a caller that
    only needed them for a moment (verify's gpt_dataset gate) and must leave its process as it found it."""
    import torch.distributed as dist
    from megatron.core import parallel_state

    if parallel_state.model_parallel_is_initialized():
        parallel_state.destroy_model_parallel()
    if dist.is_initialized():
        dist.destroy_process_group()
