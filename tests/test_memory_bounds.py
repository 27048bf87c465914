"""What keeps a build's processes small (issue 15, point 4; docs/SCALING.md): row groups decoded in batches,
packing blocks bounded by text, Arrow on glibc's allocator, and single tasks run outside the driver."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from datatrove.pipeline.base import PipelineStep

from cpp_data.pipeline.contract.executor import ExecutorConfig
from cpp_data.pipeline.runner.executors.run import run_datatrove
from cpp_data.schemas.reader import BATCH_ROWS, read_row_group
from cpp_data.stages.lib.packing import block_plan


def _shard(path: Path, sizes: list[int], repos: list[str] | None = None, row_group: int = 1024) -> Path:
    rng = np.random.default_rng(7)
    texts = ["x" * n for n in sizes]
    per_char = [rng.integers(-5, 5, n).astype(np.int8) for n in sizes]
    table = pa.table({"text": texts, "source_repo": repos or ["r"] * len(sizes),
                      "size_bytes": pa.array(sizes, pa.int64()),
                      "ast_depth": pa.array([a.tolist() for a in per_char], pa.list_(pa.int8()))})
    pq.write_table(table, path, row_group_size=row_group)
    return path


def test_read_row_group_gives_the_rows_of_pyarrows_reader_in_batches(tmp_path):
    sizes = [int(n) for n in np.random.default_rng(1).integers(0, 400, 300)]
    path = _shard(tmp_path / "s.parquet", sizes, row_group=200)
    pf = pq.ParquetFile(path)
    for rg in range(pf.num_row_groups):
        for cols in (None, ["ast_depth", "text"], ["size_bytes"]):
            got = read_row_group(pf, rg, cols)
            want = pf.read_row_group(rg, columns=cols)
            assert got.schema == want.schema and got.equals(want)
    whole = read_row_group(pf, 0)
    assert whole.column("ast_depth").num_chunks == -(-200 // BATCH_ROWS)  # decoded a batch at a time


def test_packing_blocks_close_at_block_bytes_and_a_large_document_stands_alone(tmp_path):
    sizes = [100, 200, 300, 1_000, 50, 50, 400, 10]
    path = _shard(tmp_path / "train-00000.parquet", sizes)
    groups = [("", ["r"], None)]
    blocks = block_plan([path], "train", groups, block_docs=1_000, block_bytes=600)
    spans = [(b["lo"], b["hi"]) for b in blocks]
    assert spans == [(0, 3), (3, 4), (4, 8)]  # 600 | 1,000 alone | 510
    assert [b["documents"] for b in blocks] == [3, 1, 4]
    for lo, hi in spans:
        assert hi - lo == 1 or sum(sizes[lo:hi]) <= 600
    assert [(b["lo"], b["hi"]) for b in block_plan([path], "train", groups, 3)] == [(0, 3), (3, 6), (6, 8)]
    assert block_plan([path], "train", groups, 3, 10**9) == block_plan([path], "train", groups, 3)


def test_blocks_of_a_weight_group_count_only_its_own_documents(tmp_path):
    sizes = [300, 300, 300, 300]
    path = _shard(tmp_path / "train-00000.parquet", sizes, repos=["a", "b", "a", "a"])
    blocks = block_plan([path], "train", [("-a", ["a"], {"a"}), ("-b", ["b"], {"b"})], 1_000, 600)
    assert [(b["key"], b["lo"], b["hi"], b["documents"]) for b in blocks] == [
        ("train-a", 0, 3, 2), ("train-a", 3, 4, 1), ("train-b", 1, 2, 1)]


def test_build_processes_use_glibcs_allocator_unless_the_user_chose_one():
    code = ("import os, pyarrow as pa\nfrom cpp_data.pipeline.foundation.allocator import use_system_allocator\n"
            "name = use_system_allocator()\n"
            "print(name, pa.default_memory_pool().backend_name, os.environ['ARROW_DEFAULT_MEMORY_POOL'])\n")
    env = {k: v for k, v in os.environ.items() if k != "ARROW_DEFAULT_MEMORY_POOL"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["system", "system", "system"]
    out = subprocess.run([sys.executable, "-c", code], env={**env, "ARROW_DEFAULT_MEMORY_POOL": "mimalloc"},
                         capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["mimalloc", "mimalloc", "mimalloc"]


class RecordPid(PipelineStep):
    name = "record pid"

    def __init__(self, out: Path):
        super().__init__()
        self.out = out

    def run(self, data, rank: int = 0, world_size: int = 1):
        from cpp_data.pipeline.foundation.allocator import POOL_VARIABLE

        (self.out / f"{rank}.json").write_text(json.dumps({"pid": os.getpid(), "pool": pa.default_memory_pool(
            ).backend_name, "variable": os.environ.get(POOL_VARIABLE)}))
        return
        yield


def test_a_single_task_runs_outside_the_driver_whatever_the_worker_count(tmp_path):
    """The driver never takes a task's peak: with two workers a single task goes to a pool, with one worker the
    run goes to a process of its own (executors.run_in_one_worker), where datatrove would run it in the driver."""
    for workers in (2, 1):
        out = tmp_path / f"w{workers}"
        out.mkdir()
        run_datatrove(ExecutorConfig(kind="local", workers=workers, progress=False), [RecordPid(out)], 1,
                      out / "logs", "test")
        task = json.loads((out / "0.json").read_text())
        assert task["pid"] != os.getpid()
        assert task["pool"] == "system" or task["variable"] not in (None, "system")  # set by the task's first step


def test_loguru_works_out_its_library_directories_once_per_sys_path():
    """Each handler datatrove adds per task made loguru ask sysconfig for every scheme's paths (docs/SCALING.md)."""
    code = '''
import io, sys, sysconfig
from loguru import logger
from loguru._better_exceptions import ExceptionFormatter
from cpp_data.pipeline.runner.executors.task_logging import remember_loguru_lib_dirs
calls = [0]
get_path = sysconfig.get_path
def counted(*a, **k):
    calls[0] += 1
    return get_path(*a, **k)
sysconfig.get_path = counted
logger.add(io.StringIO())
one = calls[0]
before = ExceptionFormatter._get_lib_dirs()
remember_loguru_lib_dirs()
calls[0] = 0
for _ in range(3):
    logger.add(io.StringIO())
cached = calls[0]
sys.path.insert(0, "/nonexistent")
logger.add(io.StringIO())
print(one, cached, calls[0] - cached, ExceptionFormatter._get_lib_dirs() == before)
'''
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    one, cached, after_change, same = int(out[0]), int(out[1]), int(out[2]), out[3]
    assert one > 0 and cached == one and after_change == one and same == "True"


