"""End-to-end builds of real C++ (googletest, nlohmann-json, POCO from Debian) through the real CLI."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pyarrow.parquet as pq

from cpp_data.pipeline.outlock import OutputLock
from conftest import CLI, build, build_dir, data_digests, run_cli


def test_two_builds_are_byte_identical(small_sources, reference_build, tmp_path):
    out = tmp_path / "again"
    # A different worker count must not change a byte.
    run_cli("build", "--version", "v6", "--sources", str(small_sources), "--out", str(out), "--workers", "1",
            "--no-progress")
    again = build_dir(out)
    assert again.name == reference_build.name
    assert data_digests(again) == data_digests(reference_build)
    assert len(data_digests(again)) >= 2  # at least one shard and the ledger


def test_build_contents_and_summary(reference_build):
    manifest = json.loads((reference_build / "manifest.json").read_text())
    assert manifest["schema_generation"] == "v6"
    assert all(s["commit"].startswith("tree:") for s in manifest["sources"])
    ledger = pq.read_table(reference_build / "provenance" / "ledger.parquet").to_pylist()
    seen = sum(st["counts"]["files_seen"] for st in manifest["stages"] if st["stage"] == "collect")
    assert len(ledger) == seen, "the ledger must hold one row per file seen"
    kept = {(r["repo"], r["path"]) for r in ledger if r["decision"] == "kept"}
    shard_rows = []
    for entry in manifest["files"]:
        if entry["kind"] == "shard":
            t = pq.read_table(reference_build / entry["path"])
            assert entry["rows"] == t.num_rows
            shard_rows += list(zip(t.column("source_repo").to_pylist(), t.column("source_path").to_pylist()))
            md = pq.ParquetFile(reference_build / entry["path"]).metadata
            sizes = [md.row_group(i).num_rows for i in range(md.num_row_groups)]
            assert all(s == 1024 for s in sizes[:-1]) and sizes[-1] <= 1024
    assert len(shard_rows) == len(set(shard_rows)) == len(kept)
    assert set(shard_rows) == kept
    # a known file: gtest.h is BSD-3 by its header notice, kept, with its text byte-identical to the source
    t = pq.read_table(reference_build / "shards" / "train-00000.parquet").to_pylist()
    splits = {e["split"] for e in manifest["files"] if e["kind"] == "shard"}
    assert splits == {"train", "valid"}
    rows = {(r["source_repo"], r["source_path"]): r for r in t}
    row = rows.get(("nlohmann-json", "json.hpp"))
    if row is not None:
        assert row["license_spdx"] == "MIT" and row["license_source"] == "spdx_tag"
        assert row["text"] == Path("/usr/include/nlohmann/json.hpp").read_text()


def test_rerun_does_no_work_and_only_from_rerun(small_sources, tmp_path):
    out = tmp_path / "out"
    first = build(small_sources, out)
    assert "running" in first.stdout
    digests = data_digests(build_dir(out))
    second = build(small_sources, out, check=False)
    assert second.returncode == 3  # nothing to do: schedulers can tell it from a new build (0)
    assert "running" not in second.stdout and "nothing to do" in second.stdout
    only = build(small_sources, out, "--only", "shards", check=False)
    assert only.returncode == 3  # the same bytes again: no new build
    assert "shards: running" in only.stdout and "filter[" not in only.stdout and "ledger: running" not in only.stdout
    frm = build(small_sources, out, "--from", "exact_dedup", check=False)
    ran = [ln.split("] ", 1)[1].split(":")[0] for ln in frm.stdout.splitlines() if ": running" in ln]
    assert ran == ["exact_dedup", "near_dedup", "shards", "ledger"]
    assert data_digests(build_dir(out)) == digests


def test_validate_catches_corruption(reference_build, tmp_path):
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(reference_build, copy)
    ok = run_cli("validate", str(copy))
    assert ok.stdout.startswith("ok:")
    shard = copy / "shards" / "train-00000.parquet"
    data = bytearray(shard.read_bytes())
    mid = len(data) // 2
    data[mid:mid + 64] = bytes(b ^ 0xFF for b in data[mid:mid + 64])
    shard.write_bytes(bytes(data))
    bad = run_cli("validate", str(copy), check=False)
    assert bad.returncode == 1
    msg = bad.stderr.strip()
    assert len(msg.splitlines()) == 1
    assert "train-00000.parquet" in msg and "row group" in msg and "column" in msg, msg
    (copy / "_COMPLETE").unlink()
    incomplete = run_cli("validate", str(copy), check=False)
    assert incomplete.returncode == 1 and "_COMPLETE" in incomplete.stderr


def _partials(out: Path) -> list[Path]:
    cache = out / "cache"
    return [p for p in cache.glob("*/*.partial")] if cache.is_dir() else []


def test_sigkill_mid_stage_resumes_to_identical_bytes(small_sources, reference_build, tmp_path):
    out = tmp_path / "killed"
    killed_in = []
    for stage in ("filter", "license", "near_dedup", "shards"):
        proc = subprocess.Popen([*CLI, "build", "--version", "v6", "--sources", str(small_sources), "--out",
                                 str(out), "--workers", "2", "--no-progress"],
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and proc.poll() is None:
            hits = [p for p in _partials(out) if p.parent.name == stage]
            if hits:
                os.kill(proc.pid, signal.SIGKILL)
                killed_in.append(hits[0].parent.name)
                break
            time.sleep(0.01)
        proc.wait()
        time.sleep(0.5)  # let orphaned datatrove workers notice their parent died (PR_SET_PDEATHSIG)
    assert killed_in == ["filter", "license", "near_dedup", "shards"], killed_in
    sealed_builds = [d for d in (out / "builds").glob("*") if (d / "_COMPLETE").exists()] \
        if (out / "builds").exists() else []
    assert sealed_builds == [], "a killed build must not publish"
    build(small_sources, out)
    assert data_digests(build_dir(out)) == data_digests(reference_build)
    assert not _partials(out)


def test_second_build_on_same_output_is_refused_while_locked(small_sources, tmp_path):
    out = tmp_path / "locked"
    with OutputLock(out):
        proc = build(small_sources, out, check=False)
    assert proc.returncode == 75
    assert "another build is running" in proc.stderr and "--wait" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_wait_queues_behind_a_running_build(small_sources, tmp_path):
    import threading

    out = tmp_path / "queued"
    lock = OutputLock(out)
    lock.__enter__()
    timer = threading.Timer(3.0, lock.__exit__)
    timer.start()
    started = time.monotonic()
    proc = build(small_sources, out, "--wait")
    timer.join()
    assert time.monotonic() - started >= 3.0
    assert proc.returncode == 0 and build_dir(out).is_dir()
