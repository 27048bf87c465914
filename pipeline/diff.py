"""`cpp-data diff A B`: what changed between two builds, keyed by (repo, path) with the commit each side saw;
when either is of a history generation (v2, v3), whose documents are versions, by (repo, path, commit read at).

- documents: added (only in B), removed (only in A), changed (same repo and path, other text),
  license_changed (same text, another license decision), same_text_new_pin (same text, but the source's pin
  moved), unchanged, from the shards of each build (read through the tolerant reader);
- refusals: files whose ledger decision moved from kept (or absent) in A to a refusal in B, by decision and rule,
  and files refused in both under another rule in B (`refused_under_another_rule`, "A's -> B's");
- distributions: documents and text bytes per license and per repo, in A and in B;
- schema: generation of each build and shard columns added, removed or retyped (a build without shards, having
  no documents, has no columns to compare).
The per-document table and the others can be written as Parquet (`--tables DIR`) for DuckDB or pandas.
Memory holds one (repo, path) -> (commit, text_sha256) map per build: bounded by document count, not text.
Builds of an earlier schema revision are read under today's column names (schemas/reader.py).
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from cpp_data.schemas.artifacts import rule_of
from cpp_data.schemas.manifest import load_manifest
from cpp_data.schemas.reader import iter_build_shards, read_ledger, require_complete

_COLS = ["source_repo", "source_path", "source_commit", "text_sha256", "license_spdx", "size_bytes"]


HISTORY_GENERATIONS = ("v2", "v3")


def _documents(build: Path, versions: bool, history: bool) -> dict[tuple[str, str, str], tuple[str, str, str, int]]:
    """(repo, path, version) -> (source_commit, text_sha256, license_spdx, size_bytes). With `versions`, the
    version is the commit the text was read at: a history build's text_commit (a v2 "before" row reads at the
    parent, while its source_commit is the commit it belongs to), another build's source_commit."""
    docs = {}
    cols = _COLS + (["text_commit"] if versions and history else [])
    for table in iter_build_shards(build, columns_wanted=cols):
        for r, p, c, s, lic, n, *at in zip(*(table.column(x).to_pylist() for x in cols)):
            docs[(r, p, (at[0] if history else c) if versions else "")] = (c, s, lic, n)
    return docs


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


