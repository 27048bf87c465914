"""Concatenate Parquet files of one schema into one file, their row groups copied byte for byte; or build each
row group from the column chunks of several files' row groups, side by side (`splice_row_groups`).

Why by hand: pyarrow can only write a row group by encoding a table, so putting the row groups of N files into
one file costs a decode and an encode of every column (a single-core merge at the end of the structure and
token_columns stages). No kept library appends encoded row groups. The format makes it cheap: a Parquet file
is `PAR1`, the row groups' column chunks (pages that hold no file offsets), the footer (a Thrift
compact-protocol `FileMetaData`), its 4-byte little-endian length and `PAR1` again. So the bodies are copied
in order and one footer is written that lists every row group, with each file offset moved by where its body
starts in the new file. Row groups written one per file with the same writer settings come out as the same
bytes as one writer writing them in turn (tests/test_parquet_concat.py checks that against pyarrow).

The footer is read and written with a schema-less Thrift compact codec (`_read_struct`, `_write_struct`):
every field is kept as read (id, type, value) and written back in the same order and encoding, so the only
bytes that change are the fields this module sets. The fields moved are those the Parquet format defines as
offsets (0 stands for none and stays): RowGroup.file_offset; ColumnChunk.file_offset and column_index_offset;
ColumnMetaData.data_page_offset, index_page_offset, dictionary_page_offset and bloom_filter_offset. The column
indexes and bloom filters a writer puts after the row groups are inside the copied body, so their offsets move
with it. An offset index is different: it lists each page's absolute offset, so it is decoded, its pages moved,
and written again after the bodies (ColumnChunk.offset_index_offset and _length point at the new copy; the old
one stays behind, unreferenced). Encrypted files (`PARE`) are refused.

Splicing copies column chunks one by one (from the first page, the dictionary page where there is one, for the
chunk's total_compressed_size, headers included), so it refuses chunks that point at data outside that range
(page indexes, bloom filters) or in other files (file_path). The new file takes its schema and key-value
metadata from a template file (pyarrow writing no rows of the whole schema); each spliced row group's columns,
taken together, must have the template's schema elements, field by field, else ParquetConcatError.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import BinaryIO

MAGIC = b"PAR1"

# Thrift compact protocol type codes (the low nibble of a field header)
_STOP, _TRUE, _FALSE, _BYTE, _I16, _I32, _I64, _DOUBLE, _BINARY, _LIST, _SET, _MAP, _STRUCT = range(13)

# Parquet's FileMetaData, RowGroup, ColumnChunk and ColumnMetaData field ids (parquet.thrift)
_FMD_SCHEMA, _FMD_NUM_ROWS, _FMD_ROW_GROUPS, _FMD_KEY_VALUE, _FMD_ENCRYPTION = 2, 3, 4, 5, 8
_RG_COLUMNS, _RG_FILE_OFFSET, _RG_ORDINAL = 1, 5, 7
_CC_FILE_OFFSET, _CC_META, _CC_OFFSET_INDEX, _CC_OFFSET_INDEX_LENGTH, _CC_COLUMN_INDEX = 2, 3, 4, 5, 6
_OI_PAGE_LOCATIONS, _PL_OFFSET = 1, 1  # OffsetIndex.page_locations, PageLocation.offset
_CMD_OFFSETS = (9, 10, 11, 14)  # data_page_offset, index_page_offset, dictionary_page_offset, bloom_filter_offset
_RG_TOTAL_BYTE_SIZE, _RG_NUM_ROWS, _RG_TOTAL_COMPRESSED = 2, 3, 6
_CC_FILE_PATH, _CMD_TOTAL_COMPRESSED, _CMD_DATA_PAGE, _CMD_DICTIONARY_PAGE, _CMD_BLOOM = 1, 7, 9, 11, 14
_SE_NUM_CHILDREN = 5  # SchemaElement.num_children


class ParquetConcatError(ValueError):
    """A part that cannot be concatenated; the message names the file."""


class _Reader:
    def __init__(self, buf: bytes):
        self.buf, self.pos = buf, 0

    def byte(self) -> int:
        b = self.buf[self.pos]
        self.pos += 1
        return b

    def varint(self) -> int:
        out, shift = 0, 0
        while True:
            b = self.byte()
            out |= (b & 0x7F) << shift
            if not b & 0x80:
                return out
            shift += 7

    def zigzag(self) -> int:
        n = self.varint()
        return (n >> 1) ^ -(n & 1)

    def take(self, n: int) -> bytes:
        if self.pos + n > len(self.buf):
            raise IndexError("past the end of the footer")
        out = self.buf[self.pos:self.pos + n]
        self.pos += n
        return out


def _read_value(r: _Reader, kind: int):
    if kind in (_TRUE, _FALSE):  # a list element (a field's boolean is in its header): 1 true, else false
        return r.byte() == _TRUE
    if kind == _BYTE:
        return struct.unpack("b", r.take(1))[0]
    if kind in (_I16, _I32, _I64):
        return r.zigzag()
    if kind == _DOUBLE:
        return r.take(8)
    if kind == _BINARY:
        return r.take(r.varint())
    if kind in (_LIST, _SET):
        head = r.byte()
        size, elem = head >> 4, head & 0x0F
        if size == 15:
            size = r.varint()
        return elem, [_read_value(r, elem) for _ in range(size)]
    if kind == _MAP:
        size = r.varint()
        if not size:
            return 0, 0, []
        types = r.byte()
        return types >> 4, types & 0x0F, [(_read_value(r, types >> 4), _read_value(r, types & 0x0F))
                                          for _ in range(size)]
    if kind == _STRUCT:
        return _read_struct(r)
    raise ValueError(f"unknown Thrift compact type {kind}")


def _read_struct(r: _Reader) -> list[list]:
    """A struct as its fields in order: [field id, type, value] (a boolean field's value is its type)."""
    fields: list[list] = []
    last = 0
    while True:
        head = r.byte()
        kind = head & 0x0F
        if kind == _STOP:
            return fields
        fid = last + (head >> 4) if head >> 4 else r.zigzag()
        value = kind == _TRUE if kind in (_TRUE, _FALSE) else _read_value(r, kind)
        fields.append([fid, kind, value])
        last = fid


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        if n < 0x80:
            out.append(n)
            return bytes(out)
        out.append((n & 0x7F) | 0x80)
        n >>= 7


def _zigzag(n: int) -> bytes:
    return _varint((n << 1) ^ (n >> 63))


def _write_value(out: bytearray, kind: int, value) -> None:
    if kind in (_TRUE, _FALSE):
        out.append(_TRUE if value else _FALSE)
    elif kind == _BYTE:
        out += struct.pack("b", value)
    elif kind in (_I16, _I32, _I64):
        out += _zigzag(value)
    elif kind == _DOUBLE:
        out += value
    elif kind == _BINARY:
        out += _varint(len(value)) + value
    elif kind in (_LIST, _SET):
        elem, items = value
        out += bytes([(len(items) << 4) | elem]) if len(items) < 15 else bytes([0xF0 | elem]) + _varint(len(items))
        for item in items:
            _write_value(out, elem, item)
    elif kind == _MAP:
        ktype, vtype, items = value
        out += _varint(len(items))
        if items:
            out.append((ktype << 4) | vtype)
        for k, v in items:
            _write_value(out, ktype, k)
            _write_value(out, vtype, v)
    elif kind == _STRUCT:
        _write_struct(out, value)
    else:
        raise ValueError(f"unknown Thrift compact type {kind}")


def _write_struct(out: bytearray, fields: list[list]) -> None:
    last = 0
    for fid, kind, value in fields:
        if kind in (_TRUE, _FALSE):
            kind = _TRUE if value else _FALSE
        if 0 < fid - last <= 15:
            out.append(((fid - last) << 4) | kind)
        else:
            out.append(kind)
            out += _zigzag(fid)
        if kind not in (_TRUE, _FALSE):
            _write_value(out, kind, value)
        last = fid
    out.append(_STOP)


def _field(fields: list[list], fid: int) -> list | None:
    return next((f for f in fields if f[0] == fid), None)


def _required(fields: list[list], fid: int) -> list:
    """The field `fid`, which the format requires: ParquetConcatError when a footer lacks it."""
    found = _field(fields, fid)
    if found is None:
        raise ParquetConcatError(f"a Parquet footer lacks required field {fid}")
    return found


def _shift(fields: list[list], ids: Sequence[int], by: int) -> None:
    """Move the offsets among `fields` by `by`. A 0 is left alone: no data starts at 0 (PAR1 is there), and
    Arrow's writer puts 0 in ColumnChunk.file_offset, a required field the format deprecated."""
    for f in fields:
        if f[0] in ids and f[2] > 0:
            f[2] += by


def read_footer(path: Path) -> tuple[list[list], int]:
    """(the file's FileMetaData as fields, the offset where the footer starts); ParquetConcatError names the
    file when it is not an unencrypted Parquet file."""
    size = path.stat().st_size
    with open(path, "rb") as f:
        head = f.read(4)
        f.seek(max(size - 8, 0))
        tail = f.read(8)
        if size < 12 or head != MAGIC or tail[4:] != MAGIC:
            raise ParquetConcatError(f"{path}: not a Parquet file (no PAR1 at its start and end; "
                                     f"an encrypted file ends in PARE and is not supported)")
        length = struct.unpack("<I", tail[:4])[0]
        start = size - 8 - length
        if start < 4:
            raise ParquetConcatError(f"{path}: footer length {length} is larger than the file")
        f.seek(start)
        raw = f.read(length)
    try:
        reader = _Reader(raw)
        meta = _read_struct(reader)
    except (IndexError, ValueError) as e:
        raise ParquetConcatError(f"{path}: unreadable footer ({e})") from None
    if _field(meta, _FMD_ENCRYPTION) is not None:
        raise ParquetConcatError(f"{path}: an encrypted footer is not supported")
    return meta, start


def footer_bytes(meta: list[list]) -> bytes:
    out = bytearray()
    _write_struct(out, meta)
    return bytes(out)


def _copy_range(src: BinaryIO, start: int, length: int, dest: BinaryIO, short: str) -> None:
    """Copy `length` bytes of `src` from `start` to `dest` in blocks of 1 << 20 bytes; ParquetConcatError(short)
    if the file ends first."""
    src.seek(start)
    while length:
        block = src.read(min(length, 1 << 20))
        if not block:
            raise ParquetConcatError(short)
        dest.write(block)
        length -= len(block)


def _write_footer(dest: BinaryIO, meta: list[list], rows: int, row_groups: list) -> None:
    """Close a file: `meta` with its row count and row groups replaced, its length and the magic."""
    _required(meta, _FMD_NUM_ROWS)[2] = rows
    rg_field = _field(meta, _FMD_ROW_GROUPS)
    if rg_field is None:
        meta.append([_FMD_ROW_GROUPS, _LIST, (_STRUCT, row_groups)])
        meta.sort(key=lambda f: f[0])
    else:
        rg_field[2] = (_STRUCT, row_groups)
    footer = footer_bytes(meta)
    dest.write(footer + struct.pack("<I", len(footer)) + MAGIC)


def concat_parquet(parts: Sequence[Path], dest: BinaryIO) -> int:
    """Write `parts` (Parquet files of one schema, in order) to `dest` as one Parquet file holding all their row
    groups in order; returns the rows written. The schema and key-value metadata (Arrow's schema among them)
    must be equal in every part, else ParquetConcatError naming the first part that differs. Memory: the footers
    only; the bodies are copied a block at a time (`_copy_range`)."""
    if not parts:
        raise ParquetConcatError("no Parquet files to concatenate")
    first: list[list] | None = None
    row_groups: list = []
    indexes: list = []
    rows = 0
    dest.write(MAGIC)
    at = 4
    for part in parts:
        part = Path(part)
        meta, footer_start = read_footer(part)
        if first is None:
            first = meta
        elif (_field(meta, _FMD_SCHEMA) != _field(first, _FMD_SCHEMA)
              or _field(meta, _FMD_KEY_VALUE) != _field(first, _FMD_KEY_VALUE)):
            raise ParquetConcatError(f"{part}: its schema or key-value metadata differs from {parts[0]}'s")
        by = at - 4
        groups = _field(meta, _FMD_ROW_GROUPS)
        with open(part, "rb") as f:  # once per part: the offset indexes are read from it, then its body copied
            for group in (groups[2][1] if groups else []):
                _shift(group, (_RG_FILE_OFFSET,), by)
                ordinal = _field(group, _RG_ORDINAL)
                if ordinal is not None:
                    ordinal[2] = len(row_groups)
                for chunk in _required(group, _RG_COLUMNS)[2][1]:
                    _shift(chunk, (_CC_FILE_OFFSET, _CC_COLUMN_INDEX), by)
                    cmd = _field(chunk, _CC_META)
                    if cmd is not None:
                        _shift(cmd[2], _CMD_OFFSETS, by)
                    if _field(chunk, _CC_OFFSET_INDEX) is not None:
                        indexes.append((chunk, _moved_offset_index(f, part, chunk, by)))
                row_groups.append(group)
            _copy_range(f, 4, footer_start - 4, dest, f"{part}: shorter than its footer says")
        rows += _required(meta, _FMD_NUM_ROWS)[2]
        at += footer_start - 4
    for chunk, index in indexes:  # after every body, before the footer, as a writer puts them
        dest.write(index)
        _required(chunk, _CC_OFFSET_INDEX)[2] = at
        _required(chunk, _CC_OFFSET_INDEX_LENGTH)[2] = len(index)
        at += len(index)
    assert first is not None  # parts is not empty
    _write_footer(dest, [list(f) for f in first], rows, row_groups)
    return rows


def _moved_offset_index(f: BinaryIO, part: Path, chunk: list[list], by: int) -> bytes:
    """The offset index of `chunk` in `part` (open as `f`) encoded again with every page's offset moved by `by`."""
    where, length = _required(chunk, _CC_OFFSET_INDEX)[2], _field(chunk, _CC_OFFSET_INDEX_LENGTH)
    if length is None:
        raise ParquetConcatError(f"{part}: an offset index without its length")
    f.seek(where)
    raw = f.read(length[2])
    try:
        index = _read_struct(_Reader(raw))
        for location in _required(index, _OI_PAGE_LOCATIONS)[2][1]:
            _shift(location, (_PL_OFFSET,), by)
    except (IndexError, ValueError, TypeError) as e:
        raise ParquetConcatError(f"{part}: unreadable offset index at {where} ({e})") from None
    return footer_bytes(index)


def _top_level_fields(meta: list[list]) -> list[list]:
    """The schema elements of each top-level field (the field's element and its descendants'), in order."""
    elements = _required(meta, _FMD_SCHEMA)[2][1]
    out, k = [], 1  # elements[0] is the root

    def span(i: int) -> int:  # index past element i's subtree
        children = _field(elements[i], _SE_NUM_CHILDREN)
        j = i + 1
        for _ in range(children[2] if children else 0):
            j = span(j)
        return j

    while k < len(elements):
        end = span(k)
        out.append(elements[k:end])
        k = end
    return out


def splice_row_groups(dest: BinaryIO, template: Path, groups: Sequence[Sequence[tuple[Path, int]]]) -> int:
    """Write to `dest` a Parquet file with `template`'s schema and key-value metadata whose row group k holds the
    column chunks of groups[k]'s (file, row group) pairs, side by side in that order, copied byte for byte;
    returns the rows written. The pairs of a group must have as many rows each, and their files' fields, in
    order, must be the template's. Memory: the footers, and one copy block (`_copy_range`)."""
    meta = [list(f) for f in read_footer(Path(template))[0]]
    want = _top_level_fields(meta)
    footers: dict[Path, tuple[list[list], list[list]]] = {}
    handles: dict[Path, BinaryIO] = {}
    row_groups, rows, at = [], 0, 4
    dest.write(MAGIC)
    try:
        for k, group in enumerate(groups):
            columns, fields, n_rows, total_bytes, total_compressed, first_start = [], [], None, 0, 0, None
            for path, rg in group:
                path = Path(path)
                if path not in footers:
                    source, _ = read_footer(path)
                    footers[path] = source, _top_level_fields(source)
                    handles[path] = open(path, "rb")
                source, source_fields = footers[path]
                listed = _field(source, _FMD_ROW_GROUPS)
                if listed is None or not 0 <= rg < len(listed[2][1]):
                    raise ParquetConcatError(f"{path}: has no row group {rg}")
                group_meta = listed[2][1][rg]
                here = _required(group_meta, _RG_NUM_ROWS)[2]
                if n_rows is not None and here != n_rows:
                    raise ParquetConcatError(f"{path}: row group {rg} holds {here} rows, not {n_rows}")
                n_rows = here
                fields += source_fields
                total_bytes += _required(group_meta, _RG_TOTAL_BYTE_SIZE)[2]
                total_compressed += (_field(group_meta, _RG_TOTAL_COMPRESSED) or [0, 0, 0])[2]
                for chunk in _required(group_meta, _RG_COLUMNS)[2][1]:
                    chunk = [list(f) for f in chunk]
                    cmd_field = _field(chunk, _CC_META)
                    if cmd_field is None or _field(chunk, _CC_FILE_PATH) is not None or any(
                            _field(chunk, f) is not None for f in (_CC_OFFSET_INDEX, _CC_COLUMN_INDEX)) \
                            or _field(cmd_field[2], _CMD_BLOOM) is not None:
                        raise ParquetConcatError(f"{path}: a column chunk with page indexes, a bloom filter or "
                                                 f"data in another file cannot be spliced")
                    cmd = cmd_field[2] = [list(f) for f in cmd_field[2]]
                    dictionary = _field(cmd, _CMD_DICTIONARY_PAGE)
                    start = dictionary[2] if dictionary is not None and dictionary[2] > 0 \
                        else _required(cmd, _CMD_DATA_PAGE)[2]
                    length = _required(cmd, _CMD_TOTAL_COMPRESSED)[2]
                    _copy_range(handles[path], start, length, dest,
                                f"{path}: a column chunk runs past the end of the file")
                    _shift(chunk, (_CC_FILE_OFFSET,), at - start)
                    _shift(cmd, _CMD_OFFSETS, at - start)
                    first_start = at if first_start is None else first_start
                    at += length
                    columns.append(chunk)
            if fields != want:
                raise ParquetConcatError(f"{group[0][0]} and the rest of row group {k}'s parts: their fields are "
                                         f"not {template}'s")
            out = [[_RG_COLUMNS, _LIST, (_STRUCT, columns)], [_RG_TOTAL_BYTE_SIZE, _I64, total_bytes],
                   [_RG_NUM_ROWS, _I64, n_rows or 0], [_RG_FILE_OFFSET, _I64, first_start or 0],
                   [_RG_TOTAL_COMPRESSED, _I64, total_compressed]]
            row_groups.append(out)
            rows += n_rows or 0
    finally:
        for f in handles.values():
            f.close()
    _write_footer(dest, meta, rows, row_groups)
    return rows


def splice_row_groups_file(template: Path, groups: Sequence[Sequence[tuple[Path, int]]], final: Path) -> int:
    """splice_row_groups into `final`, written under a hidden temporary name and renamed into place."""
    return _write_atomically(final, lambda f: splice_row_groups(f, template, groups))


def concat_parquet_file(parts: Sequence[Path], final: Path) -> int:
    """concat_parquet into `final`, written under a hidden temporary name and renamed into place."""
    return _write_atomically(final, lambda f: concat_parquet(parts, f))


def _write_atomically(final: Path, write: Callable[[BinaryIO], int]) -> int:
    tmp = final.with_name(f".{final.name}.tmp")
    with open(tmp, "wb") as f:
        rows = write(f)
    os.replace(tmp, final)
    return rows
