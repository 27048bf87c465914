"""Per-document work over a stage's shards as datatrove tasks, and the merge that puts the results back into
shard files with the same files, row groups and row order (docs/DESIGN.md section 13).

Map: the rows of the input shards are cut into slices of at most `rows_per_task` rows that never cross a row
group (`plan_slices`); task r reads slice r, hands it to the stage's `SliceWork.transform` and writes what it
returns to `_work/pieces/r.arrow` (scratch: Arrow IPC with lz4, which keeps the Arrow schema exactly, list
field names included, and costs no Parquet encoding). Merge: one task per input row group reads that row
group's pieces in order, lets `SliceWork.finalize` complete them (the structure stage fills in what needed the
whole repository), concatenates them into one table of one chunk per column and writes it as a Parquet file of
one row group, of the added columns only. Concat: one task per input file builds each row group from the input
row group's column chunks and the merged ones, copied as they are encoded (schemas/parquet_concat.py), renames
the file into place and records its rows, bytes and SHA-256. So the input's columns are never decoded or
encoded again (token_columns keeps the four per-character columns of structure and the text as they are), and
the encoding is spread over the row groups, where one task per file would leave cores idle while it encoded a
whole file. A stage's compression settings apply to the columns it adds; the columns it keeps stay as their
stage wrote them. Where the output is not the input's fields then the added ones (`spliced_schema`), the merge
reads the input's columns and writes every column, and the concat copies whole row groups.

A row group is written from the same rows whatever the slicing, and its bytes are the same in a file of its own
as in the final file, so the bytes do not depend on rows_per_task, the number of workers or the executor. Every
phase is datatrove tasks with its completion markers, so a killed stage resumes its unfinished tasks, and a task
only ever writes files named by its own rank (atomically).

Hand-written because datatrove's readers and writers are document streams: they know neither row groups nor
the rule that an output row group must hold exactly the rows of its input row group.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from datatrove.pipeline.base import PipelineStep

from cpp_data.pipeline.foundation.allocator import give_back_freed_memory
from cpp_data.schemas.manifest import sha256_file
from cpp_data.schemas.parquet_concat import concat_parquet_file, splice_row_groups_file
from cpp_data.schemas.reader import read_row_group
from cpp_data.schemas.shard_writer import open_writer

WORK = "_work"  # scratch of the tasks (pieces, plans); pipeline/runner/cache.py leaves it out of the sealed outputs


@dataclass(frozen=True)
class Slice:
    """Rows [start, stop) of row group `row_group` of input file `file` (an index into the listing); its first
    row is row `first_row` of all the listed files in order."""

    file: int
    row_group: int
    start: int
    stop: int
    first_row: int


def plan_slices(src: Path, listing: list[dict], rows_per_task: int) -> list[Slice]:
    """Slices of at most `rows_per_task` rows over every row group of the listed files, in file order (from
    the Parquet footers only)."""
    if rows_per_task < 1:
        raise ValueError(f"rows_per_task must be at least 1, not {rows_per_task}")
    out, first = [], 0
    for i, entry in enumerate(listing):
        md = pq.read_metadata(src / entry["path"])
        for rg in range(md.num_row_groups):
            n = md.row_group(rg).num_rows
            for a in range(0, n, rows_per_task):
                out.append(Slice(i, rg, a, min(n, a + rows_per_task), first))
                first += out[-1].stop - a
    return out


def _plan_path(work: Path) -> Path:
    return work / "slices.npy"


def load_plan(work: Path) -> np.ndarray:
    """The slices of a stage's tasks as rows (file, row_group, start, stop, first_row), memory-mapped: a task
    reads its own row, never the whole plan."""
    return np.load(_plan_path(work), mmap_mode="r")


def slice_of(plan: np.ndarray, rank: int) -> Slice:
    return Slice(*(int(x) for x in plan[rank]))


class SliceWork:
    """What a stage does to its rows, run inside datatrove tasks. Instances are pickled to the workers, so they
    hold settings and paths only; heavy objects (a parser, a tokenizer) are made in the worker, once per
    process (see `worker_cache`)."""

    columns: list[str] | None = None  # the input columns transform reads (None: all)

    def transform(self, table: pa.Table, piece: Slice, rank: int, work: Path, stat) -> pa.Table:
        """The slice's rows (its `columns`) in; the columns the stage adds out, for the same rows in the same
        order, or None for a job that writes its own files under `work` (named by `rank`) and has nothing to
        merge. `stat(name, value)` counts."""
        raise NotImplementedError

    def schema(self, names: list[str]) -> pa.Schema:
        """The output schema of rows with these columns (input and added), in output order."""
        raise NotImplementedError

    def finalize(self, table: pa.Table, rank: int, work: Path) -> pa.Table:
        """A piece of rank `rank` just before it is written into its file (default: as it is)."""
        return table


def write_piece(table: pa.Table, path: Path) -> None:
    """An Arrow IPC file (lz4: scratch is read once, so speed beats size), written under a temporary name and
    renamed into place."""
    tmp = path.with_name(f".{path.name}.tmp")
    with pa.ipc.new_file(tmp, table.schema, options=pa.ipc.IpcWriteOptions(compression="lz4")) as writer:
        writer.write_table(table)
    os.replace(tmp, path)


def write_task_table(table: pa.Table, path: Path, compression: str = "zstd", **kw) -> None:
    """A task's intermediate table as a Parquet file, written under a hidden temporary name and renamed into
    place, so a killed task leaves no half file under the name its successor reads."""
    tmp = path.with_name(f".{path.name}.tmp")
    pq.write_table(table, tmp, compression=compression, **kw)
    os.replace(tmp, path)


def read_piece(path: Path) -> pa.Table:
    with pa.memory_map(str(path)) as source:
        return pa.ipc.open_file(source).read_all()


def read_piece_rows(path: Path, start: int, stop: int) -> Iterator[pa.Table]:
    """Rows [start, stop) of a piece, one record batch at a time: a piece of many batches (a packing block's
    rows) is never in memory whole, so a packed-file task's memory is one batch, not one block."""
    with pa.memory_map(str(path)) as source:
        reader = pa.ipc.open_file(source)
        first = 0
        for i in range(reader.num_record_batches):
            if first >= stop:
                break
            batch = reader.get_batch(i)
            a, b = max(start - first, 0), min(stop - first, batch.num_rows)
            if b > a:
                yield pa.Table.from_batches([batch.slice(a, b - a)])
            first += batch.num_rows


