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


def partial_dtype(vocab_size: int) -> np.dtype:
    """megatron-core's DType.optimal_dtype rule without importing it: uint16 under 65,500 ids, else int32."""
    return np.dtype(np.uint16 if vocab_size < 65_500 else np.int32)


_DTYPE_CODE = {np.dtype(np.uint16): 8, np.dtype(np.int32): 4}


class PartialWriter:
    """A partial `<prefix>.bin/.idx` that a task writes and IndexedWriter.add_index joins at once (scratch, never
    published): the format above, one sequence per document, written with numpy.

    Hand-written because importing torch and megatron-core costs every worker process about 5 s, which on a
    small build is more than the work; the partial is read back by megatron-core's own reader in `add_index`,
    and the joined result is megatron-core's builder's (tests/test_export.py compares it byte for byte with
    adding each sequence to the builder)."""

    def __init__(self, prefix: Path, vocab_size: int):
        self.prefix, self.dtype = Path(prefix), partial_dtype(vocab_size)
        self.vocab_size = vocab_size
        self._bin = open(self.prefix.with_suffix(".bin"), "wb")
        self.lengths: list[int] = []
        self.tokens, self.max_id = 0, -1

    def add(self, ids: np.ndarray) -> None:
        ids = np.asarray(ids)
        if len(ids):
            self.max_id = max(self.max_id, int(ids.max()))
        self._bin.write(ids.astype(self.dtype).tobytes())
        self.lengths.append(len(ids))
        self.tokens += len(ids)

    def close(self) -> dict:
        import struct

        self._bin.close()
        if self.max_id >= self.vocab_size:
            raise ValueError(f"{self.prefix}: token id {self.max_id} does not fit the vocabulary of {self.vocab_size}")
        lengths = np.array(self.lengths, dtype=np.int32)
        pointers = np.r_[0, np.cumsum(lengths.astype(np.int64) * self.dtype.itemsize)[:-1]].astype(np.int64) \
            if len(lengths) else np.zeros(0, np.int64)
        with open(self.prefix.with_suffix(".idx"), "wb") as f:
            f.write(b"MMIDIDX\x00\x00" + struct.pack("<Q", 1) + struct.pack("<B", _DTYPE_CODE[self.dtype]))
            f.write(struct.pack("<Q", len(lengths)) + struct.pack("<Q", len(lengths) + 1))
            f.write(lengths.tobytes() + pointers.tobytes() + np.arange(len(lengths) + 1, dtype=np.int64).tobytes())
        return {"sequences": len(lengths), "tokens": self.tokens, "max_token_id": self.max_id}


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

    def add_index(self, prefix: Path, written: dict) -> None:
        """Append a whole dataset written by another IndexedWriter (`written`: what its close returned), with
        megatron-core's own `add_index`: its .bin is copied, its sequence lengths and document index appended, so
        the result is byte-identical to adding its sequences here one by one."""
        self._builder.add_index(str(prefix))
        self.sequences += written["sequences"]
        self.tokens += written["tokens"]
        self.max_id = max(self.max_id, written["max_token_id"])

    def close(self, digests: bool = True) -> dict:
        """Finalize and rename into place; refuses ids past the vocabulary (a uint16 file would wrap them).
        `digests`: the SHA-256 of both files in the result (not wanted for partials that are merged at once)."""
        from megatron.core.datasets.indexed_dataset import DType

        self._builder.finalize(str(self._idx))
        if self.max_id >= self.vocab_size:
            raise ValueError(f"{self.prefix}: token id {self.max_id} does not fit the vocabulary of {self.vocab_size}")
        os.replace(self._bin, self.prefix.with_suffix(".bin"))
        os.replace(self._idx, self.prefix.with_suffix(".idx"))
        out = {"prefix": self.prefix.name, "sequences": self.sequences, "tokens": self.tokens,
               "max_token_id": self.max_id, "dtype": np.dtype(self.dtype).name,
               "dtype_code": DType.code_from_dtype(self.dtype)}
        if digests:
            out |= {"bin_sha256": sha256_file(self.prefix.with_suffix(".bin")),
                    "idx_sha256": sha256_file(self.prefix.with_suffix(".idx"))}
        return out


def read_sequences(prefix: Path):
    """megatron-core's reader over `<prefix>.bin/.idx` (indexable, len = sequences; items are numpy arrays)."""
    from megatron.core.datasets.indexed_dataset import IndexedDataset

    return IndexedDataset(str(prefix))
