"""Megatron indexed datasets (`<prefix>.bin` + `<prefix>.idx`) as cpp-data writes and reads them.

A build's tasks write partial datasets (PartialWriter) that the driver joins (join_partials); both
write, with numpy, exactly the bytes megatron-core's own `IndexedDatasetBuilder` writes (tests/test_indexed.py
compares them), and reading is megatron-core's own `IndexedDataset`, so what Megatron reads is what its builder
would have written. IndexedWriter, the builder itself, writes one sequence at a time where no task split is
wanted. The dtype is megatron-core's `DType.optimal_dtype` rule: uint16 under 65,500
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
import shutil
import struct
from pathlib import Path

import numpy as np

from cpp_data.schemas.manifest import sha256_file


def partial_dtype(vocab_size: int) -> np.dtype:
    """megatron-core's DType.optimal_dtype rule without importing it: uint16 under 65,500 ids, else int32."""
    return np.dtype(np.uint16 if vocab_size < 65_500 else np.int32)


_DTYPE_CODE = {np.dtype(np.uint16): 8, np.dtype(np.int32): 4}
_MAGIC = b"MMIDIDX\x00\x00"
_HEADER = 34  # magic 9, version 8, dtype code 1, sequence count 8, document count 8
_CHUNK = 1 << 20  # index entries copied at a time by join_partials


def _header(code: int, sequences: int, documents: int) -> bytes:
    """An .idx header in the format above; `documents` is the document index's length (documents + 1)."""
    return _MAGIC + struct.pack("<QBQQ", 1, code, sequences, documents)


def _check_vocab(prefix: Path, max_id: int, vocab_size: int) -> None:
    """Refuse ids past the vocabulary: a uint16 file would wrap them silently."""
    if max_id >= vocab_size:
        raise ValueError(f"{prefix}: token id {max_id} does not fit the vocabulary of {vocab_size}")


def _result(prefix: Path, sequences: int, tokens: int, max_id: int, dtype) -> dict:
    """What a finished `<prefix>.bin/.idx` reports: counts, dtype and both files' SHA-256."""
    dtype = np.dtype(dtype)
    return {"prefix": prefix.name, "sequences": sequences, "tokens": tokens, "max_token_id": max_id,
            "dtype": dtype.name, "dtype_code": _DTYPE_CODE[dtype],
            "bin_sha256": sha256_file(prefix.with_suffix(".bin")),
            "idx_sha256": sha256_file(prefix.with_suffix(".idx"))}


class PartialWriter:
    """A partial `<prefix>.bin/.idx` that a task writes and join_partials joins at once (scratch, never
    published): the format above, one sequence per document, written with numpy.

    Hand-written because importing torch and megatron-core costs every worker process seconds, which on a
    small build is more than the work; the joined result is megatron-core's builder's (tests/test_indexed.py
    compares it byte for byte with adding each sequence to the builder and with its add_index)."""

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
        self._bin.close()
        _check_vocab(self.prefix, self.max_id, self.vocab_size)
        lengths = np.array(self.lengths, dtype=np.int32)
        pointers = np.r_[0, np.cumsum(lengths.astype(np.int64) * self.dtype.itemsize)[:-1]].astype(np.int64) \
            if len(lengths) else np.zeros(0, np.int64)
        with open(self.prefix.with_suffix(".idx"), "wb") as f:
            f.write(_header(_DTYPE_CODE[self.dtype], len(lengths), len(lengths) + 1))
            f.write(lengths.tobytes() + pointers.tobytes() + np.arange(len(lengths) + 1, dtype=np.int64).tobytes())
        return {"sequences": len(lengths), "tokens": self.tokens, "max_token_id": self.max_id}


def _idx_header(path: Path) -> tuple[int, int, int]:
    """(dtype code, sequences, documents + 1) of an .idx file in the format above."""
    with open(path, "rb") as f:
        head = f.read(_HEADER)
    if len(head) < _HEADER or head[:9] != _MAGIC:
        raise ValueError(f"{path}: not a Megatron index")
    version, code, sequences, documents = struct.unpack("<QBQQ", head[9:])
    if version != 1:
        raise ValueError(f"{path}: Megatron index version {version}, not 1")
    return code, sequences, documents


