"""Schemas of the intermediate artifacts that cross stage boundaries inside the cache.

Every stage writes Parquet with one of these schemas, so a stage can be rerun, inspected or replaced on its own.
"""

from __future__ import annotations

import pyarrow as pa

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
        ("source_repo", pa.string()),
        ("source_commit", pa.string()),
        ("source_path", pa.string()),
        ("size_bytes", pa.int64()),
        ("raw_sha256", pa.string()),  # of the file's bytes at the commit
        ("content", pa.binary()),
        ("history", HISTORY),
    ]
)

# collect: repository-level license texts (LICENSE*, COPYING*, LICENCE*) found anywhere in the tree.
LICENSE_FILE = pa.schema(
    [
        ("source_repo", pa.string()),
        ("source_path", pa.string()),
        ("content", pa.binary()),
        ("state", pa.string()),  # history walks: the tree state these files belong to; null at a pin
    ]
)

# One row per file that a stage set aside, with the rule that did it. Assembled into the provenance ledger.
REJECTION = pa.schema(
    [
        ("source_repo", pa.string()),
        ("source_commit", pa.string()),
        ("source_path", pa.string()),
        ("size_bytes", pa.int64()),
        ("raw_sha256", pa.string()),
        ("decision", pa.string()),  # skipped | filtered | license_refused
        ("reason", pa.string()),  # rule name, e.g. "max_line_length" or "license_not_allowed"
        ("license_spdx", pa.string()),
        ("license_source", pa.string()),
        ("license_confidence", pa.float32()),
        ("license_evidence", pa.string()),  # the file(s) or rule that decided the license, and how they combined
    ]
)

# A document of the per-document stages: decoded, with its license (license stage), then its quality signals,
# scrubbed text and dedup key (filter); a column a stage has not filled yet is null.
DOCUMENT = pa.schema(
    [
        ("source_repo", pa.string()),
        ("source_commit", pa.string()),
        ("source_path", pa.string()),
        ("text_sha256", pa.string()),  # of the normalized, scrubbed text: the exact-dedup key
        ("raw_sha256", pa.string()),  # of the file's bytes at its pinned commit (what the ledger identifies)
        ("text", pa.string()),
        ("size_bytes", pa.int64()),
        ("n_lines", pa.int32()),
        ("max_line_length", pa.int32()),
        ("unique_line_ratio", pa.float32()),
        ("comment_share", pa.float32()),
        ("byte_entropy", pa.float32()),
        ("is_vendored", pa.bool_()),
        ("redactions", pa.int32()),
        ("license_spdx", pa.string()),
        ("license_source", pa.string()),
        ("license_confidence", pa.float32()),
        ("license_family", pa.string()),  # permissive | weak_copyleft | copyleft | unknown
        ("license_evidence", pa.string()),
        ("history", HISTORY),
    ]
)

# exact dedup: one row per removed copy, with its keeper.
DUPLICATE = pa.schema(
    [
        ("source_repo", pa.string()),
        ("source_commit", pa.string()),
        ("source_path", pa.string()),
        ("text_sha256", pa.string()),  # normalized text (the cluster key)
        ("raw_sha256", pa.string()),  # the file at its pin
        ("size_bytes", pa.int64()),
        ("license_spdx", pa.string()),
        ("license_source", pa.string()),
        ("license_confidence", pa.float32()),
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
        ("source_repo", pa.string()),
        ("source_commit", pa.string()),
        ("source_path", pa.string()),
        ("raw_sha256", pa.string()),  # of the file's bytes at the pinned commit, for every row
        ("text_sha256", pa.string()),  # of the normalized, scrubbed text, where the file got that far
        ("size_bytes", pa.int64()),
        ("license_spdx", pa.string()),
        ("license_source", pa.string()),
        ("license_confidence", pa.float32()),
        ("decision", pa.string()),  # kept | skipped | filtered | license_refused | exact_duplicate | near_duplicate
        ("reason", pa.string()),
        ("keeper_repo", pa.string()),
        ("keeper_path", pa.string()),
        ("cluster_id", pa.string()),  # near duplicates: the cluster (keeper's key)
        ("similarity", pa.float32()),  # near duplicates: estimated Jaccard to the keeper
        ("license_evidence", pa.string()),  # what decided license_spdx: a tag, a notice, license file(s) and rule
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
    return {
        "source_repo": doc_meta.get("source_repo"),
        "source_commit": doc_meta.get("source_commit"),
        "source_path": doc_meta.get("source_path"),
        "size_bytes": doc_meta.get("size_bytes"),
        "raw_sha256": doc_meta.get("raw_sha256"),
        "decision": decision,
        "reason": reason,
        "license_spdx": doc_meta.get("license_spdx"),
        "license_source": doc_meta.get("license_source"),
        "license_confidence": doc_meta.get("license_confidence"),
        "license_evidence": doc_meta.get("license_evidence"),
    }
