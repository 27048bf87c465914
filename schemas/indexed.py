"""Megatron indexed datasets (`<prefix>.bin` + `<prefix>.idx`) as cpp-data writes and reads them.

Writing is megatron-core's own `IndexedDatasetBuilder` and reading its own `IndexedDataset`, so what Megatron
reads is what Megatron wrote. The dtype is megatron-core's `DType.optimal_dtype` rule: uint16 under 65,500
ids, else int32 (there is no uint32). The format, as megatron-core 0.16.1 writes it (little-endian):
  <prefix>.bin  the token ids of every sequence back to back, no header
  <prefix>.idx  b"MMIDIDX\\x00\\x00", u64 version (1), u8 dtype code (1 uint8, 2 int8, 3 int16, 4 int32,
                5 int64, 6 float64, 7 float32, 8 uint16), u64 sequence count, u64 document count + 1,
                int32 sequence lengths, int64 byte offsets, int64 document index
Both files are written under temporary names and renamed, .idx last, so a reader never sees half a dataset.
Two users: the document export (one document per sequence, EOD appended) and the packed rows (one row per
sequence, every sequence exactly seq_length ids).
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from cpp_data.schemas.manifest import sha256_file


def indexed_dtype(vocab_size: int):
    from megatron.core.datasets.indexed_dataset import DType

    return DType.optimal_dtype(vocab_size)


class IndexedWriter:
    """Sequences in, `<prefix>.bin/.idx` out; each `add` is one sequence and one document."""

    def __init__(self, prefix: Path, vocab_size: int):
        import torch  # noqa: F401 - the builder takes torch tensors
        from megatron.core.datasets.indexed_dataset import IndexedDatasetBuilder

        self.prefix, self.vocab_size = Path(prefix), vocab_size
        self.dtype = indexed_dtype(vocab_size)
        self._bin = self.prefix.with_name(f".{self.prefix.name}.bin.tmp")
        self._idx = self.prefix.with_name(f".{self.prefix.name}.idx.tmp")
        self._builder = IndexedDatasetBuilder(str(self._bin), dtype=self.dtype)
        self.sequences = self.tokens = 0
        self.max_id = -1

    def add(self, ids: np.ndarray) -> None:
        import torch

        ids = np.asarray(ids, dtype=np.int32)
        if len(ids):
            self.max_id = max(self.max_id, int(ids.max()))
        self._builder.add_item(torch.from_numpy(ids))
        self._builder.end_document()
        self.sequences += 1
        self.tokens += len(ids)

    def close(self) -> dict:
        """Finalize and rename into place; refuses ids past the vocabulary (a uint16 file would wrap them)."""
        from megatron.core.datasets.indexed_dataset import DType

        self._builder.finalize(str(self._idx))
        if self.max_id >= self.vocab_size:
            raise ValueError(f"{self.prefix}: token id {self.max_id} does not fit the vocabulary of {self.vocab_size}")
        os.replace(self._bin, self.prefix.with_suffix(".bin"))
        os.replace(self._idx, self.prefix.with_suffix(".idx"))
        return {"prefix": self.prefix.name, "sequences": self.sequences, "tokens": self.tokens,
                "max_token_id": self.max_id, "dtype": np.dtype(self.dtype).name,
                "dtype_code": DType.code_from_dtype(self.dtype),
                "bin_sha256": sha256_file(self.prefix.with_suffix(".bin")),
                "idx_sha256": sha256_file(self.prefix.with_suffix(".idx"))}


def read_sequences(prefix: Path):
    """megatron-core's reader over `<prefix>.bin/.idx` (indexable, len = sequences; items are numpy arrays)."""
    from megatron.core.datasets.indexed_dataset import IndexedDataset

    return IndexedDataset(str(prefix))
