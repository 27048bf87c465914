"""schemas/parquet_concat.py: row groups copied into one file must be the file pyarrow's own writer makes of them,
files from another writer (DuckDB's) must come out whole, as pyarrow and DuckDB read them, and columns spliced
side by side must be the file pyarrow writes of the whole table."""

from __future__ import annotations

import io

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from cpp_data.schemas.parquet_concat import (
    ParquetConcatError,
    _read_struct,
    _Reader,
    concat_parquet,
    footer_bytes,
    read_footer,
    splice_row_groups,
)


def _tables(n_groups: int) -> list[pa.Table]:
    """Row groups of every kind of column the shards hold: strings, numbers, floats, booleans, nulls, lists of
    small ints (per-character columns), lists of structs, and a column that dictionary-encodes well."""
    out = []
    for g in range(n_groups):
        rows = 50 + 37 * g
        out.append(pa.table({
            "text": [f"int f{g}_{i}() {{ return {i * g}; }}\n" * (i % 7 + 1) for i in range(rows)],
            "source_repo": [["googletest", "poco", "juce"][i % 3] for i in range(rows)],
            "size_bytes": pa.array([i * 1000 + g for i in range(rows)], pa.int64()),
            "comment_share": pa.array([i / (rows + g) for i in range(rows)], pa.float32()),
            "entropy": pa.array([None if i % 11 == 0 else i * 0.25 for i in range(rows)], pa.float64()),
            "is_vendored": [i % 5 == 0 for i in range(rows)],
            "ast_depth": pa.array([[(i + k) % 40 for k in range(i % 90)] for i in range(rows)], pa.list_(pa.int8())),
            "chunk_boundaries": pa.array(
                [[{"start": k, "end": k + 3, "kind": "function", "name": f"n{k}"} for k in range(i % 4)]
                 for i in range(rows)],
                pa.list_(pa.struct([("start", pa.int32()), ("end", pa.int32()), ("kind", pa.string()),
                                    ("name", pa.string())]))),
        }))
    return out


def _one_writer(tables: list[pa.Table], **kw) -> bytes:
    buf = io.BytesIO()
    with pq.ParquetWriter(buf, tables[0].schema, **kw) as writer:
        for t in tables:
            writer.write_table(t, row_group_size=max(t.num_rows, 1))
    return buf.getvalue()


@pytest.mark.parametrize("settings", [
    {"compression": "zstd", "compression_level": 3, "write_page_checksum": True},
    {"compression": "snappy"},
    {"compression": "none", "use_dictionary": False, "write_statistics": False},
    {"compression": "zstd", "data_page_size": 512},  # many pages per column chunk
])
def test_concat_equals_pyarrows_own_writer(tmp_path, settings):
    tables = _tables(5)
    parts = []
    for k, t in enumerate(tables):
        parts.append(tmp_path / f"{k}.parquet")
        parts[-1].write_bytes(_one_writer([t], **settings))
    out = io.BytesIO()
    assert concat_parquet(parts, out) == sum(t.num_rows for t in tables)
    assert out.getvalue() == _one_writer(tables, **settings)


def test_footer_round_trips_byte_for_byte(tmp_path):
    """The codec keeps every field as read, whoever wrote it: pyarrow, and DuckDB's own writer."""
    pa_file = tmp_path / "pa.parquet"
    pa_file.write_bytes(_one_writer(_tables(3), compression="zstd", write_page_index=True))
    dk_file = tmp_path / "duck.parquet"
    duckdb.sql("COPY (SELECT range AS i, 'x' || range::VARCHAR AS s, [range, range + 1] AS l, range % 2 = 0 AS b, "
               "range / 3.0 AS d FROM range(20000)) TO '" + str(dk_file) + "' (FORMAT parquet, ROW_GROUP_SIZE 3000)")
    for path in (pa_file, dk_file):
        raw = path.read_bytes()
        meta, start = read_footer(path)
        assert footer_bytes(meta) == raw[start:-8], path


