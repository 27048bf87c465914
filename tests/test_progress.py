"""What a build shows while it runs (issue 17, point 1): a live display of stage k/N in a terminal (a
pseudo-terminal here), plain timestamped lines without one, JSON lines with --log-format json, and a log file
under OUT/logs/ every time."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import CLI, build, run_in_terminal

pytestmark = pytest.mark.slow  # full builds (pyproject.toml: markers)


def _copy(reference_build: Path, tmp_path: Path) -> tuple[Path, Path]:
    out = tmp_path / "out"
    shutil.copytree(reference_build.parent.parent, out, symlinks=True)
    return out, reference_build.parent.parent.parent / "sources.toml"


def test_a_terminal_gets_a_live_display(reference_build: Path, tmp_path: Path):
    out, sources = _copy(reference_build, tmp_path)
    rc, text = run_in_terminal(["build", "--version", "v6", "--sources", str(sources), "--out", str(out),
                               "--workers", "2", "--set", "packed_rows.fim_rate=0.4"])
    assert rc == 0, text[-3000:]
    first = next(line for line in text.splitlines() if "stage 1/" in line)
    n = int(first.split("stage 1/")[1].split()[0])
    assert f"stage {n}/{n}" in text  # the bar reached the last stage
    assert "· shards cached" in text and "· packed_rows running" in text
    assert "build summary" in text


def test_without_a_terminal_plain_lines_and_json_for_schedulers(reference_build: Path, tmp_path: Path):
    out, sources = _copy(reference_build, tmp_path)
    plain = build(sources, out, "--set", "packed_rows.fim_rate=0.4")
    assert "stage 1/" not in plain.stdout and "] shards: cached" in plain.stdout
    assert "] packed_rows: running" in plain.stdout
    proc = subprocess.run([*CLI, "build", "--version", "v6", "--sources", str(sources), "--out", str(out),
                           "--workers", "2", "--set", "packed_rows.fim_rate=0.3", "--log-format", "json"],
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr
    events = [json.loads(line) for line in proc.stdout.splitlines()]  # every line is JSON
    kinds = [e["event"] for e in events]
    assert kinds[0] == "start" and kinds[-1] == "summary" and "stage_cached" in kinds and "stage_done" in kinds
    done = next(e for e in events if e["event"] == "stage_done" and e["label"] == "packed_rows")
    assert done["seconds"] >= 0 and 1 <= done["index"] <= done["total"]
    assert events[-1]["summary"]["documents"] > 0
    logs = sorted((out / "logs").glob("build-*.log"))
    assert len(logs) >= 2
    assert json.loads(logs[-1].read_text().splitlines()[-1])["event"] == "summary"
    # a failed build's last JSON line says so, so a scheduler reading the stream learns why it ends
    proc = subprocess.run([*CLI, "build", "--version", "v6", "--sources", str(sources), "--out", str(out),
                           "--set", "packed_rows.fim_epochs=0", "--log-format", "json"],
                          capture_output=True, text=True, timeout=300)
    last = json.loads(proc.stdout.splitlines()[-1])
    assert proc.returncode == 2 and last["event"] == "error" and last["exit_code"] == 2, proc.stdout
    assert last["message"] in proc.stderr and "fim_epochs" in last["message"]