def test_piece_rows_come_a_batch_at_a_time_and_equal_the_whole_pieces_rows(tmp_path):
    from cpp_data.stages.lib.shard_tasks import read_piece, read_piece_rows

    path = tmp_path / "piece.arrow"
    table = pa.table({"pack_id": pa.array(range(1000), pa.int64()),
                      "input_ids": pa.array([[k, k + 1] for k in range(1000)], pa.list_(pa.int32()))})
    with pa.ipc.new_file(path, table.schema, options=pa.ipc.IpcWriteOptions(compression="lz4")) as out:
        for a in range(0, 1000, 256):  # batches of 256 rows, as the packing tasks write them
            out.write_table(table.slice(a, 256))
    whole = read_piece(path)
    for start, stop in ((0, 1000), (0, 256), (255, 257), (300, 301), (700, 1000), (999, 1000), (10, 10)):
        parts = list(read_piece_rows(path, start, stop))
        assert all(p.num_rows <= 256 for p in parts)
        got = pa.concat_tables(parts) if parts else whole.schema.empty_table()
        assert got.equals(whole.slice(start, stop - start))


def test_a_documents_end_keeps_its_columns_type():
    from cpp_data.stages.lib.packing import _with_end

    for dtype, end in ((np.uint8, 0), (np.int8, -1), (np.int16, -1), (np.int32, 65_535)):
        got = _with_end(np.array([3, 4, 5], dtype), end)
        assert got.dtype == dtype  # np.concatenate with [end] would make int64: 8 bytes a token
        assert got.tolist() == [3, 4, 5, end]
