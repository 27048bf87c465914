"""The Ray executor on a real two-node Ray cluster on this machine (`ray start --head` on 127.0.0.1, a second
`ray start --address` as a node of its own on 127.0.0.2, one CPU each): a whole v6 build runs tasks on both
nodes and publishes the same bytes as the local executor."""

from __future__ import annotations

import json
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
def two_node_cluster():
    if RAY is None:
        pytest.fail("ray is not installed; scripts/setup.sh installs it (pip install -e .[test])")
    port = _free_port()
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0"}
    temp = Path("/tmp") / f"ray-{port}"  # Ray's socket paths must stay short
    common = ["--num-cpus=1", "--disable-usage-stats"]
    try:
        subprocess.run([RAY, "start", "--head", "--node-ip-address=127.0.0.1", f"--port={port}",
                        "--include-dashboard=false", f"--temp-dir={temp}", '--resources={"head_node": 1}', *common],
                       check=True, env=env, capture_output=True, timeout=180)
        subprocess.run([RAY, "start", f"--address=127.0.0.1:{port}", "--node-ip-address=127.0.0.2",
                        '--resources={"second_node": 1}', *common],
                       check=True, env=env, capture_output=True, timeout=180)
        yield f"127.0.0.1:{port}"
    finally:
        subprocess.run([RAY, "stop", "--force"], env=env, capture_output=True, timeout=120)
        shutil.rmtree(temp, ignore_errors=True)


def test_two_node_ray_build_matches_local_bytes(tiny_reference, tmp_path, two_node_cluster):
    small_sources, reference_build = tiny_reference
    out = tmp_path / "ray"
    proc = build(small_sources, out, "--executor", "ray", "--ray-address", two_node_cluster)
    assert "executor ray" in proc.stdout
    assert data_digests(build_dir(out)) == data_digests(reference_build)
    # every per-document stage went through Ray, and its tasks ran on both nodes
    summary = json.loads((build_dir(out) / "reports" / "summary.json").read_text())
    nodes = summary["tasks_per_node"]
    assert len(nodes) == 2 and all(n.startswith("ray:") and count > 0 for n, count in nodes.items()), nodes
    assert "tasks per node" in proc.stdout
    record = next((out / "cache" / "filter").glob("*/_datatrove/executor.json")).read_text()
    assert '"log_first"' in record and '"cpus_per_task"' in record  # datatrove's Ray executor wrote it