class MapSlices(PipelineStep):
    """Task r: slice r of the input shards through `work.transform`, into pieces/r.arrow."""

    type = "🔢 - MAP"
    name = "map"

    def __init__(self, src: Path, files: list[str], work_dir: Path, job: SliceWork):
        super().__init__()
        self.src, self.files, self.work_dir, self.job = Path(src), files, Path(work_dir), job

    def run(self, data, rank: int = 0, world_size: int = 1):
        s = slice_of(load_plan(self.work_dir), rank)
        path = self.src / self.files[s.file]
        pf = pq.ParquetFile(path, page_checksum_verification=True)
        rows = read_row_group(pf, s.row_group, self.job.columns)
        table = rows.slice(s.start, s.stop - s.start)
        out = self.job.transform(table, s, rank, self.work_dir, lambda k, v=1: self.stat_update(k, value=v))
        self.stat_update("rows", value=table.num_rows)
        if out is None:  # the job wrote what it makes itself (the export's partial bin/idx)
            return
        # every column of the file, not only those the job read: an added column the input already holds
        # (shards that carry token_ids already) would otherwise be written twice or replace the input's
        if out.num_rows != table.num_rows or set(out.column_names) & set(pf.schema_arrow.names):
            raise RuntimeError(f"{path}, row group {s.row_group}: {type(self.job).__name__} returned "
                               f"{out.num_rows} rows for {table.num_rows}, or an input column")
        write_piece(out, self.work_dir / "pieces" / f"{rank:05d}.arrow")
        return
        yield  # a generator that yields nothing: the last step of its pipeline


def row_groups(plan: np.ndarray) -> np.ndarray:
    """The (file, row_group) pairs the plan's slices cover, in file then row group order: merge task r writes
    row group r of this list."""
    return np.unique(np.asarray(plan[:, :2]), axis=0) if len(plan) else np.zeros((0, 2), np.int64)


def spliced_schema(job: SliceWork, source: pa.Schema, added: list[str]) -> pa.Schema | None:
    """The output schema when a merge keeps the input's columns as they are encoded: the output is the input's
    fields (name, type, nullability), in order, then the added ones. None otherwise (the merge then reads the
    input's columns and encodes every column again)."""
    if set(added) & set(source.names):
        return None
    schema = job.schema(source.names + list(added))
    n = len(source)
    if schema.names[:n] != source.names or not all(schema.field(i).equals(source.field(i)) for i in range(n)):
        return None
    return schema


