"""The tolerant shard reader (docs/DESIGN.md section 9): what every later stage uses to read shards.

- A directory without its `_COMPLETE` marker is never read.
- Present, well-formed optional columns are used; absent (or mistyped) optional columns get the typed fill of
  their generation (0 for categories, -1 for ast_depth / sibling_index / ast_node_type, ...), per character of
  `text` for per-character columns and per token of `token_ids` for per-token columns.
- A missing or malformed required column fails closed with the shard, row group and column named.
- Shards of an earlier schema revision (schemas/generations.SCHEMA_REVISION) read under the current names: a
  retired column is renamed to its successor, and list-of-struct columns whose fields were renamed are relabelled
  by position. The ledger has the same: `read_ledger`.
Reading streams one row group at a time, so memory stays bounded by the row-group size, and decodes each row
group in batches of rows (`read_row_group`), so the decoder's scratch stays bounded by a batch.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from cpp_data.pipeline.foundation.errors import BadInput, CheckFailed
from cpp_data.schemas.generations import Column, columns, full_schema

COMPLETE_MARKER = "_COMPLETE"


class ShardError(CheckFailed):
    """A shard or output directory that cannot be used; the message names file, row group and column."""


class IncompleteBuild(BadInput, ShardError):
    """A directory given as a build that has no `_COMPLETE` marker: bad input (exit 2), never read."""


BATCH_ROWS = 64  # rows per decoded batch of read_row_group


def read_row_group(pf: pq.ParquetFile, rg: int, columns: list[str] | None = None,
                   batch_rows: int = BATCH_ROWS) -> pa.Table:
    """Row group `rg` of `pf` (its `columns`, or all), decoded `batch_rows` rows at a time: the same values and
    rows as `pf.read_row_group`, in one chunk per batch.

    Why not read_row_group: decoding a list column at once allocates the Parquet levels of every value of the
    row group (for a per-character column, 4 bytes per character of text beside the values), and Arrow's
    allocator keeps what was freed, so a process reading a row group whole grows by several times its Arrow
    size. Read `batch_rows` at a time it grows by a fraction of that, in the same time."""
    batches = list(pf.iter_batches(batch_size=batch_rows, row_groups=[rg], columns=columns, use_threads=False))
    schema = pf.schema_arrow if columns is None else pa.schema([pf.schema_arrow.field(n) for n in columns])
    return pa.Table.from_batches(batches, schema=batches[0].schema if batches else schema)


def require_complete(directory: Path) -> Path:
    """Return `directory` if it carries its `_COMPLETE` marker, else raise ShardError."""
    directory = Path(directory)
    if not (directory / COMPLETE_MARKER).is_file():
        raise IncompleteBuild(f"{directory}: no {COMPLETE_MARKER} marker; the directory is incomplete and is not read")
    return directory


def _fill_array(col: Column, table: pa.Table) -> pa.Array:
    n = table.num_rows
    if col.per_char:
        lengths = [0 if t is None else len(t) for t in table.column("text").to_pylist()]
        return pa.array([[col.fill] * k for k in lengths], type=col.type)
    if col.per_token:
        ids = table.column("token_ids").to_pylist() if "token_ids" in table.column_names else [None] * n
        return pa.array([[col.fill] * len(t or []) for t in ids], type=col.type)
    return pa.array([col.fill] * n, type=col.type)


def struct_fields_renamed(have: pa.DataType, want: pa.DataType) -> bool:
    """True when `have` is `want` (a list of structs) but for the names of the struct's fields: what a schema
    revision that renamed them leaves in older shards."""
    return (pa.types.is_list(have) and pa.types.is_list(want) and pa.types.is_struct(have.value_type)
            and pa.types.is_struct(want.value_type) and have.value_type.num_fields == want.value_type.num_fields
            and all(have.value_type.field(i).type == want.value_type.field(i).type
                    for i in range(want.value_type.num_fields)))


def _relabel(arr, want: pa.DataType):
    """A list<struct> column of an earlier revision, whose struct fields were renamed (same count, same types,
    same order), under the current field names; None when it is not that case."""
    if not struct_fields_renamed(arr.type, want):
        return None
    names = [want.value_type.field(i).name for i in range(want.value_type.num_fields)]
    chunks = []
    for chunk in (arr.chunks if isinstance(arr, pa.ChunkedArray) else [arr]):
        values = chunk.values
        struct = pa.StructArray.from_arrays([values.field(i) for i in range(len(names))], names=names,
                                            mask=values.is_null() if values.null_count else None)
        mask = chunk.is_null() if chunk.null_count else None
        chunks.append(pa.ListArray.from_arrays(chunk.offsets, struct, mask=mask))
    return pa.chunked_array(chunks, type=want)


def conform(table: pa.Table, generation: str, where: str, names: list[str] | None = None) -> pa.Table:
    """Return `table` with exactly the columns of `generation` (or those of them in `names`, in that order),
    filling the missing optional ones; columns of an earlier schema revision are read under the current names."""
    present = set(table.column_names)
    renames = {c.formerly: c.name for c in columns(generation)
               if c.formerly and c.formerly in present and c.name not in present}
    if renames:
        table = table.rename_columns([renames.get(n, n) for n in table.column_names])
    out, fields = [], []
    schema = full_schema(generation)
    by_name = {c.name: c for c in columns(generation)}
    unknown = [n for n in names or () if n not in by_name]
    if unknown:
        raise ShardError(f"{where}: no column(s) {unknown} in schema generation {generation}")
    for col in [by_name[n] for n in names] if names else columns(generation):
        fields.append(schema.field(col.name))
        if col.name in table.column_names:
            arr = table.column(col.name)
            if arr.type == col.type:
                if col.required and arr.null_count:
                    raise ShardError(f"{where}, column {col.name!r}: {arr.null_count} nulls in a required column")
                out.append(arr)
                continue
            relabelled = _relabel(arr, col.type)
            if relabelled is not None:
                out.append(relabelled)
                continue
            if col.required:
                raise ShardError(f"{where}, column {col.name!r}: type {arr.type}, expected {col.type}")
        elif col.required:
            raise ShardError(f"{where}, column {col.name!r}: required column is missing")
        out.append(_fill_array(col, table))
    return pa.Table.from_arrays(out, schema=pa.schema(fields) if names else schema)


def iter_shard(path: Path, generation: str | None, columns_wanted: list[str] | None = None
               ) -> Iterator[pa.Table]:
    """Yield the shard's row groups as tables conformed to `generation` (optionally a subset of columns).

    `generation=None` is for the stages, which read shards they or an earlier stage of the same build wrote:
    the projected columns as written, no fills, and a missing column is a ShardError naming the file."""
    path = Path(path)
    try:
        pf = pq.ParquetFile(path, page_checksum_verification=True)
    except Exception as exc:  # pyarrow raises several types for unreadable footers
        raise ShardError(f"{path}: not a readable Parquet file ({exc})") from None
    read = None  # every column, unless a projection: then only those (and what their fills are sized by)
    if generation is None:
        missing = [n for n in columns_wanted or () if n not in pf.schema_arrow.names]
        if missing:
            raise ShardError(f"{path}: no column(s) {missing}")
        for rg in range(pf.num_row_groups):
            try:
                yield read_row_group(pf, rg, columns_wanted)
            except Exception as exc:
                raise ShardError(f"{path}, row group {rg}: cannot be decoded ({exc})") from None
        return
    if columns_wanted:
        present = set(pf.schema_arrow.names)
        by_name = {c.name: c for c in columns(generation)}
        need = set(columns_wanted)
        for name in columns_wanted:
            col = by_name.get(name)
            if col is not None and name not in present and (col.per_char or col.per_token):
                need.add("text" if col.per_char else "token_ids")
            if col is not None and name not in present and col.formerly in present:
                need.add(str(col.formerly))
        read = [n for n in pf.schema_arrow.names if n in need]
    for rg in range(pf.num_row_groups):
        where = f"{path}, row group {rg}"
        try:
            table = read_row_group(pf, rg, read)
        except Exception as exc:
            raise ShardError(f"{where}: cannot be decoded ({exc})") from None
        yield conform(table, generation, where, columns_wanted)


def iter_build_shards(build_dir: Path, generation: str | None = None, split: str | None = None,
                      columns_wanted: list[str] | None = None) -> Iterator[pa.Table]:
    """Yield every row group of every shard of a sealed build, in manifest order."""
    from cpp_data.schemas.manifest import load_manifest

    build_dir = require_complete(build_dir)
    manifest = load_manifest(build_dir)
    gen = generation or manifest["schema_generation"]
    for entry in manifest["files"]:
        if entry.get("kind") != "shard" or (split and entry.get("split") != split):
            continue
        yield from iter_shard(build_dir / entry["path"], gen, columns_wanted)


def read_ledger(path: Path, columns_wanted: list[str] | None = None) -> pa.Table:
    """A build's provenance/ledger.parquet under the current column names (schemas/artifacts.LEDGER), also when
    an earlier schema revision wrote it (repo, commit, path, sha256, size: artifacts.LEDGER_RENAMED)."""
    from cpp_data.schemas.artifacts import LEDGER_RENAMED

    path = Path(path)
    try:
        present = pq.read_schema(path).names
    except Exception as exc:
        raise ShardError(f"{path}: not a readable Parquet file ({exc})") from None
    old = {new: old for old, new in LEDGER_RENAMED.items() if old in present and new not in present}
    read = None if columns_wanted is None else [old.get(n, n) for n in columns_wanted]
    try:
        table = pq.read_table(path, columns=read)
    except Exception as exc:
        raise ShardError(f"{path}: {exc}") from None
    back = {o: n for n, o in old.items()}
    return table.rename_columns([back.get(n, n) for n in table.column_names])


def shard_files(directory: Path, split: str | None = None) -> list[Path]:
    """The shard files of a shards-like stage output (shards.json) or a published build (manifest.json),
    optionally of one split, in their listed order."""
    directory = Path(directory)
    if (directory / "shards.json").is_file():
        listing = json.loads((directory / "shards.json").read_text())["files"]
    else:
        from cpp_data.schemas.manifest import load_manifest

        listing = [e for e in load_manifest(directory)["files"] if e.get("kind") == "shard"]
    return [directory / e["path"] for e in listing if split is None or e["split"] == split]


def resolve_build(path: Path) -> Path:
    """A BUILD argument: a build directory as given, an output directory (meaning its builds/LATEST), or one of
    the pointer files OUT/builds/LATEST and OUT/builds/PROMOTED (meaning the build it names)."""
    if (path / "manifest.json").is_file() or (path / "_COMPLETE").is_file():
        return path
    if path.name in ("LATEST", "PROMOTED") and path.parent.name == "builds" and path.is_file():
        named = path.read_text().strip()
        if named and "/" not in named and (path.parent / named / "manifest.json").is_file():
            return path.parent / named
        raise BadInput(f"{path}: names {named!r}, which is not a build in {path.parent}")
    latest = path / "builds" / "LATEST"
    if latest.is_file():
        return path / "builds" / latest.read_text().strip()
    if (path / "builds").is_dir():
        raise BadInput(f"{path}: an output directory without builds/LATEST; give one of its builds: "
                       f"{path}/builds/NAME")
    if not path.exists():
        raise BadInput(f"{path}: no such build or output directory")
    raise BadInput(f"{path}: not a build (no manifest.json) and not an output directory (no builds/); "
                   f"give OUT/builds/NAME")
