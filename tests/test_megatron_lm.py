"""Megatron-LM launches launch.json (issue 14): its own pretrain_gpt.py (tag core_v0.16.1, the release of our
megatron-core) trains a few steps on CPU from a build's launch.json, on the packed rows and on the documents,
with launch.json's megatron_args and a model preset's flags; the only other flags are what a CPU run of
core_v0.16.1 needs (tests/pretrain_gpt_on_cpu.py) and a smaller batch and step count.

Megatron-LM is not on PyPI: the test unpacks the tarball in ../shared/peers/ (or CPP_DATA_MEGATRON_LM: a
tarball or a checkout)."""

from __future__ import annotations

import json
import math
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CPU_FLAGS = ["--transformer-impl", "local", "--no-gradient-accumulation-fusion", "--no-rope-fusion",
             "--no-persist-layer-norm", "--distributed-backend", "gloo"]
SMALL_RUN = ["--micro-batch-size", "1", "--global-batch-size", "1", "--train-iters", "2", "--eval-iters", "1",
             "--eval-interval", "2", "--log-interval", "1"]


@pytest.mark.slow
@pytest.mark.parametrize("dataset", ["packed", "documents"])
def test_pretrain_gpt_trains_from_launch_json(megatron_lm: Path, reference_build: Path, tmp_path: Path,
                                              dataset: str):
    build = tmp_path / "build"  # a copy, run from its own directory: launch.json's paths are relative to it
    shutil.copytree(reference_build, build)
    spec = json.loads((build / "launch.json").read_text())
    first = spec["phases"][0]["lane"]  # the curriculum's first lane trains; tests/test_lanes.py parses every phase
    args = spec["lanes"][first]["datasets"][dataset]["megatron_args"] + spec["model_args"]["tiny"]
    args += CPU_FLAGS + SMALL_RUN + ["--data-cache-path", str(tmp_path / "index-cache")]
    cmd = [sys.executable, str(ROOT / "tests" / "pretrain_gpt_on_cpu.py"), str(megatron_lm), "--", *args]
    proc = subprocess.run(cmd, cwd=build, capture_output=True, text=True, timeout=900)
    log = proc.stdout + proc.stderr
    if proc.returncode != 0 and "EADDRINUSE" in log:
        # the wrapper takes a free port for torch's rendezvous, then lets it go before torch binds it, and
        # another process of the suite can take it meanwhile; a second run picks another port
        proc = subprocess.run(cmd, cwd=build, capture_output=True, text=True, timeout=900)
        log = proc.stdout + proc.stderr
    assert proc.returncode == 0, log[-4000:]
    losses = [float(x) for x in re.findall(r"iteration\s+\d+/\s*2 \|.*?lm loss: ([0-9.E+-]+)", log)]
    assert len(losses) == 2 and all(math.isfinite(x) for x in losses), log[-4000:]
    assert abs(losses[0] - math.log(spec["vocab_size"])) < 1.0  # an untrained model over our vocabulary
    assert re.search(r"validation loss at iteration 2", log), log[-2000:]
    packed_flags = "reset_position_ids=True, reset_attention_mask=True, eod_mask_loss=True"
    assert (packed_flags in log) is (dataset == "packed"), re.findall(r"GPTDatasetConfig\(.{0,600}", log)[:1]
