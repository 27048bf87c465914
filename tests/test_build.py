"""End-to-end builds of real C++ (googletest, nlohmann-json, POCO from Debian) through the real CLI."""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from conftest import build, build_dir, data_digests, run_cli

from cpp_data.pipeline.runner.outlock import OutputLock

pytestmark = pytest.mark.slow  # full builds (pyproject.toml: markers)


def test_two_builds_are_byte_identical(tiny_reference, tmp_path):
    sources, reference_build = tiny_reference
    out = tmp_path / "again"
    # Another output directory and a different worker count must not change a byte.
    run_cli("build", "--version", "v6", "--sources", str(sources), "--out", str(out), "--workers", "1",
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
    kept = {(r["source_repo"], r["source_path"]) for r in ledger if r["decision"] == "kept"}
    shard_rows = []
    for entry in manifest["files"]:
        if entry["kind"] == "shard":
            t = pq.read_table(reference_build / entry["path"])
            assert entry["rows"] == t.num_rows
            shard_rows += list(zip(t.column("source_repo").to_pylist(), t.column("source_path").to_pylist()))
            md = pq.ParquetFile(reference_build / entry["path"]).metadata
            sizes = [md.row_group(i).num_rows for i in range(md.num_row_groups)]
            text = [len(x.encode()) for x in t.column("text").to_pylist()]
            start = 0
            for k, n in enumerate(sizes):  # row_group_size rows or row_group_bytes of text, whichever comes first
                group = sum(text[start:start + n])
                assert n <= 1024 and (group <= 4 * 2**20 or n == 1)
                if k < len(sizes) - 1 and n < 1024:
                    assert group + text[start + n] > 4 * 2**20
                start += n
    assert len(shard_rows) == len(set(shard_rows)) == len(kept)
    assert set(shard_rows) == kept
    splits = {e["split"] for e in manifest["files"] if e["kind"] == "shard"}
    assert splits == {"train", "valid"}
    # every ledger row names the file's bytes at its pin
    roots = {s["name"]: Path(s["url"]) for s in manifest["sources"]}
    for r in ledger:
        raw = (roots[r["source_repo"]] / r["source_path"]).read_bytes()
        assert r["raw_sha256"] == hashlib.sha256(raw).hexdigest(), r["source_path"]
    # a known file: json.hpp is MIT by its SPDX tag, kept, its text byte-identical to the installed header
    rows = {(r["source_repo"], r["source_path"]): r for e in manifest["files"] if e["kind"] == "shard"
            for r in pq.read_table(reference_build / e["path"]).to_pylist()}
    row = rows[("nlohmann-json", "json.hpp")]
    assert row["license_spdx"] == "MIT" and row["license_source"] == "spdx_tag"
    assert row["text"] == Path("/usr/include/nlohmann/json.hpp").read_text()


def test_rerun_does_no_work_and_only_from_rerun(small_sources, reference_build, tmp_path):
    import shutil

    out = tmp_path / "out"  # a copy of the reference build's output directory: its first build
    shutil.copytree(reference_build.parent.parent, out, symlinks=True)
    digests = data_digests(build_dir(out))
    second = build(small_sources, out, check=False)
    assert second.returncode == 3  # nothing to do: schedulers can tell it from a new build (0)
    assert "running" not in second.stdout and "nothing to do" in second.stdout
    only = build(small_sources, out, "--only", "shards", check=False)
    assert only.returncode == 3  # the same bytes again: no new build
    ran = [ln.split("] ", 1)[1].split(":")[0] for ln in only.stdout.splitlines() if ": running" in ln]
    assert ran == ["shards"]  # its inputs are listed as cached; nothing after it is even looked at
    assert "ledger:" not in only.stdout
    forced = build(small_sources, out, "--only", "shards", "--force", check=False)
    assert [ln.split("] ", 1)[1].split(":")[0] for ln in forced.stdout.splitlines()
            if ": running" in ln] == ["shards"]  # --force reruns no input of the stage --only names
    frm = build(small_sources, out, "--from", "megatron_export", check=False)
    ran = [ln.split("] ", 1)[1].split(":")[0] for ln in frm.stdout.splitlines() if ": running" in ln]
    assert ran == ["megatron_export", "packed_rows", "launch_spec", "ledger"]  # the suffix from the stage
    assert data_digests(build_dir(out)) == digests


def test_only_on_a_fresh_output_names_the_missing_input(small_sources, tmp_path):
    proc = build(small_sources, tmp_path / "fresh", "--only", "license", check=False)
    assert proc.returncode == 2  # a usage problem (no stage failed), as --from and --force mistakes are
    assert "its input collect[" in proc.stderr and "without --only" in proc.stderr
    assert "filter" not in proc.stdout  # nothing after the stage ran


def test_validate_catches_corruption(reference_build, tmp_path):
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(reference_build, copy)
    ok = run_cli("validate", str(copy))
    assert ok.stdout.startswith("ok:")
    shard = copy / "shards" / "train-00000.parquet"
    assert not shard.stat().st_mode & 0o222, "published shards are read-only"
    for name in ("manifest.json", "_COMPLETE", "reports/summary.json"):  # the whole build, these too
        assert not (reference_build / name).stat().st_mode & 0o222, name
    shard.chmod(0o644)
    data = bytearray(shard.read_bytes())
    mid = len(data) // 2
    data[mid:mid + 64] = bytes(b ^ 0xFF for b in data[mid:mid + 64])
    shard.write_bytes(bytes(data))
    bad = run_cli("validate", str(copy), check=False)
    assert bad.returncode == 1
    msg = bad.stderr.strip()
    assert len(msg.splitlines()) == 1
    assert "train-00000.parquet" in msg and "row group" in msg and "column" in msg, msg
    shard.write_bytes(bytes(data[: len(data) - 100]))  # truncated: the footer is gone
    truncated = run_cli("validate", str(copy), check=False)
    assert truncated.returncode == 1 and "bytes, manifest says" in truncated.stderr
    assert "first damage" in truncated.stderr and len(truncated.stderr.strip().splitlines()) == 1
    (copy / "_COMPLETE").unlink()
    incomplete = run_cli("validate", str(copy), check=False)
    assert incomplete.returncode == 1 and "_COMPLETE" in incomplete.stderr


def test_validate_refuses_files_the_manifest_does_not_list_and_paths_outside_the_build(reference_build, tmp_path):
    """A shard copied in after publishing is read by every reader that globs shards/ (the card's
    `shards/train*.parquet`, DuckDB's `shards/*.parquet`): validate names it. A manifest path that climbs out of
    the build is refused instead of followed."""
    import json
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(reference_build, copy)
    extra = copy / "shards" / "train-09999.parquet"
    shutil.copy(copy / "shards" / "train-00000.parquet", extra)
    proc = run_cli("validate", str(copy), check=False)
    assert proc.returncode == 1 and len(proc.stderr.strip().splitlines()) == 1
    assert "train-09999.parquet: in the build but not in its manifest" in proc.stderr
    extra.unlink()
    assert run_cli("validate", str(copy)).stdout.startswith("ok:")  # summary.json and the seal are no strays
    manifest = copy / "manifest.json"
    manifest.chmod(0o644)
    data = json.loads(manifest.read_text())
    data["files"][0]["path"] = "../../../../../../etc/hostname"
    manifest.write_text(json.dumps(data))
    proc = run_cli("validate", str(copy), check=False)
    assert proc.returncode == 1 and "is not a file inside the build" in proc.stderr, proc.stderr


def test_second_build_on_same_output_is_refused_while_locked(small_sources, tmp_path):
    out = tmp_path / "locked"
    with OutputLock(out):
        proc = build(small_sources, out, check=False)
    assert proc.returncode == 75
    assert "another build is running" in proc.stderr and "--wait" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_wait_queues_behind_a_running_build(small_sources, reference_build, tmp_path):
    import shutil
    import threading

    out = tmp_path / "queued"  # the reference build's output without its builds: publishes from the cache
    shutil.copytree(reference_build.parent.parent, out, symlinks=True, ignore=shutil.ignore_patterns("builds"))
    lock = OutputLock(out)
    lock.__enter__()
    timer = threading.Timer(3.0, lock.__exit__)
    timer.start()
    started = time.monotonic()
    proc = build(small_sources, out, "--wait")
    timer.join()
    assert time.monotonic() - started >= 3.0
    assert proc.returncode == 0 and build_dir(out).is_dir()


def test_summary_agrees_with_the_data(reference_build):
    summary = json.loads((reference_build / "reports" / "summary.json").read_text())
    manifest = json.loads((reference_build / "manifest.json").read_text())
    ledger = pq.read_table(reference_build / "provenance" / "ledger.parquet").to_pylist()
    shard_rows = sum(e["rows"] for e in manifest["files"] if e["kind"] == "shard")
    text_bytes = sum(sum(pq.read_table(reference_build / e["path"], columns=["size_bytes"]).column(0).to_pylist())
                     for e in manifest["files"] if e["kind"] == "shard")
    decisions = {}
    for r in ledger:
        decisions[r["decision"]] = decisions.get(r["decision"], 0) + 1
    assert summary["files_seen"] == len(ledger)
    assert summary["decisions"] == decisions
    assert summary["documents"] == shard_rows == decisions["kept"] == manifest["totals"]["documents"]
    assert summary["train_documents"] + summary["valid_documents"] == shard_rows
    assert summary["exact_duplicates"] == decisions.get("exact_duplicate", 0)
    assert summary["near_duplicates"] == decisions.get("near_duplicate", 0)
    assert summary["text_bytes"] == text_bytes
    assert summary["shards"] == sum(1 for e in manifest["files"] if e["kind"] == "shard")
    assert summary["shard_bytes"] == sum(e["bytes"] for e in manifest["files"] if e["kind"] == "shard")
    assert summary["throughput_mb_s"] > 0 and summary["cpp_bytes_collected"] > summary["text_bytes"] / 2
