"""The Ray executor on a real two-node Ray cluster on one host (`ray start --head` on 127.0.0.1, a second
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
from conftest import CLI, build, build_dir, data_digests, run_bounded

pytestmark = pytest.mark.slow  # full builds (pyproject.toml: markers)

RAY = shutil.which("ray", path=str(Path(sys.executable).parent)) or shutil.which("ray")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def ray_token(tmp_path, monkeypatch) -> dict[str, str]:
    """Token authentication with a token of the test's own, set in this process's environment (so the builds
    it starts carry it) and returned. Ray 2.59 and later turn token authentication on for local clusters and
    keep the token in ~/.ray/auth_token: without this, the first local Ray of a machine writes that file, and
    a later `ray start --address` of a two-node cluster is refused (InvalidAuthToken), while the tests would
    leave a token in the user's home."""
    token = tmp_path / "ray_auth_token"
    token.write_text(os.urandom(32).hex())
    env = {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(token), "RAY_USAGE_STATS_ENABLED": "0"}
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    return env


def _ray(*args: str, timeout: float = 180) -> None:
    proc = subprocess.run([RAY, *args], env=os.environ, capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        pytest.fail(f"ray {' '.join(args)} exited {proc.returncode}: {proc.stderr.strip()[-2000:]}", pytrace=False)


@pytest.fixture
def two_node_cluster(ray_token):
    if RAY is None:
        pytest.fail("ray is not installed; scripts/setup.sh installs it (pip install -e .[test])")
    port = _free_port()
    temp = Path("/tmp") / f"ray-{port}"  # Ray's socket paths must stay short
    common = ["--num-cpus=1", "--disable-usage-stats"]
    try:
        _ray("start", "--head", "--node-ip-address=127.0.0.1", f"--port={port}", "--include-dashboard=false",
             f"--temp-dir={temp}", '--resources={"head_node": 1}', *common)
        _ray("start", f"--address=127.0.0.1:{port}", "--node-ip-address=127.0.0.2", '--resources={"second_node": 1}',
             *common)
        yield f"127.0.0.1:{port}"
    finally:
        subprocess.run([RAY, "stop", "--force"], env=os.environ, capture_output=True, timeout=120)
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
    record = next((out / "cache" / "near_dedup").glob("*/_datatrove/executor.json")).read_text()
    assert '"log_first"' in record and '"cpus_per_task"' in record  # datatrove's Ray executor wrote it


# A local Ray of one CPU, and datatrove's Ray executor as the build makes it (pipeline/runner/executors/ray.py): tasks
# whose actors cannot start (a runtime_env working_dir that does not exist) must fail the run with the reason,
# and leave no placement group holding the CPU, so the next run on the same Ray completes. Before, the first
# run waited forever.
SUBMIT_FAILS = """
import json, sys
import ray
from cpp_data.pipeline.runner.executors.ray import RayExecutor, RaySubmitFailed

def step(data, rank=0, world_size=1):
    yield from data or []

ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False, logging_level="ERROR")
logs = sys.argv[1]
bad = RayExecutor([step], tasks=2, workers=1, logging_dir=logs + "/bad",
                  ray_remote_kwargs={"runtime_env": {"working_dir": "/nonexistent/cpp-data-test"}})
try:
    bad.run()
    error = None
except RaySubmitFailed as exc:
    error = str(exc)
held = [g for g in ray.util.placement_group_table().values() if g["state"] != "REMOVED"]
good = RayExecutor([step], tasks=2, workers=1, logging_dir=logs + "/good")
good.run()
print(json.dumps({"error": error, "held": len(held), "incomplete_after_good": good.get_incomplete_ranks()}))
"""


def test_a_task_whose_actor_cannot_start_fails_the_run_and_frees_its_cpu(tmp_path, ray_token):
    proc = run_bounded([sys.executable, "-c", SUBMIT_FAILS, str(tmp_path)], timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["error"] is not None and "could not start 2 of 2 tasks after 3 attempts" in result["error"]
    assert "/nonexistent/cpp-data-test" in result["error"]  # the reason Ray gave
    assert result["held"] == 0
    assert result["incomplete_after_good"] == []


def test_a_task_no_node_can_hold_is_refused_before_any_stage(tiny_reference, tmp_path, ray_token):
    sources = tiny_reference[0]
    out = tmp_path / "out"
    proc = run_bounded([*CLI, "build", "--version", "v6", "--sources", str(sources), "--out", str(out),
                        "--no-progress", "--executor", "ray", "--ray-resource", "no_such_node=1"], timeout=300)
    assert proc.returncode == 2, proc.stderr[-3000:]
    errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("cpp-data: error:")]
    assert len(errors) == 1 and "no node of the cluster" in errors[0] and "no_such_node=1" in errors[0], errors
    assert "--ray-resource" in errors[0]  # says what to change
    assert not (out / "cache").exists() or not any((out / "cache").iterdir())  # no stage ran
