"""`cpp-data gc` (issue 17, point 7): old builds and the cache entries only they needed go; LATEST and PROMOTED
never do; a kept build still validates and rebuilding it is still "nothing to do"."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import build, run_cli


@pytest.mark.slow
def test_gc_keeps_latest_and_promoted_and_what_they_need(reference_build: Path, tmp_path: Path):
    out = tmp_path / "out"
    shutil.copytree(reference_build.parent.parent, out, symlinks=True)
    sources = reference_build.parent.parent.parent / "sources.toml"
    old = reference_build.name
    (out / "builds" / "PROMOTED").write_text(old + "\n")
    build(sources, out, "--set", "packed_rows.fim_rate=0.4")  # a second v6 build: LATEST
    new = (out / "builds" / "LATEST").read_text().strip()
    assert new != old
    before = {p for p in (out / "cache").glob("*/*")}

    proc = run_cli("gc", "--out", str(out), "--keep", "1")
    assert "removed 0 build(s)" in proc.stdout  # the old build is PROMOTED
    assert {p for p in (out / "cache").glob("*/*")} == before

    (out / "builds" / "PROMOTED").unlink()
    dry = run_cli("gc", "--out", str(out), "--keep", "1", "--dry-run")
    assert f"would remove build {old}" in dry.stdout and (out / "builds" / old).is_dir()
    # a command reading the old build (verify, export, train ...) keeps it from this gc: removed under a running
    # verify, the build would fail that verify's gates on FileNotFoundError
    reader = subprocess.Popen([sys.executable, "-c", "import sys, time; from pathlib import Path; "
                               "from cpp_data.pipeline.runner.outlock import hold_for_reading; "
                               "hold_for_reading(Path(sys.argv[1])); print('reading', flush=True); time.sleep(120)",
                               str(out / "builds" / old)], stdout=subprocess.PIPE, text=True)
    try:
        assert reader.stdout.readline().strip() == "reading"
        proc = run_cli("gc", "--out", str(out), "--keep", "1")
        assert "removed 0 build(s)" in proc.stdout and (out / "builds" / old).is_dir()
        assert f"kept because another command is reading them (run gc again later): {old}" in proc.stdout
    finally:
        reader.kill()
        reader.wait()
    proc = run_cli("gc", "--out", str(out), "--keep", "1")
    assert f"removed build {old}" in proc.stdout and not (out / "builds" / old).exists()
    assert (out / "builds" / new).is_dir()
    gone = before - {p for p in (out / "cache").glob("*/*")}
    assert {p.parent.name for p in gone} == {"packed_rows", "launch_spec"}  # only the old length's entries
    run_cli("validate", str(out / "builds" / new))
    again = build(sources, out, "--set", "packed_rows.fim_rate=0.4", check=False)
    assert again.returncode == 3 and "nothing to do" in again.stdout and ": running" not in again.stdout


def test_gc_refuses_what_is_not_an_output_directory(tmp_path: Path):
    proc = run_cli("gc", "--out", str(tmp_path), check=False)
    assert proc.returncode == 2 and "not an output directory" in proc.stderr
    proc = run_cli("gc", "--out", str(tmp_path), "--keep", "0", check=False)
    assert proc.returncode == 2 and "--keep must be at least 1" in proc.stderr


def test_reading_commands_hold_their_builds_against_gc(reference_build: Path, tmp_path: Path):
    """The CLI takes the reader's lock for every command that reads a published build (absolute_paths). On a
    copy of the build: other tests read the shared one, and their locks would answer for these commands."""
    import os

    from cpp_data.pipeline.cli import _parser, absolute_paths
    from cpp_data.pipeline.runner import outlock

    build = tmp_path / "builds" / reference_build.name
    shutil.copytree(reference_build, build)
    export = tmp_path / "exported"
    run_cli("export", "megatron", str(build), "--out", str(export))  # train on it reads the build's tokenizer
    before = len(outlock._READING)
    for argv in (["verify", str(build), "--no-train-step"], ["show", str(build)], ["diff", str(build), str(build)],
                 ["train", "--launch-spec", str(build), "--out", str(tmp_path / "run")],
                 ["train", "--launch-spec", str(export / "launch.json"), "--out", str(tmp_path / "run")]):
        absolute_paths(_parser().parse_args(argv))
        assert outlock.lock_for_removal(build) is None, argv  # gc would keep it
        while len(outlock._READING) > before:  # released, as the command's exit releases it
            os.close(outlock._READING.pop())
    fd = outlock.lock_for_removal(build)
    assert fd is not None
    os.close(fd)
