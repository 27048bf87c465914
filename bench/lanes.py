"""Length lanes on a multi-repository corpus: per lane, documents, tokens, context share, documents per packed
row, slot use and the share of tokens in documents cut across rows, beside the whole-file documents packed at
4,096 tokens (what a build trained on before lanes). The issue's target: the 4k lane's cropped share <= 0.05.

The corpus: the default Debian corpus (sources/debian.toml) plus each --repo (a git repository, bare or not,
pinned at its HEAD; for example the snapshots `fetch` leaves under /work/.mirror/<owner>+<name>/repo). It runs
`cpp-data build --version v6` and `cpp-data export packed --seq-length 4096` of the whole documents, then reads
the lanes' records, the packed telemetry and the chunk rows (context tokens, cut levels).

    .venv/bin/python bench/lanes.py [--repo /work/.mirror/fmtlib+fmt/repo ...] [--work /tmp/lanes-bench]
        [--set semantics.configure=false ...] [--name lanes]

Writes bench/results/<name>.{json,md}.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.compute as pc
import pyarrow.parquet as pq

REPO = Path(__file__).resolve().parent.parent
CLI = [sys.executable, "-m", "cpp_data.pipeline.cli"]


def sources_file(repos: list[Path], work: Path) -> Path:
    text = (REPO / "sources" / "debian.toml").read_text()
    for r in repos:
        name = r.parent.name if r.name == "repo" else r.name
        text += f'\n[[source]]\nname = "{name.replace("+", "-").lower()}"\nurl = "{r}"\nref = "HEAD"\n'
    path = work / "sources.toml"
    path.write_text(text)
    return path


def lane_table(build: Path) -> list[dict]:
    """Per lane: what the build's summary and the lane rows say."""
    summary = json.loads((build / "reports" / "summary.json").read_text())
    rows = []
    for lane, rec in summary["lanes"].items():
        t = summary["packing"][lane]["train"]
        files = sorted((build / "lanes" / lane).glob("train-*.parquet"))
        cols = pq.read_table(files, columns=["context_length", "token_ids", "chunk_count"]) if files else None
        tokens = int(pc.sum(pc.list_value_length(cols.column("token_ids"))).as_py()) if cols else 0
        context = int(pc.sum(cols.column("context_length")).as_py() or 0) if cols else 0
        rows.append({"lane": lane, "kind": rec["kind"], "budget": rec["budget"], "documents": rec["splits"]["train"]
                     ["rows"], "tokens": rec["splits"]["train"]["tokens"],
                     "context_share": round(context / tokens, 4) if tokens else 0.0,
                     "rows": t["rows"], "docs_per_row": t["docs_per_row"], "slot_utilization": t["slot_utilization"],
                     "cropped_token_share": t["cropped_token_share"]})
    return sorted(rows, key=lambda r: r["budget"])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repo", type=Path, action="append", default=[], help="a git repository to add to the corpus")
    ap.add_argument("--work", type=Path, default=Path("/tmp/lanes-bench"))
    ap.add_argument("--set", action="append", default=[], metavar="STAGE.PARAM=VALUE",
                    help="a recipe override for the build, as `cpp-data build --set` takes it")
    ap.add_argument("--name", default="lanes")
    args = ap.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    sources = sources_file(args.repo, args.work)
    out = args.work / "out"
    t0 = time.monotonic()
    subprocess.run([*CLI, "build", "--version", "v6", "--sources", str(sources), "--out", str(out), "--no-progress",
                    *(a for kv in args.set for a in ("--set", kv))],
                   check=True, stdout=subprocess.DEVNULL)
    build_s = time.monotonic() - t0
    build = out / "builds" / (out / "builds" / "LATEST").read_text().strip()
    whole = args.work / "whole-4096"
    subprocess.run([*CLI, "export", "packed", str(build), "--seq-length", "4096", "--out", str(whole)],
                   check=True, stdout=subprocess.DEVNULL)
    t = json.loads((whole / "packed.json").read_text())["telemetry"]["train"]
    summary = json.loads((build / "reports" / "summary.json").read_text())
    stage = {s["stage"]: s for s in json.loads((build / "manifest.json").read_text())["stages"]}
    result = {
        "command": "python bench/lanes.py " + " ".join([*(f"--repo {r}" for r in args.repo),
                                                        *(f"--set {kv}" for kv in args.set)]),
        "build": build.name, "sources": summary["sources"], "documents": summary["documents"],
        "text_bytes": summary["text_bytes"], "build_seconds": round(build_s, 1),
        "lanes_stage_seconds": stage["lanes"]["seconds"],
        "whole_files_at_4096": {"documents": t["documents"], "tokens": t["tokens"], "rows": t["rows"],
                                "docs_per_row": t["docs_per_row"], "slot_utilization": t["slot_utilization"],
                                "cropped_token_share": t["cropped_token_share"]},
        "lanes": lane_table(build),
    }
    (REPO / "bench" / "results" / f"{args.name}.json").write_text(json.dumps(result, indent=2) + "\n")
    lines = [f"# Length lanes: {result['sources']} sources, {result['documents']:,} documents, "
             f"{result['text_bytes'] / 1e6:.1f} MB of text", "", f"`{result['command']}`", "",
             "| units | budget | documents | tokens | context share | packed rows | docs/row | slots used | "
             "cropped share |", "|---|---|---|---|---|---|---|---|---|"]
    w = result["whole_files_at_4096"]
    lines.append(f"| whole files, rows of 4,096 | - | {w['documents']:,} | {w['tokens']:,} | 0 | {w['rows']:,} | "
                 f"{w['docs_per_row']} | {w['slot_utilization']:.1%} | {w['cropped_token_share']:.3f} |")
    for r in result["lanes"]:
        lines.append(f"| lane {r['lane']} ({r['kind']}) | {r['budget']:,} | {r['documents']:,} | {r['tokens']:,} | "
                     f"{r['context_share']:.3f} | {r['rows']:,} | {r['docs_per_row']} | {r['slot_utilization']:.1%} | "
                     f"{r['cropped_token_share']:.3f} |")
    lines += ["", f"lanes stage: {result['lanes_stage_seconds']:.1f} s; whole build {result['build_seconds']:.0f} s."]
    (REPO / "bench" / "results" / f"{args.name}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
