"""Length lanes end to end (issue 58): a build with two small lanes trains phase by phase on CPU, two builds
of other generations blend into one launch.json that Megatron-LM's parser takes phase by phase, and the bad
inputs (builds with other tokenizers, a lane longer than the model's positions, a lane left empty) stop with
one line and exit 2."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import NLOHMANN, POCO, build, build_dir, need, run_cli, write_sources

pytestmark = pytest.mark.slow  # full builds (pyproject.toml: markers)

LANES = ["--set", 'lanes.lanes=["256", "512"]', "--set", 'lanes.chunked=["256"]']
SMALL = [{"name": "nlohmann-json", "url": str(NLOHMANN)}, {"name": "poco-json", "url": str(POCO / "JSON")}]


@pytest.fixture(scope="module")
def two_lanes(tmp_path_factory) -> Path:
    """A v6 build of two small sources with lanes of 256 (chunks) and 512 tokens (files)."""
    need(NLOHMANN, POCO)
    tmp = tmp_path_factory.mktemp("two-lanes")
    build(write_sources(tmp / "sources.toml", SMALL), tmp / "out", *LANES)
    return build_dir(tmp / "out")


def test_train_runs_the_curriculum_phase_by_phase(two_lanes: Path, tmp_path: Path):
    run = tmp_path / "run"
    proc = run_cli("train", "--launch-spec", str(two_lanes), "--out", str(run), "--model", "tiny", "--steps", "6",
                   "--batch-size", "4", "--log-every", "1", "--device", "cpu")
    summary = json.loads((run / "summary.json").read_text())
    first, second = summary["phases"]
    assert (first["lane"], first["seq_length"], second["lane"], second["seq_length"]) == ("256", 256, "512", 512)
    assert first["batch_size"] == 4 and second["batch_size"] == 2  # the same tokens a step in both phases
    assert first["steps"] + second["steps"] == 6 and min(first["steps"], second["steps"]) >= 1
    assert "starting from the weights of" in proc.stdout and str(run / "phase-1-256") in proc.stdout
    assert (run / "phase-2-512" / "checkpoints").is_dir() and summary["final_loss"] == second["final_loss"]
    # run again: each phase resumes from its own last checkpoint, nothing is trained twice
    again = run_cli("train", "--launch-spec", str(two_lanes), "--out", str(run), "--model", "tiny", "--steps", "6",
                    "--batch-size", "4", "--log-every", "1", "--device", "cpu")
    assert again.stdout.count("resumed from") == 2


def test_a_lane_longer_than_the_models_positions_is_refused(two_lanes: Path, tmp_path: Path):
    proc = run_cli("train", "--launch-spec", str(two_lanes), "--out", str(tmp_path / "r"), "--lane", "512",
                   "--max-positions", "256", "--steps", "1", check=False)
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1
    assert "lane 512 is 512 tokens, longer than the model's 256 positions" in proc.stderr
    assert not (tmp_path / "r" / "checkpoints").exists()


@pytest.fixture(scope="module")
def v3_with_the_same_tokenizer(two_lanes: Path, tmp_path_factory) -> Path:
    """A v3 build (commit history) of a small git repository, tokenized by the v6 build's tokenizer."""
    from conftest import make_git_repo

    tmp = tmp_path_factory.mktemp("v3")
    repo = tmp / "repo"
    files = {f"src/f{i}.cc": "".join(f"int f{i}_{k}(int x) {{ return x * {k} + {i}; }}\n" for k in range(60))
             for i in range(6)}
    make_git_repo(repo, files)
    for step in range(3):  # three more commits, each touching every file
        for name in files:
            (repo / name).write_text((repo / name).read_text() + f"int added_{step}() {{ return {step}; }}\n")
        subprocess.run(["git", "-C", str(repo), "commit", "-qam", f"step {step}"], check=True)
    sources = write_sources(tmp / "s.toml", [{"name": "mini", "url": str(repo), "license": "MIT"}])
    build(sources, tmp / "out", "--version", "v3", "--tokenizer", str(two_lanes), *LANES)
    return build_dir(tmp / "out")


