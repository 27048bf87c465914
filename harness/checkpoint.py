"""A run's checkpoints: checkpoints/step-NNNNNNN.pt (model, optimizer, step, RNG, and the settings a resume must
match), written atomically, the last two kept; resuming loads the latest."""

from __future__ import annotations

import os
from pathlib import Path

import torch

from cpp_data.pipeline.foundation.errors import BadInput


def save_checkpoint(directory: Path, step: int, model: torch.nn.Module, opt: torch.optim.Optimizer,
                    settings: dict) -> None:
    """Write step `step`'s checkpoint (through a temporary file and a rename), then drop all but the last two."""
    path = directory / f"step-{step:07d}.pt"
    tmp = path.with_name(f".{path.name}.tmp")
    torch.save({"model": model.state_dict(), "optimizer": opt.state_dict(), "step": step,
                "rng": torch.get_rng_state(), **settings}, tmp)
    os.replace(tmp, path)
    for old in sorted(directory.glob("step-*.pt"))[:-2]:
        old.unlink()


def latest_checkpoint(directory: Path) -> Path | None:
    ckpts = sorted(directory.glob("step-*.pt"))
    return ckpts[-1] if ckpts else None


def check_resume(ckpt: Path, state: dict, now: dict) -> None:
    """A run resumes only as it started: another batch size had been taken silently (the sample order and the
    token count went wrong: 196,608 tokens at step 6, 114,688 at step 7), another vocabulary failed in
    load_state_dict with a bare RuntimeError. Checkpoints from before a key was recorded skip that key."""
    differ = [f"{k} {state[k]} (now {v})" for k, v in now.items() if k in state and state[k] != v]
    if differ:
        raise BadInput(f"{ckpt}: this run was trained with {', '.join(differ)}; resume it with the same "
                       f"arguments and launch spec, or give a new --out")


def load_weights(model: torch.nn.Module, state: dict) -> None:
    """Load a state dict of either model implementation into `model`: every parameter must match; megatron-core's
    `_extra_state` entries (empty for the local spec), which the plain model has not, are left out either way."""
    mine = model.state_dict()
    extra = {k for k in set(state) ^ set(mine) if k.endswith("._extra_state")}
    missing, unexpected = model.load_state_dict({k: v for k, v in state.items() if k not in extra}, strict=False)
    missing = [k for k in missing if k not in extra]
    if missing or unexpected:
        raise BadInput(f"the checkpoint does not fit this model: missing {missing[:3]}, unexpected {unexpected[:3]}")


def initial_weights(path: Path, device: torch.device) -> dict:
    """The model weights of a checkpoint, or of a run directory's latest checkpoint (a curriculum's previous
    phase)."""
    path = Path(path)
    ckpt = latest_checkpoint(path / "checkpoints") if path.is_dir() else path
    if ckpt is None or not ckpt.is_file():
        raise BadInput(f"{path}: no checkpoint to start from (a step-*.pt file, or a run directory holding one)")
    return torch.load(ckpt, map_location=device, weights_only=False)["model"]


def resume(directory: Path, model: torch.nn.Module, opt: torch.optim.Optimizer, device: torch.device,
           settings: dict) -> tuple[int, Path | None]:
    """(the step to start from, the checkpoint resumed from): model, optimizer and RNG from the latest checkpoint
    in `directory` when it holds one and it was trained with `settings`, else (0, None)."""
    ckpt = latest_checkpoint(directory)
    if ckpt is None:
        return 0, None
    state = torch.load(ckpt, map_location=device, weights_only=False)
    check_resume(ckpt, state, settings)
    load_weights(model, state["model"])
    opt.load_state_dict(state["optimizer"])
    torch.set_rng_state(state["rng"])
    return state["step"], ckpt
