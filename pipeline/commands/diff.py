"""`cpp-data diff A B`: what changed between two builds, document by document, where a document is what its
generation says one is (schemas/generations.DOCUMENT_IDENTITY): a file for v6, keyed by (repo, path) with the commit
each
side saw; a version of a file for v2/v3, by (repo, path, commit read at); a function for v4/v5, by (repo, path,
doc_id). Builds whose documents are different things (v4 functions against v6 files) are compared all the same,
and the result says so (`comparable`: false): no document of one is a document of the other.

- documents: added (only in B), removed (only in A), changed (same repo and path, other text),
  license_changed (same text, another license decision), same_text_new_pin (same text, but the source's pin
  moved), unchanged, from the shards of each build (read through the tolerant reader);
- refusals: files whose ledger decision moved from kept (or absent) in A to a refusal in B, by decision and rule,
  and files refused in both under another rule in B (`refused_under_another_rule`, "A's -> B's"), each file
  with its path in refusals.parquet and the first few in the text output;
- distributions: documents and text bytes per license and per repo, in A and in B;
- schema: generation of each build and shard columns added, removed or retyped (a build without shards, having
  no documents, has no columns to compare).
The per-document table and the others can be written as Parquet (`--tables DIR`) for DuckDB or pandas.
Memory holds one (repo, path) -> (commit, text_sha256) map per build: bounded by document count, not text.
Builds of an earlier schema revision are read under the current column names (schemas/reader.py).
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from cpp_data.schemas.artifacts import rule_of
from cpp_data.schemas.generations import DOCUMENT_IDENTITY
from cpp_data.schemas.manifest import load_manifest
from cpp_data.schemas.reader import iter_build_shards, read_ledger, require_complete

_COLS = ["source_repo", "source_path", "source_commit", "text_sha256", "license_spdx", "size_bytes"]
SHOWN = 10  # paths listed per kind of change in the text output; the rest are counted


def _version_column(generation: str, other: str) -> str | None:
    """The column that tells apart documents of one path in `generation` (schemas/generations.DOCUMENT_IDENTITY),
    against
    a build of `other`: a file compared with versions of files is compared at the commit it was read at."""
    column = DOCUMENT_IDENTITY[generation][1]
    if column is None and DOCUMENT_IDENTITY[other][1] == "text_commit":
        return "source_commit"
    return column


def _documents(build: Path, version: str | None) -> tuple[dict[tuple[str, str, str], tuple[str, str, str, int]], int]:
    """((repo, path, version) -> (source_commit, text_sha256, license_spdx, size_bytes), documents read). The
    version is the value of the generation's identity column (`version`), "" where a path holds one document."""
    docs = {}
    read = 0
    cols = _COLS + ([version] if version and version not in _COLS else [])
    for table in iter_build_shards(build, columns_wanted=cols):
        read += table.num_rows
        values = {x: table.column(x).to_pylist() for x in cols}
        versions = values[version] if version else [""] * table.num_rows
        for r, p, c, s, lic, n, v in zip(*(values[x] for x in _COLS), versions):
            docs[(r, p, v)] = (c, s, lic, n)
    return docs, read


def _ledger(build: Path, versions: bool) -> dict[tuple[str, str, str], tuple[str, str]]:
    path = build / "provenance" / "ledger.parquet"
    if not path.is_file():
        return {}
    t = read_ledger(path, ["source_repo", "source_path", "source_commit", "decision", "reason"])
    return {(r, p, c if versions else ""): (d, why)
            for r, p, c, d, why in zip(*(t.column(x).to_pylist() for x in t.column_names))}


def _schema(build: Path, manifest: dict) -> dict[str, str]:
    for entry in manifest["files"]:
        if entry.get("kind") == "shard":
            return {f.name: str(f.type) for f in pq.read_schema(build / entry["path"])}
    return {}


def _refusals(la: dict, lb: dict) -> tuple[list[dict], Counter, Counter]:
    """Files refused in B that A kept (or did not have), and files refused in both under another rule: one row
    each (repo, path, commit, A's decision and rule, B's), and the counts by B's rule and by the move."""
    rows: list[dict] = []
    refused: Counter = Counter()
    moved: Counter = Counter()  # refused in both builds, under another rule in B
    for key, (decision, reason) in sorted(lb.items()):
        before, why = la.get(key, ("absent", ""))
        was, now = f"{before}:{rule_of(why)}" if why else before, f"{decision}:{rule_of(reason)}"
        if decision == "kept" or (before, rule_of(why)) == (decision, rule_of(reason)):
            continue
        if before in ("kept", "absent"):
            refused[now] += 1
        else:
            moved[f"{was} -> {now}"] += 1
        rows.append({"source_repo": key[0], "source_path": key[1], "source_commit": key[2] or None,
                     "was": was, "now": now})
    return rows, refused, moved


