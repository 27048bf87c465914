"""Inferred compile commands (clang_index/infer.py): a repository without build files and a CMake project whose
configure fails on a missing dependency still get libclang TUs, with real libclang, cmake and bubblewrap."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from cpp_data.clang_index.compile_db import CompileCommand
from cpp_data.clang_index.infer import IncludeGraph, infer_commands, language_standard, project_defines, tu_roots
from cpp_data.pipeline.contract.executor import ExecutorConfig
from cpp_data.pipeline.contract.stage import StageContext
from cpp_data.pipeline.runner.build import SUMMARY_FIELDS, format_summary
from cpp_data.pipeline.runner.executors.executor import DatatroveExecutor
from cpp_data.pipeline.runner.sources import SourceSpec, lock_sources
from cpp_data.stages.semantics import Semantics, SemanticsParams, source_files

# A library whose headers live under include/proj/, a source that demands a define, a unity file and its part
TREE = {
    "include/proj/util.h": "#pragma once\nnamespace proj { int twice(int x); }\n",
    "src/util.cc": '#include "proj/util.h"\nnamespace proj { int twice(int x) { return 2 * x; } }\n',
    "src/detail/mix.h": '#pragma once\n#include "proj/util.h"\ninline int mix(int x) { return proj::twice(x) + 1; }\n',
    "src/app.cc": '#include "detail/mix.h"\n#ifndef PROJ_SHARED\n#error "define PROJ_SHARED"\n#endif\n'
                  "int run() { return mix(3); }\n",
    "src/all.cc": '#include "part.cc"\nint all() { return part(); }\n',
    "src/part.cc": "int part() { return 7; }\n",
}


def write(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


def run_semantics(root: Path, out: Path, shared: Path | None = None, **params) -> dict:
    """The semantics stage over a plain directory through a StageContext, as the runner runs it (`shared`: the
    output directory's shared directory, which holds the per-TU cache)."""
    [source] = lock_sources([SourceSpec(name="p", url=str(root))])
    out.mkdir(parents=True)
    ctx = StageContext(out=out, inputs={}, source=source, label="semantics[p]", shared=shared,
                       executor=DatatroveExecutor(ExecutorConfig(kind="local", workers=1, progress=False)))
    return Semantics(SemanticsParams(**params)).run(ctx)


def test_include_dirs_come_from_where_the_included_files_live(tmp_path):
    root = write(tmp_path / "p", TREE)
    inferred = {Path(x.command.file).name: x for x in infer_commands(root, source_files(root), set())}
    assert sorted(inferred) == ["all.cc", "app.cc", "util.cc"]  # part.cc is parsed through all.cc
    app = inferred["app.cc"]
    assert app.include_dirs == ["include", "src"] + ["."]  # proj/util.h from mix.h; then the public roots
    assert f"-I{root}/include" in app.command.arguments and "-DPROJ_SHARED" in app.command.arguments
    assert "-DPROJ_SHARED" not in inferred["util.cc"].command.arguments  # only what the file's own reach demands


def test_a_database_s_files_and_what_they_include_get_no_inferred_command(tmp_path):
    root = write(tmp_path / "p", TREE)
    given = {str(root / "src/all.cc"), str(root / "src/util.cc")}
    assert [Path(x.command.file).name for x in infer_commands(root, source_files(root), given)] == ["app.cc"]
    graph = IncludeGraph(root, ["a.cc", "b.cc"])
    write(root, {"a.cc": '#include "b.cc"\n', "b.cc": '#include "a.cc"\n'})
    assert tu_roots(graph, ["a.cc", "b.cc"], set()) == ["a.cc"]  # a cycle: the first in sort order


def test_standard_and_defines_from_the_build_files(tmp_path):
    root = write(tmp_path / "p", {
        "CMakeLists.txt": "set(CMAKE_CXX_STANDARD 20)\nadd_compile_definitions(PROJ_ON=1)\n"
                          "if(WIN32)\n  add_compile_definitions(PROJ_WINDOWS)\nendif()\n",
        "sub/CMakeLists.txt": "target_compile_features(x PUBLIC cxx_std_14)\n", "a.cc": "int a;\n"})
    assert language_standard(root, ["a.cc"]) == "c++20"  # the root's build files decide
    assert project_defines(root) == ["-DPROJ_ON=1"]  # what an if() guards is not for every file
    bare = write(tmp_path / "q", {"a.cc": "#include <concepts>\ntemplate <class T> concept C = true;\n"})
    assert language_standard(bare, ["a.cc"]) == "c++20"


def test_a_repository_without_build_files_is_indexed_with_inferred_commands(tmp_path):
    root = write(tmp_path / "p", TREE)
    counts = run_semantics(root, tmp_path / "out")
    assert counts["database"] == "inferred", counts["database_reason"]
    assert counts["tus"] == counts["tus_clean"] == 3 and counts["files_matched_to_compile_command"] == 3
    assert counts["tus_by_database"] == {"inferred": {"tus": 3, "clean": 3, "errors": 0, "failed": 0}}
    receipt = json.loads((tmp_path / "out" / "coverage.json").read_text())
    app = next(r for r in receipt["inferred_commands"] if r["file"] == "src/app.cc")
    assert app == {"file": "src/app.cc", "include_dirs": ["include", "src", "."], "unresolved": []}
    tus = pq.read_table(tmp_path / "out" / "tu_status.parquet").to_pylist()
    assert {t["database"] for t in tus} == {"inferred"}
    assert all("<source>/include" in t["arguments"] for t in tus)  # placeless, as the database's are
    functions = {f["name"] for f in pq.read_table(tmp_path / "out" / "functions.parquet").to_pylist()}
    assert {"part", "all", "run", "mix", "proj::twice"} <= functions  # part.cc through all.cc
    lines = format_summary({**SUMMARY_FIELDS, "sources": 1, "semantic_coverage": {"p": counts},
                            "wall_seconds": 1.0, "stage_seconds": 4 * counts["semantics_seconds"],
                            "throughput_mb_s": None}, None, True).splitlines()
    at = next(k for k, line in enumerate(lines) if line.startswith("  libclang p "))
    assert lines[at].endswith("inferred database: 3/4 sources matched, 3/3 TUs clean, 0 with errors, 0 timeouts, "
                              "1 files to tree-sitter")  # part.cc is parsed through all.cc; util.h defines nothing
    assert lines[at + 1].startswith("    TUs reused 0, parsed 3 in ") and "TUs/s per worker; configure" in lines[at + 1]
    assert "3 inferred command(s) for every source no other source includes" in lines[at + 2]
    assert lines[at + 3].startswith("  libclang share     25% of the stages' time")


def test_configure_false_infers_nothing(tmp_path):
    root = write(tmp_path / "p", TREE)
    [source] = lock_sources([SourceSpec(name="p", url=str(root), configure=False)])
    (tmp_path / "out").mkdir()
    ctx = StageContext(out=tmp_path / "out", inputs={}, source=source, label="semantics[p]",
                       executor=DatatroveExecutor(ExecutorConfig(kind="local", workers=1, progress=False)))
    counts = Semantics(SemanticsParams()).run(ctx)
    assert counts["database"] == "none" and counts["tus"] == 0


@pytest.mark.skipif(shutil.which("cmake") is None, reason="cmake not installed (scripts/setup.sh)")
def test_a_cmake_project_missing_a_dependency_is_indexed_with_inferred_commands(tmp_path):
    """configure fails on find_package of a library that is not installed, after it wrote its configured header:
    the inferred commands find that header in the failed run's directory and the TUs parse clean."""
    root = write(tmp_path / "p", {
        "CMakeLists.txt": "cmake_minimum_required(VERSION 3.13)\nproject(demo CXX)\n"
                          "configure_file(config.h.in gen/demo_config.h)\n"
                          "find_package(SurelyNotInstalledDependency REQUIRED)\nadd_library(demo src/lib.cc)\n",
        "config.h.in": "#define DEMO_ANSWER 42\n",
        "src/lib.cc": '#include "demo_config.h"\nint answer() { return DEMO_ANSWER; }\n'})
    counts = run_semantics(root, tmp_path / "out")
    assert counts["database"] == "inferred" and "every cmake configure failed" in counts["database_reason"]
    assert counts["tus"] == counts["tus_clean"] == 1, counts
    [tu] = pq.read_table(tmp_path / "out" / "tu_status.parquet").to_pylist()
    assert tu["database"] == "inferred" and "-I<configure>/" in tu["arguments"]
    # the generated header's row names it placeless, so the table's bytes do not depend on where the output lives
    [row] = pq.read_table(tmp_path / "out" / "includes.parquet").to_pylist()
    assert row["includer"] == "src/lib.cc" and row["included"].startswith("<configure>/")
    run_semantics(root, tmp_path / "elsewhere" / "out")
    assert (tmp_path / "elsewhere" / "out" / "includes.parquet").read_bytes() == \
        (tmp_path / "out" / "includes.parquet").read_bytes()


def test_skip_globs_leave_matching_main_files_unparsed(tmp_path):
    root = write(tmp_path / "p", TREE)
    counts = run_semantics(root, tmp_path / "out", skip_globs=("src/app*", "*/all.cc"))
    assert (counts["tus"], counts["tus_skipped"]) == (1, 2)
    assert [r["file"] for r in counts["inferred_commands"]] == ["src/util.cc"]


def test_a_file_the_database_leaves_out_borrows_the_nearest_command_s_flags(tmp_path):
    """leveldb's shape: the database compiles src/a.cc with -DPORT=3; src/b.cc, left out, needs it too."""
    root = write(tmp_path / "p", {"inc/port.h": "#if PORT != 3\n#error port\n#endif\n",
                                  "src/a.cc": '#include "port.h"\n', "src/b.cc": '#include "port.h"\nint b;\n',
                                  "tools/c.c": "int c;\n"})
    database = [CompileCommand(str(root / "src"), str(root / "src/a.cc"),
                               ["c++", "-std=gnu++14", "-I../inc", "-D", "PORT=3", "-c", "a.cc"])]
    made = {Path(x.command.file).name: x.command.arguments
            for x in infer_commands(root, source_files(root), {str(root / "src/a.cc")}, (), database)}
    assert made["b.cc"][:2] == ["clang++", "-std=gnu++14"] and "-DPORT=3" in made["b.cc"]
    assert made["b.cc"][made["b.cc"].index("-I") + 1] == str(root / "inc")
    assert not any(a.startswith("-std=") for a in made["c.c"])  # a C file takes no C++ standard
