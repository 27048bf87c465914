"""The provenance columns: one definition of each, shared by every table that carries them (the collected files,
rejections, documents, duplicates, the ledger, the shards).

A file is identified by IDENTITY (the source it came from, the commit it was read at, its path in the source); its
bytes by RAW_SHA256 and SIZE_BYTES, its normalized text by TEXT_SHA256; its license answer by LICENSE (the SPDX
expression, which step of the cascade gave it, how sure that step was), with LICENSE_EVIDENCE saying what it read.
Tables order these columns differently (their bytes depend on it), so a table composes its schema from the fields
it needs, in its own order; `row` builds a row's provenance from a document's metadata by these same names, so a
column cannot be spelled two ways.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

SOURCE_REPO = pa.field("source_repo", pa.string())
SOURCE_COMMIT = pa.field("source_commit", pa.string())
SOURCE_PATH = pa.field("source_path", pa.string())
RAW_SHA256 = pa.field("raw_sha256", pa.string())  # of the file's bytes at source_commit
TEXT_SHA256 = pa.field("text_sha256", pa.string())  # of the normalized, scrubbed text: the exact-dedup key
SIZE_BYTES = pa.field("size_bytes", pa.int64())
LICENSE_SPDX = pa.field("license_spdx", pa.string())
LICENSE_SOURCE = pa.field("license_source", pa.string())
LICENSE_CONFIDENCE = pa.field("license_confidence", pa.float32())
LICENSE_FAMILY = pa.field("license_family", pa.string())  # permissive | weak_copyleft | copyleft | unknown
LICENSE_EVIDENCE = pa.field("license_evidence", pa.string())  # the file(s) or rule that decided, and how

IDENTITY = (SOURCE_REPO, SOURCE_COMMIT, SOURCE_PATH)
LICENSE = (LICENSE_SPDX, LICENSE_SOURCE, LICENSE_CONFIDENCE)


def names(*fields: pa.Field) -> list[str]:
    """The column names of `fields`, in the order given."""
    return [f.name for f in fields]


def row(meta: dict[str, Any], *fields: pa.Field) -> dict[str, Any]:
    """{column: meta's value of it} for `fields` (None where meta has none)."""
    return {f.name: meta.get(f.name) for f in fields}