def test_other_writers_files_come_out_whole(tmp_path):
    """DuckDB-written parts (several row groups each) with statistics of DuckDB's making:
    pyarrow (checking page checksums where there are any) and DuckDB read the rows back in order."""
    parts = []
    for k in range(3):
        parts.append(tmp_path / f"duck{k}.parquet")
        duckdb.sql(f"COPY (SELECT range + {k * 100000} AS i, 'row ' || range::VARCHAR AS s, [range % 7] AS l "
                   f"FROM range({7000 + 1000 * k})) TO '{parts[-1]}' (FORMAT parquet, ROW_GROUP_SIZE 2048)")
    whole = tmp_path / "whole.parquet"
    with open(whole, "wb") as f:
        rows = concat_parquet(parts, f)
    expected = pa.concat_tables([pq.read_table(p) for p in parts])
    got = pq.ParquetFile(whole, page_checksum_verification=True)
    assert rows == expected.num_rows == got.metadata.num_rows
    assert got.metadata.num_row_groups == sum(pq.ParquetFile(p).metadata.num_row_groups for p in parts)
    assert got.read().equals(expected)
    con = duckdb.connect()
    assert con.execute(f"SELECT count(*), sum(i), max(s), sum(l[1]) FROM '{whole}'").fetchall() == \
        con.execute("SELECT count(*), sum(i), max(s), sum(l[1]) FROM read_parquet(["
                    + ", ".join(f"'{p}'" for p in parts) + "])").fetchall()
    # a filter DuckDB answers from the moved row groups' statistics
    assert con.execute(f"SELECT count(*) FROM '{whole}' WHERE i BETWEEN 200100 AND 200199").fetchall() == [(100,)]


def _page_locations(path, meta) -> list[list[tuple[int, int]]]:
    """Per column chunk of the file, its offset index's (offset, compressed size) per page."""
    out = []
    raw = path.read_bytes()
    for group in [f for f in meta if f[0] == 4][0][2][1]:
        for chunk in [f for f in group if f[0] == 1][0][2][1]:
            fields = dict((f[0], f[2]) for f in chunk)
            index = _read_struct(_Reader(raw[fields[4]:fields[4] + fields[5]]))
            out.append([(dict((f[0], f[2]) for f in loc)[1], dict((f[0], f[2]) for f in loc)[2])
                        for loc in [f for f in index if f[0] == 1][0][2][1]])
    return out


def test_offset_indexes_point_at_the_moved_pages(tmp_path):
    """An offset index lists absolute page offsets: after the concatenation every page it names must be the
    page its part had there (the bytes compared), and pyarrow must read the file back."""
    tables = _tables(3)
    parts = []
    for k, t in enumerate(tables):
        parts.append(tmp_path / f"p{k}.parquet")
        pq.write_table(t, parts[-1], write_page_index=True, data_page_size=512, compression="zstd")
    whole = tmp_path / "whole.parquet"
    with open(whole, "wb") as f:
        concat_parquet(parts, f)
    got = _page_locations(whole, read_footer(whole)[0])
    want = [(p, loc) for p in parts for loc in _page_locations(p, read_footer(p)[0])]
    assert len(got) == len(want) and sum(len(x) for x in got) > 3 * len(tables[0].column_names)
    data = whole.read_bytes()
    for locations, (part, old) in zip(got, want):
        raw = part.read_bytes()
        assert [n for _, n in locations] == [n for _, n in old]
        for (at, n), (was, _) in zip(locations, old):
            assert data[at:at + n] == raw[was:was + n]
    assert pq.read_table(whole).equals(pa.concat_tables(tables))
    assert pq.ParquetFile(whole).metadata.row_group(2).column(0).has_offset_index


def test_parts_of_another_schema_are_refused(tmp_path):
    a, b = tmp_path / "a.parquet", tmp_path / "b.parquet"
    pq.write_table(pa.table({"x": [1, 2]}), a)
    pq.write_table(pa.table({"x": ["1", "2"]}), b)
    with pytest.raises(ParquetConcatError, match=f"{b}: its schema"):
        concat_parquet([a, b], io.BytesIO())