def test_a_history_build_trains_and_blends_with_a_file_build(two_lanes, v3_with_the_same_tokenizer, tmp_path):
    v3 = v3_with_the_same_tokenizer
    assert run_cli("verify", str(v3)).returncode == 0  # every gate, the train step included
    out = tmp_path / "mix"
    run_cli("launch", "--blend", f"{two_lanes}:0.6", f"{v3}:0.4", "--lanes", "256,512", "--out", str(out))
    spec = json.loads((out / "launch.json").read_text())
    assert [p["lane"] for p in spec["phases"]] == ["256", "512"]
    assert [b["weight"] for b in spec["builds"]] == [0.6, 0.4]
    blend = spec["lanes"]["256"]["datasets"]["packed"]["blend_per_split"]["train"]
    by_build = {}
    for w, prefix in blend:  # relative to the spec's directory, into each build
        by_build[Path(prefix).parts[-4]] = by_build.get(Path(prefix).parts[-4], 0) + w
        assert (out / (prefix + ".bin")).resolve().is_file()
    assert sorted(by_build.values()) == pytest.approx([0.4, 0.6])
    run = tmp_path / "run"
    run_cli("train", "--launch-spec", str(out), "--out", str(run), "--model", "tiny", "--steps", "2",
            "--batch-size", "2", "--device", "cpu")
    assert len(json.loads((run / "summary.json").read_text())["phases"]) == 2


def test_megatron_lm_parses_every_phase_of_a_blend(two_lanes, v3_with_the_same_tokenizer, megatron_lm, tmp_path):
    from test_megatron_lm import CPU_FLAGS, ROOT

    tree = megatron_lm
    out = tmp_path / "mix"
    run_cli("launch", "--blend", f"{two_lanes}:1", f"{v3_with_the_same_tokenizer}:1", "--out", str(out))
    spec = json.loads((out / "launch.json").read_text())
    for phase in spec["phases"]:
        args = phase["megatron_args"] + spec["model_args"]["tiny"] + CPU_FLAGS
        proc = subprocess.run([sys.executable, str(ROOT / "tests" / "pretrain_gpt_on_cpu.py"), str(tree),
                               "--args-only", "--", *args], cwd=out, capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, proc.stderr[-3000:]
        parsed = json.loads(proc.stdout.strip().splitlines()[-1])
        assert parsed["seq_length"] == phase["seq_length"] and len(parsed["train_data_path"]) == 4
        assert parsed["reset_position_ids"] and parsed["eod_mask_loss"]


def test_builds_with_other_tokenizers_do_not_blend(two_lanes: Path, tmp_path: Path):
    need(NLOHMANN)
    other = tmp_path / "other"
    build(write_sources(tmp_path / "s.toml", SMALL[:1]), other, *LANES, "--set", "tokenizer.vocab_size=4096")
    proc = run_cli("launch", "--blend", f"{two_lanes}:1", f"{other}:1", "--out", str(tmp_path / "mix"),
                   check=False)
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1
    assert "tokenizer differs" in proc.stderr and "--tokenizer" in proc.stderr
    assert not (tmp_path / "mix" / "launch.json").exists()


def test_a_lane_without_training_documents_publishes_nothing(tmp_path: Path):
    """One file that the hash split sends to validation: a lane comes out without a training document."""
    from cpp_data.stages.lib.keys import is_valid_split

    name = next(f"f{k}.cc" for k in range(1000) if is_valid_split("one", f"f{k}.cc", 0.5))
    src = tmp_path / "one"
    src.mkdir()
    (src / name).write_text("// SPDX-License-Identifier: MIT\n" + "".join(
        f"int g{k}(int x) {{ return x + {k}; }}\n" for k in range(40)))
    out = tmp_path / "out"
    proc = build(write_sources(tmp_path / "s.toml", [{"name": "one", "url": str(src)}]), out, *LANES,
                 "--set", "shards.valid_fraction=0.5", check=False)
    assert proc.returncode == 2, proc.stdout[-2000:]
    assert "no training document came out" in proc.stderr.strip().splitlines()[-1]
    assert not list((out / "builds").glob("v6-*")) if (out / "builds").exists() else True