def _copy_array(f, path: Path, dtype, offset: int, count: int, add: int = 0) -> None:
    """Write `count` entries of `dtype` from `path` at byte `offset` to f, each plus `add`, a chunk at a time."""
    if not count:
        return
    data = np.memmap(path, dtype=dtype, mode="r", offset=offset, shape=(count,))
    for i in range(0, count, _CHUNK):
        chunk = np.asarray(data[i:i + _CHUNK])
        f.write((chunk + np.asarray(add, dtype)).tobytes() if add else chunk.tobytes())
    del data


def join_partials(prefix: Path, parts: list[tuple[Path, dict]], vocab_size: int) -> dict:
    """Join partial datasets (PartialWriter's: their prefix and what close returned), in order, into
    `<prefix>.bin/.idx`; returns what IndexedWriter.close returns. A partial with no sequences adds nothing
    (its files are not read).

    The result is byte for byte what megatron-core's `IndexedDatasetBuilder.add_index` of each partial and
    `finalize` write (tests/test_indexed.py holds it to that): the .bin files back to back, then an index of the
    partials' sequence lengths, their byte pointers shifted by the bytes before them, and their document
    indices shifted by the sequences before them.

    Hand-written because the builder's `add_index` extends Python lists with every sequence length and document
    index (over a hundred bytes per sequence, so gigabytes for a corpus of a hundred million documents) and
    importing torch and megatron-core costs the driver seconds per export; this streams each array from the
    partials' memory-mapped .idx files a chunk at a time, so memory stays flat."""
    prefix = Path(prefix)
    parts = [(part, w) for part, w in parts if w["sequences"]]
    dtype = partial_dtype(vocab_size)
    code = _DTYPE_CODE[dtype]
    max_id = max((w["max_token_id"] for _, w in parts), default=-1)
    _check_vocab(prefix, max_id, vocab_size)
    heads = []
    for part, _ in parts:
        got = _idx_header(part.with_suffix(".idx"))
        if got[0] != code:
            raise ValueError(f"{part}.idx: dtype code {got[0]}, the joined dataset's is {code}")
        heads.append(got)
    tmp_bin = prefix.with_name(f".{prefix.name}.bin.tmp")
    tmp_idx = prefix.with_name(f".{prefix.name}.idx.tmp")
    sizes = []
    with open(tmp_bin, "wb") as out:
        for part, _ in parts:
            with open(part.with_suffix(".bin"), "rb") as f:
                shutil.copyfileobj(f, out, 16 << 20)
            sizes.append(part.with_suffix(".bin").stat().st_size)
    sequences = sum(h[1] for h in heads)
    documents = sum(h[2] - 1 for h in heads) + 1
    with open(tmp_idx, "wb") as f:
        f.write(_header(code, sequences, documents))
        for (part, _), (_, n, _) in zip(parts, heads):
            _copy_array(f, part.with_suffix(".idx"), np.int32, _HEADER, n)
        shift = 0
        for (part, _), (_, n, _), size in zip(parts, heads, sizes):
            _copy_array(f, part.with_suffix(".idx"), np.int64, _HEADER + 4 * n, n, shift)
            shift += size
        f.write(np.zeros(1, np.int64).tobytes())
        shift = 0
        for (part, _), (_, n, d) in zip(parts, heads):
            _copy_array(f, part.with_suffix(".idx"), np.int64, _HEADER + 12 * n + 8, d - 1, shift)
            shift += n
    os.replace(tmp_bin, prefix.with_suffix(".bin"))
    os.replace(tmp_idx, prefix.with_suffix(".idx"))
    return _result(prefix, sequences, sum(w["tokens"] for _, w in parts), max_id, dtype)


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
        """Finalize and rename into place; refuses ids past the vocabulary (_check_vocab)."""
        self._builder.finalize(str(self._idx))
        _check_vocab(self.prefix, self.max_id, self.vocab_size)
        os.replace(self._bin, self.prefix.with_suffix(".bin"))
        os.replace(self._idx, self.prefix.with_suffix(".idx"))
        return _result(self.prefix, self.sequences, self.tokens, self.max_id, self.dtype)


def read_sequences(prefix: Path):
    """megatron-core's reader over `<prefix>.bin/.idx` (indexable, len = sequences; items are numpy arrays)."""
    from megatron.core.datasets.indexed_dataset import IndexedDataset

    return IndexedDataset(str(prefix))
