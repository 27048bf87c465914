"""The bundled training harness on the document export (issues 6 and 14): a stopped run resumes to exactly the
losses of an uninterrupted one, and two data-parallel ranks make one process's updates. Apart from
tests/test_harness.py so that the suite's processes share the harness's runs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import run_cli
from test_harness import _log, _train





@pytest.mark.slow
def test_stopped_run_resumes_to_the_same_losses(reference_build: Path, tmp_path: Path):
    spec, docs = reference_build / "launch.json", ("--data", "documents", "--seq-length", "128")
    _train(spec, tmp_path / "whole", "--steps", "8", "--warmup", "2", *docs)
    _train(spec, tmp_path / "split", "--steps", "8", "--warmup", "2", "--stop-after", "4", *docs)
    assert sorted(_log(tmp_path / "split")) == [1, 2, 3, 4]
    assert json.loads((tmp_path / "whole" / "summary.json").read_text())["data_kind"] == "documents"
    resumed = _train(spec, tmp_path / "split", "--steps", "8", "--warmup", "2", *docs)
    assert "resumed from" in resumed.stdout
    whole, split = _log(tmp_path / "whole"), _log(tmp_path / "split")
    assert sorted(split) == list(range(1, 9))
    for step in range(1, 9):
        assert abs(whole[step] - split[step]) < 1e-4, (step, whole[step], split[step])


@pytest.mark.slow
def test_data_parallel_over_two_ranks_makes_one_process_updates(reference_build: Path, tmp_path: Path):
    """torchrun with 2 ranks (gloo on CPU): each rank takes half of every global batch and DDP averages the
    gradients, so the losses equal one process's on the whole batch, to fp32 reduction order."""
    import sys

    spec = reference_build / "launch.json"
    args = ["--launch-spec", str(spec), "--model", "tiny", "--batch-size", "4", "--micro-batch-size", "2",
            "--steps", "4", "--warmup", "2", "--log-every", "1", "--data", "documents", "--seq-length", "128"]
    run_cli("train", *args, "--out", str(tmp_path / "one"))
    import subprocess

    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
                           "--standalone", "-m", "cpp_data.pipeline.cli", "train", *args,
                           "--out", str(tmp_path / "two")], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    one, two = _log(tmp_path / "one"), _log(tmp_path / "two")
    assert sorted(two) == list(range(1, 5))
    for step in range(1, 5):
        assert abs(one[step] - two[step]) < 2e-4, (step, one[step], two[step])
    summary = json.loads((tmp_path / "two" / "summary.json").read_text())
    assert summary["ranks"] == 2 and summary["tokens_seen"] == 4 * 4 * 128