def diff_builds(a: Path, b: Path) -> dict[str, Any]:
    """Compare two sealed builds; returns the summary and the per-document rows."""
    a, b = require_complete(Path(a)), require_complete(Path(b))
    ma, mb = load_manifest(a), load_manifest(b)
    history_a = ma["schema_generation"] in HISTORY_GENERATIONS
    history_b = mb["schema_generation"] in HISTORY_GENERATIONS
    versions = history_a or history_b  # a history build holds several versions of a path: never fold them
    da, db = _documents(a, versions, history_a), _documents(b, versions, history_b)
    rows = []
    kinds: Counter = Counter()
    for key in sorted(da.keys() | db.keys()):
        old, new = da.get(key), db.get(key)
        if old is None:
            kind = "added"
        elif new is None:
            kind = "removed"
        elif old[1] != new[1]:
            kind = "changed"
        elif old[2] != new[2]:
            kind = "license_changed"  # the same text under another license decision
        elif old[0] != new[0]:
            kind = "same_text_new_pin"  # the source's pin moved, this document's text did not
        else:
            kind = "unchanged"
        kinds[kind] += 1
        rows.append({"source_repo": key[0], "source_path": key[1], "version": key[2], "change": kind,
                     "source_commit_a": old[0] if old else None, "source_commit_b": new[0] if new else None,
                     "text_sha256_a": old[1] if old else None, "text_sha256_b": new[1] if new else None,
                     "license_spdx_a": old[2] if old else None, "license_spdx_b": new[2] if new else None,
                     "size_bytes_a": old[3] if old else None, "size_bytes_b": new[3] if new else None})
    la, lb = _ledger(a, versions), _ledger(b, versions)
    refused: Counter = Counter()
    moved: Counter = Counter()  # refused in both builds, under another rule in B
    for key, (decision, reason) in lb.items():
        before, why = la.get(key, ("absent", ""))
        if decision != "kept" and before in ("kept", "absent"):
            refused[f"{decision}:{rule_of(reason)}"] += 1
        elif decision != "kept" and (before, rule_of(why)) != (decision, rule_of(reason)):
            moved[f"{before}:{rule_of(why)} -> {decision}:{rule_of(reason)}"] += 1

    def dist(docs: dict, field: int) -> dict[str, dict[str, int]]:
        out: dict[str, dict[str, int]] = {}
        for key, v in docs.items():
            name = v[field] if field >= 0 else key[0]
            slot = out.setdefault(name, {"documents": 0, "bytes": 0})
            slot["documents"] += 1
            slot["bytes"] += v[3] or 0
        return dict(sorted(out.items()))

    sa, sb = _schema(a, ma), _schema(b, mb)
    if not sa or not sb:  # a build without shards (no documents) has no columns to compare: not "all added"
        sa = sb = sa or sb
    return {
        "a": {"build": ma["build"], "generation": ma["schema_generation"], "documents": len(da)},
        "b": {"build": mb["build"], "generation": mb["schema_generation"], "documents": len(db)},
        "documents": {k: kinds.get(k, 0) for k in ("added", "removed", "changed", "license_changed",
                                                        "same_text_new_pin", "unchanged")},
        "newly_refused": dict(sorted(refused.items())),
        "refused_under_another_rule": dict(sorted(moved.items())),
        "licenses": {"a": dist(da, 2), "b": dist(db, 2)},
        "repos": {"a": dist(da, -1), "b": dist(db, -1)},
        "text_bytes": {"a": sum(v[3] or 0 for v in da.values()), "b": sum(v[3] or 0 for v in db.values())},
        "schema": {
            "generation": [ma["schema_generation"], mb["schema_generation"]],
            "revision": [ma.get("schema_revision", 1), mb.get("schema_revision", 1)],
            "columns_added": sorted(sb.keys() - sa.keys()),
            "columns_removed": sorted(sa.keys() - sb.keys()),
            "columns_retyped": sorted(k for k in sa.keys() & sb.keys() if sa[k] != sb[k]),
        },
        "_rows": rows,
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
    pq.write_table(pa.table({"rule": pa.array(list(result["newly_refused"]), pa.string()),  # typed when empty too
                             "files": pa.array(list(result["newly_refused"].values()), pa.int64())}), refusals)
    lic_rows = [{"license_spdx": lic, "side": side, "documents": v["documents"], "size_bytes": v["bytes"]}
                for side in ("a", "b") for lic, v in result["licenses"][side].items()]
    licenses = directory / "licenses.parquet"
    pq.write_table(pa.Table.from_pylist(lic_rows, schema=pa.schema([
        ("license_spdx", pa.string()), ("side", pa.string()), ("documents", pa.int64()), ("size_bytes", pa.int64())])),
        licenses)
    return [docs, refusals, licenses]


def render(result: dict[str, Any]) -> str:
    a, b, d = result["a"], result["b"], result["documents"]
    lines = [f"A {a['build']} ({a['generation']}, {a['documents']:,} documents)",
             f"B {b['build']} ({b['generation']}, {b['documents']:,} documents)", "",
             f"documents: +{d['added']:,} added, -{d['removed']:,} removed, ~{d['changed']:,} changed, "
             f"{d['license_changed']:,} same text under another license, "
             f"{d['same_text_new_pin']:,} same text under a new pin, {d['unchanged']:,} unchanged",
             f"text bytes: {result['text_bytes']['a']:,} -> {result['text_bytes']['b']:,}"]
    if result["refused_under_another_rule"]:
        lines.append("refused in both, under another rule in B:")
        lines += [f"  {change:<60} {n:,}" for change, n in result["refused_under_another_rule"].items()]
    if result["newly_refused"]:
        lines.append("newly refused in B:")
        lines += [f"  {rule:<40} {n:,}" for rule, n in result["newly_refused"].items()]
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
