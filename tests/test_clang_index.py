"""The libclang layer (issue 4): real libclang on real compile databases. A committed fixture project with a
known call graph (exact edges, levels, preamble), failures that are recorded instead of crashing or hanging, and
googletest configured by default (sandboxed CMake) and its samples indexed from that database."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from conftest import (
    GOOGLETEST,
    build_dir,
    clang_fixture_source,
    data_digests,
    need,
    provenance_recipe,
    run_cli,
    write_sources,
)

from cpp_data.clang_index.compile_db import CompileCommand, clean_args, find_resource_dir, load_compile_commands
from cpp_data.clang_index.index import index_project
from cpp_data.clang_index.levels import dependency_levels
from cpp_data.clang_index.pool import HOOK_ENV

FIX = Path(__file__).parent / "fixtures" / "clang_project"


@pytest.fixture(scope="module")
def database(tmp_path_factory) -> Path:
    """The fixture's compile database: `command` strings (with a shell-quoted -D, sanitizer and dependency-file
    flags) and an `arguments` entry for the C file, run from the fixture's src/ directory."""
    src = FIX / "src"
    flags = '-I../include -DNAME="\\"x y\\"" -std=c++17 -Wall'
    db = [{"directory": str(src), "file": "util.cc",
           "command": f"/usr/bin/c++ {flags} -fsanitize=address -fcolor-diagnostics -MD -MT u.o -MF u.o.d -o u.o "
                      "-c util.cc"},
          {"directory": str(src), "file": "main.cc", "command": f"/usr/bin/c++ {flags} -o m.o -c main.cc"},
          {"directory": str(src), "file": str(src / "cfile.c"),
           "arguments": ["/usr/bin/cc", "-std=c11", "-Wall", "-o", "c.o", "-c", str(src / "cfile.c")]}]
    path = tmp_path_factory.mktemp("db") / "compile_commands.json"
    path.write_text(json.dumps(db))
    return path


@pytest.fixture(scope="module")
def indexed(database):
    return index_project(load_compile_commands(database), FIX, workers=2, timeout_s=60)


def test_commands_are_cleaned(database):
    util, _, cfile = load_compile_commands(database)
    assert '-DNAME="x y"' in util.arguments  # shell-split, not whitespace-split
    assert clean_args(util, "/rd") == ["-I../include", '-DNAME="x y"', "-std=c++17", "-Wall", "-resource-dir", "/rd"]
    c = clean_args(cfile, "/rd")
    assert "-x" not in c and c[:2] == ["-std=c11", "-Wall"]
    assert (find_resource_dir() / "include" / "stddef.h").is_file()


