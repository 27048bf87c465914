"""The bundled training harness (issue 6): a tiny megatron-core GPT on CPU learns from an export, and a
stopped run resumes to exactly the losses of an uninterrupted one."""

from __future__ import annotations

import json
from pathlib import Path

from conftest import run_cli


def _train(spec: Path, out: Path, *extra: str):
    return run_cli("train", "--launch-spec", str(spec), "--out", str(out), "--model", "tiny", "--seq-length", "128",
                   "--batch-size", "8", "--log-every", "1", *extra)


def _log(out: Path) -> dict[int, float]:
    return {r["step"]: r["loss"] for r in map(json.loads, (out / "log.jsonl").read_text().splitlines())}


def test_tiny_gpt_loss_falls(reference_build: Path, tmp_path: Path):
    spec = reference_build / "megatron" / "launch.json"
    _train(spec, tmp_path / "run", "--steps", "30", "--warmup", "5")
    losses = _log(tmp_path / "run")
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert sorted(losses) == list(range(1, 31))
    first, last = losses[1], sum(losses[s] for s in range(26, 31)) / 5
    assert first > 10.5 and last < first - 1.5, losses  # ln(65,536) = 11.09 at the start
    assert summary["parameters"] > 1_000_000 and summary["valid_loss"] is not None
    assert summary["data"]["train.bin.sha256"] and summary["tokens_per_s_mean"] > 0
    assert (tmp_path / "run" / "checkpoints" / "step-0000030.pt").is_file()


def test_stopped_run_resumes_to_the_same_losses(reference_build: Path, tmp_path: Path):
    spec = reference_build / "megatron" / "launch.json"
    _train(spec, tmp_path / "whole", "--steps", "8", "--warmup", "2")
    _train(spec, tmp_path / "split", "--steps", "8", "--warmup", "2", "--stop-after", "4")
    assert sorted(_log(tmp_path / "split")) == [1, 2, 3, 4]
    resumed = _train(spec, tmp_path / "split", "--steps", "8", "--warmup", "2")
    assert "resumed from" in resumed.stdout
    whole, split = _log(tmp_path / "whole"), _log(tmp_path / "split")
    assert sorted(split) == list(range(1, 9))
    for step in range(1, 9):
        assert abs(whole[step] - split[step]) < 1e-4, (step, whole[step], split[step])


def test_missing_launch_spec_is_one_clear_line(tmp_path: Path):
    proc = run_cli("train", "--launch-spec", str(tmp_path / "nope.json"), "--out", str(tmp_path / "r"), check=False)
    assert proc.returncode == 2
    assert "nope.json: no such launch spec" in proc.stderr.strip().splitlines()[-1]