class MergeRowGroup(PipelineStep):
    """Task r: row group r of the input shards (`row_groups`) again, the concatenation of its pieces
    (finalized), as a Parquet file of that one row group under _work/rowgroups/: of the added columns only
    where the input's columns are kept as encoded (`spliced_schema`), else of every column."""

    type = "🔢 - MERGE"
    name = "merge"

    def __init__(self, src: Path, files: list[str], work_dir: Path, job: SliceWork, compression: str,
                 compression_level: int | None):
        super().__init__()
        self.src, self.files, self.work_dir, self.job = Path(src), files, Path(work_dir), job
        self.compression, self.compression_level = compression, compression_level

    def run(self, data, rank: int = 0, world_size: int = 1):
        plan = load_plan(self.work_dir)
        file, rg = (int(x) for x in row_groups(plan)[rank])
        mine = [(int(r), slice_of(plan, int(r))) for r in np.flatnonzero((plan[:, 0] == file) & (plan[:, 1] == rg))]
        pieces = [read_piece(self.work_dir / "pieces" / f"{r:05d}.arrow") for r, _ in mine]
        source = pq.ParquetFile(self.src / self.files[file], page_checksum_verification=True)
        spliced = spliced_schema(self.job, source.schema_arrow, pieces[0].column_names)
        if spliced is not None:  # the input's columns stay in its file, encoded; ConcatFile splices them in
            base = pa.table({})
            schema = pa.schema([f for f in spliced if f.name in pieces[0].column_names])
        else:
            base = read_row_group(source, rg)
            schema = self.job.schema([n for n in base.column_names if n not in pieces[0].column_names]
                                     + pieces[0].column_names)
        parts, at = [], 0
        for (r, _), piece in zip(mine, pieces):
            whole = (piece.select([]) if spliced is not None else
                     base.slice(at, piece.num_rows).select([n for n in schema.names if n not in piece.column_names]))
            at += piece.num_rows
            for name in piece.column_names:
                whole = whole.append_column(name, piece.column(name))
            parts.append(self.job.finalize(whole.select(schema.names).cast(schema), r, self.work_dir))
        table = pa.concat_tables(parts).combine_chunks()
        del pieces, base, parts
        out = self.work_dir / "rowgroups" / f"{rank:05d}.parquet"
        out.parent.mkdir(exist_ok=True)
        # the settings of the final file: ConcatFile copies this row group's bytes into it as they are
        write_one_row_group(table, out, self.compression, self.compression_level)
        self.stat_update("rows", value=table.num_rows)
        del table
        give_back_freed_memory()  # else a worker grows with the row groups it merged (pipeline/foundation/allocator.py)
        return
        yield  # a generator that yields nothing: the last step of its pipeline


def write_one_row_group(table: pa.Table, path: Path, compression: str, compression_level: int | None) -> None:
    """`table` as a Parquet file of one row group at `path` (atomically), with the settings of the shard files
    (shard_writer.open_writer), so parquet_concat can copy the row group into a file as it is encoded."""
    tmp = path.with_name(f".{path.name}.tmp")
    with open_writer(tmp, table.schema, compression, compression_level) as writer:
        writer.write_table(table, row_group_size=max(table.num_rows, 1))
    os.replace(tmp, path)


class ConcatFile(PipelineStep):
    """Task k: input file k again, from its merged row groups without decoding them (schemas/parquet_concat.py):
    each row group's column chunks copied in order, the input's own chunks first where the merge kept them
    (`spliced_schema`); renamed into place, its rows, bytes and SHA-256 recorded."""

    type = "🔢 - CONCAT"
    name = "concat"

    def __init__(self, src: Path, files: list[str], out: Path, work_dir: Path, job: SliceWork, compression: str,
                 compression_level: int | None):
        super().__init__()
        self.src, self.files, self.out, self.work_dir, self.job = Path(src), files, Path(out), Path(work_dir), job
        self.compression, self.compression_level = compression, compression_level

    def run(self, data, rank: int = 0, world_size: int = 1):
        groups = row_groups(load_plan(self.work_dir))
        mine = np.flatnonzero(groups[:, 0] == rank)
        parts = [self.work_dir / "rowgroups" / f"{r:05d}.parquet" for r in mine]
        if not parts:  # a file without rows keeps its (empty) shape: the transform of an empty slice
            raise RuntimeError(f"{self.files[rank]}: no rows to merge")
        final = self.out / self.files[rank]
        final.parent.mkdir(parents=True, exist_ok=True)
        source = self.src / self.files[rank]
        spliced = spliced_schema(self.job, pq.read_schema(source), pq.read_schema(parts[0]).names)
        if spliced is None:
            rows = concat_parquet_file(parts, final)
        else:  # the template gives the file its schema and Arrow metadata: pyarrow writing no rows of it
            template = self.work_dir / "rowgroups" / f"template-{rank:05d}.parquet"
            write_one_row_group(spliced.empty_table(), template, self.compression, self.compression_level)
            rows = splice_row_groups_file(template, [[(source, int(groups[r, 1])), (part, 0)]
                                                     for r, part in zip(mine, parts)], final)
        (self.work_dir / "merged").mkdir(exist_ok=True)
        (self.work_dir / "merged" / f"{rank:05d}.json").write_text(json.dumps(
            {"rows": rows, "bytes": final.stat().st_size, "sha256": sha256_file(final)}))
        self.stat_update("rows", value=rows)
        return
        yield