def test_a_hostile_database_cannot_make_libclang_write_or_load(tmp_path):
    """A repository's own compile_commands.json asks libclang to write a module cache, dependency files, a
    compile-database record and fragment, a dependency graph, a header list and a copy of the headers where it
    likes, and to load a plugin: none of it is passed on, the modules still resolve (from a cache of the TU's
    own), a stray `-Xclang` takes no kept argument with it, and nothing appears where the database pointed."""
    (tmp_path / "module.modulemap").write_text('module M { header "m.h" export * }\n')
    (tmp_path / "m.h").write_text("int mm();\n")
    (tmp_path / "t.cpp").write_text('#include "m.h"\nint main() { return mm(); }\n')
    target = tmp_path / "elsewhere"
    target.mkdir()
    modules = ["-fmodules", "-fimplicit-module-maps"]
    writers = [  # each wrote into `target` when passed to libclang as it stands (or was a plugin to load)
        [*modules, f"-fmodules-cache-path={target}/mc"], ["-MJ", f"{target}/mj.json"], [f"-MJ{target}/mj2.json"],
        ["-gen-cdb-fragment-path", f"{target}/cdb"], [f"-Wp,-MD,{target}/wp.d"],
        ["-Xclang", "-dependency-file", "-Xclang", f"{target}/df", "-Xclang", "-MT", "-Xclang", "x"],
        ["-Xclang", "-dependency-dot", "-Xclang", f"{target}/dot"],
        ["-Xclang", "-header-include-file", "-Xclang", f"{target}/hif"],
        [*modules, "-Xclang", "-module-dependency-dir", "-Xclang", f"{target}/mdd"],
        ["-Xclang", "-load", "-Xclang", f"{target}/evil.so", f"-fplugin={target}/p.so",
         "-Xclang", "-plugin-arg-x", "-Xclang", "v"],
        [f"-ftime-trace={target}/t.json", "--serialize-diagnostics", f"{target}/d", "-save-temps=obj"]]
    kept = ["-DKEEP=1", "-Wp,-DWP=1", "-I", "inc", "-Xclang", "-std=c++17"]
    args = ["clang++", *[a for w in writers for a in w], "-Xclang", "-MT", "-Xclang", "y", *kept, "-c", "t.cpp"]
    cmd = CompileCommand(str(tmp_path), str(tmp_path / "t.cpp"), args)
    assert clean_args(cmd, "/rd", "/cache") == [*modules, *modules, *kept, "-fmodules-cache-path=/cache",
                                                "-resource-dir", "/rd"]
    assert "-fmodules-cache-path" not in " ".join(clean_args(CompileCommand(str(tmp_path), "t.cpp", args[:1]), "/rd",
                                                             "/cache"))  # no modules, no cache
    # each writer alone through libclang, then all of them together
    cmds = [CompileCommand(str(tmp_path), str(tmp_path / "t.cpp"), ["clang++", *w, "-c", "t.cpp"]) for w in writers]
    res = index_project([*cmds, cmd], tmp_path, workers=1, timeout_s=60)
    assert [t["status"] for t in res.tu_status] == ["ok"] * (len(cmds) + 1), res.tu_status
    assert any(e["dst_name"] == "mm" for e in res.edges)  # the call into the module resolved
    assert list(target.iterdir()) == []


@pytest.mark.parametrize("text,msg", [("[{", "cannot read"), ('{"a": 1}', "must be a JSON list"),
                                      ('[{"directory": "/x"}]', "entry 0"),
                                      ('[{"directory": "/x", "file": "a.cc"}]', "'arguments'")])
def test_broken_compile_database_is_named(tmp_path, text, msg):
    p = tmp_path / "compile_commands.json"
    p.write_text(text)
    with pytest.raises(ValueError) as exc:
        load_compile_commands(p)
    assert str(p) in str(exc.value) and msg in str(exc.value)


def test_fixture_definitions_edges_and_levels(indexed):
    assert [(Path(s["file"]).name, s["status"]) for s in indexed.tu_status] == \
        [("util.cc", "ok"), ("main.cc", "ok"), ("cfile.c", "ok")]  # cfile.c uses `class` as a name: parsed as C
    name = {f["usr"]: f["name"] for f in indexed.functions}
    assert set(name.values()) == {"fx::leaf", "fx::ping", "fx::pong", "fx::Counter::Counter", "fx::Counter::add",
                                  "fx::Counter::get", "fx::helper_inline", "twice", "main", "c_helper", "c_entry"}
    edges = {(name[e["src"]], e["dst_name"], e["kind"]) for e in indexed.edges}
    assert edges == {("fx::helper_inline", "fx::leaf", "call"), ("fx::ping", "fx::pong", "call"),
                     ("fx::pong", "fx::ping", "call"), ("fx::pong", "fx::leaf", "call"),
                     ("fx::Counter::add", "fx::leaf", "call"), ("twice", "fx::leaf", "call"),
                     ("main", "fx::Counter::Counter", "call"), ("main", "fx::Counter::add", "call"),
                     ("main", "twice", "call"), ("main", "fx::Counter::get", "call"), ("main", "fx::ping", "ref"),
                     ("c_entry", "c_helper", "call")}  # strlen and std::vector::push_back are system: dropped
    levels = {name[u]: lv for u, lv in dependency_levels(indexed.edges).items()}
    assert levels == {"fx::leaf": 0, "fx::Counter::Counter": 0, "fx::Counter::get": 0, "c_helper": 0,
                      "fx::ping": 1, "fx::pong": 1, "fx::helper_inline": 1, "fx::Counter::add": 1, "twice": 1,
                      "c_entry": 1, "main": 2}  # the ping/pong cycle is one level
    leaf = next(f for f in indexed.functions if f["name"] == "fx::leaf")
    text = (FIX / "src" / "util.cc").read_bytes()[leaf["start_offset"]:leaf["end_offset"]]
    assert text.startswith(b"int leaf(int x) {") and text.endswith(b"}")


