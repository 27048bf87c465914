"""schemas/indexed.py: the partials the export and packing tasks write and the driver's join give byte for
byte what megatron-core's own IndexedDatasetBuilder writes, both adding sequence by sequence and through its
add_index, and megatron-core's IndexedDataset reads them back."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from cpp_data.schemas import indexed
from cpp_data.schemas.indexed import PartialWriter, join_partials


def _partials(tmp_path: Path, vocab: int, sizes: list[int], seed: int) -> tuple[list[tuple[Path, dict]], list]:
    """Partials of random sequences (some empty); returns [(prefix, what close said)] and every sequence."""
    rng = np.random.default_rng(seed)
    parts, every = [], []
    for k, n in enumerate(sizes):
        w = PartialWriter(tmp_path / f"part-{k}", vocab)
        for _ in range(n):
            seq = rng.integers(0, vocab, size=int(rng.integers(0, 40)))
            w.add(seq)
            every.append(seq)
        parts.append((tmp_path / f"part-{k}", w.close()))
    return parts, every


def _builder(prefix: Path, vocab: int, fill) -> None:
    import torch
    from megatron.core.datasets.indexed_dataset import DType, IndexedDatasetBuilder

    b = IndexedDatasetBuilder(str(prefix.with_suffix(".bin")), dtype=DType.optimal_dtype(vocab))
    fill(b, torch)
    b.finalize(str(prefix.with_suffix(".idx")))


@pytest.mark.parametrize("vocab", [50_000, 131_072])  # uint16 and int32
def test_join_gives_megatron_cores_bytes(tmp_path: Path, vocab: int, monkeypatch):
    from megatron.core.datasets.indexed_dataset import IndexedDataset

    monkeypatch.setattr(indexed, "_CHUNK", 7)  # several chunks per array, as a large partial would have
    parts, every = _partials(tmp_path, vocab, [5, 0, 23, 1, 12], seed=vocab)
    got = join_partials(tmp_path / "joined", parts, vocab)  # the empty partial among them adds nothing

    def one_by_one(b, torch):
        for seq in every:
            b.add_item(torch.from_numpy(seq.astype(np.int64)))
            b.end_document()

    def by_add_index(b, torch):
        for prefix, written in parts:
            if written["sequences"]:
                b.add_index(str(prefix))

    for name, fill in (("items", one_by_one), ("added", by_add_index)):
        _builder(tmp_path / name, vocab, fill)
        for ext in (".bin", ".idx"):
            assert (tmp_path / f"joined{ext}").read_bytes() == (tmp_path / f"{name}{ext}").read_bytes(), (name, ext)
    ds = IndexedDataset(str(tmp_path / "joined"))
    assert len(ds) == len(every) == got["sequences"]
    assert all(ds[i].tolist() == seq.tolist() for i, seq in enumerate(every))
    assert got["tokens"] == sum(len(s) for s in every)
    assert got["dtype_code"] == (8 if vocab < 65_500 else 4)
    assert not list(tmp_path.glob(".*.tmp"))


def test_join_of_nothing_is_the_builders_empty_dataset(tmp_path: Path):
    join_partials(tmp_path / "empty", [], 1000)
    _builder(tmp_path / "ref", 1000, lambda b, torch: None)
    for ext in (".bin", ".idx"):
        assert (tmp_path / f"empty{ext}").read_bytes() == (tmp_path / f"ref{ext}").read_bytes()


def test_join_refuses_ids_past_the_vocabulary_and_mixed_dtypes(tmp_path: Path):
    small, _ = _partials(tmp_path, 1000, [3], seed=1)
    small[0][1]["max_token_id"] = 1000  # as a task would report an id the vocabulary does not have
    with pytest.raises(ValueError, match="does not fit the vocabulary"):
        join_partials(tmp_path / "bad", small, 1000)
    assert not (tmp_path / "bad.bin").exists() and not (tmp_path / "bad.idx").exists()
    wide = PartialWriter(tmp_path / "wide", 100_000)
    wide.add(np.array([999]))
    with pytest.raises(ValueError, match="wide.idx: dtype code 4, the joined dataset's is 8"):
        join_partials(tmp_path / "mixed", [(tmp_path / "wide", wide.close())], 1000)
