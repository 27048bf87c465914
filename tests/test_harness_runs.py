"""The bundled training harness on the document export (issues 6 and 14): a stopped run resumes to exactly the
losses of an uninterrupted one, and two data-parallel ranks make one process's updates. Apart from
tests/test_harness.py so that the suite's processes share the harness's runs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import run_cli
from test_harness import _log

pytestmark = pytest.mark.slow  # trains the tiny model on the reference build (pyproject.toml: markers)

# 4 steps of 4 documents (2 micro-batches of 2) at 128 tokens: what every run below trains
ARGS = ("--lane", "4k", "--model", "tiny", "--batch-size", "4", "--micro-batch-size", "2", "--steps", "4",
        "--warmup", "2", "--log-every", "1", "--data", "documents", "--seq-length", "128")


def _run(reference_build: Path, out: Path, *extra: str):
    return run_cli("train", "--launch-spec", str(reference_build / "launch.json"), *ARGS, "--out", str(out), *extra)


@pytest.fixture(scope="module")
def one_process(reference_build: Path, tmp_path_factory) -> dict[int, float]:
    """The losses of one uninterrupted process: what a resumed run and two ranks must reproduce."""
    out = tmp_path_factory.mktemp("harness") / "one"
    _run(reference_build, out)
    assert json.loads((out / "summary.json").read_text())["data_kind"] == "documents"
    return _log(out)


def test_stopped_run_resumes_to_the_same_losses(reference_build: Path, one_process: dict, tmp_path: Path):
    _run(reference_build, tmp_path / "split", "--stop-after", "2")
    assert sorted(_log(tmp_path / "split")) == [1, 2]
    # another batch size would take other samples and count tokens wrong: refused, naming the checkpoint
    proc = run_cli("train", "--launch-spec", str(reference_build / "launch.json"), *ARGS, "--out",
                   str(tmp_path / "split"), "--batch-size", "2", check=False)
    last = proc.stderr.strip().splitlines()[-1]  # after megatron-core's import-time warnings (Apex, ...)
    assert proc.returncode == 2 and last.startswith("cpp-data: error: train: ") and "Traceback" not in proc.stderr
    assert "step-0000002.pt" in last and "batch_size 4 (now 2)" in last, proc.stderr
    resumed = _run(reference_build, tmp_path / "split")
    assert "resumed from" in resumed.stdout
    split = _log(tmp_path / "split")
    assert sorted(split) == sorted(one_process) == [1, 2, 3, 4]
    for step in range(1, 5):
        assert abs(one_process[step] - split[step]) < 1e-4, (step, one_process[step], split[step])


def test_data_parallel_over_two_ranks_makes_one_process_updates(reference_build: Path, one_process: dict,
                                                                tmp_path: Path):
    """torchrun with 2 ranks (gloo on CPU): each rank takes half of every global batch and DDP averages the
    gradients, so the losses equal one process's on the whole batch, to fp32 reduction order."""
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
                           "--standalone", "-m", "cpp_data.pipeline.cli", "train", "--launch-spec",
                           str(reference_build / "launch.json"), *ARGS, "--out", str(tmp_path / "two")],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    two = _log(tmp_path / "two")
    assert sorted(two) == list(range(1, 5))
    for step in range(1, 5):
        assert abs(one_process[step] - two[step]) < 2e-4, (step, one_process[step], two[step])
    summary = json.loads((tmp_path / "two" / "summary.json").read_text())
    assert summary["ranks"] == 2 and summary["tokens_seen"] == 4 * 4 * 128


def test_a_cuda_device_without_cuda_is_a_one_line_usage_error(reference_build: Path, tmp_path: Path):
    """On a CPU-only torch `--device cuda` had died in torch's own AttributeError about torch._C (exit 1)."""
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA: --device cuda is valid here")
    proc = run_cli("train", "--launch-spec", str(reference_build), "--out", str(tmp_path / "run"),
                   "--device", "cuda", "--steps", "1", "--lane", "4k", check=False)
    assert proc.returncode == 2 and proc.stderr.strip().splitlines() == [
        f"cpp-data: error: train: --device cuda: this torch ({torch.__version__}) has no usable CUDA device; use "
        f"--device cpu (or auto)"], proc.stderr


def test_an_unknown_model_is_refused_before_the_run_directory_is_made(reference_build: Path, tmp_path: Path):
    """`--model huge` is refused (exit 2) before RUN/checkpoints/ or RUN/index_cache/ is made."""
    proc = run_cli("train", "--launch-spec", str(reference_build), "--out", str(tmp_path / "run"), "--model", "huge",
                   check=False)
    assert proc.returncode == 2 and "unknown model size 'huge'" in proc.stderr.strip().splitlines()[-1]
    assert not (tmp_path / "run").exists()


def test_megatron_core_trains_as_the_oracle_and_its_attention_needs_it(reference_build: Path, tmp_path: Path):
    """The plain model is the default; `--model-impl megatron` trains megatron-core's GPTModel, and megatron-core's
    own attention (`--attention local`) is refused with the plain model, before the run directory is made."""
    _run(reference_build, tmp_path / "megatron", "--model-impl", "megatron", "--steps", "2")
    summary = json.loads((tmp_path / "megatron" / "summary.json").read_text())
    assert summary["model_impl"] == "megatron" and summary["steps"] == 2 and summary["final_loss"] > 0
    proc = run_cli("train", "--launch-spec", str(reference_build / "launch.json"), *ARGS, "--out",
                   str(tmp_path / "refused"), "--model-impl", "plain", "--attention", "local", check=False)
    assert proc.returncode == 2 and "runs with --model-impl megatron" in proc.stderr.strip().splitlines()[-1]
    assert not (tmp_path / "refused").exists()