def test_fixture_preamble_types_and_includes(indexed):
    pre = {(Path(p["file"]).name, p["kind"]) for p in indexed.preamble}
    assert {("util.h", "forward_decl"), ("util.h", "alias"), ("util.h", "typedef"), ("main.cc", "using"),
            ("main.cc", "using_directive"), ("main.cc", "include")} <= pre
    inc = {(Path(i["includer"]).name, Path(i["included"]).name, i["system"]) for i in indexed.includes}
    assert {("util.cc", "util.h", False), ("main.cc", "util.h", False), ("main.cc", "vector", True)} <= inc
    name = {f["usr"]: f["name"] for f in indexed.functions}
    assert ("main", "fx::Counter") in {(name[t["src"]], t["dst_name"]) for t in indexed.type_refs}


def test_levels_survive_deep_chains_and_cycles():
    assert dependency_levels([("a", "b"), ("b", "c"), ("c", "b"), ("c", "d"), ("e", "e")]) == \
        {"a": 2, "b": 1, "c": 1, "d": 0, "e": 0}
    n = 100_000
    assert dependency_levels([(str(i), str(i + 1)) for i in range(n)])["0"] == n


def test_missing_header_and_missing_file_are_recorded():
    src = FIX / "src"
    cmds = [CompileCommand(str(src), str(src / "broken.cc"), ["c++", "-I../include", "-std=c++17", "-c", "broken.cc"]),
            CompileCommand(str(src), str(src / "nope.cc"), ["c++", "-c", "nope.cc"])]
    broken, nope = index_project(cmds, FIX, timeout_s=60).tu_status
    assert broken["status"] == "errors" and "'does_not_exist.h' file not found" in broken["error_messages"][0]
    assert nope["status"] == "missing_file"


def test_hung_tu_is_killed_and_recorded(database, monkeypatch):
    import glob
    import os
    import tempfile

    monkeypatch.setenv(HOOK_ENV, "hang:main.cc")  # main.cc's worker makes a temporary file, then sleeps forever
    tmp = tempfile.gettempdir()
    hung = [os.path.join(tmp, "cpp-data-hung-*"), os.path.join(tmp, "cpp-data-tus-*", "cpp-data-hung-*")]
    before = {f for pattern in hung for f in glob.glob(pattern)}
    t0 = time.monotonic()
    res = index_project(load_compile_commands(database), FIX, workers=2, timeout_s=3)
    assert time.monotonic() - t0 < 30
    assert [(Path(s["file"]).name, s["status"]) for s in res.tu_status] == \
        [("util.cc", "ok"), ("main.cc", "timeout"), ("cfile.c", "ok")]
    assert {f for pattern in hung for f in glob.glob(pattern)} <= before  # it went with the pool's scratch


MAIN_SCRIPT = """
import json, os, sys
with open(os.environ["IMPORTS_LOG"], "a") as f:
    f.write(__name__ + "\\n")
if __name__ == "__main__":
    from cpp_data.clang_index.compile_db import load_compile_commands
    from cpp_data.clang_index.index import index_project
    res = index_project(load_compile_commands(sys.argv[1]), sys.argv[2], workers=2, timeout_s=60)
    print(json.dumps([s["status"] for s in res.tu_status]))
"""


