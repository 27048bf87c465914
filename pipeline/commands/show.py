"""`cpp-data show`: sample documents of a build in the terminal, or as JSON for scripts.

Documents come in the build's manifest order (the seeded shuffle of the shards), filtered by repository and a
path glob; each shows its provenance (repo, path, commit, doc_id), license decision, size and tokens, and its
text with the structure spans tree-sitter labelled (v4+ builds): coloured by category in a terminal, listed as
line ranges otherwise. Columns are read through the tolerant reader, projected to what is shown.
"""

from __future__ import annotations

import fnmatch
import json
from pathlib import Path
from typing import Any

from cpp_data.pipeline.foundation.terminal_text import json_printable, printable
from cpp_data.schemas.generations import CATEGORY_NAMES
from cpp_data.schemas.provenance import LICENSE, SIZE_BYTES, SOURCE_COMMIT, SOURCE_PATH, SOURCE_REPO, names

BASE_COLUMNS = ["text", "doc_id", *names(SOURCE_REPO, SOURCE_PATH, SOURCE_COMMIT, *LICENSE, SIZE_BYTES)]
OPTIONAL = ["structure_ids", "token_ids"]
# ANSI colours per structure category (schemas/generations.CATEGORY_NAMES order); 0 (OTHER) stays plain
BODY = "\t\n"  # what a shown text body keeps of the characters `printable` escapes
_COLOURS = {1: "35", 2: "1;33", 3: "33", 4: "1;36", 5: "36", 6: "2;32", 7: "34", 8: "1;34"}


def spans(ids: list[int]) -> list[tuple[int, int, int]]:
    """Runs of one structure category over the characters: (start, end, category), end exclusive."""
    out: list[tuple[int, int, int]] = []
    for i, c in enumerate(ids):
        if out and out[-1][2] == c and out[-1][1] == i:
            out[-1] = (out[-1][0], i + 1, c)
        else:
            out.append((i, i + 1, c))
    return out


def sample_documents(build: Path, repo: str | None = None, path_glob: str | None = None, n: int = 3,
                     columns: list[str] | None = None) -> list[dict[str, Any]]:
    """The first `n` documents of the build matching `repo` and `path_glob`, as dicts of the shown columns."""
    from cpp_data.schemas.manifest import load_manifest
    from cpp_data.schemas.reader import iter_build_shards

    manifest = load_manifest(build)
    shard = next((f for f in manifest["files"] if f.get("kind") == "shard"), None)
    have = set()
    if shard:
        import pyarrow.parquet as pq

        have = set(pq.read_schema(build / shard["path"]).names)
    wanted = list(dict.fromkeys(BASE_COLUMNS + [c for c in OPTIONAL if c in have] + list(columns or [])))  # once each
    unknown = [c for c in (columns or []) if c not in have]
    if unknown:
        from cpp_data.pipeline.foundation.errors import BadInput

        raise BadInput(f"{build}: no column(s) {unknown} in its shards; it has: {', '.join(sorted(have))}")
    found: list[dict[str, Any]] = []
    for table in iter_build_shards(build, columns_wanted=wanted):
        for row in table.select([c for c in wanted if c in table.column_names]).to_pylist():
            if repo and row["source_repo"] != repo:
                continue
            if path_glob and not fnmatch.fnmatchcase(row["source_path"], path_glob):
                continue
            found.append(row)
            if len(found) >= n:
                return found
    return found


def as_json(doc: dict[str, Any]) -> dict[str, Any]:
    out = {k: v for k, v in doc.items() if k != "structure_ids"}
    if doc.get("structure_ids") is not None:
        names = CATEGORY_NAMES
        out["structure_spans"] = [{"start": a, "end": b, "category": names[c]}
                                  for a, b, c in spans(doc["structure_ids"]) if c]
    return out


def render(doc: dict[str, Any], colour: bool, max_lines: int = 40, extra: list[str] | None = None) -> str:
    names = CATEGORY_NAMES
    text = doc["text"]
    head = (f"── {printable(doc['source_repo'])}:{printable(doc['source_path'])}  "
            f"(doc {doc['doc_id']}, commit {doc['source_commit'][:12]})\n"
            f"   license {doc['license_spdx'] or 'none'} ({doc['license_source']}, confidence "
            f"{doc['license_confidence'] or 0:.2f}) · {doc['size_bytes']:,} bytes")
    if doc.get("token_ids") is not None:
        head += f" · {len(doc['token_ids']):,} tokens (first: {doc['token_ids'][:12]})"
    lines = [head]
    for column in extra or []:
        lines.append(f"   {column}: {doc.get(column)!r}"[:200])
    ids = doc.get("structure_ids")
    runs = spans(ids) if ids is not None else []
    if runs:
        counts: dict[int, int] = {}
        for _, _, c in runs:
            counts[c] = counts.get(c, 0) + 1
        lines.append("   structure: " + ", ".join(f"{names[c]} {n}" for c, n in sorted(counts.items()) if c))
    shown = "\n".join(text.split("\n")[:max_lines])
    if colour and runs:
        body = "".join(f"\x1b[{_COLOURS[c]}m{printable(shown[a:b], keep=BODY)}\x1b[0m" if c in _COLOURS
                       else printable(shown[a:b], keep=BODY) for a, b, c in runs if a < len(shown))
    else:
        body = printable(shown, keep=BODY)
    lines += [f"   {i + 1:>4} | {line}" for i, line in enumerate(body.split("\n"))]
    if text.count("\n") + 1 > max_lines:
        lines.append(f"   ... {text.count(chr(10)) + 1 - max_lines} more lines")
    if runs and not colour:  # no colour: the spans as line ranges
        starts = [0]
        for line in text.split("\n"):
            starts.append(starts[-1] + len(line) + 1)
        import bisect

        merged: list[tuple[int, int, int]] = []  # one category across whitespace between its runs
        for a, b, c in runs:
            if not c:
                continue
            if merged and merged[-1][2] == c and not text[merged[-1][1]:a].strip():
                merged[-1] = (merged[-1][0], b, c)
            else:
                merged.append((a, b, c))
        for a, b, c in merged:
            if b - a > 1:
                la, lb = bisect.bisect_right(starts, a), bisect.bisect_right(starts, b - 1)
                if la <= max_lines:
                    lines.append(f"   span {names[c]:<14} lines {la}-{lb}")
    return "\n".join(lines)


def dumps(docs: list[dict[str, Any]]) -> str:
    """The documents as JSON, non-ASCII text as it is but what `printable` escapes as \\u escapes (json.dumps
    escapes only the C0 controls), so the JSON printed to a terminal is as safe as the text view."""
    return json_printable(json.dumps([as_json(d) for d in docs], indent=2, ensure_ascii=False))
