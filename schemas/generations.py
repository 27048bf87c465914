"""Shard schemas of the dataset generations v2..v6 (docs/DESIGN.md sections 7 and 9).

A generation is a schema axis, distinct from a build revision. Each generation lists its columns as
required or optional with the typed fill the tolerant reader uses when an optional column is absent.
Changes are additive only: a column name is never reused for a new meaning.

SCHEMA_REVISION counts changes to the column set shared by every generation; the manifest records it. A
column retired by a revision names its successor here (`formerly`), and the tolerant reader renames it when
it reads an older shard:
  1: the first revision (no `schema_revision` in the manifest);
  2: `sha256` (the normalized text's) became `text_sha256`, and `raw_sha256` (the file's bytes at the commit)
     joined it; the `constituents` structs of v4-v6 name their fields source_repo, source_commit, source_path
     (were repo, commit, path), as the ledger does (schemas/artifacts.LEDGER);
  3: the ledger's `confidence` became `license_confidence`, the shards' name for it (the shards are unchanged);
  4: every generation may carry `token_ids` (v2..v5 became trainable), and the length lanes' chunk columns
     (LANE_COLUMNS: chunk_index, chunk_count, chunk_kind, chunk_name, context_length, context_chars) joined
     every generation, filled only in the lanes' shards (schemas/lanes.py).

Per-character columns (``per_char=True``) are filled with one value per character of ``text``; per-token
columns (``per_token=True``) with one value per entry of ``token_ids`` (none when it is absent).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from cpp_data.schemas.provenance import (
    IDENTITY,
    LICENSE_CONFIDENCE,
    LICENSE_FAMILY,
    LICENSE_SOURCE,
    LICENSE_SPDX,
    RAW_SHA256,
    SIZE_BYTES,
    SOURCE_COMMIT,
    SOURCE_PATH,
    SOURCE_REPO,
    TEXT_SHA256,
)


@dataclass(frozen=True)
class Column:
    name: str
    type: pa.DataType
    required: bool = False
    fill: Any = None  # typed default for a missing optional column
    per_char: bool = False  # one value per character of `text`
    per_token: bool = False  # one value per entry of `token_ids`
    formerly: str | None = None  # the name an earlier schema revision gave this column


SCHEMA_REVISION = 4

# The categories of `structure_ids` (one per character of `text`; stages/lib/syntax.py paints them).
OTHER, PREAMBLE, FUNC_SIGNATURE, FUNC_BODY, CLASS_DECL, CLASS_MEMBER, COMMENT, TYPEDEF, NAMESPACE = range(9)
CATEGORY_NAMES = ("OTHER", "PREAMBLE", "FUNC_SIGNATURE", "FUNC_BODY", "CLASS_DECL", "CLASS_MEMBER", "COMMENT",
                  "TYPEDEF", "NAMESPACE")


_EDGE = pa.struct([("from", pa.int32()), ("to", pa.int32())])
_CHUNK = pa.struct(
    [
        ("start", pa.int32()),
        ("end", pa.int32()),
        ("kind", pa.string()),
        ("name", pa.string()),
        ("dep_level", pa.int32()),
    ]
)
_CONSTITUENT = pa.struct([*IDENTITY, ("start", pa.int32()), ("end", pa.int32()), LICENSE_SPDX])


def _provenance(field: pa.Field, fill: Any) -> Column:
    """A provenance column (schemas/provenance.py) as a generation's optional column with its typed fill."""
    return Column(field.name, field.type, fill=fill)


# Columns every file-level document of ours carries: provenance, license and the filter metadata.
_FILE_DOC = [
    Column("doc_id", pa.string(), fill=""),
    _provenance(SOURCE_REPO, ""),
    _provenance(SOURCE_COMMIT, ""),
    _provenance(SOURCE_PATH, ""),
    Column(TEXT_SHA256.name, TEXT_SHA256.type, fill="", formerly="sha256"),  # of the text as published
    _provenance(RAW_SHA256, ""),  # of the file's bytes at source_commit (the ledger's key)
    _provenance(LICENSE_SPDX, "NOASSERTION"),
    _provenance(LICENSE_SOURCE, "unknown"),
    _provenance(LICENSE_CONFIDENCE, 0.0),
    _provenance(LICENSE_FAMILY, "unknown"),
    _provenance(SIZE_BYTES, -1),
    Column("n_lines", pa.int32(), fill=-1),
    Column("max_line_length", pa.int32(), fill=-1),
    Column("unique_line_ratio", pa.float32(), fill=-1.0),
    Column("comment_share", pa.float32(), fill=-1.0),
    Column("byte_entropy", pa.float32(), fill=-1.0),
    Column("is_vendored", pa.bool_(), fill=False),
    Column("redactions", pa.int32(), fill=0),
]

_TEXT = Column("text", pa.string(), required=True)

# source_commit of a history document is the commit it belongs to; for a v2 "before" the text is as of
# parent_commit. `text_commit` names the commit the text was read at in both cases.
_HISTORY = [
    Column("parent_commit", pa.string(), fill=""),
    Column("author_time", pa.int64(), fill=-1),
    Column("commit_time", pa.int64(), fill=-1),
    Column("text_commit", pa.string(), fill=""),
    Column("change_type", pa.string(), fill=""),  # A added, M modified, D deleted, R renamed
    Column("rename_from", pa.string(), fill=""),
    Column("is_merge", pa.bool_(), fill=False),
]

_TOKEN_IDS = Column("token_ids", pa.list_(pa.int32()), fill=[])  # the build tokenizer's ids of `text`

