"""`cpp-data train` over a launch spec's curriculum: its phases (one per length lane, shortest first) one after
another, each a run of harness/train.py that starts from the weights the phase before it ended with.

Steps are shared out by the phases' training tokens (at least one each), and a step holds the same number of
tokens in every phase: `batch_size` sequences of the first phase's length, fewer and longer later (at least
one). Each phase writes its own run directory, OUT/phase-<k>-<lane>/, and resumes there; OUT/summary.json lists
the phases. A run given `lane` (or `seq_length`, which applies to one lane: the first) trains one lane alone.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from cpp_data.harness.presets import SIZES, TrainConfig
from cpp_data.pipeline.foundation.errors import BadInput


def split_steps(steps: int, tokens: list[int]) -> list[int]:
    """`steps` shared out in proportion to `tokens`, at least one each (largest remainders first)."""
    if steps < len(tokens):
        raise BadInput(f"--steps {steps} is fewer than the curriculum's {len(tokens)} phases; give at least "
                       f"{len(tokens)}, or --lane to train one lane")
    total = sum(tokens) or len(tokens)
    exact = [(steps - len(tokens)) * (t or 1) / total for t in tokens]
    out = [1 + int(e) for e in exact]
    for k in sorted(range(len(tokens)), key=lambda k: -(exact[k] - int(exact[k])))[:steps - sum(out)]:
        out[k] += 1
    return out


CPU_LONGEST = 16_384  # on CPU attention builds a [s, s] mask per row: 1 GiB at 32K, 4 GiB at 64K


def _fits_the_device(c: TrainConfig, phases: list[dict]) -> None:
    """Refuse, before any phase runs, a curriculum on CPU with a lane longer than CPU_LONGEST."""
    import torch

    cpu = c.device == "cpu" or (c.device == "auto" and not torch.cuda.is_available())
    long = [ph["lane"] for ph in phases if ph["seq_length"] > CPU_LONGEST]
    if cpu and long:
        raise BadInput(f"lane(s) {', '.join(long)} are longer than {CPU_LONGEST:,} tokens, too long for attention on "
                       f"CPU (a dense mask per row); train on a GPU, or one shorter lane with --lane "
                       f"{phases[0]['lane']}")


def phase_config(c: TrainConfig, phase: dict, first_seq: int, steps: int, out: Path, start_from: Path | None,
                 world: int) -> TrainConfig:
    """The run of one phase: its lane, steps, a batch of the same tokens as the first phase's, its own
    directory, the previous phase's weights."""
    tokens = c.batch_size * first_seq
    batch = max(world, tokens // phase["seq_length"] // world * world)
    micro = min(c.micro_batch_size or batch, batch // world)
    while (batch // world) % micro:
        micro -= 1
    return dataclasses.replace(c, lane=phase["lane"], steps=steps, batch_size=batch, micro_batch_size=micro,
                               out=out, init_from=start_from, warmup=min(c.warmup, max(steps // 10, 0)),
                               stop_after=None)


def run_curriculum(c: TrainConfig, train, log=print) -> dict:
    """Every phase of the spec in order (or the one lane `c.lane`); returns the summary."""
    import os

    from cpp_data.schemas.launch_spec import load_launch_spec

    spec = load_launch_spec(c.launch_spec)
    phases = spec["phases"]
    if c.lane is not None or c.seq_length or len(phases) == 1:  # one lane (--seq-length: the first's data)
        return train(c, log)
    if c.model not in SIZES:  # before anything else, as a one-lane run checks it
        raise BadInput(f"unknown model size {c.model!r}; known: {', '.join(SIZES)}")
    _fits_the_device(c, phases)
    world = int(os.environ.get("WORLD_SIZE", 1))
    steps = split_steps(c.steps, [ph["tokens"] for ph in phases])
    previous, summaries = c.init_from, []
    for k, (phase, n) in enumerate(zip(phases, steps), start=1):
        out = Path(c.out) / f"phase-{k}-{phase['lane']}"
        log(f"phase {k}/{len(phases)}: lane {phase['lane']}, seq {phase['seq_length']:,}, {n} steps")
        summaries.append(train(phase_config(c, phase, phases[0]["seq_length"], n, out, previous, world), log))
        previous = out
    summary = {"launch_spec": str(c.launch_spec), "phases": summaries,
               "final_loss": summaries[-1]["final_loss"], "valid_loss": summaries[-1]["valid_loss"],
               "tokens_seen": sum(s["tokens_seen"] for s in summaries), "data_kind": summaries[-1]["data_kind"]}
    if int(os.environ.get("RANK", 0)) == 0:
        (Path(c.out) / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    return summary
