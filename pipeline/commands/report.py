"""`cpp-data report BUILD`: one self-contained HTML page (inline SVG plots, no scripts, no network) about a
build, for a reader deciding whether to train on it.

First a table of the numbers: files seen, kept and refused by reason; licenses; exact and near duplicates;
documents; tokens; packing. Then plots that each answer a question (refusals by repository and reason, the
license mix by repository, document and token lengths, bytes per token by repository, near-duplicate cluster
sizes with the largest clusters' paths, semantic coverage by repository, stage times, packing efficiency), and
examples of refused and deduplicated files with their reasons and paths. Count axes use integers. Plots are
drawn with matplotlib (Agg) as SVG. A sealed build is never written into: the page goes to
OUT/reports/BUILD.html.
"""

from __future__ import annotations

import html
import io
import json
from collections import Counter, defaultdict
from pathlib import Path

from cpp_data.pipeline.foundation.errors import BadInput
from cpp_data.pipeline.foundation.fsutil import atomic_write_text
from cpp_data.pipeline.foundation.terminal_text import printable
from cpp_data.schemas.artifacts import rule_of
from cpp_data.schemas.manifest import load_manifest
from cpp_data.schemas.reader import iter_build_shards, read_ledger, require_complete

DUPLICATES = ("exact_duplicate", "near_duplicate")
EXAMPLES = 12  # rows per example table


def _svg(fig) -> str:
    buf = io.StringIO()
    fig.savefig(buf, format="svg", bbox_inches="tight")
    import matplotlib.pyplot as plt

    plt.close(fig)
    text = buf.getvalue()
    return text[text.index("<svg"):]


def _integer_axis(axis) -> None:
    from matplotlib.ticker import MaxNLocator

    axis.set_major_locator(MaxNLocator(integer=True))


def _bar(labels: list[str], values: list[float], title: str, xlabel: str, counts: bool = True) -> str:
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 0.35 * max(3, len(labels)) + 1))
    ax.barh(range(len(labels)), values, color="#4c72b0")
    ax.set_yticks(range(len(labels)), labels, fontsize=8)
    ax.invert_yaxis()
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    if counts:
        _integer_axis(ax.xaxis)
    return _svg(fig)


def _stacked(rows: list[str], parts: list[str], counts: dict, title: str, xlabel: str) -> str:
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 0.5 * max(3, len(rows)) + 1))
    left = [0] * len(rows)
    for part in parts:
        vals = [counts.get((r, part), 0) for r in rows]
        ax.barh(rows, vals, left=left, label=part)
        left = [a + b for a, b in zip(left, vals)]
    ax.invert_yaxis()
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    _integer_axis(ax.xaxis)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1))
    return _svg(fig)


def _hists(series: list[tuple[list[float], str]], title: str) -> str:
    """Side-by-side histograms on log-spaced bins (lengths span orders of magnitude)."""
    import matplotlib.pyplot as plt
    import numpy as np

    fig, axes = plt.subplots(1, len(series), figsize=(4.2 * len(series), 3))
    for ax, (values, xlabel) in zip(np.atleast_1d(axes), series):
        data = np.asarray(values, dtype=float)
        bins = np.logspace(np.log10(max(1, data.min())), np.log10(max(2, data.max())), 40)
        ax.hist(data, bins=bins, color="#55a868")
        ax.set_xscale("log")
        ax.set_xlabel(xlabel)
        ax.set_ylabel("documents")
        _integer_axis(ax.yaxis)
    fig.suptitle(title)
    return _svg(fig)


def _table(header: list[str], rows: list[list], cls: str = "") -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{c if isinstance(c, _Raw) else html.escape(printable(str(c)))}</td>"
                                    for c in r) + "</tr>" for r in rows)
    return f"<table{f' class={cls!r}' if cls else ''}><tr>{head}</tr>{body}</table>"


class _Raw(str):
    """Table cell content that is already HTML."""


def _n(x: float) -> str:
    return f"{x:,.0f}" if float(x).is_integer() else f"{x:,.2f}"