def map_shards(ctx, src: Path, listing: list[dict], job: SliceWork, slices: list[Slice],
               what: str = "map") -> dict[str, int]:
    """Run `job.transform` over `slices` of the listed shards (plan_slices) as datatrove tasks, pieces under
    ctx.out/_work; returns the tasks' summed stats ({"map.<name>": total})."""
    work = Path(ctx.out) / WORK
    (work / "pieces").mkdir(parents=True, exist_ok=True)
    write_plan(work, slices)
    return ctx.executor.run([MapSlices(src, [e["path"] for e in listing], work, job)], len(slices),
                          work / "_datatrove" / what, f"{ctx.label}: {what}")


def merge_shards(ctx, src: Path, listing: list[dict], job: SliceWork, compression: str,
                 compression_level: int | None, keep_work: bool = False) -> list[dict]:
    """Write every listed file again into ctx.out from its pieces (a datatrove task per row group, then one per
    file); returns the listing with each file's new bytes and SHA-256. The pieces and row groups go unless
    `keep_work`."""
    work = Path(ctx.out) / WORK
    files = [e["path"] for e in listing]
    ctx.executor.run([MergeRowGroup(src, files, work, job, compression, compression_level)],
                  len(row_groups(load_plan(work))), work / "_datatrove" / "merge", f"{ctx.label}: merge")
    ctx.executor.run([ConcatFile(src, files, ctx.out, work, job, compression, compression_level)],
                  len(files), work / "_datatrove" / "concat", f"{ctx.label}: concat")
    out = []
    for k, entry in enumerate(listing):
        merged = json.loads((work / "merged" / f"{k:05d}.json").read_text())
        if merged["rows"] != entry["rows"]:
            raise RuntimeError(f"{entry['path']}: merged {merged['rows']} rows of {entry['rows']}")
        out.append({**entry, "bytes": merged["bytes"], "sha256": merged["sha256"]})
    if not keep_work:
        shutil.rmtree(work / "pieces", ignore_errors=True)
        shutil.rmtree(work / "rowgroups", ignore_errors=True)
    return out


def clean_work(ctx) -> None:
    """Delete the tasks' intermediate files and bookkeeping once the stage's outputs are written, all at once:
    a stage killed after this point redoes its tasks rather than trust completions without their files."""
    shutil.rmtree(Path(ctx.out) / WORK, ignore_errors=True)


def write_plan(work: Path, slices: list[Slice]) -> None:
    """The slices the tasks read (load_plan); a resumed stage must find the plan it started with (its finished
    tasks are kept by rank)."""
    plan = np.array([[s.file, s.row_group, s.start, s.stop, s.first_row] for s in slices], np.int64).reshape(-1, 5)
    path = _plan_path(work)
    if path.exists():
        if not np.array_equal(np.load(path), plan):
            raise RuntimeError(f"{path}: the task plan changed under a resumed stage")
        return
    tmp = path.with_name(f".{path.name}.tmp.npy")
    np.save(tmp, plan)
    os.replace(tmp, path)


def rewrite_shards_as_tasks(ctx, src: Path, job: SliceWork, rows_per_task: int, compression: str,
                            compression_level: int | None) -> tuple[list[dict], dict[str, int]]:
    """Map then merge: every shard of src/shards.json through `job`, into ctx.out/shards/ (same files, row
    groups and row order); returns (the new listing, the map tasks' stats)."""
    listing = json.loads((Path(src) / "shards.json").read_text())["files"]
    stats = map_shards(ctx, src, listing, job, plan_slices(src, listing, rows_per_task))
    return merge_shards(ctx, src, listing, job, compression, compression_level), stats
