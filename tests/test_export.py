"""Megatron bin/idx export and packed rows (issue 6), read back with megatron-core's own readers."""

from __future__ import annotations

import json
import shutil
import struct
from collections import Counter
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from conftest import run_cli

from cpp_data.schemas.indexed import indexed_dtype as megatron_dtype
from cpp_data.schemas.manifest import load_manifest, sha256_file
from cpp_data.stages.lib.export_megatron import write_indexed
from cpp_data.tokenizer.band import load_band

pytestmark = pytest.mark.slow  # full builds (pyproject.toml: markers)

BAND = load_band()
EOS, PAD = BAND.role_id("eos"), BAND.role_id("pad")
FIM = {BAND.role_id("fim_prefix"), BAND.role_id("fim_middle"), BAND.role_id("fim_suffix")}


def _shard_tokens(build: Path, split: str) -> list[list[int]]:
    manifest = load_manifest(build)
    out = []
    for e in manifest["files"]:
        if e["kind"] == "shard" and e["split"] == split:
            out += pq.read_table(build / e["path"], columns=["token_ids"]).column(0).to_pylist()
    return out


def _lane_tokens(build: Path, lane: str, split: str) -> list[list[int]]:
    manifest = load_manifest(build)
    return [ids for e in manifest["files"] if e["kind"] == "lane_shard" and e["split"] == split
            and e["path"].startswith(f"lanes/{lane}/")
            for ids in pq.read_table(build / e["path"], columns=["token_ids"]).column(0).to_pylist()]


def test_bin_idx_read_back_by_megatron_core(reference_build: Path):
    from megatron.core.datasets.indexed_dataset import DType, IndexedDataset

    manifest = load_manifest(reference_build)
    bins = {e["path"]: e["sha256"] for e in manifest["files"] if e["kind"] == "megatron_bin"}
    assert set(bins) == {f"megatron/{lane}/cpp_{s}.bin" for lane in ("4k", "16k", "64k") for s in ("train", "valid")}
    for lane in ("4k", "16k", "64k"):
        for split in ("train", "valid"):
            prefix = reference_build / "megatron" / lane / f"cpp_{split}"
            assert sha256_file(prefix.with_suffix(".bin")) == bins[f"megatron/{lane}/cpp_{split}.bin"]
            ds = IndexedDataset(str(prefix))
            docs = _lane_tokens(reference_build, lane, split)
            assert len(ds) == len(docs) > 0
            for i, ids in enumerate(docs):
                assert ds[i].tolist() == ids + [EOS]
            # the header, as megatron-core's format says: magic, version 1, dtype code (8 uint16 under 65,500
            # ids, else 4 int32)
            head = prefix.with_suffix(".idx").read_bytes()[:34]
            assert head[:9] == b"MMIDIDX\x00\x00"
            version, code, seqs, docs_plus_one = struct.unpack("<QBQQ", head[9:34])
            vocab = manifest["tokenizer"]["vocab_size"]
            assert (version, code, seqs, docs_plus_one) == (1, 8 if vocab < 65_500 else 4, len(docs), len(docs) + 1)
            assert ds.index.dtype == DType.optimal_dtype(vocab)


def test_small_vocab_uses_uint16_and_oversized_ids_are_refused(tmp_path: Path):
    from megatron.core.datasets.indexed_dataset import IndexedDataset

    docs = [np.array([1, 2, 65_000], dtype=np.int64), np.array([], dtype=np.int64), np.array([7], dtype=np.int64)]
    info = write_indexed(tmp_path / "small", iter(docs), vocab_size=65_499, eod=0)
    assert info["dtype"] == "uint16" and info["dtype_code"] == 8 and megatron_dtype(65_499) == np.uint16
    ds = IndexedDataset(str(tmp_path / "small"))
    assert [ds[i].tolist() for i in range(3)] == [[1, 2, 65_000, 0], [0], [7, 0]]
    assert write_indexed(tmp_path / "big", iter(docs), vocab_size=65_500, eod=0)["dtype"] == "int32"
    # the reference team's costliest bug (docs/DESIGN.md section 10): ids past the vocabulary (e.g. 131,005 through a
    # uint16 writer) must never pass
    with pytest.raises(ValueError, match="does not fit the vocabulary"):
        write_indexed(tmp_path / "bad", iter([np.array([131_005])]), vocab_size=65_536, eod=0)
    assert not (tmp_path / "bad.bin").exists()