def _numbers(summary: dict, manifest: dict, ledger: list[dict]) -> str:
    decisions = Counter(r["decision"] for r in ledger)
    rows = [["files seen", _n(len(ledger))], ["kept", _n(decisions.get("kept", 0))]]
    refused = Counter((r["decision"], rule_of(r["reason"])) for r in ledger
                      if r["decision"] not in ("kept", *DUPLICATES))
    rows += [[_Raw(f"&nbsp;&nbsp;refused: {html.escape(d)} / {html.escape(str(why))}"), _n(n)]
             for (d, why), n in sorted(refused.items(), key=lambda x: (-x[1], x[0]))]
    rows += [["exact duplicates removed", f"{_n(summary.get('exact_duplicates', 0))} "
              f"({summary.get('exact_duplicate_bytes', 0) / 1e6:.1f} MB)"],
             ["near duplicates removed", f"{_n(summary.get('near_duplicates', 0))} in "
              f"{_n(summary.get('near_duplicate_clusters', 0))} clusters "
              f"({summary.get('near_duplicate_bytes', 0) / 1e6:.1f} MB)"]]
    licenses = Counter(r["license_spdx"] or "none" for r in ledger if r["decision"] == "kept")
    rows += [["licenses of kept files", ", ".join(f"{k} {_n(v)}" for k, v in licenses.most_common())]]
    totals = manifest.get("totals", {})
    rows += [["documents", f"{_n(totals.get('documents', 0))} (train {_n(totals.get('train_documents', 0))}, "
              f"validation {_n(totals.get('valid_documents', 0))})"],
             ["text", f"{totals.get('text_bytes', 0) / 1e6:.1f} MB"]]
    if summary.get("tokens"):
        rows.append(["tokens", f"{_n(summary['tokens'])} ({totals.get('text_bytes', 0) / summary['tokens']:.2f} "
                               f"bytes per token; vocabulary {_n(summary.get('tokenizer_vocab_size') or 0)})"])
    for lane, rec in (summary.get("lanes") or {}).items():
        t = (summary.get("packing") or {}).get(lane, {}).get("train")
        rows.append([f"lane {lane} ({rec['kind']})", f"{_n(rec['splits']['train']['rows'])} training documents, "
                     f"{_n(rec['splits']['train']['tokens'])} tokens"
                     + (f"; {_n(t['rows'])} rows of {_n(rec['seq_length'])}, {t['slot_utilization']:.1%} of slots "
                        f"used, {t['docs_per_row']:.2f} documents per row" if t else "")])
    return _table(["what", "how many"], rows, "numbers")


def _refusals_by_repo(ledger: list[dict]) -> str:
    counts = Counter((r["source_repo"], f"{r['decision']}: {rule_of(r['reason'])}") for r in ledger
                     if r["decision"] != "kept")
    if not counts:
        return "<p>Every file seen was kept.</p>"
    repos = sorted({r for r, _ in counts})
    reasons = [k for k, _ in Counter(reason for _, reason in counts.elements()).most_common()]
    return _stacked(repos, reasons, counts, "files set aside, by repository and reason", "files")


def _bytes_per_token(per_repo: dict[str, list[int]]) -> str:
    repos = sorted(per_repo, key=lambda r: per_repo[r][0] / max(1, per_repo[r][1]))
    values = [per_repo[r][0] / max(1, per_repo[r][1]) for r in repos]
    return (_bar(repos, [round(v, 3) for v in values], "bytes of text per token, by repository (higher: the "
                 "tokenizer compresses this code better)", "bytes per token", counts=False)
            + _table(["repository", "bytes", "tokens", "bytes per token"],
                     [[r, _n(per_repo[r][0]), _n(per_repo[r][1]), f"{v:.2f}"] for r, v in zip(repos, values)]))


def _clusters(ledger: list[dict]) -> str:
    members: dict[tuple, list[dict]] = defaultdict(list)
    for r in ledger:
        if r["decision"] in DUPLICATES:
            members[(r["decision"], r["keeper_repo"], r["keeper_path"])].append(r)
    if not members:
        return "<p>No file was a duplicate of another.</p>"
    sizes = Counter(len(v) + 1 for v in members.values())  # + the kept copy
    plot = _bar([f"{k} files" for k in sorted(sizes)], [sizes[k] for k in sorted(sizes)],
                "duplicate clusters, by files per cluster", "clusters")
    largest = sorted(members.items(), key=lambda kv: (-len(kv[1]), kv[0]))[:EXAMPLES]
    rows = []
    for (decision, krepo, kpath), rs in largest:
        shown = ", ".join(f"{m['source_repo']}:{m['source_path']}" for m in rs[:3])
        shown += f", … {len(rs) - 3} more" if len(rs) > 3 else ""
        sim = [m["similarity"] for m in rs if m.get("similarity") is not None]
        rows.append([decision.replace("_", " "), len(rs) + 1, f"{krepo}:{kpath}", shown,
                     f"{min(sim):.2f}" if sim else "1.00"])
    return plot + _table(["kind", "files", "kept copy", "removed copies", "lowest similarity"], rows)


