"""`cpp-data report BUILD`: one self-contained HTML page (inline SVG plots, no scripts, no network) about a
build: sources and pins, license distribution by repo, refusal reasons, duplicate cluster sizes, document
lengths, tokens per document, semantic-index coverage by repo and stage times. Plots are drawn with matplotlib
(Agg) and embedded as SVG. A sealed build is never written into: the page goes to OUT/reports/BUILD.html.
"""

from __future__ import annotations

import html
import io
import json
from collections import Counter
from pathlib import Path

import pyarrow.parquet as pq

from cpp_data.pipeline.fsutil import atomic_write_text
from cpp_data.schemas.manifest import load_manifest
from cpp_data.schemas.reader import iter_build_shards, require_complete


def _svg(fig) -> str:
    buf = io.StringIO()
    fig.savefig(buf, format="svg", bbox_inches="tight")
    import matplotlib.pyplot as plt

    plt.close(fig)
    text = buf.getvalue()
    return text[text.index("<svg"):]


def _bar(labels: list[str], values: list[float], title: str, xlabel: str) -> str:
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 0.35 * max(3, len(labels)) + 1))
    ax.barh(range(len(labels)), values, color="#4c72b0")
    ax.set_yticks(range(len(labels)), labels, fontsize=8)
    ax.invert_yaxis()
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    return _svg(fig)


def _stacked(repos: list[str], licenses: list[str], counts: dict, title: str, xlabel: str = "documents") -> str:
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 0.5 * max(3, len(repos)) + 1))
    left = [0] * len(repos)
    for lic in licenses:
        vals = [counts.get((r, lic), 0) for r in repos]
        ax.barh(repos, vals, left=left, label=lic)
        left = [a + b for a, b in zip(left, vals)]
    ax.invert_yaxis()
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1))
    return _svg(fig)


def _hist(values: list[float], title: str, xlabel: str, log: bool = False) -> str:
    import matplotlib.pyplot as plt
    import numpy as np

    fig, ax = plt.subplots(figsize=(8, 3))
    if values:
        data = np.asarray(values, dtype=float)
        bins = np.logspace(np.log10(max(1, data.min())), np.log10(max(2, data.max())), 40) if log else 40
        ax.hist(data, bins=bins, color="#55a868")
        if log:
            ax.set_xscale("log")
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    ax.set_ylabel("count")
    return _svg(fig)


def default_report_path(build: Path) -> Path:
    """OUT/reports/BUILD.html, beside the builds, never inside a sealed one."""
    return Path(build).parent.parent / "reports" / f"{Path(build).name}.html"


def _coverage(coverage: dict) -> str:
    """Semantic-index coverage by repository: files indexed by libclang against files left to tree-sitter, and
    where each compile database came from."""
    if not coverage:
        return "<p>This build's recipe has no libclang stage.</p>"
    repos = sorted(coverage)
    counts = {}
    for r in repos:
        counts[(r, "indexed by libclang")] = coverage[r].get("files_indexed", 0)
        counts[(r, "tree-sitter only")] = coverage[r].get("files_fallen_back_to_tree_sitter", 0)
    rows = "".join(f"<tr><td>{html.escape(r)}</td><td>{html.escape(str(c.get('database')))}</td>"
                   f"<td>{c.get('tus_clean', 0)}/{c.get('tus', 0)}</td>"
                   f"<td>{html.escape(str(c.get('database_reason', '')))}</td></tr>" for r, c in sorted(coverage.items()))
    return (_stacked(repos, ["indexed by libclang", "tree-sitter only"], counts, "files by semantic layer", "files")
            + f"<table><tr><th>repo</th><th>database</th><th>TUs clean</th><th>why</th></tr>{rows}</table>")