def test_export_command_is_deterministic_and_matches_the_build(reference_build: Path, tmp_path: Path):
    for name in ("a", "b"):
        run_cli("export", "megatron", str(reference_build), "--lane", "4k", "--out", str(tmp_path / name),
                "--workers", "2")
    for f in ("cpp_train.bin", "cpp_train.idx", "cpp_valid.bin", "cpp_valid.idx"):
        a, b = (tmp_path / "a" / f).read_bytes(), (tmp_path / "b" / f).read_bytes()
        assert a == b == (reference_build / "megatron" / "4k" / f).read_bytes(), f
    assert (tmp_path / "a" / "_COMPLETE").exists()
    again = run_cli("export", "megatron", str(reference_build), "--lane", "4k", "--out", str(tmp_path / "a"),
                    check=False)
    assert again.returncode == 3  # already exported
    whole = tmp_path / "whole"  # without --lane: the whole documents, one sequence each
    run_cli("export", "megatron", str(reference_build), "--out", str(whole))
    from megatron.core.datasets.indexed_dataset import IndexedDataset

    assert len(IndexedDataset(str(whole / "cpp_train"))) == len(_shard_tokens(reference_build, "train"))
    missing = run_cli("export", "megatron", str(reference_build), "--lane", "8k", check=False)
    assert missing.returncode == 2 and "no lane '8k'" in missing.stderr


def _segments(row: dict) -> list[list[int]]:
    segs: dict[int, list[int]] = {}
    for tok, d in zip(row["input_ids"], row["doc_ids"]):
        if d:
            segs.setdefault(d, []).append(tok)
    return [segs[k] for k in sorted(segs)]


def test_packed_rows(reference_build: Path):
    """A lane's packed rows: exactly its length, every document of the lane whole in one row (no FIM in the
    rows), loss only on real next tokens outside context prefixes; the training bin/idx of epoch 0 is the same
    rows with FIM drawn on about half the documents, each a permutation of its document around 3 sentinels."""
    from cpp_data.schemas.indexed import read_sequences

    manifest = load_manifest(reference_build)
    meta = json.loads((reference_build / "packed" / "4k" / "packed.json").read_text())
    T = meta["seq_length"]
    assert T == 4096 and meta["fim_epochs"] == 1
    rows = {s: [r for e in manifest["files"] if e["kind"] == "packed" and e["split"] == s
                and e["path"].startswith("packed/4k/") for r in pq.read_table(reference_build / e["path"]).to_pylist()]
            for s in ("train", "valid")}
    for split, rs in rows.items():
        assert [r["pack_id"] for r in rs] == list(range(len(rs)))
        for r in rs:
            assert len(r["input_ids"]) == len(r["target_ids"]) == len(r["loss_mask"]) == len(r["doc_ids"]) == T
            d = r["doc_ids"]
            assert d[0] == 1 and max(d) == r["num_docs"] and sum(1 for x in d if x) == r["valid_token_count"]
            assert all(x == 0 for x in d[r["valid_token_count"]:])  # right-padded
            assert r["valid_token_count"] + 3 * r["num_docs"] <= T  # FIM's three slots reserved per document
            for k in range(T - 1):
                if r["loss_mask"][k]:
                    assert d[k + 1] == d[k] and r["target_ids"][k] == r["input_ids"][k + 1]
        tokens = sum(r["valid_token_count"] for r in rs)
        assert meta["telemetry"][split]["slot_utilization"] == round(tokens / (len(rs) * T), 4)
        assert meta["telemetry"][split]["cropped_token_share"] == 0.0  # a lane's documents fit its rows
        expected = Counter(tuple(ids + [EOS]) for ids in _lane_tokens(reference_build, "4k", split))
        assert expected == Counter(tuple(s) for r in rs for s in _segments(r))
    # the training bin/idx, epoch 0: the rows with FIM drawn
    train_docs = _lane_tokens(reference_build, "4k", "train")
    fim = meta["telemetry"]["train"]["fim_documents"]
    assert 0.4 < fim / len(train_docs) < 0.6
    originals = Counter(tuple(sorted(ids + [EOS])) for ids in train_docs)
    seen_fim = 0
    for seq, r in zip(read_sequences(reference_build / "packed" / "4k" / "cpp_packed_train_e0"), rows["train"]):
        seq = seq.tolist()
        assert len(seq) == T and seq.count(BAND.role_id("fim_prefix")) <= r["num_docs"]
        segments, start = [], 0
        for k, t in enumerate(seq):  # each document ends with its EOD
            if t == EOS:
                segments.append(seq[start:k + 1])
                start = k + 1
        for s in segments:
            if s[0] == BAND.role_id("fim_prefix"):
                assert sum(1 for t in s if t in FIM) == 3
                assert tuple(sorted(t for t in s if t not in FIM)) in originals
                seen_fim += 1
    assert seen_fim > 0.3 * fim


