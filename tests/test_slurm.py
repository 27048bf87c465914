"""The Slurm executor: datatrove's real submission scripts, run by a local stand-in for sbatch/srun."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from conftest import build, build_dir, data_digests

pytestmark = pytest.mark.slow  # full builds (pyproject.toml: markers)

STUB = Path(__file__).parent / "slurm_stub"


def test_slurm_executor_scripts_run_to_identical_bytes(tiny_reference, tmp_path, monkeypatch):
    small_sources, reference_build = tiny_reference
    spool = tmp_path / "spool"
    monkeypatch.setenv("PATH", f"{STUB}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("SLURM_STUB_DIR", str(spool))
    out = tmp_path / "slurm"
    build(small_sources, out, "--executor", "slurm", "--slurm-partition", "cpu-small", "--slurm-time", "01:30:00",
          "--slurm-account", "proj42", "--slurm-qos", "low", "--slurm-mem-per-cpu", "3",
          "--slurm-arg", "constraint=skylake")
    assert data_digests(build_dir(out)) == data_digests(reference_build)
    scripts = sorted(spool.glob("*.slurm"))
    assert scripts, "no job was submitted"
    first = scripts[0].read_text()
    assert "#SBATCH --partition=cpu-small" in first and "#SBATCH --time=01:30:00" in first
    for option in ("--account=proj42", "--qos=low", "--mem-per-cpu=3G", "--constraint=skylake"):
        assert f"#SBATCH {option}" in first, option
    assert "#SBATCH --array=0-" in first and "launch_pickled_pipeline" in first
    assert "bin/activate" in first  # the job activates the same environment


def test_slurm_job_that_never_ran_fails_instead_of_hanging(tiny_reference, tmp_path, monkeypatch):
    small_sources = tiny_reference[0]
    monkeypatch.setenv("PATH", f"{STUB}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("SLURM_STUB_DIR", str(tmp_path / "spool"))
    monkeypatch.setenv("SLURM_STUB_LOSE_JOBS", "1")
    proc = build(small_sources, tmp_path / "out", "--executor", "slurm", check=False, timeout=120)
    assert proc.returncode == 1
    assert "ended with" in proc.stderr and "incomplete" in proc.stderr
