"""Which TUs the semantics stage parses (clang_index/selection.py): only those reaching kept documents, each
main file once, each file walked by one TU whatever the number of workers; real libclang, real files, the
stage as the runner runs it with a kept-documents input."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from test_infer import write

from cpp_data.clang_index.compile_db import CompileCommand
from cpp_data.clang_index.selection import fewest_covering, select_tus, tree_files
from cpp_data.pipeline.contract.executor import ExecutorConfig
from cpp_data.pipeline.contract.stage import Artifact, StageContext
from cpp_data.pipeline.runner.cache import checksum_outputs
from cpp_data.pipeline.runner.executors.executor import DatatroveExecutor
from cpp_data.pipeline.runner.sources import SourceSpec, lock_sources
from cpp_data.stages.semantics import Semantics, SemanticsParams

# kept: a.cc, b.cc, shared.h, lonely.h, maybe.h; refused (say, copyleft): gpl.cc, reach.cc, its own.h
TREE = {
    "shared.h": "#pragma once\ninline int shared_fn(int x) { return x + 1; }\n",
    "lonely.h": "#pragma once\ninline int lonely_fn(int x) { return x * 3; }\n",
    "own.h": "#pragma once\ninline int own_fn(int x) { return x - 1; }\n",
    "maybe.h": "#pragma once\ninline int maybe_fn(int x) { return x * 5; }\n",
    # a.cc names maybe.h behind an #if its parse does not take; b.cc really includes it
    "a.cc": '#include "shared.h"\n#if 0\n#include "maybe.h"\n#endif\nint a_fn() { return shared_fn(1); }\n',
    "b.cc": '#include "shared.h"\n#include "maybe.h"\nint b_fn() { return shared_fn(2) + maybe_fn(1); }\n',
    "gpl.cc": '#include "shared.h"\nint gpl_fn() { return shared_fn(3); }\n',
    "reach.cc": '#include "lonely.h"\n#include "own.h"\nint reach_fn() { return lonely_fn(1) + own_fn(2); }\n',
}
KEPT = {"a.cc", "b.cc", "shared.h", "lonely.h", "maybe.h"}


def database(root: Path, files: list[str]) -> None:
    (root / "compile_commands.json").write_text(json.dumps(
        [{"directory": str(root), "file": f, "arguments": ["c++", "-std=c++17", "-c", f]} for f in files]))


def kept_input(tmp_path: Path, paths: set[str]) -> Artifact:
    """A per-document stage's artifact holding the kept documents' paths, as license/filter write them."""
    where = tmp_path / "kept"
    where.mkdir()
    pq.write_table(pa.table({"source_repo": ["p"] * len(paths), "source_path": sorted(paths)}),
                   where / "part-00000.parquet")
    return Artifact(stage="filter", source="p", fingerprint="f" * 64, path=where)


def run_stage(root: Path, out: Path, kept: Artifact | None, workers: int = 1, shared: Path | None = None) -> dict:
    [source] = lock_sources([SourceSpec(name="p", url=str(root))])
    out.mkdir(parents=True)
    ctx = StageContext(out=out, inputs={"filter": [kept]} if kept else {}, source=source, label="semantics[p]",
                       documents="filter" if kept else None, shared=shared,
                       executor=DatatroveExecutor(ExecutorConfig(kind="local", workers=workers, progress=False)))
    return Semantics(SemanticsParams(tus_per_task=1, infer_commands=False)).run(ctx)


def functions(out: Path) -> dict[str, str]:
    """{function name: the TU that walked it}."""
    return {r["name"]: r["tu"] for r in pq.read_table(out / "functions.parquet").to_pylist()}


def test_only_tus_reaching_kept_documents_are_parsed_and_each_file_is_walked_once(tmp_path):
    root = write(tmp_path / "p", TREE)
    database(root, ["a.cc", "b.cc", "gpl.cc", "reach.cc", "b.cc"])  # b.cc twice, as two targets would list it
    counts = run_stage(root, tmp_path / "out", kept_input(tmp_path, KEPT))
    status = pq.read_table(tmp_path / "out" / "tu_status.parquet").to_pylist()
    assert [s["file"] for s in status] == ["a.cc", "b.cc", "reach.cc"]  # gpl.cc refused; b.cc once
    assert (counts["tus_not_kept"], counts["tus_for_kept_headers"], counts["duplicate_commands"]) == (1, 1, 1)
    found = functions(tmp_path / "out")
    # a refused TU reached only for lonely.h walks lonely.h, not its own file nor the refused own.h
    assert found["lonely_fn"] == "reach.cc" and "reach_fn" not in found and "own_fn" not in found
    assert found["shared_fn"] == "a.cc" and "gpl_fn" not in found  # the first TU reaching it walks it
    # maybe.h: owned by a.cc on the include graph, but a.cc's parse never reads it; b.cc walks it again
    assert found["maybe_fn"] == "b.cc" and counts["tus_walked_again"] == 1
    assert counts["source_files"] == 2  # the receipt counts the kept sources


def test_the_rows_are_the_same_for_any_number_of_workers_and_from_the_cache(tmp_path):
    root = write(tmp_path / "p", TREE)
    database(root, ["a.cc", "b.cc", "gpl.cc", "reach.cc"])
    kept = kept_input(tmp_path, KEPT)
    shared = tmp_path / "shared"
    one = run_stage(root, tmp_path / "one", kept, workers=1, shared=shared)
    run_stage(root, tmp_path / "two", kept, workers=2)
    again = run_stage(root, tmp_path / "again", kept, workers=2, shared=shared)
    tables = [{k: v for k, v in checksum_outputs(tmp_path / d).items() if k.endswith(".parquet")}
              for d in ("one", "two", "again")]
    assert tables[0] == tables[1] == tables[2]
    assert (one["tus_reused"], again["tus_reused"], again["tus_parsed"]) == (0, 3, 0)


def test_without_a_kept_list_every_tu_is_parsed_and_headers_walked_once(tmp_path):
    root = write(tmp_path / "p", TREE)
    database(root, ["a.cc", "b.cc", "gpl.cc", "reach.cc"])
    counts = run_stage(root, tmp_path / "out", None)
    assert (counts["tus"], counts["tus_not_kept"]) == (4, 0)
    found = functions(tmp_path / "out")
    assert {found["shared_fn"], found["gpl_fn"], found["own_fn"]} == {"a.cc", "gpl.cc", "reach.cc"}


def test_selection_on_the_include_graph(tmp_path):
    root = write(tmp_path / "p", TREE)
    cmds = [CompileCommand(str(root), str(root / f), ["c++", "-c", f]) for f in ("a.cc", "gpl.cc", "reach.cc")]
    sel = select_tus(cmds, root, tree_files(root), {"a.cc", "shared.h"})
    assert [Path(c.file).name for c in sel.commands] == ["a.cc"] and sel.not_kept == 2
    # a.cc owns what it reaches that is kept; what is not kept (maybe.h here) it skips
    assert sel.skips == [frozenset({str(root / "maybe.h")})]
    everything = select_tus(cmds, root, tree_files(root), None)
    assert everything.skips[1] == frozenset({str(root / "shared.h")})  # gpl.cc: shared.h is a.cc's
    assert fewest_covering([(0, {"x"}), (1, {"x", "y"}), (2, {"y", "z"}), (3, {"z"})], {"x", "y", "z"}) == [1, 2]
    assert fewest_covering([(0, {"q"})], {"x"}) == []