def test_packed_export_is_deterministic(reference_build: Path, tmp_path: Path):
    for name in ("a", "b"):
        run_cli("export", "packed", str(reference_build), "--seq-length", "1024", "--out", str(tmp_path / name))
    files = sorted(p.name for p in (tmp_path / "a").glob("*.parquet"))
    assert files and all((tmp_path / "a" / f).read_bytes() == (tmp_path / "b" / f).read_bytes() for f in files)
    rows = pq.read_table(tmp_path / "a" / "train-00000.parquet", columns=["input_ids"]).column(0).to_pylist()
    assert all(len(r) == 1024 for r in rows)
    shutil.rmtree(tmp_path / "b")


def test_export_never_replaces_files_it_did_not_write(reference_build: Path, tmp_path: Path):
    """An export is sealed by renaming its directory into place, replacing what was there: `--out DIR` had
    deleted a user's files (and `--out OUT` a whole output directory) and `--out BUILD/packed` had rewritten a
    promoted build, all with exit 0. Each is refused before any work, and the files stay."""
    keep = tmp_path / "keep"
    keep.mkdir()
    (keep / "notes.txt").write_text("important")
    out_dir = reference_build.parent.parent
    for args, message in (
            (["megatron", "--out", str(keep)], "exists and holds other files"),
            (["packed", "--out", str(keep)], "exists and holds other files"),
            (["megatron", "--out", str(out_dir)], "exists and holds other files"),
            (["packed", "--out", str(reference_build / "packed")], f"inside the published build {reference_build}"),
            (["megatron", "--out", str(reference_build / "new")], f"inside the published build {reference_build}"),
            (["megatron", "--out", str(reference_build)], "a sealed directory that is not an export")):
        proc = run_cli("export", args[0], str(reference_build), *args[1:], check=False)
        lines = proc.stderr.strip().splitlines()
        assert proc.returncode == 2 and len(lines) == 1 and message in lines[0], (args, proc.stderr)
    assert (keep / "notes.txt").read_text() == "important" and sorted(p.name for p in keep.iterdir()) == ["notes.txt"]
    assert (out_dir / "builds").is_dir() and not (reference_build / "new").exists()
    run_cli("validate", str(reference_build))
    empty = tmp_path / "empty"
    empty.mkdir()  # an empty directory is a fine target
    run_cli("export", "megatron", str(reference_build), "--out", str(empty))
    assert (empty / "launch.json").is_file()


def test_commands_never_write_inside_a_published_build(reference_build: Path):
    """`report --output BUILD/reports/summary.json` would replace a sealed build's summary with HTML, `diff --tables
    BUILD/shards` add Parquet files to it, and `export megatron --name ../../evil` write bin/idx files outside the
    export directory. Each is refused in one line before any work."""
    b = str(reference_build)
    for args, message in (
            (["report", b, "--output", f"{b}/reports/summary.json"], f"inside the published build {b}"),
            (["report", b, "--output", f"{b}/x.html"], f"inside the published build {b}"),
            (["diff", b, b, "--tables", f"{b}/shards"], f"inside the published build {b}"),
            (["export", "megatron", b, "--name", "../../evil"], "is not a file prefix"),
            (["export", "megatron", b, "--name", ""], "is not a file prefix")):
        proc = run_cli(*args, check=False)
        lines = proc.stderr.strip().splitlines()
        assert proc.returncode == 2 and len(lines) == 1 and message in lines[0], (args, proc.stderr)
    run_cli("validate", b)
    assert not list(reference_build.parent.parent.rglob("*evil*"))