def test_a_tus_process_does_not_run_the_main_script_again(database, tmp_path):
    """Each TU's process starts from the forkserver without running the build's main script (clang_index/pool.py
    _main_left_out): the script logs each time it runs, as `__main__` in its own process and as `__mp_main__` in
    any child that imports it again."""
    import os
    import subprocess
    import sys

    script, log = tmp_path / "main_script.py", tmp_path / "imports.log"
    script.write_text(MAIN_SCRIPT)
    done = subprocess.run([sys.executable, str(script), str(database), str(FIX)], capture_output=True, text=True,
                          env={**os.environ, "IMPORTS_LOG": str(log)}, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout) == ["ok", "ok", "ok"]
    assert log.read_text().split() == ["__main__"]


def test_googletest_configured_by_default_and_indexed(tmp_path):
    """Debian's googletest source ships no compile database: discovery configures it (sandboxed), turns on its
    own test and sample switches (99 TUs, where its defaults give 4), and libclang indexes its samples from that
    database cleanly, finding a test body's call into the code under test. The whole stage over all 99 TUs runs
    in the README's main job (CI) and in the container check; here a sample of TUs keeps the suite short."""
    need(GOOGLETEST)
    from cpp_data.clang_index.configure import discover

    found = discover(GOOGLETEST, tmp_path / "configure")
    assert found.database == "cmake" and found.sandbox == "bwrap", found.receipt()
    assert "gtest_build_tests" in found.reason and "gtest_build_samples" in found.reason
    commands = load_compile_commands(found.path)
    assert len(commands) >= 95
    samples = [c for c in commands if "/googletest/samples/" in c.file]
    assert len(samples) >= 8
    res = index_project(samples, GOOGLETEST, workers=2, timeout_s=120)
    assert [s["status"] for s in res.tu_status].count("ok") >= 0.95 * len(samples)
    fact = next(f for f in res.functions if f["name"] == "Factorial")
    assert fact["file"].endswith("googletest/samples/sample1.cc")
    name = {f["usr"]: f["name"] for f in res.functions}
    callers = {name.get(e["src"]) for e in res.edges if e["dst"] == fact["usr"] and e["kind"] == "call"}
    assert "(anonymous)::FactorialTest_Positive_Test::TestBody" in callers  # a test body calls Factorial


@pytest.mark.slow
def test_v6_edges_come_from_libclang_where_there_is_a_build(tmp_path):
    import pyarrow.parquet as pq

    proj = clang_fixture_source(tmp_path)
    sources = write_sources(tmp_path / "s.toml", [{"name": "fx", "url": str(proj), "license": "MIT"}])
    recipe = str(provenance_recipe(tmp_path / "recipe", "structure"))  # up to the structure columns
    run_cli("build", "--recipe", recipe, "--sources", str(sources), "--out", str(tmp_path / "out"), "--workers", "1",
            "--no-progress")
    build = build_dir(tmp_path / "out")
    rows = {r["source_path"]: r for f in sorted((build / "shards").glob("*.parquet"))
            for r in pq.read_table(f).to_pylist()}
    main = rows["src/main.cc"]
    assert json.loads(main["language_info"])["edges"] == "libclang"
    info = json.loads(main["build_info"])
    assert "main.cc" in info["command"] and info["status"] == "ok"
    assert json.loads(main["platform_info"])["std"] == "c++17"
    names = [c["name"] for c in main["chunk_boundaries"]]
    assert (names.index("main"), names.index("twice")) in {(e["from"], e["to"]) for e in main["call_edges"]}
    assert main["constituents"] == [{"source_repo": "fx", "source_commit": main["source_commit"],
                                     "source_path": "src/main.cc", "start": 0, "end": len(main["text"]),
                                     "license_spdx": "MIT"}]
    assert json.loads(rows["src/util.cc"]["language_info"])["edges"] == "libclang"
    assert info["directory"].startswith("<source>") and str(proj) not in info["command"]
    # again into another output directory, with another worker count: the same build, byte for byte (the TUs'
    # timings and the paths of the stage's scratch are no part of any output)
    run_cli("build", "--recipe", recipe, "--sources", str(sources), "--out", str(tmp_path / "out2"), "--workers",
            "2", "--no-progress")
    assert build_dir(tmp_path / "out2").name == build.name
    assert data_digests(build_dir(tmp_path / "out2")) == data_digests(build)


