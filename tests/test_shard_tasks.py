"""stages/lib/shard_tasks.py's map task: a stage's job may add columns, never return one the input file holds."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from cpp_data.stages.lib.shard_tasks import MapSlices, Slice, SliceWork, read_piece, write_plan


class _AddTokenIds(SliceWork):
    """Reads `text` only and adds `token_ids` (as token_columns does)."""

    columns = ["text"]

    def transform(self, table, piece, rank, work, stat):
        return pa.table({"token_ids": [[len(t)] for t in table.column("text").to_pylist()]})


def _run(tmp_path, table: pa.Table):
    src, work = tmp_path / "src", tmp_path / "work"
    (src).mkdir()
    (work / "pieces").mkdir(parents=True)
    pq.write_table(table, src / "train-00000.parquet")
    write_plan(work, [Slice(0, 0, 0, table.num_rows, 0)])
    list(MapSlices(src, ["train-00000.parquet"], work, _AddTokenIds()).run(None, rank=0))
    return read_piece(work / "pieces" / "00000.arrow")


def test_added_columns_come_out_alone(tmp_path):
    piece = _run(tmp_path, pa.table({"text": ["ab", "cde"], "size_bytes": [2, 3]}))
    assert piece.column_names == ["token_ids"] and piece.column("token_ids").to_pylist() == [[2], [3]]


def test_a_column_the_input_already_holds_is_refused(tmp_path):
    """The job reads only `text`, but the file already has `token_ids`: writing them again would put two
    columns of one name in the output (or drop the input's), so the task fails naming the file."""
    with pytest.raises(RuntimeError, match=r"train-00000\.parquet, row group 0: _AddTokenIds returned"):
        _run(tmp_path, pa.table({"text": ["ab", "cde"], "token_ids": [[1], [2]]}))
