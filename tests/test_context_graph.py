"""v4 documents (issue 4): each function with its direct callees and callers from the tree-sitter call graph,
within the budget, every piece traceable to its file and character range."""

from __future__ import annotations

import glob
import json

import pyarrow.parquet as pq
import pytest
from conftest import GOOGLETEST, NLOHMANN, build_dir, data_digests, need, run_cli, write_sources

pytestmark = pytest.mark.slow  # full builds (pyproject.toml: markers)


def test_v4_context_documents(tmp_path):
    need(GOOGLETEST, NLOHMANN)
    sources = write_sources(tmp_path / "s.toml", [{"name": "googletest", "url": str(GOOGLETEST),
                                                   "license": "BSD-3-Clause", "configure": False},
                                                  {"name": "nlohmann-json", "url": str(NLOHMANN)}])
    out = tmp_path / "out"
    run_cli("build", "--version", "v4", "--sources", str(sources), "--out", str(out), "--workers", "2",
            "--no-progress")
    build = build_dir(out)
    # One repository per documents task and slices of 50 files, in the same output directory (only
    # context_graph runs again): the same bytes, since the work splits by repository and the documents come
    # back in shard order whatever the tasks
    run_cli("build", "--version", "v4", "--sources", str(sources), "--out", str(out), "--workers", "2",
            "--no-progress", "--set", "context_graph.group_bytes=1", "--set", "context_graph.rows_per_task=50")
    split_build = out / "builds" / (out / "builds" / "LATEST").read_text().strip()
    assert split_build != build and data_digests(split_build) == data_digests(build)
    stage = next(s for s in json.loads((split_build / "manifest.json").read_text())["stages"]
                 if s["stage"] == "context_graph")  # the manifest keeps every stage's counts
    assert stage["counts"]["tasks"]["documents"] == 2 and stage["counts"]["tasks"]["extract"] > 2, stage["counts"]
    run_cli("validate", str(build))
    spec = json.loads((build / "launch.json").read_text())  # v4 trains too: its own tokenizer, lanes, exports
    assert [p["lane"] for p in spec["phases"]] == ["4k", "16k", "64k"] and all(p["tokens"] for p in spec["phases"])
    rows = [r for f in sorted(glob.glob(str(build / "shards" / "*.parquet"))) for r in pq.read_table(f).to_pylist()]
    assert len(rows) > 1000
    # constituent ranges are character offsets into each file's normalized text (its file-level document)
    files = {r["source_path"]: r["text"] for f in glob.glob(str(out / "cache" / "structure" / "*" / "shards" / "*"))
             for r in pq.read_table(f, columns=["source_path", "text"]).to_pylist()}
    with_both = 0
    for r in rows:
        pieces = r["constituents"]
        assert len(pieces) == 1 + r["n_callers"] + r["n_callees"]
        roles = ["callee"] * r["n_callees"] + ["caller"] * r["n_callers"] + ["target"]
        pos, body_bytes = 0, 0
        for role, c in zip(roles, pieces):  # each piece: its header, then its exact text, in this order
            body = files[c["source_path"]][c["start"]:c["end"]]
            head = f"// {role}: {c['source_path']}: "
            at = r["text"].find(head, pos)
            assert at >= 0, (role, c["source_path"])
            start = r["text"].index("\n", at) + 1
            assert r["text"][start:start + len(body)] == body
            pos, body_bytes = start + len(body), body_bytes + len(body.encode())
            assert c["source_repo"] == r["source_repo"] and c["license_spdx"]  # never across repositories
        target_line = f"// target: {pieces[-1]['source_path']}: {r['target_name']}\n"
        assert r["text"].endswith(body + "\n") and target_line in r["text"]
        assert body_bytes <= 16_384
        with_both += bool(r["n_callers"] and r["n_callees"])
    assert with_both > 100