@pytest.mark.parametrize("damage", ["truncated", "not parquet", "footer length"])
def test_damaged_part_is_named(tmp_path, damage):
    path = tmp_path / "part.parquet"
    pq.write_table(pa.table({"x": list(range(100))}), path)
    raw = path.read_bytes()
    if damage == "truncated":
        path.write_bytes(raw[:-3])
    elif damage == "not parquet":
        path.write_bytes(b"x = 1\n" * 10)
    else:
        path.write_bytes(raw[:-8] + (len(raw) * 2).to_bytes(4, "little") + b"PAR1")
    with pytest.raises(ParquetConcatError, match=str(path)):
        concat_parquet([path], io.BytesIO())


def test_row_group_ordinals_are_renumbered(tmp_path):
    """RowGroup.ordinal (field 7, which writers set for encrypted files) counts the row groups of the new file."""
    parts = []
    for k in range(2):
        path = tmp_path / f"{k}.parquet"
        pq.write_table(pa.table({"x": list(range(10))}), path, row_group_size=4)
        meta, start = read_footer(path)
        for ordinal, group in enumerate(next(f for f in meta if f[0] == 4)[2][1]):
            group.append([7, 4, ordinal])  # i16
        footer = footer_bytes(meta)
        raw = path.read_bytes()
        path.write_bytes(raw[:start] + footer + len(footer).to_bytes(4, "little") + b"PAR1")
        parts.append(path)
    whole = tmp_path / "whole.parquet"
    with open(whole, "wb") as f:
        concat_parquet(parts, f)
    meta, _ = read_footer(whole)
    groups = next(f for f in meta if f[0] == 4)[2][1]
    assert [next(v for fid, _, v in g if fid == 7) for g in groups] == list(range(6))
    assert pq.read_table(whole).column("x").to_pylist() == list(range(10)) * 2


def _splice_parts(tmp_path, tables, split, **settings):
    """The first `split` columns of every row group in one file, the rest one row group per file, and the
    template (no rows of the whole schema)."""
    left = tmp_path / "left.parquet"
    left.write_bytes(_one_writer([t.select(t.column_names[:split]) for t in tables], **settings))
    groups = []
    for k, t in enumerate(tables):
        right = tmp_path / f"right{k}.parquet"
        right.write_bytes(_one_writer([t.select(t.column_names[split:])], **settings))
        groups.append([(left, k), (right, 0)])
    template = tmp_path / "template.parquet"
    template.write_bytes(_one_writer([tables[0].schema.empty_table()], **settings))
    return template, groups


@pytest.mark.parametrize("split", [1, 4, 7])
def test_splice_equals_pyarrows_own_writer(tmp_path, split):
    """Row groups spliced from a file of the first columns and files of the rest are the bytes pyarrow writes
    for the whole table (the stages' merges keep the input's columns this way)."""
    settings = {"compression": "zstd", "compression_level": 3, "write_page_checksum": True}
    tables = _tables(4)
    template, groups = _splice_parts(tmp_path, tables, split, **settings)
    out = io.BytesIO()
    assert splice_row_groups(out, template, groups) == sum(t.num_rows for t in tables)
    assert out.getvalue() == _one_writer(tables, **settings)


def test_splice_refuses_columns_out_of_the_templates_order(tmp_path):
    tables = _tables(2)
    template, groups = _splice_parts(tmp_path, tables, 3)
    with pytest.raises(ParquetConcatError, match="their fields are not"):
        splice_row_groups(io.BytesIO(), template, [list(reversed(g)) for g in groups])
    nullable = tmp_path / "nullable.parquet"  # the same names and types, but another nullability: other levels
    schema = pa.schema([pa.field(f.name, f.type, nullable=False) if f.name == "text" else f
                        for f in tables[0].schema])
    nullable.write_bytes(_one_writer([schema.empty_table()]))
    with pytest.raises(ParquetConcatError, match="their fields are not"):
        splice_row_groups(io.BytesIO(), nullable, groups)


def test_splice_refuses_row_groups_of_other_lengths(tmp_path):
    tables = _tables(2)
    template, groups = _splice_parts(tmp_path, tables, 3)
    with pytest.raises(ParquetConcatError, match="rows, not"):
        splice_row_groups(io.BytesIO(), template, [[groups[0][0], groups[1][1]]])