def _change(old: tuple | None, new: tuple | None) -> str:
    if old is None:
        return "added"
    if new is None:
        return "removed"
    if old[1] != new[1]:
        return "changed"
    if old[2] != new[2]:
        return "license_changed"  # the same text under another license decision
    if old[0] != new[0]:
        return "same_text_new_pin"  # the source's pin moved, this document's text did not
    return "unchanged"


def _distribution(docs: dict, field: int) -> dict[str, dict[str, int]]:
    """Documents and text bytes per license (`field` 2) or per repository (-1)."""
    out: dict[str, dict[str, int]] = {}
    for key, v in docs.items():
        name = v[field] if field >= 0 else key[0]
        slot = out.setdefault(name, {"documents": 0, "bytes": 0})
        slot["documents"] += 1
        slot["bytes"] += v[3] or 0
    return dict(sorted(out.items()))


def _side(manifest: dict, documents: int, distinct: int) -> dict[str, Any]:
    generation = manifest["schema_generation"]
    side = {"build": manifest["build"], "generation": generation, "documents": documents,
            "identity": DOCUMENT_IDENTITY.get(generation, ("documents", None))[0]}
    if distinct != documents:  # two documents of one identity: the per-document counts see one of them
        side["documents_sharing_an_identity"] = documents - distinct
    return side


def diff_builds(a: Path, b: Path) -> dict[str, Any]:
    """Compare two sealed builds; returns the summary and the per-document rows."""
    a, b = require_complete(Path(a)), require_complete(Path(b))
    ma, mb = load_manifest(a), load_manifest(b)
    ga, gb = ma["schema_generation"], mb["schema_generation"]
    va, vb = _version_column(ga, gb), _version_column(gb, ga)
    (da, na), (db, nb) = _documents(a, va), _documents(b, vb)
    rows = []
    kinds: Counter = Counter()
    for key in sorted(da.keys() | db.keys()):
        old, new = da.get(key), db.get(key)
        kind = _change(old, new)
        kinds[kind] += 1
        rows.append({"source_repo": key[0], "source_path": key[1], "version": key[2], "change": kind,
                     "source_commit_a": old[0] if old else None, "source_commit_b": new[0] if new else None,
                     "text_sha256_a": old[1] if old else None, "text_sha256_b": new[1] if new else None,
                     "license_spdx_a": old[2] if old else None, "license_spdx_b": new[2] if new else None,
                     "size_bytes_a": old[3] if old else None, "size_bytes_b": new[3] if new else None})
    versions = "text_commit" in (va, vb) or "source_commit" in (va, vb)  # file versions: never fold commits
    refusal_rows, refused, moved = _refusals(_ledger(a, versions), _ledger(b, versions))
    sa, sb = _schema(a, ma), _schema(b, mb)
    if not sa or not sb:  # a build without shards (no documents) has no columns to compare: not "all added"
        sa = sb = sa or sb
    return {
        "a": _side(ma, na, len(da)),
        "b": _side(mb, nb, len(db)),
        "comparable": DOCUMENT_IDENTITY.get(ga, (None,))[0] == DOCUMENT_IDENTITY.get(gb, (None,))[0] or versions,
        "documents": {k: kinds.get(k, 0) for k in ("added", "removed", "changed", "license_changed",
                                                   "same_text_new_pin", "unchanged")},
        "newly_refused": dict(sorted(refused.items())),
        "refused_under_another_rule": dict(sorted(moved.items())),
        "licenses": {"a": _distribution(da, 2), "b": _distribution(db, 2)},
        "repos": {"a": _distribution(da, -1), "b": _distribution(db, -1)},
        "text_bytes": {"a": sum(v[3] or 0 for v in da.values()), "b": sum(v[3] or 0 for v in db.values())},
        "schema": {
            "generation": [ga, gb],
            "revision": [ma.get("schema_revision", 1), mb.get("schema_revision", 1)],
            "columns_added": sorted(sb.keys() - sa.keys()),
            "columns_removed": sorted(sa.keys() - sb.keys()),
            "columns_retyped": sorted(k for k in sa.keys() & sb.keys() if sa[k] != sb[k]),
        },
        "_rows": rows,
        "_refusals": refusal_rows,
    }


