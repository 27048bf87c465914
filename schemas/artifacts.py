"""Schemas of the intermediate artifacts that cross stage boundaries inside the cache.

Every stage writes Parquet with one of these schemas, so a stage can be rerun, inspected or replaced on its own.
"""

from __future__ import annotations

import pyarrow as pa

from cpp_data.schemas.provenance import (
    IDENTITY,
    LICENSE,
    LICENSE_EVIDENCE,
    LICENSE_FAMILY,
    RAW_SHA256,
    SIZE_BYTES,
    SOURCE_PATH,
    SOURCE_REPO,
    TEXT_SHA256,
    row,
)

# collect: one row per C/C++ file taken from a source at its pinned commit; content is the raw bytes.
# History versions (v2, v3): what a document of a commit walk carries besides its (repo, path, commit); null for
# a snapshot at the pin. `commit` of the row is the commit the text is read at (the parent, for a v2 "before").
HISTORY = pa.struct(
    [
        ("side", pa.string()),  # v2: before | after; v3: diff
        ("commit", pa.string()),  # the commit the document belongs to (changed the file)
        ("parent_commit", pa.string()),  # its first parent ("" for a root commit)
        ("author_time", pa.int64()),
        ("commit_time", pa.int64()),
        ("change", pa.string()),  # A added | M modified | D deleted | R renamed
        ("rename_from", pa.string()),
        ("is_merge", pa.bool_()),
        ("header_style", pa.string()),  # v3: doxygen | simple
        ("license_state", pa.string()),  # the LICENSE files of the tree at `commit` (license_files.state)
        ("lineage", pa.string()),  # the path the file had where the walk first saw it (renames followed)
    ]
)

COLLECTED_FILE = pa.schema(
    [
        *IDENTITY,
        SIZE_BYTES,
        RAW_SHA256,
        ("content", pa.binary()),
        ("history", HISTORY),
    ]
)

# collect: repository-level license texts (LICENSE*, COPYING*, LICENCE*) found anywhere in the tree.
LICENSE_FILE = pa.schema(
    [
        SOURCE_REPO,
        SOURCE_PATH,
        ("content", pa.binary()),
        ("state", pa.string()),  # history walks: the tree state these files belong to; null at a pin
    ]
)

# One row per file that a stage set aside, with the rule that did it. Assembled into the provenance ledger.
REJECTION = pa.schema(
    [
        *IDENTITY,
        SIZE_BYTES,
        RAW_SHA256,
        ("decision", pa.string()),  # skipped | filtered | license_refused
        ("reason", pa.string()),  # rule name, e.g. "max_line_length" or "license_not_allowed"
        *LICENSE,
        LICENSE_EVIDENCE,
    ]
)

# A document of the per-document stages: decoded, with its license (license stage), then its quality signals,
# scrubbed text and dedup key (filter); a column a stage has not filled yet is null.
DOCUMENT = pa.schema(
    [
        *IDENTITY,
        TEXT_SHA256,
        RAW_SHA256,
        ("text", pa.string()),
        SIZE_BYTES,
        ("n_lines", pa.int32()),
        ("max_line_length", pa.int32()),
        ("unique_line_ratio", pa.float32()),
        ("comment_share", pa.float32()),
        ("byte_entropy", pa.float32()),
        ("is_vendored", pa.bool_()),
        ("redactions", pa.int32()),
        *LICENSE,
        LICENSE_FAMILY,
        LICENSE_EVIDENCE,
        ("history", HISTORY),
    ]
)

# exact dedup: one row per removed copy, with its keeper.
DUPLICATE = pa.schema(
    [
        *IDENTITY,
        TEXT_SHA256,  # the cluster key
        RAW_SHA256,
        SIZE_BYTES,
        *LICENSE,
        ("keeper_repo", pa.string()),
        ("keeper_path", pa.string()),
        ("cluster_size", pa.int32()),
    ]
)

# The provenance ledger: one row per file seen, whatever happened to it. Field names are the shards' (one name
# per field in every table); builds before schema revision 2 named the first six repo, commit, path, sha256
# (the raw bytes'), text_sha256 and size, and schemas.reader.read_ledger renames them on reading.
LEDGER = pa.schema(
    [
        *IDENTITY,
        RAW_SHA256,  # for every row
        TEXT_SHA256,  # where the file got that far
        SIZE_BYTES,
        *LICENSE,
        ("decision", pa.string()),  # kept | skipped | filtered | license_refused | exact_duplicate | near_duplicate
        ("reason", pa.string()),
        ("keeper_repo", pa.string()),
        ("keeper_path", pa.string()),
        ("cluster_id", pa.string()),  # near duplicates: the cluster (keeper's key)
        ("similarity", pa.float32()),  # near duplicates: estimated Jaccard to the keeper
        LICENSE_EVIDENCE,
    ]
)

# What LEDGER's columns were called before schema revision 2.
LEDGER_RENAMED = {"repo": "source_repo", "commit": "source_commit", "path": "source_path", "sha256": "raw_sha256",
                  "size": "size_bytes", "confidence": "license_confidence"}


def rule_of(reason: str) -> str:
    """The rule of a ledger or rejection `reason`: the text before any `@` detail. A reason may carry where in
    the file its rule fired (`undecodable_utf8@14`, the first byte that is not UTF-8); counts by rule (the build
    summary's refused_by_rule, the report, `cpp-data diff`) use the rule alone, so that many files refused by
    one rule make one line, not one per offset."""
    return reason.split("@", 1)[0] if reason else reason


def rejection_row(doc_meta: dict, decision: str, reason: str) -> dict:
    """A REJECTION row from a document's metadata (missing fields become nulls)."""
    return {**row(doc_meta, *IDENTITY, SIZE_BYTES, RAW_SHA256), "decision": decision, "reason": reason,
            **row(doc_meta, *LICENSE, LICENSE_EVIDENCE)}
