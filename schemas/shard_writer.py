"""Writing shards: the one writer of rolled Parquet files (exact row groups; the document shards and the packed
rows both) and the rewrite that adds columns while keeping files, row groups and row order (docs/FORMATS.md
gives the layout; schemas/reader.py reads it)."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from tqdm import tqdm

from cpp_data.schemas.manifest import sha256_file
from cpp_data.schemas.reader import read_row_group

SPLITS = ("train", "valid")


@dataclass(frozen=True)
class ShardParams:
    bounds: ClassVar[dict] = {"docs_per_shard": (1, None), "row_group_size": (1, None), "row_group_bytes": (0, None),
                              "valid_fraction": (0, 0.5), "bucket_bytes": (1, None), "max_buckets": (1, None)}
    generation: str = "v6"
    docs_per_shard: int = 50_000
    row_group_size: int = 1024
    # ... and at most this many bytes of `text` per row group (one larger document stands alone; 0: no bound).
    # Every task over the shards (structure, token_columns and their merges) holds a row group's per-character
    # columns, tens of bytes per byte of text, so this bounds their memory where documents are large: 1,024
    # rows of up to collect.max_bytes each could be a gigabyte of text, where a row group of typical documents
    # holds a few MB (docs/SCALING.md, memory).
    row_group_bytes: int = 4 * 2**20
    valid_fraction: float = 0.01
    seed: int = 42
    compression: str = "zstd"
    compression_level: int | None = 3  # None: the codec's default level
    # in-memory size of one shuffle bucket (Parquet's uncompressed size of its rows): a shard-writing task holds
    # a whole bucket and its sorted copy, so this bounds the stage's memory, which would otherwise grow with the
    # corpus. A small bucket costs nothing in output: the order is by key, whatever the buckets, so more buckets
    # give the same bytes (docs/SCALING.md, memory).
    bucket_bytes: int = 16 * 2**20
    max_buckets: int = 512  # bound on open bucket files; past it buckets grow beyond bucket_bytes


# Columns of token ids are written without a dictionary. A vocabulary of tens of thousands of ids makes the
# dictionary page large and its indices nearly as wide as the ids, so the dictionary only costs the encoder a
# hash per value and makes the column larger, under zstd too. Every other column keeps its dictionary, which
# the small-valued per-character and per-token columns need (without it, structure_ids takes about twice the
# bytes).
PLAIN_COLUMNS = frozenset({"token_ids", "input_ids", "target_ids"})


# The codecs Parquet writers take (case does not matter), and what they say to a level.
PARQUET_CODECS = ("zstd", "snappy", "gzip", "brotli", "lz4", "lz4_raw", "none")


def _takes_level(codec: str) -> bool:
    return codec.lower() != "none" and pa.Codec.supports_compression_level(codec.lower())


def compression_problem(codec: str, level: int | None) -> str | None:
    """Why a Parquet writer would refuse `codec` at `level` (None: the codec's default), or silently do
    something else, else None. Checked with the recipe, before any stage runs: pyarrow only refuses an unknown
    codec when the first file is written (a build with `shards.compression="bogus"` ran eight stages first),
    and takes zstd at level 999 or brotli at 50 without a word."""
    name = codec.lower()
    if name not in PARQUET_CODECS:
        return f"compression must be one of {', '.join(PARQUET_CODECS)}, got {codec!r}"
    if level is None or not _takes_level(name):  # snappy and none have no levels: open_writer drops it
        return None
    lo, hi = pa.Codec.minimum_compression_level(name), pa.Codec.maximum_compression_level(name)
    if not lo <= level <= hi:
        return f"compression_level of {name} must be between {lo} and {hi}, got {level}"
    return None


def dictionary_columns(schema: pa.Schema) -> list[str]:
    """Parquet leaf paths (`name`, `name.list.element`, `name.list.element.field`) of every column of `schema`
    but PLAIN_COLUMNS: the `use_dictionary` argument of pyarrow's writers, which names leaves, not fields."""
    def leaves(path: str, t: pa.DataType) -> list[str]:
        if pa.types.is_list(t) or pa.types.is_large_list(t):
            return leaves(f"{path}.list.element", t.value_type)
        if pa.types.is_struct(t):
            return [x for i in range(t.num_fields) for x in leaves(f"{path}.{t.field(i).name}", t.field(i).type)]
        return [path]

    return [x for f in schema if f.name not in PLAIN_COLUMNS for x in leaves(f.name, f.type)]


def open_writer(where: Path | str, schema: pa.Schema, compression: str,
                compression_level: int | None) -> pq.ParquetWriter:
    """A Parquet writer of shard files (and of their row groups written apart, which must be the same bytes):
    page checksums, and a dictionary for every column but PLAIN_COLUMNS."""
    if compression_level is not None and not _takes_level(compression):
        compression_level = None  # the recipe's level (3 by default) means nothing to snappy or none
    return pq.ParquetWriter(where, schema, compression=compression, compression_level=compression_level,
                            write_page_checksum=True, use_dictionary=dictionary_columns(schema))


class ShardWriter:
    """Rolls files of `docs_per_shard` rows with row groups of `row_group_size` rows, or fewer where
    `row_group_bytes` of text comes first, each file written to a hidden temporary and renamed into place when
    full, listed with its rows, bytes and SHA-256. A row group's bounds depend only on the sequence of rows
    (never on how they were handed to `write`), and each is written from one Arrow chunk, so the same rows give
    the same bytes.

    Document shards are `shards/<split>-NNNNN.parquet`; the packed rows use the same writer with their own
    stem, kind and directory (`packed/<key>-NNNNN.parquet`, kind "packed"), and `add` a row at a time."""

    def __init__(self, directory: Path, split: str, schema: pa.Schema, p: ShardParams, stem: str | None = None,
                 kind: str = "shard", prefix: str = "shards"):
        self.directory, self.split, self.schema, self.p = directory, split, schema, p
        self.stem, self.kind, self.prefix = stem or split, kind, prefix
        self.rows: list[dict] = []  # rows given one at a time (add), not yet a table
        self.pending: list[pa.Table] = []
        self.pending_rows = 0
        self.pending_bytes = 0  # Arrow bytes of the pending text (offsets too): when to try a flush
        self.writer: pq.ParquetWriter | None = None
        self.rows_in_shard = 0
        self.index = 0
        self.files: list[dict] = []

    def _open(self):
        """Open the next shard's writer (a temporary file until _close_shard names it) and return it."""
        self.tmp = self.directory / f".{self.stem}-{self.index:05d}.parquet.tmp"
        self.writer = open_writer(self.tmp, self.schema, self.p.compression, self.p.compression_level)
        return self.writer

    def _close_shard(self) -> None:
        assert self.writer is not None  # a shard is open
        self.writer.close()
        final = self.directory / f"{self.stem}-{self.index:05d}.parquet"
        os.replace(self.tmp, final)
        self.files.append({"path": f"{self.prefix}/{final.name}", "split": self.split, "rows": self.rows_in_shard,
                           "kind": self.kind, "bytes": final.stat().st_size, "sha256": sha256_file(final)})
        self.writer, self.rows_in_shard = None, 0
        self.index += 1

    def _flush(self, final: bool) -> None:
        table = pa.concat_tables(self.pending) if self.pending else self.schema.empty_table()
        ends = self._text_ends(table)
        pos = 0
        while pos < table.num_rows:
            room = self.p.docs_per_shard - self.rows_in_shard
            n = min(self.p.row_group_size, room, table.num_rows - pos)
            if ends is not None:  # the most rows from pos within row_group_bytes, at least one
                before = int(ends[pos - 1]) if pos else 0
                n = max(1, int(np.searchsorted(ends[pos:pos + n], before + self.p.row_group_bytes, "right")))
            if not (final or n < table.num_rows - pos or n == self.p.row_group_size or n == room):
                break  # the rows still to come could join this row group
            writer = self.writer if self.writer is not None else self._open()
            # one Arrow chunk per row group: Parquet ends a page where a written chunk ends once the page is
            # full, so a row group made of several chunks would get other pages (and bytes) than the same rows whole
            writer.write_table(table.slice(pos, n).combine_chunks(), row_group_size=n)
            self.rows_in_shard += n
            pos += n
            if self.rows_in_shard == self.p.docs_per_shard:
                self._close_shard()
        rest = table.slice(pos)
        self.pending, self.pending_rows = ([rest] if rest.num_rows else []), rest.num_rows
        self.pending_bytes = rest.column("text").nbytes if "text" in rest.column_names else 0

    def _text_ends(self, table: pa.Table) -> np.ndarray | None:
        """Cumulative text bytes of the rows (None when row groups have no bytes bound or no text)."""
        if not self.p.row_group_bytes or "text" not in table.column_names:
            return None
        return np.cumsum(pc.binary_length(table.column("text")).to_numpy(zero_copy_only=False), dtype=np.int64)

    def write(self, table: pa.Table) -> None:
        self.pending.append(table)
        self.pending_rows += table.num_rows
        self.pending_bytes += table.column("text").nbytes if "text" in table.column_names else 0
        if self.pending_rows >= self.p.row_group_size or (
                self.p.row_group_bytes and self.pending_bytes > self.p.row_group_bytes):
            self._flush(final=False)

    def add(self, row: dict) -> None:
        """One row as a dict of the schema's fields (the packed rows come one at a time)."""
        self.rows.append(row)
        if len(self.rows) == self.p.row_group_size:
            self.write(pa.Table.from_pylist(self.rows, schema=self.schema))
            self.rows = []

    def close(self) -> list[dict]:
        if self.rows:
            self.write(pa.Table.from_pylist(self.rows, schema=self.schema))
            self.rows = []
        self._flush(final=True)
        if self.writer is not None:
            self._close_shard()
        return self.files


def rewrite_shards(src: Path, out: Path, transform, compression: str, compression_level: int,
                   desc: str = "", progress: bool = False) -> list[dict]:
    """Copy the shards listed in src/shards.json to out/shards/, each row group through `transform(table,
    entry)`, keeping files, row groups and row order; returns the listing with each file's new bytes and
    SHA-256. (structure and token_columns add columns this way, so `text` stays byte-identical.)"""
    listing = json.loads((src / "shards.json").read_text())["files"]
    (out / "shards").mkdir(exist_ok=True)
    result = []
    for entry in tqdm(listing, desc=desc, unit="shard", leave=False, disable=not progress):
        pf = pq.ParquetFile(src / entry["path"])
        final = out / entry["path"]
        tmp = final.with_name(f".{final.name}.tmp")
        writer = None
        for rg in range(pf.num_row_groups):
            table = transform(read_row_group(pf, rg), entry)
            if writer is None:
                writer = open_writer(tmp, table.schema, compression, compression_level)
            writer.write_table(table, row_group_size=table.num_rows)
        if writer is not None:
            writer.close()
            os.replace(tmp, final)
        result.append({**entry, "bytes": final.stat().st_size, "sha256": sha256_file(final)})
    return result
