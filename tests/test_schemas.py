"""The tolerant reader: typed fills for missing optional columns, fail-closed on required ones."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from cpp_data.schemas.generations import GENERATIONS, full_schema
from cpp_data.schemas.reader import ShardError, iter_shard, require_complete
from cpp_data.schemas.validate import check_shard


def test_missing_optional_columns_get_typed_fills(tmp_path):
    f = tmp_path / "old.parquet"
    pq.write_table(pa.table({"text": ["int a;\n", "héllo"], "source_repo": ["r", "r"]}), f, row_group_size=1)
    tables = list(iter_shard(f, "v6"))
    assert len(tables) == 2  # one per row group
    t = pa.concat_tables(tables)
    assert t.schema == full_schema("v6")
    rows = t.to_pylist()
    assert rows[0]["structure_ids"] == [0] * len("int a;\n")
    assert rows[1]["ast_depth"] == [-1] * len("héllo")  # one per character, not per byte
    assert rows[1]["sibling_index"] == [-1] * 5 and rows[1]["ast_node_type"] == [-1] * 5
    assert rows[0]["license_spdx"] == "NOASSERTION" and rows[0]["call_edges"] == []
    assert rows[0]["source_repo"] == "r"


def test_missing_or_malformed_required_column_fails_closed(tmp_path):
    f = tmp_path / "bad.parquet"
    pq.write_table(pa.table({"source_repo": ["r"]}), f)
    with pytest.raises(ShardError, match=r"bad.parquet, row group 0, column 'text': required column is missing"):
        list(iter_shard(f, "v6"))
    g = tmp_path / "typed.parquet"
    pq.write_table(pa.table({"text": [1, 2]}), g)
    with pytest.raises(ShardError, match="column 'text': type int64"):
        list(iter_shard(g, "v6"))
    with pytest.raises(ShardError, match="column 'text'"):
        check_shard(g, "v6", None)


def test_mistyped_optional_column_is_filled_and_rejected_by_validate(tmp_path):
    f = tmp_path / "x.parquet"
    pq.write_table(pa.table({"text": ["ab"], "structure_ids": [["x", "y"]]}), f)
    row = pa.concat_tables(iter_shard(f, "v6")).to_pylist()[0]
    assert row["structure_ids"] == [0, 0]
    with pytest.raises(ShardError, match="column 'structure_ids'"):
        check_shard(f, "v6", None)


def test_incomplete_directory_is_never_read(tmp_path):
    with pytest.raises(ShardError, match="_COMPLETE"):
        require_complete(tmp_path)


def test_every_generation_requires_text():
    for gen, cols in GENERATIONS.items():
        assert [c.name for c in cols if c.required] == ["text"], gen


def test_a_projection_reads_only_its_columns_and_fills_alike(tmp_path, monkeypatch):
    """columns_wanted reads only those columns from the file (and `text` where a missing per-character column
    must be sized by it), and gives exactly what a full read would, selected."""
    f = tmp_path / "old.parquet"
    pq.write_table(pa.table({"text": ["int a;\n", "héllo"], "source_repo": ["r", "s"], "size_bytes": [7, 6],
                             "n_lines": pa.array([1, 1], pa.int32())}), f, row_group_size=1)
    wanted = ["source_repo", "structure_ids", "size_bytes"]
    full = pa.concat_tables(list(iter_shard(f, "v6"))).select(wanted)
    asked = []
    original = pq.ParquetFile.iter_batches  # what schemas/reader.read_row_group decodes with

    def spy(self, *args, columns=None, **kw):
        asked.append(columns)
        return original(self, *args, columns=columns, **kw)

    monkeypatch.setattr(pq.ParquetFile, "iter_batches", spy)
    part = pa.concat_tables(list(iter_shard(f, "v6", wanted)))
    assert part.equals(full) and part.column_names == wanted
    assert asked and all(sorted(c) == ["size_bytes", "source_repo", "text"] for c in asked)  # never n_lines
    with pytest.raises(ShardError, match="no column"):
        list(iter_shard(f, "v6", ["no_such_column"]))


def test_revision_1_shards_and_ledger_read_under_todays_names(tmp_path):
    """Schema revision 2 renamed sha256 (the text's) to text_sha256, the constituents' fields and the ledger's
    identity columns; a revision-1 build still reads, validates and diffs under the new names."""
    from cpp_data.schemas.artifacts import LEDGER, LEDGER_RENAMED
    from cpp_data.schemas.reader import read_ledger

    old_piece = pa.struct([("repo", pa.string()), ("commit", pa.string()), ("path", pa.string()),
                           ("start", pa.int32()), ("end", pa.int32()), ("license_spdx", pa.string())])
    piece = {"repo": "r", "commit": "c0", "path": "a.cc", "start": 0, "end": 5, "license_spdx": "MIT"}
    shard = tmp_path / "train-00000.parquet"
    pq.write_table(pa.table({"text": ["int a;", "int b;"], "sha256": ["t1", "t2"],
                             "constituents": pa.array([[piece], None], pa.list_(old_piece))}), shard)
    check_shard(shard, "v6", 2)  # the retired name and the old struct are an earlier revision, not damage
    (t,) = iter_shard(shard, "v6", ["text_sha256", "constituents"])
    assert t.column("text_sha256").to_pylist() == ["t1", "t2"]
    assert t.column("constituents").to_pylist()[0] == [{"source_repo": "r", "source_commit": "c0",
                                                        "source_path": "a.cc", "start": 0, "end": 5,
                                                        "license_spdx": "MIT"}]
    assert t.column("constituents").to_pylist()[1] is None
    (full,) = iter_shard(shard, "v6")
    assert full.column("raw_sha256").to_pylist() == ["", ""]  # not in revision 1: its fill
    back = {new: old for old, new in LEDGER_RENAMED.items()}
    old_ledger = pa.schema([pa.field(back.get(f.name, f.name), f.type) for f in LEDGER])
    row = {back.get(f.name, f.name): None for f in LEDGER}
    row.update(repo="r", path="a.cc", commit="c0", sha256="raw", size=7, decision="kept")
    pq.write_table(pa.Table.from_pylist([row], schema=old_ledger), tmp_path / "ledger.parquet")
    ledger = read_ledger(tmp_path / "ledger.parquet")
    assert ledger.schema.names == LEDGER.names
    assert ledger.to_pylist()[0]["raw_sha256"] == "raw" and ledger.to_pylist()[0]["size_bytes"] == 7
    picked = read_ledger(tmp_path / "ledger.parquet", ["source_path", "decision"]).to_pylist()
    assert picked == [{"source_path": "a.cc", "decision": "kept"}]
    # and an unrelated mistyped column is still refused
    pq.write_table(pa.table({"text": ["x"], "constituents": pa.array([[{"a": 1}]])}), shard)
    with pytest.raises(ShardError, match="constituents"):
        check_shard(shard, "v6", 1)


def _write_in_pieces(out, table: pa.Table, p, cut: list[int]) -> list[dict]:
    """`table` through one ShardWriter into `out`, handed over in pieces of the sizes in `cut`; its listing."""
    from cpp_data.schemas.shard_writer import ShardWriter

    out.mkdir()
    writer = ShardWriter(out, "train", table.schema, p)
    pos = 0
    for n in cut:
        writer.write(table.slice(pos, n))
        pos += n
    return writer.close()


def test_row_groups_larger_than_a_page_are_the_same_bytes_whatever_the_chunking(tmp_path):
    """Parquet cuts a column's pages where a written chunk ends once the page is full, so a row group written
    from several Arrow chunks had other pages than one written from one: the shards stage's bytes then
    depended on its shuffle buckets' size (bucket_bytes), a memory setting. Row groups of several MB of text,
    several pages each, handed over whole, a row at a time and in uneven pieces, must give one file."""
    import random

    from cpp_data.schemas.generations import write_schema
    from cpp_data.schemas.shard_writer import ShardParams

    rng = random.Random(11)
    texts = ["".join(rng.choice("abcdefghij{};() \n") for _ in range(rng.randrange(20_000, 120_000)))
             for _ in range(60)]
    schema = write_schema("v6", ["text", "doc_id"])
    table = pa.table({"text": texts, "doc_id": [f"d{i}" for i in range(len(texts))]}, schema=schema)
    p = ShardParams(docs_per_shard=1000, row_group_size=32, row_group_bytes=0)
    digests = [[f["sha256"] for f in _write_in_pieces(tmp_path / f"c{k}", table, p, cut)]
               for k, cut in enumerate([[60], [1] * 60, [7, 20, 2, 31]])]
    md = pq.read_metadata(tmp_path / "c0" / "train-00000.parquet")
    assert md.row_group(0).column(0).total_uncompressed_size > 2 * 2**20  # a text chunk of several pages
    assert digests[1] == digests[0] and digests[2] == digests[0]


def test_row_groups_close_at_their_byte_bound_whatever_the_chunking(tmp_path):
    """ShardWriter: a row group closes at row_group_size rows or row_group_bytes of text, whichever first (a
    larger document alone), and the files do not depend on how the rows were handed over."""
    import random

    from cpp_data.schemas.generations import write_schema
    from cpp_data.schemas.shard_writer import ShardParams

    rng = random.Random(7)
    sizes = [rng.choice([10, 300, 900, 2500]) for _ in range(200)]
    texts = [chr(97 + i % 26) * n for i, n in enumerate(sizes)]
    schema = write_schema("v6", ["text", "doc_id"])
    table = pa.table({"text": texts, "doc_id": [f"d{i}" for i in range(len(texts))]}, schema=schema)
    p = ShardParams(docs_per_shard=150, row_group_size=8, row_group_bytes=2000)
    listings = [[(f["path"], f["rows"], f["sha256"]) for f in _write_in_pieces(tmp_path / f"c{k}", table, p, cut)]
                for k, cut in enumerate([[200], [1] * 200, [3, 50, 7, 140], [64, 64, 64, 8]])]
    assert all(lst == listings[0] for lst in listings)
    groups = []
    for path, _, _ in listings[0]:
        md = pq.read_metadata(tmp_path / "c0" / path.split("/")[-1])
        groups += [md.row_group(i).num_rows for i in range(md.num_row_groups)]
    assert sum(groups) == 200 and [r for _, r, _ in listings[0]] == [150, 50]
    start = 0
    for g in groups:
        chunk = sizes[start:start + g]
        assert g <= 8 and (sum(chunk) <= 2000 or g == 1)
        if start + g < 200 and g < 8 and not (start + g == 150):  # closed by bytes: the next row did not fit
            assert sum(chunk) + sizes[start + g] > 2000
        start += g


@pytest.mark.parametrize("generation", sorted(GENERATIONS) + ["packed"])
def test_token_id_columns_are_written_without_a_dictionary(tmp_path, generation):
    """dictionary_columns names Parquet's leaves as the writer does (pyarrow's own file is the judge), and a
    shard written by ShardWriter has plain token ids and dictionary-encoded everything else."""
    from cpp_data.schemas.shard_writer import PLAIN_COLUMNS, ShardParams, ShardWriter, dictionary_columns
    from cpp_data.stages.lib.packing import packed_schema

    schema = packed_schema("v6", ["token_structure_ids"]) if generation == "packed" else full_schema(generation)
    pq.write_table(schema.empty_table(), tmp_path / "empty.parquet")
    leaves = pq.ParquetFile(tmp_path / "empty.parquet").schema
    plain = [leaves.column(i).path for i in range(len(leaves)) if leaves.column(i).path.split(".")[0] in PLAIN_COLUMNS]
    assert dictionary_columns(schema) == [leaves.column(i).path for i in range(len(leaves))
                                          if leaves.column(i).path not in plain]
    if not plain:
        return
    row = {f.name: ([7, 70000, 7] if f.name in PLAIN_COLUMNS else None) for f in schema}
    row |= {"text": "abc", "structure_ids": [1, 1, 2], "token_structure_ids": [1, 1, 2]}
    writer = ShardWriter(tmp_path, "train", schema, ShardParams())
    writer.write(pa.Table.from_pylist([{k: v for k, v in row.items() if k in schema.names}], schema=schema))
    [entry] = writer.close()
    meta = pq.ParquetFile(tmp_path / entry["path"].split("/")[-1]).metadata.row_group(0)
    encodings = {meta.column(i).path_in_schema: meta.column(i).encodings for i in range(meta.num_columns)}
    assert all("RLE_DICTIONARY" not in encodings[p] for p in plain)
    dictionary = [p for p in encodings if p.split(".")[0] in ("structure_ids", "token_structure_ids", "text")]
    assert dictionary and all("RLE_DICTIONARY" in encodings[p] for p in dictionary)