def _coverage(coverage: dict) -> str:
    """Semantic-index coverage by repository: files indexed by libclang against files left to tree-sitter, and
    where each compile database came from."""
    if not coverage:
        return "<p>This build's recipe has no libclang stage (schema generations v2 and v3).</p>"
    repos = sorted(coverage)
    counts = {}
    for r in repos:
        counts[(r, "indexed by libclang")] = coverage[r].get("files_indexed", 0)
        counts[(r, "tree-sitter only")] = coverage[r].get("files_fallen_back_to_tree_sitter", 0)
    rows = [[r, c.get("database"), f"{c.get('tus_clean', 0)}/{c.get('tus', 0)}", c.get("database_reason", "")]
            for r, c in sorted(coverage.items())]
    return (_stacked(repos, ["indexed by libclang", "tree-sitter only"], counts, "files by semantic layer", "files")
            + _table(["repository", "database", "TUs clean", "why"], rows))


def _packing(summary: dict) -> str:
    """Per lane and split: rows, slots used, documents per row, tokens in documents cut across rows."""
    packing = summary.get("packing") or {}
    if not packing:
        return "<p>This build packs no rows.</p>"
    import matplotlib.pyplot as plt

    keys = [(lane, s) for lane, splits in packing.items() for s in splits]
    fig, ax = plt.subplots(figsize=(8, 0.4 * len(keys) + 1.2))
    ax.barh([f"{lane} {s}" for lane, s in keys], [packing[lane][s]["slot_utilization"] * 100 for lane, s in keys],
            color="#8172b2")
    ax.set_xlim(0, 100)
    ax.set_xlabel("% of token slots holding document tokens (the rest is EOD padding)")
    ax.set_title("packing efficiency, by lane and split")
    rows = [[lane, s, _n(t["rows"]), f"{t['slot_utilization']:.1%}", f"{t['docs_per_row']:.2f}",
             f"{t['cropped_token_share']:.1%}", _n(t["fim_documents"])]
            for lane, splits in packing.items() for s, t in splits.items()]
    return _svg(fig) + _table(["lane", "split", "rows", "slots used", "documents per row",
                               "tokens in split documents", "FIM documents (epoch 0)"], rows)


def _examples(ledger: list[dict]) -> str:
    refused = [r for r in ledger if r["decision"] not in ("kept", *DUPLICATES)]
    dups = [r for r in ledger if r["decision"] in DUPLICATES]
    parts = []
    if refused:  # a few of each reason, so rare reasons show too
        by_reason: dict = defaultdict(list)
        for r in refused:
            by_reason[(r["decision"], rule_of(r["reason"]))].append(r)
        picked = [r for rs in by_reason.values() for r in rs[:3]][:EXAMPLES]
        parts.append("<h3>Refused</h3>" + _table(["file", "decision", "reason", "license", "evidence"], [
            [f"{r['source_repo']}:{r['source_path']}", r["decision"], r["reason"], r["license_spdx"] or "",
             (r.get("license_evidence") or "")[:120]] for r in picked]))
    else:
        parts.append("<p>No file was refused.</p>")
    if dups:
        parts.append("<h3>Deduplicated</h3>" + _table(["file", "decision", "kept copy", "similarity"], [
            [f"{r['source_repo']}:{r['source_path']}", r["decision"], f"{r['keeper_repo']}:{r['keeper_path']}",
             f"{r['similarity']:.2f}" if r.get("similarity") is not None else "1.00"] for r in dups[:EXAMPLES]]))
    return "".join(parts)


def default_report_path(build: Path) -> Path:
    """OUT/reports/BUILD.html, beside the builds, never inside a sealed one."""
    return Path(build).parent.parent / "reports" / f"{Path(build).name}.html"