# A row of a length lane (schemas/lanes.py) is a chunk of a document (or, in a file lane, a group of whole
# files): which chunk it is, what it holds, and its context prefix, which counts in the budget and carries no
# loss (`text[:context_chars]`, the first `context_length` of `token_ids`). Absent from whole-document shards.
LANE_COLUMNS = [
    Column("chunk_index", pa.int32(), fill=0),  # its place among its document's chunks
    Column("chunk_count", pa.int32(), fill=1),
    Column("chunk_kind", pa.string(), fill="file"),  # function, class, namespace_part, file, files, ...
    Column("chunk_name", pa.string(), fill=""),  # the qualified name of what it holds
    Column("context_length", pa.int32(), fill=0),  # tokens of the context prefix
    Column("context_chars", pa.int32(), fill=0),  # characters of the context prefix
]

GENERATIONS: dict[str, list[Column]] = {
    # v2: the file before and after each commit touching C/C++ code.
    "v2": [_TEXT, *_FILE_DOC, *_HISTORY, Column("side", pa.string(), fill="after"), _TOKEN_IDS, *LANE_COLUMNS],
    # v3: one document per commit and file, synthesized header + new code with removed lines as comments.
    "v3": [_TEXT, *_FILE_DOC, *_HISTORY, Column("header_style", pa.string(), fill="simple"), _TOKEN_IDS,
           *LANE_COLUMNS],
    # v4: tree-sitter context graph documents.
    "v4": [
        _TEXT,
        *_FILE_DOC,
        Column("target_name", pa.string(), fill=""),
        Column("n_callers", pa.int32(), fill=0),
        Column("n_callees", pa.int32(), fill=0),
        Column("constituents", pa.list_(_CONSTITUENT), fill=[]),
        _TOKEN_IDS,
        *LANE_COLUMNS,
    ],
    # v5: libclang dependency-ordered documents.
    "v5": [
        _TEXT,
        *_FILE_DOC,
        Column("target_name", pa.string(), fill=""),
        Column("max_dep_level", pa.int32(), fill=-1),
        Column("build_info", pa.string(), fill=""),
        Column("constituents", pa.list_(_CONSTITUENT), fill=[]),
        _TOKEN_IDS,
        *LANE_COLUMNS,
    ],
    # v6: enriched documents; `text` is the only required column.
    "v6": [
        _TEXT,
        *_FILE_DOC,
        Column("structure_ids", pa.list_(pa.uint8()), fill=0, per_char=True),
        Column("ast_depth", pa.list_(pa.int8()), fill=-1, per_char=True),
        Column("sibling_index", pa.list_(pa.int8()), fill=-1, per_char=True),
        Column("ast_node_type", pa.list_(pa.int16()), fill=-1, per_char=True),
        Column("dep_levels", pa.list_(pa.int8()), fill=-1, per_char=True),
        Column("chunk_boundaries", pa.list_(_CHUNK), fill=[]),
        Column("call_edges", pa.list_(_EDGE), fill=[]),
        Column("type_edges", pa.list_(_EDGE), fill=[]),
        Column("platform_info", pa.string(), fill=""),
        Column("language_info", pa.string(), fill=""),
        Column("build_info", pa.string(), fill=""),
        Column("constituents", pa.list_(_CONSTITUENT), fill=[]),
        # token level (docs/DESIGN.md section 7): the build tokenizer's ids and per-token mirrors of the character
        # columns, sampled at each token's first character
        _TOKEN_IDS,
        Column("token_structure_ids", pa.list_(pa.uint8()), fill=0, per_token=True),
        Column("token_ast_depth", pa.list_(pa.int8()), fill=-1, per_token=True),
        Column("token_sibling_index", pa.list_(pa.int8()), fill=-1, per_token=True),
        Column("token_ast_node_type", pa.list_(pa.int16()), fill=-1, per_token=True),
        Column("token_dep_levels", pa.list_(pa.int8()), fill=-1, per_token=True),
        *LANE_COLUMNS,
    ],
}


# What one document of a generation is, across builds (`cpp-data diff`): (what it is, the column that tells two
# documents of one path apart, or None where a path holds one document). A v2/v3 document is a version of a file
# (the commit its text was read at), a v4/v5 document a function (doc_id hashes its repository with its path and
# name, or with its libclang USR, so it holds across commits), a v6 document a file.
DOCUMENT_IDENTITY: dict[str, tuple[str, str | None]] = {
    "v2": ("file versions", "text_commit"),
    "v3": ("file versions", "text_commit"),
    "v4": ("functions", "doc_id"),
    "v5": ("functions", "doc_id"),
    "v6": ("files", None),
}


def columns(generation: str) -> list[Column]:
    """The columns of a generation; raises ValueError naming the known generations otherwise."""
    try:
        return GENERATIONS[generation]
    except KeyError:
        raise ValueError(f"unknown schema generation {generation!r}; known: {', '.join(sorted(GENERATIONS))}") from None


def full_schema(generation: str) -> pa.Schema:
    """The Arrow schema with every column of the generation (what the tolerant reader returns)."""
    return pa.schema([pa.field(c.name, c.type, nullable=not c.required) for c in columns(generation)])


def write_schema(generation: str, present: list[str]) -> pa.Schema:
    """The schema a writer uses when it fills only the columns in `present` (in generation order)."""
    cols = {c.name: c for c in columns(generation)}
    missing = [name for name in present if name not in cols]
    if missing:
        raise ValueError(f"columns {missing} are not part of generation {generation}")
    return pa.schema(
        [pa.field(c.name, c.type, nullable=not c.required) for c in columns(generation) if c.name in present]
    )