def write_tables(result: dict[str, Any], directory: Path) -> list[Path]:
    """documents.parquet, refusals.parquet, licenses.parquet: query them with DuckDB or pandas. Columns take the
    build's names (source_commit, text_sha256, license_spdx, size_bytes), with _a and _b for the two sides."""
    directory.mkdir(parents=True, exist_ok=True)
    docs = directory / "documents.parquet"
    pq.write_table(pa.Table.from_pylist(result["_rows"], schema=pa.schema([
        ("source_repo", pa.string()), ("source_path", pa.string()), ("version", pa.string()),
        ("change", pa.string()), ("source_commit_a", pa.string()), ("source_commit_b", pa.string()),
        ("text_sha256_a", pa.string()), ("text_sha256_b", pa.string()),
        ("license_spdx_a", pa.string()), ("license_spdx_b", pa.string()), ("size_bytes_a", pa.int64()),
        ("size_bytes_b", pa.int64()),
    ])), docs)
    refusals = directory / "refusals.parquet"
    pq.write_table(pa.Table.from_pylist(result["_refusals"], schema=pa.schema([
        ("source_repo", pa.string()), ("source_path", pa.string()), ("source_commit", pa.string()),
        ("was", pa.string()), ("now", pa.string())])), refusals)
    lic_rows = [{"license_spdx": lic, "side": side, "documents": v["documents"], "size_bytes": v["bytes"]}
                for side in ("a", "b") for lic, v in result["licenses"][side].items()]
    licenses = directory / "licenses.parquet"
    pq.write_table(pa.Table.from_pylist(lic_rows, schema=pa.schema([
        ("license_spdx", pa.string()), ("side", pa.string()), ("documents", pa.int64()), ("size_bytes", pa.int64())])),
        licenses)
    return [docs, refusals, licenses]


def _paths(rows: list[dict], label: str) -> list[str]:
    """`label` and the first SHOWN paths of `rows` (repo:path, with the version where there is one), then how
    many more."""
    if not rows:
        return []
    lines = [f"{label}:"]
    for r in rows[:SHOWN]:
        version = r.get("version") or ""
        lines.append(f"  {r['source_repo']}:{r['source_path']}" + (f" @{version[:12]}" if version else "")
                     + (f"  ({r['was']} -> {r['now']})" if "now" in r else ""))
    if len(rows) > SHOWN:
        lines.append(f"  ... and {len(rows) - SHOWN:,} more (--tables writes them all)")
    return lines


def render(result: dict[str, Any]) -> str:
    a, b, d = result["a"], result["b"], result["documents"]
    lines = [f"A {a['build']} ({a['generation']}, {a['documents']:,} documents: {a['identity']})",
             f"B {b['build']} ({b['generation']}, {b['documents']:,} documents: {b['identity']})", ""]
    if not result["comparable"]:
        lines += [f"A's documents are {a['identity']} and B's are {b['identity']}: no document of one is a document "
                  f"of the other, so every one counts as added or removed", ""]
    for side in (a, b):
        if side.get("documents_sharing_an_identity"):
            lines.append(f"{side['build']}: {side['documents_sharing_an_identity']:,} documents share an identity "
                         f"with another and are compared as one")
    lines += [f"documents: +{d['added']:,} added, -{d['removed']:,} removed, ~{d['changed']:,} changed, "
              f"{d['license_changed']:,} same text under another license, "
              f"{d['same_text_new_pin']:,} same text under a new pin, {d['unchanged']:,} unchanged",
              f"text bytes: {result['text_bytes']['a']:,} -> {result['text_bytes']['b']:,}"]
    rows = result.get("_rows", [])
    for kind in ("added", "removed", "changed", "license_changed"):
        lines += _paths([r for r in rows if r["change"] == kind], kind.replace("_", " "))
    if result["refused_under_another_rule"]:
        lines.append("refused in both, under another rule in B:")
        lines += [f"  {change:<60} {n:,}" for change, n in result["refused_under_another_rule"].items()]
    if result["newly_refused"]:
        lines.append("newly refused in B:")
        lines += [f"  {rule:<40} {n:,}" for rule, n in result["newly_refused"].items()]
    lines += _paths(result.get("_refusals", []), "files refused in B")
    lines.append("licenses (documents A -> B):")
    la, lb = result["licenses"]["a"], result["licenses"]["b"]
    for lic in sorted(la.keys() | lb.keys()):
        x, y = la.get(lic, {}).get("documents", 0), lb.get(lic, {}).get("documents", 0)
        lines.append(f"  {lic:<40} {x:>8,} -> {y:,}" + ("" if x == y else f"  ({y - x:+,})"))
    s = result["schema"]
    if s["generation"][0] != s["generation"][1] or s["columns_added"] or s["columns_removed"] or s["columns_retyped"]:
        lines.append(f"schema: {s['generation'][0]} (revision {s['revision'][0]}) -> {s['generation'][1]} (revision "
                     f"{s['revision'][1]}); added {s['columns_added']}, "
                     f"removed {s['columns_removed']}, retyped {s['columns_retyped']}")
    else:
        lines.append(f"schema: unchanged ({s['generation'][0]})")
    return "\n".join(lines)
