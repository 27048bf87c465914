"""`cpp-data validate`: prove a build directory is whole and matches its manifest.

Checks, in order, stopping at the first problem: the `_COMPLETE` marker; the manifest; for every listed file
that its path stays inside the build, its size and SHA-256; for every shard its footer, schema (against its
generation), every row group and column decoded with page checksums verified, and its row count; and that the
build holds no file its manifest does not list (BUILD_FILES aside). A file added after publishing is read by
every reader that globs the directory (the dataset card's `shards/train*.parquet`, DuckDB's
`shards/*.parquet`), so an unlisted file is as much a mismatch as a changed one.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq

from cpp_data.schemas.generations import columns
from cpp_data.schemas.manifest import load_manifest, sha256_file
from cpp_data.schemas.reader import ShardError, read_row_group, require_complete, struct_fields_renamed

# The files of a build that its manifest does not list: the manifest itself, the seal, and the build summary
# (it holds this run's timings, so it is not part of the build's bytes, but the manifest's `summary_sha256`
# fixes it; pipeline/runner/build.py writes all three).
BUILD_FILES = frozenset({"manifest.json", "_COMPLETE", "reports/summary.json"})


def _locate_corruption(path: Path) -> str | None:
    """Name the first row group and column of `path` that fails to decode, if any."""
    try:
        pf = pq.ParquetFile(path, page_checksum_verification=True)
    except Exception as exc:
        return f"{path}: footer unreadable ({exc})"
    for rg in range(pf.num_row_groups):
        for name in pf.schema_arrow.names:
            try:
                read_row_group(pf, rg, [name])
            except Exception as exc:
                return f"{path}, row group {rg}, column {name!r}: {exc}"
    return None


def check_shard(path: Path, generation: str, expected_rows: int | None) -> None:
    """Raise ShardError naming file, row group and column on the first problem in one shard."""
    try:
        pf = pq.ParquetFile(path, page_checksum_verification=True)
    except Exception as exc:
        raise ShardError(f"{path}: not a readable Parquet file ({exc})") from None
    schema = pf.schema_arrow
    for col in columns(generation):
        name = col.name if col.name in schema.names or col.formerly not in schema.names else col.formerly
        if name not in schema.names:
            if col.required:
                raise ShardError(f"{path}, column {col.name!r}: required column is missing")
            continue
        actual = schema.field(name).type
        if actual != col.type and not struct_fields_renamed(actual, col.type):  # an earlier revision's names
            raise ShardError(f"{path}, column {name!r}: type {actual}, generation {generation} says {col.type}")
    known = {c.name for c in columns(generation)} | {c.formerly for c in columns(generation) if c.formerly}
    for name in schema.names:
        if name not in known:
            raise ShardError(f"{path}, column {name!r}: not a column of generation {generation}")
    rows = 0
    for rg in range(pf.num_row_groups):
        for name in schema.names:
            try:
                table = read_row_group(pf, rg, [name])
            except Exception as exc:
                raise ShardError(f"{path}, row group {rg}, column {name!r}: cannot be decoded ({exc})") from None
            if name == "text" and table.column(0).null_count:
                raise ShardError(f"{path}, row group {rg}, column 'text': nulls in a required column")
        rows += pf.metadata.row_group(rg).num_rows
    if expected_rows is not None and rows != expected_rows:
        raise ShardError(f"{path}: {rows} rows, manifest says {expected_rows}")


def _damage(path: Path) -> str:
    """Where a damaged Parquet file's first damage is, as " (first damage: ...)", or "" (not Parquet, or not found)."""
    where = _locate_corruption(path) if path.suffix == ".parquet" else None
    return f" (first damage: {where})" if where else ""


def validate_build(build_dir: Path) -> dict:
    """Validate a sealed build; returns counts on success, raises ShardError on the first problem."""
    build_dir = require_complete(Path(build_dir))
    try:
        manifest = load_manifest(build_dir)
    except ValueError as exc:
        raise ShardError(str(exc)) from None
    generation = manifest["schema_generation"]
    shards = rows = 0
    for i, entry in enumerate(manifest["files"]):
        missing = [k for k in ("path", "bytes", "sha256") if k not in entry]
        if missing:
            raise ShardError(f"{build_dir / 'manifest.json'}: files[{i}] lacks {missing}")
        if not isinstance(entry["path"], str) or not _inside(build_dir, entry["path"]):
            raise ShardError(f"{build_dir / 'manifest.json'}: files[{i}] path {entry['path']!r} is not a file "
                             f"inside the build")
        path = build_dir / entry["path"]
        if not path.is_file():
            raise ShardError(f"{path}: listed in the manifest but missing")

        size = path.stat().st_size
        if size != entry["bytes"]:
            raise ShardError(f"{path}: {size} bytes, manifest says {entry['bytes']}{_damage(path)}")
        digest = sha256_file(path)
        if digest != entry["sha256"]:
            raise ShardError(f"{path}: SHA-256 {digest[:16]}..., manifest says {entry['sha256'][:16]}..."
                             f"{_damage(path)}")
        if entry.get("kind") == "shard":
            check_shard(path, generation, entry.get("rows"))
            shards += 1
            rows += entry.get("rows") or 0
    summary = build_dir / "reports" / "summary.json"
    if manifest.get("summary_sha256") is not None:  # builds of earlier revisions of cpp-data do not record it
        if not summary.is_file():
            raise ShardError(f"{summary}: missing (the manifest records its SHA-256)")
        digest = sha256_file(summary)
        if digest != manifest["summary_sha256"]:
            raise ShardError(f"{summary}: SHA-256 {digest[:16]}..., manifest says {manifest['summary_sha256'][:16]}...")
    listed = {Path(e["path"]).as_posix() for e in manifest["files"]} | BUILD_FILES
    for path in sorted(p for p in build_dir.rglob("*") if not p.is_dir()):
        rel = path.relative_to(build_dir).as_posix()
        if rel not in listed:
            raise ShardError(f"{path}: in the build but not in its manifest (added after it was published? "
                             f"remove it, or build again)")
    return {"files": len(manifest["files"]), "shards": shards, "rows": rows, "generation": generation}


def _inside(build_dir: Path, rel: str) -> bool:
    """Whether the manifest path `rel` names a place inside `build_dir`: relative, and no `..` leaves it."""
    path = Path(rel)
    if path.is_absolute() or not rel:
        return False
    return (build_dir / path).resolve().is_relative_to(build_dir.resolve())
