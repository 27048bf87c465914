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


@pytest.mark.slow
def test_gc_prunes_the_per_tu_cache_to_what_kept_builds_used(tmp_path: Path):
    """Two builds of one tree, a source file edited between them: gc keeping one build removes the per-TU
    results only the other's semantics entry used, keeps every one the kept build used, and `status` counts
    what is left."""
    import json

    from conftest import provenance_build, write_sources

    proj = tmp_path / "proj"
    proj.mkdir()
    body = "".join(f"int step_{k}(int x) {{\n  return x * {k} + 2;\n}}\n\n" for k in range(12))
    (proj / "a.cc").write_text(body + "int a_main() { return step_3(1); }\n")
    (proj / "b.cc").write_text(body.replace("step_", "hop_"))
    sources = write_sources(tmp_path / "s.toml", [{"name": "fx", "url": str(proj), "license": "MIT"}])
    out = tmp_path / "out"
    provenance_build(sources, out, "--workers", "1", stages=("semantics",))
    (proj / "b.cc").write_text(body.replace("step_", "leap_"))
    provenance_build(sources, out, "--workers", "1", stages=("semantics",))
    used = [set(json.loads(p.read_text())) for p in sorted((out / "cache" / "semantics").glob("*/tu_cache_used.json"))]
    assert len(used) == 2 and used[0] != used[1]
    results = {p.stem for p in (out / "shared" / "tus").glob("results/*/*.json")}
    assert results == used[0] | used[1] and len(results) == 3  # a.cc once, b.cc twice

    proc = run_cli("gc", "--out", str(out), "--keep", "1")
    assert "removed 1 per-TU index result(s)" in proc.stdout, proc.stdout
    [left] = [set(json.loads(p.read_text())) for p in (out / "cache" / "semantics").glob("*/tu_cache_used.json")]
    assert {p.stem for p in (out / "shared" / "tus").glob("results/*/*.json")} == left
    manifests = [json.loads(p.read_text()) for p in (out / "shared" / "tus").glob("manifests/*/*.json")]
    assert sorted(v["result"] for m in manifests for v in m) == sorted(left)
    run_cli("status", "--out", str(out))
    assert json.loads((out / "status" / "current.json").read_text())["tu_cache"]["results"] == 2