def build_report(build: Path, out: Path | None = None) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    build = require_complete(Path(build))
    manifest = load_manifest(build)
    ledger = pq.read_table(build / "provenance" / "ledger.parquet").to_pylist()
    kept = [r for r in ledger if r["decision"] == "kept"]
    lic_counts = Counter((r["repo"], r["license_spdx"]) for r in kept)
    repos = sorted({r for r, _ in lic_counts})
    licenses = [lic for lic, _ in Counter(r["license_spdx"] for r in kept).most_common()]
    refusals = Counter(f"{r['decision']}: {r['reason']}" for r in ledger if r["decision"] != "kept").most_common(25)
    clusters = Counter()
    for r in ledger:
        if r["decision"] in ("exact_duplicate", "near_duplicate"):
            clusters[(r["decision"], r["cluster_id"])] += 1
    sizes = [n + 1 for n in clusters.values()]  # + the kept copy
    lengths, token_counts = [], []
    wanted = ["size_bytes", "token_ids"] if manifest.get("tokenizer") else ["size_bytes"]
    for t in iter_build_shards(build, columns_wanted=wanted):
        lengths += t.column("size_bytes").to_pylist()
        if "token_ids" in t.column_names:
            token_counts += [len(ids or ()) for ids in t.column("token_ids").to_pylist()]
    stage_s: Counter = Counter()
    for st in manifest["stages"]:
        stage_s[st["stage"]] += st.get("seconds") or 0

    sections = [
        ("License distribution by repository", _stacked(repos, licenses, lic_counts, "kept documents by license")),
        ("Refusal reasons", _bar([k for k, _ in refusals], [v for _, v in refusals], "files set aside, by rule",
                                 "files") if refusals else "<p>No file was set aside.</p>"),
        ("Duplicate cluster sizes", _bar([f"{k} files" for k in sorted(Counter(sizes))],
                                         [Counter(sizes)[k] for k in sorted(Counter(sizes))],
                                         "exact and near duplicate clusters, by files per cluster", "clusters")
         if sizes else "<p>No duplicate clusters.</p>"),
        ("Document lengths", _hist(lengths, "documents by size", "bytes (log scale)", log=True)),
        ("Stage times", _bar(list(stage_s), [round(v, 2) for v in stage_s.values()], "seconds per stage",
                             "seconds")),
        ("Tokens per document", _hist(token_counts, "documents by tokens", "tokens (log scale)", log=True)
         if token_counts else "<p>This build's recipe has no tokenizer stage.</p>"),
        ("Semantic-index coverage", _coverage(manifest.get("semantic_coverage") or {})),
    ]
    totals = manifest.get("totals", {})
    pins = "".join(f"<tr><td>{html.escape(s['name'])}</td><td>{html.escape(s.get('requested_ref') or '-')}</td>"
                   f"<td><code>{html.escape(s['commit'][:23])}</code></td><td>{html.escape(s['url'])}</td></tr>"
                   for s in manifest["sources"])
    body = "".join(f"<section><h2>{html.escape(t)}</h2>{content}</section>" for t, content in sections)
    page = f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>cpp-data report: {html.escape(manifest['build'])}</title>
<style>body{{font-family:sans-serif;max-width:60em;margin:2em auto;color:#222}}table{{border-collapse:collapse}}
td,th{{border:1px solid #ccc;padding:.2em .5em;font-size:.9em}}section{{margin:2em 0}}svg{{max-width:100%;height:auto}}</style>
</head><body>
<h1>cpp-data build {html.escape(manifest['build'])}</h1>
<p>schema {html.escape(manifest['schema_generation'])}, created {html.escape(manifest['created_at'])},
cpp-data {html.escape(manifest['cpp_data_version'])}; {totals.get('documents', 0):,} documents
({totals.get('train_documents', 0):,} train, {totals.get('valid_documents', 0):,} valid),
{totals.get('text_bytes', 0) / 1e6:.1f} MB of text; {len(ledger):,} files seen.</p>
<table><tr><th>source</th><th>ref</th><th>commit</th><th>url</th></tr>{pins}</table>
{body}
<script type="application/json" id="summary">{html.escape(json.dumps(totals))}</script>
</body></html>
"""
    out = Path(out) if out else default_report_path(build)
    atomic_write_text(out, page)
    return out