@pytest.mark.slow
def test_v5_dependency_documents_from_the_fixture(tmp_path):
    """A v5 build of the fixture project with its own compile database: preamble, then dependencies by level
    (leaves first), then the function; build_info is its compile command; pieces trace to the file bytes."""
    import pyarrow.parquet as pq

    proj = clang_fixture_source(tmp_path)
    sources = write_sources(tmp_path / "s.toml", [{"name": "fx", "url": str(proj), "license": "MIT"}])
    run_cli("build", "--version", "v5", "--sources", str(sources), "--out", str(tmp_path / "out"), "--workers", "1",
            "--no-progress")
    build = build_dir(tmp_path / "out")
    run_cli("validate", str(build))
    totals = json.loads((build / "manifest.json").read_text())["totals"]  # the hash split chose no file here:
    assert totals["valid_documents"] >= 1 and totals["train_documents"] >= 1, totals  # one is moved over
    rows = {r["target_name"]: r for f in sorted((build / "shards").glob("*.parquet"))
            for r in pq.read_table(f).to_pylist()}
    assert {"main", "fx::leaf", "fx::ping", "c_entry"} <= set(rows)
    main = rows["main"]
    text = main["text"]
    assert text.startswith('#include "util.h"\n') and "using namespace fx;" in text.split("int main()")[0]
    assert text.rstrip("\n").endswith("return sc;\n}")
    # dependencies: everything main reaches, leaves (level 0) before level 1, main last
    names = [c["source_path"] for c in main["constituents"]]
    assert names[-1] == "src/main.cc" and main["max_dep_level"] == 1
    pos = {name: text.find(snippet) for name, snippet in (("leaf", "int leaf(int x)"), ("pong", "int pong("),
                                                          ("add", "add(int"), ("main", "int main()"))}
    assert all(v >= 0 for v in pos.values()), pos
    assert pos["leaf"] < pos["pong"] < pos["main"] and pos["leaf"] < pos["add"] < pos["main"]
    assert "c_helper" not in text  # not reachable from main
    info = json.loads(main["build_info"])
    assert "main.cc" in info["command"] and "-std=c++17" in info["command"] and info["status"] == "ok"
    for c in main["constituents"]:
        piece = (proj / c["source_path"]).read_bytes()[c["start"]:c["end"]].decode()
        assert piece in text and c["license_spdx"] == "MIT"


def test_v5_trims_the_highest_level_first():
    from cpp_data.stages.dependency_documents import build_document

    def fn(usr, level, size):
        return {"usr": usr, "name": usr, "level": level, "file": "a.cc", "start_offset": 0, "end_offset": size,
                "text": f"// {usr}\n" + "x" * size}
    meta = {"repo_of": {u: "r" for u in "abcd"}, "commit_of": {u: "c" for u in "abcd"},
            "license_of": {("r", "a.cc"): {"license_spdx": "MIT", "license_source": "declared",
                                           "license_confidence": 1.0, "license_family": "permissive"}}}
    root, deps = fn("d", 3, 100), [fn("a", 0, 300), fn("b", 1, 300), fn("c", 2, 300)]
    doc = build_document(root, deps, [], meta, budget=850)
    assert [c["start"] for c in doc["constituents"]] == [0, 0, 0] and "// c\n" not in doc["text"]
    assert doc["text"].index("// a\n") < doc["text"].index("// b\n") < doc["text"].index("// d\n")
    assert doc["max_dep_level"] == 1