def build_report(build: Path, out: Path | None = None) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    build = require_complete(Path(build))
    manifest = load_manifest(build)
    summary_file = build / "reports" / "summary.json"
    try:
        summary = json.loads(summary_file.read_text()) if summary_file.is_file() else {}
    except (ValueError, UnicodeDecodeError) as exc:
        raise BadInput(f"{summary_file}: not valid JSON ({exc}); `cpp-data validate` checks the build") from None
    ledger = read_ledger(build / "provenance" / "ledger.parquet").to_pylist()
    kept = [r for r in ledger if r["decision"] == "kept"]
    lic_counts = Counter((r["source_repo"], r["license_spdx"] or "none") for r in kept)
    repos = sorted({r for r, _ in lic_counts})
    licenses = [lic for lic, _ in Counter(r["license_spdx"] or "none" for r in kept).most_common()]
    lengths, token_counts = [], []
    per_repo: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    tokenized = bool(manifest.get("tokenizer"))
    wanted = ["size_bytes", "source_repo", "token_ids"] if tokenized else ["size_bytes", "source_repo"]
    for t in iter_build_shards(build, columns_wanted=wanted):
        sizes = t.column("size_bytes").to_pylist()
        lengths += sizes
        if tokenized:
            n_tokens = [len(ids or ()) for ids in t.column("token_ids").to_pylist()]
            token_counts += n_tokens
            for repo, size, n in zip(t.column("source_repo").to_pylist(), sizes, n_tokens):
                per_repo[repo][0] += size
                per_repo[repo][1] += n
    stage_s: Counter = Counter()
    for st in manifest["stages"]:
        stage_s[st["stage"]] += st.get("seconds") or 0
    lengths_plot = _hists([(lengths, "bytes")] + ([(token_counts, "tokens")] if token_counts else []),
                          "document lengths" + (" in bytes and in tokens" if token_counts else " in bytes")) \
        if lengths else "<p>The build has no documents.</p>"
    sections = [
        ("The numbers", _numbers(summary, manifest, ledger)),
        ("Which files were set aside, where and why", _refusals_by_repo(ledger)),
        ("The license mix by repository", _stacked(repos, licenses, lic_counts, "kept files by license",
                                                   "files") if kept else "<p>No file was kept.</p>"),
        ("Document and token lengths", lengths_plot),
        ("How well the tokenizer compresses each repository", _bytes_per_token(per_repo) if per_repo else
         "<p>This build's recipe has no tokenizer stage (schema generations v2 to v5).</p>"),
        ("Duplicate clusters", _clusters(ledger)),
        ("Semantic coverage by repository", _coverage(manifest.get("semantic_coverage") or {})),
        ("Where the build's time went", _bar(list(stage_s), [round(v, 2) for v in stage_s.values()],
                                             "seconds per stage (summed over sources)", "seconds", counts=False)),
        ("Packing efficiency", _packing(summary)),
        ("Examples of refused and deduplicated files", _examples(ledger)),
    ]
    pins = _table(["source", "ref", "commit", "url", "license (sources file)"],
                  [[s["name"], s.get("requested_ref") or "-", _Raw(f"<code>{html.escape(s['commit'][:23])}</code>"),
                    s["url"], s.get("license") or "detected"] for s in manifest["sources"]])
    body = "".join(f"<section><h2>{html.escape(t)}</h2>{content}</section>" for t, content in sections)
    totals = manifest.get("totals", {})
    page = f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>cpp-data report: {html.escape(manifest['build'])}</title>
<style>body{{font-family:sans-serif;max-width:62em;margin:2em
auto;color:#222}}table{{border-collapse:collapse;margin:.6em 0}}
td,th{{border:1px solid #ccc;padding:.2em .5em;font-size:.85em;text-align:left}}section{{margin:2em 0}}
svg{{max-width:100%;height:auto}}table.numbers td:last-child{{font-variant-numeric:tabular-nums}}</style>
</head><body>
<h1>cpp-data build {html.escape(manifest['build'])}</h1>
<p>schema {html.escape(manifest['schema_generation'])}, created {html.escape(manifest['created_at'])},
cpp-data {html.escape(manifest['cpp_data_version'])}, build fingerprint
<code>{html.escape(manifest['build_fingerprint'][:16])}</code>.</p>
{pins}
{body}
<script type="application/json" id="summary">{html.escape(json.dumps(totals))}</script>
</body></html>
"""
    out = Path(out) if out else default_report_path(build)
    atomic_write_text(out, page)
    return out
