"""The Ray executor against a real local Ray cluster (`ray start --head` on loopback): same bytes as local."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import build, build_dir, data_digests

pytestmark = pytest.mark.slow  # full builds (pyproject.toml: markers)

RAY = shutil.which("ray", path=str(Path(sys.executable).parent)) or shutil.which("ray")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def ray_cluster(tmp_path):
    if RAY is None:
        pytest.fail("ray is not installed; scripts/setup.sh installs it (pip install -e .[test])")
    port = _free_port()
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0"}
    temp = Path("/tmp") / f"ray-{port}"  # Ray's socket paths must stay short
    subprocess.run([RAY, "start", "--head", "--node-ip-address=127.0.0.1", f"--port={port}", "--num-cpus=2",
                    "--include-dashboard=false", "--disable-usage-stats", f"--temp-dir={temp}"],
                   check=True, env=env, capture_output=True, timeout=180)
    try:
        yield f"127.0.0.1:{port}"
    finally:
        subprocess.run([RAY, "stop", "--force"], env=env, capture_output=True, timeout=120)
        shutil.rmtree(temp, ignore_errors=True)


def test_ray_executor_matches_local_bytes(small_sources, reference_build, tmp_path, ray_cluster):
    out = tmp_path / "ray"
    proc = build(small_sources, out, "--executor", "ray", "--ray-address", ray_cluster)
    assert "executor ray" in proc.stdout
    assert data_digests(build_dir(out)) == data_digests(reference_build)
    # the per-document stages really went through Ray: datatrove's Ray executor records fields of its own
    record = next((out / "cache" / "filter").glob("*/_datatrove/executor.json")).read_text()
    assert '"log_first"' in record and '"cpus_per_task"' in record
