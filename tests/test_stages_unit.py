"""One test per stage (issue 13, point 8): each v6 stage run on a tiny, made-up corpus through a StageContext,
with no runner, CLI or subprocess, and its own output checked.

The corpus: repository "alpha" (MIT LICENSE, its own compile_commands.json for two files) with a function file,
a header, a main file calling into the header, an exact copy of the function file under another path, a near
copy (one identifier changed), a file with a 5,000-character line, a GPL-tagged file and a non-C++ file;
repository "beta" (no license file, no compile database) with one file that names Apache-2.0 by SPDX tag.
`chain` runs the recipe's stages in order once, each into its own directory, wiring inputs as the runner does
(a per-source stage reads its own source's artifacts); the tests read what each stage wrote.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from cpp_data.pipeline.contract.executor import ExecutorConfig
from cpp_data.pipeline.contract.stage import Artifact, StageContext, resolve_inputs
from cpp_data.pipeline.foundation.fsutil import atomic_write_json
from cpp_data.pipeline.runner.executors.executor import DatatroveExecutor
from cpp_data.pipeline.runner.recipe import load_recipe
from cpp_data.pipeline.runner.sources import SourceSpec, lock_sources

MIT = ("MIT License\n\nCopyright (c) 2024 Alpha\n\nPermission is hereby granted, free of charge, to any person "
       "obtaining a copy of this software and associated documentation files (the \"Software\"), to deal in the "
       "Software without restriction, including without limitation the rights to use, copy, modify, merge, "
       "publish, distribute, sublicense, and/or sell copies of the Software, and to permit persons to whom the "
       "Software is furnished to do so, subject to the following conditions:\n\nThe above copyright notice and "
       "this permission notice shall be included in all copies or substantial portions of the Software.\n\nTHE "
       "SOFTWARE IS PROVIDED \"AS IS\", WITHOUT WARRANTY OF ANY KIND, EXPRESS OR IMPLIED, INCLUDING BUT NOT "
       "LIMITED TO THE WARRANTIES OF MERCHANTABILITY, FITNESS FOR A PARTICULAR PURPOSE AND NONINFRINGEMENT. IN "
       "NO EVENT SHALL THE AUTHORS OR COPYRIGHT HOLDERS BE LIABLE FOR ANY CLAIM, DAMAGES OR OTHER LIABILITY, "
       "WHETHER IN AN ACTION OF CONTRACT, TORT OR OTHERWISE, ARISING FROM, OUT OF OR IN CONNECTION WITH THE "
       "SOFTWARE OR THE USE OR OTHER DEALINGS IN THE SOFTWARE.\n")


def _functions(prefix: str, n: int = 30) -> str:
    body = [f"#include <vector>\n#include <string>\n\nnamespace {prefix} {{\n"]
    for i in range(n):
        body.append(f"// Adds the elements of v scaled by {i}.\nint {prefix}_sum_{i}(const std::vector<int>& v) {{\n"
                    f"  int total = 0;\n  for (int x : v) total += x * {i + 1};\n  return total + {i};\n}}\n\n")
    body.append(f"class {prefix.capitalize()}Widget {{\n public:\n  int size() const {{ return size_; }}\n"
                f" private:\n  int size_ = 0;\n}};\n}}  // namespace {prefix}\n")
    return "".join(body)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("unit-corpus")
    alpha, beta = root / "alpha", root / "beta"
    (alpha / "src").mkdir(parents=True)
    (alpha / "include").mkdir()
    (alpha / "LICENSE").write_text(MIT)
    main = _functions("alpha")
    (alpha / "src" / "sum.cpp").write_text(main)
    (alpha / "src" / "sum_copy.cpp").write_text(main)  # exact duplicate
    (alpha / "src" / "sum_near.cpp").write_text(main.replace("alpha_sum_7(", "alpha_total_7("))  # near duplicate
    (alpha / "include" / "widget.h").write_text("#pragma once\n" + _functions("widget", 12))
    (alpha / "src" / "table.cpp").write_text("int table[] = {" + ",".join(["1"] * 2500) + "};\n")  # long line
    (alpha / "src" / "gpl.cpp").write_text("// SPDX-License-Identifier: GPL-3.0-only\n" + _functions("gpl", 8))
    (alpha / "README.md").write_text("# alpha\n")  # not C/C++
    (alpha / "src" / "main.cpp").write_text('#include "widget.h"\n\nint main() {\n  widget::WidgetWidget w;\n'
                                             '  return widget::widget_sum_3({}) + w.size();\n}\n')
    (alpha / "compile_commands.json").write_text(json.dumps([  # the repository's own compile database
        {"directory": str(alpha), "file": f"src/{f}", "arguments": ["c++", "-std=c++17", "-Iinclude", "-c",
                                                                   f"src/{f}"]}
        for f in ("main.cpp", "sum.cpp")]))
    beta.mkdir()
    (beta / "lib.cc").write_text("// SPDX-License-Identifier: Apache-2.0\n" + _functions("beta", 20))
    return alpha, beta


def _run(name: str, params, inputs: dict[str, list[Artifact]], out: Path, source=None, sources=(),
         order: tuple[str, ...] = ()) -> Artifact:
    """One stage instance through a StageContext, sealed as the runner would leave it; `order` is the recipe's
    stage list, which the DOCUMENTS and PER_DOCUMENT inputs resolve against."""
    from cpp_data.pipeline.contract.stage import DOCUMENTS, PER_DOCUMENT, per_document_before, shard_markers
    from cpp_data.stages import registry

    out.mkdir(parents=True)
    label = f"{name}[{source.name}]" if source else name
    executor = DatatroveExecutor(ExecutorConfig(kind="local", workers=1, progress=False))
    cls = registry()[name]
    per_document = per_document_before(name, list(order), registry())
    ctx = StageContext(out=out, inputs=inputs, source=source, executor=executor, label=label, sources=list(sources),
                       documents=per_document[-1] if DOCUMENTS in cls.inputs else None,
                       per_document=per_document if PER_DOCUMENT in cls.inputs else (),
                       markers={k: v for k, v in shard_markers(name, list(order), registry()).items()
                                if k in cls.inputs})
    counts = registry()[name](params).run(ctx)
    atomic_write_json(out / "stage.json", {"stage": name, "counts": counts})
    (out / "_COMPLETE").write_text("")
    return Artifact(name, source.name if source else None, "unit", out)


@pytest.fixture(scope="module")
def sources(corpus):
    alpha, beta = corpus
    return lock_sources([SourceSpec(name="alpha", url=str(alpha), configure=False),
                         SourceSpec(name="beta", url=str(beta), configure=False)])


@pytest.fixture(scope="module")
def chain(sources, tmp_path_factory) -> dict[str, list[Artifact]]:
    """Every v6 stage run once over the corpus through a StageContext, in recipe order."""
    recipe = load_recipe("v6", overrides={"lanes": {"lanes": ["256", "1k"], "chunked": ["256"]}})
    from cpp_data.stages import registry

    out = tmp_path_factory.mktemp("unit-chain")
    done: dict[str, list[Artifact]] = {}
    for name in recipe.stages:
        cls = registry()[name]
        for src in (sources if cls.scope == "source" else [None]):
            inputs = {dep: [a for a in done[dep] if src is None or a.source in (None, src.name)]
                      for dep in resolve_inputs(cls, recipe.stages, registry())}
            where = out / name / (src.name if src else "corpus")
            done.setdefault(name, []).append(_run(name, recipe.params[name], inputs, where, src, sources,
                                                  tuple(recipe.stages)))
    return done


def _rows(artifacts: list[Artifact], pattern: str, columns: list[str] | None = None) -> list[dict]:
    rows = []
    for a in artifacts:
        for f in sorted(a.path.glob(pattern)):
            rows += pq.read_table(f, columns=columns).to_pylist()
    return rows


def test_collect_takes_the_cpp_files_and_skips_the_rest(chain, corpus):
    files = _rows(chain["collect"], "files-*.parquet", ["source_repo", "source_path", "raw_sha256", "size_bytes"])
    by_path = {(r["source_repo"], r["source_path"]) for r in files}
    assert ("alpha", "src/sum.cpp") in by_path and ("beta", "lib.cc") in by_path
    assert ("alpha", "README.md") not in by_path and len(files) == 8
    import hashlib

    raw = (corpus[0] / "src" / "sum.cpp").read_bytes()
    assert next(r["raw_sha256"] for r in files if r["source_path"] == "src/sum.cpp") == hashlib.sha256(raw).hexdigest()
    skipped = _rows(chain["collect"], "skipped.parquet")
    assert sorted((r["source_path"], r["reason"]) for r in skipped) == [("LICENSE", "not_cpp"),
                                                                       ("README.md", "not_cpp"),
                                                                ("compile_commands.json", "not_cpp")]


def test_filter_refuses_the_long_line_among_the_documents_the_license_stage_kept(chain):
    rejected = _rows(chain["filter"], "rejected-*.parquet")
    assert [(r["source_path"], r["decision"], r["reason"]) for r in rejected] == [("src/table.cpp", "filtered",
                                                                           "max_line_length")]
    # the filter reads what the license stage kept: the GPL file was refused before any scan (and had a license)
    assert rejected[0]["license_spdx"] == "MIT"
    licensed = sorted(r["source_path"] for r in _rows(chain["license"], "part-*.parquet", ["source_path"]))
    kept = sorted(r["source_path"] for r in _rows(chain["filter"], "part-*.parquet", ["source_path"]))
    assert "src/gpl.cpp" not in licensed and kept == [p for p in licensed if p != "src/table.cpp"] and len(kept) == 6


def test_decontaminate_without_a_reference_passes_every_document_on(chain):
    before = sorted(r["source_path"] for r in _rows(chain["filter"], "part-*.parquet", ["source_path"]))
    after = sorted(r["source_path"] for r in _rows(chain["decontaminate"], "part-*.parquet", ["source_path"]))
    assert after == before


def test_license_keeps_mit_and_apache_and_refuses_gpl(chain):
    docs = _rows(chain["license"], "part-*.parquet", ["source_repo", "source_path", "license_spdx"])
    spdx = {(r["source_repo"], r["source_path"]): r["license_spdx"] for r in docs}
    assert spdx[("alpha", "src/sum.cpp")] == "MIT" and spdx[("beta", "lib.cc")] == "Apache-2.0"
    assert ("alpha", "src/gpl.cpp") not in spdx
    refused = [r for r in _rows(chain["license"], "rejected-*.parquet") if r["decision"] == "license_refused"]
    assert [(r["source_path"], r["license_spdx"]) for r in refused] == [("src/gpl.cpp", "GPL-3.0-only")]


def test_exact_dedup_removes_the_copy(chain):
    dups = _rows(chain["exact_dedup"], "duplicates.parquet")
    assert [(r["source_path"], r["keeper_path"]) for r in dups] == [("src/sum_copy.cpp", "src/sum.cpp")]


def test_near_dedup_removes_the_near_copy_and_records_every_removal(chain):
    near = _rows(chain["near_dedup"], "near_duplicates.parquet")
    assert [r["source_path"] for r in near] == ["src/sum_near.cpp"] and near[0]["similarity"] >= 0.7
    from cpp_data.stages.lib import keys

    removed = keys.read_removed(chain["near_dedup"][0].path / "removed_keys.parquet")
    assert len(removed) == 2 and list(removed) == sorted(removed)


def test_shards_hold_the_kept_documents_split_by_path(chain):
    rows = _rows(chain["shards"], "shards/*.parquet", ["source_repo", "source_path"])
    paths = sorted(r["source_path"] for r in rows)
    assert paths == sorted(["src/sum.cpp", "src/main.cpp", "include/widget.h", "lib.cc"])
    listing = json.loads((chain["shards"][0].path / "shards.json").read_text())["files"]
    rows_by_split = {s: sum(e["rows"] for e in listing if e["split"] == s) for s in ("train", "valid")}
    assert sum(rows_by_split.values()) == 4 and min(rows_by_split.values()) >= 1  # neither split empty


def test_semantics_indexes_with_libclang_where_there_is_a_compile_database(chain):
    alpha, beta = sorted(chain["semantics"], key=lambda a: a.source)
    assert alpha.counts["database"] == "source" and alpha.counts["tus_clean"] == alpha.counts["tus"] == 2
    assert alpha.counts["edges"] >= 1  # main.cpp calls into widget.h
    assert beta.counts["database"] == "none" and beta.counts["files_fallen_back_to_tree_sitter"] == 1


def test_semantics_source_files_are_the_real_files_under_the_root_at_their_resolved_paths(tmp_path):
    """source_files lists paths as rglob joins them, without resolving each: that holds only while rglob never
    enters a symlinked directory and links are left out, which os.path.realpath judges here."""
    import os

    from cpp_data.stages.semantics import source_files

    root = tmp_path / "repo"
    (root / "src" / "deep").mkdir(parents=True)
    (root / "src" / "a.cc").write_text("int a;\n")
    (root / "src" / "deep" / "b.H").write_text("int b;\n")
    (root / "notes.txt").write_text("not C++\n")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "c.cpp").write_text("int c;\n")
    (root / "linked_dir").symlink_to(outside)  # a directory link: not entered
    (root / "src" / "loop").symlink_to(root / "src")  # a link back up: not entered either
    (root / "src" / "alias.cc").symlink_to(root / "src" / "a.cc")  # a file link: left out
    got = source_files(root.resolve())
    assert got == sorted(str((root / p).resolve()) for p in ("src/a.cc", "src/deep/b.H"))
    assert all(os.path.realpath(p) == p for p in got)


def test_semantics_source_files_survive_a_path_longer_than_path_max(tmp_path):
    """A file nested deeper than PATH_MAX (made through directory descriptors, as no path can name it) is left
    out of the list, not an ENAMETOOLONG that failed the whole build (collect gives it a ledger row); the files
    beside the deep tree are still listed."""
    import os

    from cpp_data.stages.semantics import source_files

    root = tmp_path / "repo"
    (root / "deep").mkdir(parents=True)
    (root / "a.cc").write_text("int a;\n")
    fd = os.open(root / "deep", os.O_RDONLY)
    try:
        for _ in range(80):  # 80 levels of 60 characters: well past 4,096
            os.mkdir("d" * 60, dir_fd=fd)
            inner = os.open("d" * 60, os.O_RDONLY, dir_fd=fd)
            os.close(fd)
            fd = inner
        os.close(os.open("deep.cpp", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd))
    finally:
        os.close(fd)
    with __import__("pytest").raises(OSError):  # the premise: the deep file has no usable path
        (root / "deep" / "/".join(["d" * 60] * 80) / "deep.cpp").stat()
    assert source_files(root.resolve()) == [str((root / "a.cc").resolve())]


def test_structure_labels_every_character(chain):
    rows = _rows(chain["structure"], "shards/*.parquet", ["text", "structure_ids", "source_path"])
    from cpp_data.schemas.generations import CATEGORY_NAMES

    for r in rows:
        assert len(r["structure_ids"]) == len(r["text"])
        names = {CATEGORY_NAMES[c] for c in r["structure_ids"]}
        assert {"FUNC_SIGNATURE", "FUNC_BODY"} <= names, r["source_path"]
        assert ("COMMENT" in names) == ("//" in r["text"]), r["source_path"]


def test_structure_graph_groups_spread_a_small_corpus_and_leave_the_output_alone(chain, tmp_path, monkeypatch):
    """A corpus far under graph_group_rows is cut into several graph tasks (here one per repository), and the
    shards and call graph are the same as from one task holding every repository."""
    import cpp_data.stages.structure as structure

    assert chain["structure"][0].counts["tasks"]["graph"] == 2  # alpha and beta, each its own group
    params = load_recipe("v6").params["structure"]
    inputs = {dep: chain[dep] for dep in ("shards", "semantics")}
    monkeypatch.setattr(structure, "GRAPH_SPREAD", 1)
    one = _run("structure", params, inputs, tmp_path / "one-group")
    assert one.counts["tasks"]["graph"] == 1 and one.counts["call_edges_by_name"] > 0
    assert one.counts["call_edges_by_name"] == chain["structure"][0].counts["call_edges_by_name"]
    shard_files = [e["path"] for e in json.loads((one.path / "shards.json").read_text())["files"]]
    for name in ["call_graph.parquet", *shard_files]:
        a, b = pq.read_table(one.path / name), pq.read_table(chain["structure"][0].path / name)
        assert a.num_rows and a.equals(b), name


def test_tokenizer_trains_the_asked_vocabulary_or_what_the_corpus_fills(chain):
    c = chain["tokenizer"][0].counts  # cap_vocab_to_corpus: what a tiny corpus fills, not 65,536
    assert c["vocab_size"] < c["requested_vocab_size"] and c["learned_ids"] > 300 and c["vocab_size"] % 128 == 0
    assert (chain["tokenizer"][0].path / "tokenizer" / "tokenizer.json").is_file()


def test_tokenizer_trains_in_a_process_of_its_own_and_its_errors_come_back(chain, tmp_path):
    """The trainer runs in a child process (its memory is the sample's, not the driver's): the stage's
    process never imports the trainer's allocations, and an impossible vocabulary comes back as the child's
    one-line error, not a traceback or a silent failure."""
    import dataclasses
    import resource

    from cpp_data.stages.lib.tokenizer_training import train_in_own_process

    params = load_recipe("v6").params["tokenizer"]
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_utime
    art = _run("tokenizer", params, {"shards": chain["shards"]}, tmp_path / "again",
               order=("shards", "tokenizer"))
    assert art.counts["sha256"] == chain["tokenizer"][0].counts["sha256"]  # the same bytes, run again
    assert resource.getrusage(resource.RUSAGE_CHILDREN).ru_utime - before > 0.2  # a child did the training
    with pytest.raises(ValueError, match="vocab_size 300 is smaller than the fixed band"):
        _run("tokenizer", dataclasses.replace(params, vocab_size=300), {"shards": chain["shards"]},
             tmp_path / "small", order=("shards", "tokenizer"))
    job = {"files": ["/nonexistent/train-00000.parquet"], "heldout_fraction": 0.05, "sample_bytes": 1,
           "sample_seed": 1, "band_file": "", "vocab_size": 1024, "min_frequency": 2, "cap_to_corpus": True,
           "show_progress": False, "out": str(tmp_path / "nowhere")}
    with pytest.raises(FileNotFoundError, match="/nonexistent/train-00000.parquet"):  # the child's own exception
        train_in_own_process(job, tmp_path / "scratch")


def test_token_columns_decode_back_to_the_text(chain):
    from cpp_data.tokenizer.files import load_tokenizer

    tok = load_tokenizer(chain["tokenizer"][0].path / "tokenizer")
    rows = _rows(chain["token_columns"], "shards/*.parquet", ["text", "token_ids"])
    assert rows and all(tok.decode(r["token_ids"], skip_special_tokens=False) == r["text"] for r in rows)


def test_megatron_export_reads_back_in_megatron_core(chain):
    from megatron.core.datasets.indexed_dataset import IndexedDataset

    for lane in ("256", "1k"):
        ds = IndexedDataset(str(chain["megatron_export"][0].path / "megatron" / lane / "cpp_train"))
        tokens = _rows(chain["lanes"], f"lanes/{lane}/train-*.parquet", ["token_ids"])
        assert len(ds) == len(tokens)
        assert [len(ds[i]) for i in range(len(ds))] == [len(t["token_ids"]) + 1 for t in tokens]


def test_lanes_hold_every_document_once_within_budget(chain):
    """The chunk lane cuts the files (several chunks each), the file lane groups them; both put every document
    back exactly (lane_check, verify's gate), and no row is over its lane's budget."""
    from cpp_data.stages.lib.lane_check import check_lane

    art = chain["lanes"][0].path
    whole = sorted((chain["token_columns"][0].path / "shards").glob("*.parquet"))
    for lane, budget in (("256", 252), ("1k", 1020)):
        record = json.loads((art / "lanes" / lane / "shards.json").read_text())
        assert record["budget"] == budget and record["kind"] == ("chunks" if lane == "256" else "files")
        found = check_lane(whole, sorted((art / "lanes" / lane).glob("*.parquet")), budget,
                           chain["tokenizer"][0].path / "tokenizer", first=100)
        assert found.startswith(f"{sum(pq.read_metadata(f).num_rows for f in whole)} documents")
    chunks = _rows(chain["lanes"], "lanes/256/train-*.parquet",
                   ["chunk_count", "chunk_kind", "context_length", "context_chars", "text", "token_ids"])
    assert max(r["chunk_count"] for r in chunks) >= 3  # the 30-function files do not fit 252 tokens
    cut = [r for r in chunks if r["context_chars"]]
    assert cut and all(r["text"][:r["context_chars"]].startswith("#include <vector>") for r in cut)
    assert all(0 < r["context_length"] < len(r["token_ids"]) for r in cut)
    assert {r["chunk_kind"] for r in chunks} >= {"function", "file"} or "namespace_part" in {r["chunk_kind"]
                                                                                           for r in chunks}


def test_packed_rows_are_exactly_the_lane_length_and_mask_the_context(chain):
    for lane, T in (("256", 256), ("1k", 1024)):
        rows = _rows(chain["packed_rows"], f"packed/{lane}/train-*.parquet",
                     ["input_ids", "loss_mask", "doc_ids", "segment_context_lengths"])
        assert rows and all(len(r["input_ids"]) == T == len(r["loss_mask"]) for r in rows)
        assert np.mean([sum(r["loss_mask"]) / T for r in rows]) > 0.5
    masked = 0
    for r in _rows(chain["packed_rows"], "packed/256/train-*.parquet", ["loss_mask", "doc_ids",
                                                                        "segment_context_lengths"]):
        for k, c in enumerate(r["segment_context_lengths"], start=1):
            start = r["doc_ids"].index(k)
            assert not any(r["loss_mask"][start:start + max(c - 1, 0)])  # no loss on predicting the context
            assert r["loss_mask"][start + c - 1] == 1 or c == 0  # the first body token is predicted
            masked += c > 0
    assert masked > 0


def test_launch_spec_names_every_lane_relative_to_itself(chain):
    spec = json.loads((chain["launch_spec"][0].path / "launch.json").read_text())
    assert set(spec["lanes"]) == {"256", "1k"} and spec["seq_length"] == 256
    assert [p["lane"] for p in spec["phases"]] == ["256", "1k"] and all(p["tokens"] > 0 for p in spec["phases"])
    for lane in spec["lanes"].values():
        assert set(lane["datasets"]) == {"packed", "documents"}
        packed = lane["datasets"]["packed"]
        assert all(not p.startswith("/") for _, p in packed["blend_per_split"]["train"])
        assert all(not f.startswith("/") for r in packed["rows"]["train"] for f in r["files"])


def test_ledger_has_one_row_per_file_seen(chain):
    ledger = _rows(chain["ledger"], "ledger.parquet")
    decisions = {(r["source_repo"], r["source_path"]): r["decision"] for r in ledger}
    assert len(ledger) == len(decisions) == 11  # 8 C/C++ files, README.md, LICENSE, compile_commands.json
    assert decisions[("alpha", "src/sum_copy.cpp")] == "exact_duplicate"
    assert decisions[("alpha", "src/sum_near.cpp")] == "near_duplicate"
    assert decisions[("alpha", "src/table.cpp")] == "filtered"
    assert decisions[("alpha", "src/gpl.cpp")] == "license_refused"
    assert decisions[("alpha", "README.md")] == "skipped"
    assert sum(d == "kept" for d in decisions.values()) == 4


def test_context_graph_makes_a_document_per_function_within_budget(chain, tmp_path):
    params = load_recipe("v4").params["context_graph"]
    art = _run("context_graph", params, {"structure": chain["structure"]}, tmp_path / "cg")
    rows = _rows([art], "shards/*.parquet", ["text", "constituents", "source_path"])
    functions = art.counts["functions"]
    assert functions > 50 and len(rows) == art.counts["documents"] > 0
    for r in rows:
        assert len(r["text"].encode()) <= params.budget_bytes + 200  # the budget, and the block headers
        assert r["constituents"] and all(c["source_path"] for c in r["constituents"])


def test_dependency_documents_root_each_file_with_its_dependencies(chain, sources, tmp_path):
    params = load_recipe("v5").params["dependency_documents"]
    art = _run("dependency_documents", params, {k: chain[k] for k in ("semantics", "decontaminate", "near_dedup")},
               tmp_path / "dd", sources=sources, order=tuple(load_recipe("v5").stages))
    rows = _rows([art], "shards/*.parquet", ["text", "constituents"])
    assert art.counts["roots"] >= 1 and len(rows) == art.counts["documents"] >= 1
    kept = {r["source_path"] for r in _rows(chain["shards"], "shards/*.parquet", ["source_path"])}
    for r in rows:  # every piece is a kept file: nothing dedup removed comes back through a dependency
        assert {c["source_path"] for c in r["constituents"]} <= kept


def test_packed_rows_table_is_the_one_from_pylist_builds():
    """_rows_table builds the packed rows column by column; pyarrow's row-by-row conversion is the judge."""
    import numpy as np
    import pyarrow as pa

    from cpp_data.stages.lib.packing import _rows_table, packed_schema

    schema = packed_schema("v6", ["token_structure_ids", "token_ast_depth", "token_sibling_index",
                                  "token_ast_node_type"])
    rng, T, rows = np.random.default_rng(0), 32, []
    for i in range(300):
        k = int(rng.integers(1, 5))
        row = {"pack_id": i, "valid_token_count": int(rng.integers(0, T)), "num_docs": k,
               "segment_docs": [int(x) for x in rng.integers(0, 10**12, k)],
               "segment_starts": [int(x) for x in rng.integers(0, 10**4, k)]}
        for f in schema:
            if f.name not in row:
                dtype = f.type.value_type.to_pandas_dtype()
                row[f.name] = rng.integers(np.iinfo(dtype).min, np.iinfo(dtype).max, T, dtype=dtype)
        rows.append(row)
    for part in (rows, rows[:1], []):
        want = pa.Table.from_pylist(part, schema=schema)
        got = _rows_table(part, schema)
        assert got.equals(want) and got.schema.equals(want.schema, check_metadata=True)


def test_list_array_is_pyarrows_conversion_of_the_rows_for_every_list_column_of_v6():
    """list_array (structure's per-character columns, packed_rows' lists) against pa.array over the same rows as
    Python lists: every integer list type of the v6 schema, rows of the narrower dtype syntax hands it, empty
    rows, no rows."""
    import numpy as np
    import pyarrow as pa

    from cpp_data.schemas.generations import columns
    from cpp_data.stages.lib.list_columns import list_array

    types = [c.type for c in columns("v6") if pa.types.is_list(c.type) and pa.types.is_integer(c.type.value_type)]
    assert {pa.list_(pa.uint8()), pa.list_(pa.int8()), pa.list_(pa.int16()), pa.list_(pa.int32())} <= set(types)
    rng = np.random.default_rng(1)
    for t in types:
        info = np.iinfo(t.value_type.to_pandas_dtype())
        rows = [rng.integers(max(info.min, -128), min(info.max, 127), int(rng.integers(0, 40)), dtype=np.int8)
                for _ in range(50)] + [np.zeros(0, np.int8)]
        for part in (rows, rows[:1], []):
            want = pa.array([r.tolist() for r in part], type=t)
            got = list_array(part, t)
            assert got.type == t and got.equals(want), t


def test_packed_files_written_by_row_group_are_one_writers_bytes(chain, tmp_path):
    """packed_rows writes each row group in a task of its own and copies them into the file: the file must be
    the bytes pyarrow's one writer gives for the same rows and row groups (row groups of 2 rows, files of 3)."""
    import dataclasses
    import io

    import pyarrow as pa

    from cpp_data.schemas.shard_writer import dictionary_columns
    from cpp_data.stages.lib.packing import PACKED_COMPRESSION, packed_schema

    recipe = load_recipe("v6", overrides={"lanes": {"lanes": ["256", "1k"], "chunked": ["256"]}})
    params = dataclasses.replace(recipe.params["packed_rows"], row_group_size=2, rows_per_shard=3)
    inputs = {dep: chain[dep] for dep in ("lanes", "tokenizer")}
    art = _run("packed_rows", params, inputs, tmp_path / "packed")
    files = sorted((art.path / "packed" / "256").glob("*.parquet"))
    assert len([f for f in files if f.name.startswith("train-")]) >= 2
    for f in files:
        meta = pq.ParquetFile(f).metadata
        table = pq.read_table(f)
        assert table.num_rows <= 3 and meta.num_row_groups == -(-table.num_rows // 2)
        schema = packed_schema("v6", json.loads((art.path / "packed" / "256" / "packed.json").read_text())
                               ["meta_columns"])
        buf = io.BytesIO()
        with pq.ParquetWriter(buf, schema, **PACKED_COMPRESSION, write_page_checksum=True,
                              use_dictionary=dictionary_columns(schema)) as writer:
            for a in range(0, table.num_rows, 2):
                part = table.slice(a, 2).combine_chunks()
                writer.write_table(part, row_group_size=part.num_rows)
        assert f.read_bytes() == buf.getvalue(), f.name
        assert table.column("pack_id").to_pylist() == sorted(table.column("pack_id").to_pylist())
    assert pa.concat_tables(pq.read_table(f, columns=["pack_id"]) for f in files if f.name.startswith("train-")) \
        .column("pack_id").to_pylist() == list(range(sum(pq.ParquetFile(f).metadata.num_rows
                                                         for f in files if f.name.startswith("train-"))))


@pytest.mark.parametrize("path,head,taken", [
    # GSL's span and Eigen's Core, as Debian ships them: no extension, a banner, then an include guard
    ("gsl/span", b"///////////////\n// Copyright (c) 2015 Microsoft Corporation. All rights reserved.\n//\n"
                 b"///////////////\n\n#ifndef GSL_SPAN_H\n#define GSL_SPAN_H\n\n#include <gsl/assert>\n", True),
    ("Eigen/Core", b"// This file is part of Eigen, a lightweight C++ template library\n\n"
                   b"#ifndef EIGEN_CORE_H\n#define EIGEN_CORE_H\n", True),
    ("c++/12/vector", b"// <vector> -*- C++ -*-\n\n// Copyright (C) 2001-2022 Free Software Foundation, Inc.\n", True),
    ("absl/x.inc", b"// generated table\n#include <cstdint>\nconstexpr int kT[] = {1};\n", True),
    ("bits/stl_algo.tcc", b"", True),
    # not C/C++: a license text, a Makefile, a NASM include, a shell script mentioning #include
    ("LICENSE", b"Permission is hereby granted, free of charge, to any person obtaining a copy\n", False),
    ("Makefile", b"include ../config.mk\nall:\n\tcc -o x x.c\n", False),
    ("x86/x86inc.inc", b"%include \"config.asm\"\n%macro cglobal 1\n", False),
    ("tools/gen", b"#!/bin/sh\n#include <x>\n", False),
    ("notes", b"#ifndef is how guards start\n#define something else\n", False),  # a guard defines its own name
])
def test_which_files_are_cpp(path: str, head: bytes, taken: bool):
    from cpp_data.stages.lib.repo_files import DEFAULT_EXTENSIONS, is_cpp

    assert is_cpp(path, head, DEFAULT_EXTENSIONS) is taken


def test_a_source_left_without_documents_is_warned_of():
    """GSL's headers had all been skipped and the build said nothing about the source; the summary now names a
    source whose files all failed collect, the license policy or the filters (not one with no files at all)."""
    from cpp_data.pipeline.runner.build import SUMMARY_FIELDS, _warnings

    summary = {**SUMMARY_FIELDS, "documents": 40, "valid_documents": 12,
               "files_seen_by_source": {"gsl": 15, "fmt": 30, "empty": 0},
               "documents_after_filters": {"gsl": 0, "fmt": 28, "empty": 0}}
    assert _warnings(summary) == ["source gsl: none of its 15 file(s) passed collect, the license policy and the "
                                  "filters; provenance/ledger.parquet gives each one's reason"]


def test_a_blob_the_repository_lacks_reads_as_missing_not_as_garbage(tmp_path):
    """BlobReader: a present blob's bytes; for one the object store lacks (a partial snapshot), read_present
    gives None and read says which object is missing."""
    import subprocess

    from cpp_data.stages.lib.repo_files import BlobReader

    repo = tmp_path / "r"
    repo.mkdir()
    run = {"cwd": repo, "check": True, "capture_output": True}
    subprocess.run(["git", "init", "-q"], **run)
    (repo / "a.cc").write_text("int a;\n")
    (repo / "b.cc").write_text("int b;\n")
    subprocess.run(["git", "add", "."], **run)
    oid = {n: subprocess.run(["git", "hash-object", n], **run).stdout.decode().strip() for n in ("a.cc", "b.cc")}
    (repo / ".git" / "objects" / oid["b.cc"][:2] / oid["b.cc"][2:]).unlink()
    blobs = BlobReader(repo)
    try:
        assert blobs.read(oid["a.cc"]) == b"int a;\n"
        assert blobs.read_present(oid["b.cc"]) is None
        with pytest.raises(RuntimeError, match=f"git object {oid['b.cc']} is missing"):
            blobs.read(oid["b.cc"])
        assert blobs.read_present(oid["a.cc"]) == b"int a;\n"  # the stream stays in step after a miss
    finally:
        blobs.close()
