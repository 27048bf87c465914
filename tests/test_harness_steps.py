"""The training loop's own arithmetic (harness/train.py), without a model: what a log line's tokens/s measures."""

from __future__ import annotations

import time
from types import SimpleNamespace

import torch

from cpp_data.harness.presets import TrainConfig
from cpp_data.harness.train import _record


class SlowLoss:
    """A loss whose value arrives late, as a CUDA loss's `.item()` waits for the step's kernels to finish."""

    def __init__(self, wait: float):
        self.wait = wait

    def item(self) -> float:
        time.sleep(self.wait)
        return 2.5


def test_the_logged_rate_waits_for_the_steps_kernels(tmp_path):
    """tokens/s counts the time until the step's loss is known: on CUDA the loop runs ahead of the GPU, and a rate
    taken before `.item()` measured how fast kernels were queued (1.30x the reference's rate in one H100 call)."""
    run = SimpleNamespace(c=TrainConfig(launch_spec=tmp_path, out=tmp_path, batch_size=4, steps=10), seq=100, world=1,
                          device=torch.device("cpu"), log=lambda *a: None)
    rec = _record(run, 3, SlowLoss(0.5), 4000, time.perf_counter())
    assert rec["loss"] == 2.5 and rec["tokens"] == 3 * 4 * 100
    assert rec["tokens_per_s"] < 4000 / 0.5  # the 0.5 s the loss took is in the interval