def test_a_database_written_in_another_checkout_is_read_as_this_tree(tmp_path):
    """A repository's own compile_commands.json names the checkout it was generated in; the source at its pin
    lies elsewhere. relocate_commands finds that checkout's root from the files and moves every path under it
    (directory, file, `-I` and `--include-directory=` arguments) to this tree, leaves out a command for a file
    that is in neither, and real libclang then indexes the moved commands cleanly, with the fixture's call."""
    import shutil

    from cpp_data.clang_index.compile_db import relocate_commands

    root = tmp_path / "pinned"
    shutil.copytree(FIX, root)
    (root / "src" / "broken.cc").unlink()
    there = "/home/dev/proj"  # where the database was generated: a path that does not exist where the test runs
    define = "'-DNAME=\"x y\"'"  # as main.cc needs it
    db = [{"directory": f"{there}/src", "file": f, "command": f"c++ -I{there}/include {define} -std=c++17 -c {f}"}
          for f in ("util.cc", "main.cc")]
    db += [{"directory": f"{there}/src", "file": f"{there}/src/cfile.c",
            "arguments": ["cc", f"--include-directory={there}/include", "-std=c11", "-c", f"{there}/src/cfile.c"]},
           {"directory": "/elsewhere", "file": "gen.cc", "command": "c++ -c gen.cc"}]
    path = tmp_path / "compile_commands.json"
    path.write_text(json.dumps(db))
    commands, moved_from, left_out = relocate_commands(load_compile_commands(path), root)
    assert moved_from == there and left_out == 1
    assert [Path(c.file).relative_to(root).as_posix() for c in commands] == ["src/util.cc", "src/main.cc",
                                                                              "src/cfile.c"]
    assert all(c.directory == str(root / "src") for c in commands)
    assert f"-I{root}/include" in commands[0].arguments
    assert f"--include-directory={root}/include" in commands[2].arguments
    assert not any(there in a for c in commands for a in c.arguments)
    # a database already written for this tree is left as it is
    assert relocate_commands(commands, root) == (commands, None, 0)
    res = index_project(commands, root, workers=2, timeout_s=60)
    assert [s["status"] for s in res.tu_status] == ["ok"] * 3
    name = {f["usr"]: f["name"] for f in res.functions}
    assert ("main", "twice") in {(name.get(e["src"]), name.get(e["dst"])) for e in res.edges}


@pytest.mark.slow
def test_diagnostics_from_files_outside_the_tree_are_withheld(tmp_path):
    """A compile database that makes clang read a file outside the tree (`-include ../../secret.txt`, relative
    to the command's directory, and the same by absolute path) gets TU errors located there; clang quotes the
    tokens it trips on, so those messages are published as withheld, while one in the tree keeps its text."""
    import pyarrow.parquet as pq

    proj = tmp_path / "proj"
    (proj / "src").mkdir(parents=True)
    body = "".join(f"int twice_{k}(int x) {{\n  return x * {k} + 2;\n}}\n\n" for k in range(12))
    (proj / "src" / "a.cc").write_text(body + "int main() { return twice_3(1); }\n")  # long enough to be kept
    (proj / "src" / "b.cc").write_text(body.replace("twice_", "thrice_"))
    (tmp_path / "secret.txt").write_text("root:x:0:0:root:/root:/bin/bash\nsecret_token_abc123 = 1\n")
    (proj / "compile_commands.json").write_text(json.dumps([  # a main file is parsed once: two files
        {"directory": str(proj / "src"), "file": "a.cc", "command": "c++ -include ../../secret.txt -c a.cc"},
        {"directory": str(proj / "src"), "file": "b.cc",
         "command": f"c++ -include {tmp_path}/secret.txt -include missing_in_tree.h -c b.cc"}]))
    sources = write_sources(tmp_path / "s.toml", [{"name": "fx", "url": str(proj), "license": "MIT"}])
    out = tmp_path / "out"
    run_cli("build", "--recipe", str(provenance_recipe(tmp_path / "recipe", "structure")), "--sources",
            str(sources), "--out", str(out), "--workers", "1", "--no-progress")
    status = [r for f in (out / "cache" / "semantics").glob("*/tu_status.parquet")
              for r in pq.read_table(f).to_pylist()]
    messages = [m for r in status for m in r["error_messages"]]
    assert len(status) == 2 and all(r["status"] == "errors" for r in status), status
    assert sum("(withheld)" in m for m in messages) >= 2, messages
    assert any("'missing_in_tree.h' file not found" in m for m in messages), messages
    leaked = [p for p in out.rglob("*") if p.is_file() and b"secret_token_abc123" in p.read_bytes()]
    assert leaked == [] and not any("secret_token" in m or "'root'" in m for m in messages), (leaked, messages)
