"""The per-TU cache (clang_index/tu_cache.py): a TU is reused when every file its parse read is unchanged, at
whatever path the tree lies, verified before reuse; real libclang, real files, the semantics stage as it runs."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pyarrow.parquet as pq
from test_infer import TREE, run_semantics, write

from cpp_data.pipeline.runner.cache import checksum_outputs


def outputs(out: Path) -> dict:
    return {k: v for k, v in checksum_outputs(out).items() if k.endswith(".parquet")}


def test_unchanged_tus_are_reused_with_the_same_bytes_and_a_changed_header_reparses_its_readers(tmp_path):
    shared = tmp_path / "shared"
    root = write(tmp_path / "p", TREE)
    cold = run_semantics(root, tmp_path / "cold", shared)
    assert (cold["tus_reused"], cold["tus_parsed"]) == (0, 3)
    warm = run_semantics(root, tmp_path / "warm", shared)
    assert (warm["tus_reused"], warm["tus_parsed"]) == (3, 0)
    assert outputs(tmp_path / "warm") == outputs(tmp_path / "cold")
    moved = shutil.copytree(root, tmp_path / "elsewhere" / "p")  # another build's extraction of the same pin
    assert run_semantics(moved, tmp_path / "moved", shared)["tus_reused"] == 3
    assert outputs(tmp_path / "moved") == outputs(tmp_path / "cold")
    with open(root / "include/proj/util.h", "a") as f:  # read by util.cc and, through mix.h, app.cc
        f.write("// a comment\n")
    edited = run_semantics(root, tmp_path / "edited", shared)
    assert (edited["tus_reused"], edited["tus_parsed"]) == (1, 2)  # all.cc reads none of it
    assert edited["tus_clean"] == 3


def test_a_header_no_tu_read_changes_nothing_and_a_damaged_entry_is_parsed_again(tmp_path):
    shared = tmp_path / "shared"
    root = write(tmp_path / "p", TREE)
    run_semantics(root, tmp_path / "cold", shared)
    write(root, {"src/part.h": "int unrelated();\n"})  # a basename no TU read: nothing changes
    assert run_semantics(root, tmp_path / "a", shared)["tus_reused"] == 3
    for r in sorted((shared / "tus" / "results").rglob("*.json")):
        r.write_bytes(r.read_bytes().replace(b'"status": "ok"', b'"status": "OK"'))  # same size, other bytes
    again = run_semantics(root, tmp_path / "c", shared)
    assert again["tus_reused"] == 0 and again["tus_clean"] == again["tus"]
    assert outputs(tmp_path / "c") == outputs(tmp_path / "a")


def test_a_new_header_earlier_on_the_search_path_is_seen(tmp_path):
    """The repository's own database gives fixed arguments; a header added beside the includer, where a quoted
    include looks first, is what the next parse reads, though no file the last parse read changed."""
    shared = tmp_path / "shared"
    database = [{"directory": ".", "file": "src/a.cc", "arguments": ["c++", "-Iinclude", "-c", "src/a.cc"]}]
    root = write(tmp_path / "p", {"include/util.h": "int one();\n", "compile_commands.json": json.dumps(database),
                                  "src/a.cc": '#include "util.h"\nint a() { return one(); }\n'})
    run_semantics(root, tmp_path / "cold", shared)
    write(root, {"src/util.h": "int two();\nint one();\n"})
    again = run_semantics(root, tmp_path / "again", shared)
    assert again["tus_reused"] == 0 and again["tus_clean"] == 1
    included = {r["included"] for r in pq.read_table(tmp_path / "again" / "includes.parquet").to_pylist()}
    assert included == {"src/util.h"}


def test_the_cache_is_off_without_a_shared_directory_or_by_the_recipe(tmp_path):
    root = write(tmp_path / "p", TREE)
    assert run_semantics(root, tmp_path / "a")["tus_reused"] == 0
    run_semantics(root, tmp_path / "b", tmp_path / "shared", tu_cache=False)
    assert not (tmp_path / "shared").exists()


def test_how_long_each_parse_took_is_recorded_to_order_the_next_build(tmp_path):
    """The manifest keeps how long each TU's parse took (never in the result), and seconds_before gives it back
    for the same command, 0 for a TU the cache has not seen: the longest changed TUs start first."""
    from cpp_data.clang_index.compile_db import CompileCommand, find_resource_dir
    from cpp_data.clang_index.tu_cache import Placeless, TUCache, tree_names

    shared = tmp_path / "shared"
    root = write(tmp_path / "p", TREE)
    run_semantics(root, tmp_path / "cold", shared)
    newest = [json.loads(m.read_text())[0] for m in sorted((shared / "tus" / "manifests").rglob("*.json"))]
    assert len(newest) == 3 and all(v["seconds"] > 0 for v in newest)
    assert not any("seconds" in json.loads(r.read_text()) for r in (shared / "tus" / "results").rglob("*.json"))

    root = root.resolve()
    cache = TUCache(tmp_path / "own", Placeless([(str(root), "<source>")]), tree_names(root), str(find_resource_dir()))
    cmd = CompileCommand(str(root), str(root / "src/util.cc"), ["c++", "-Iinclude", "-c", "src/util.cc"])
    other = CompileCommand(str(root), str(root / "src/app.cc"), ["c++", "-Iinclude", "-c", "src/app.cc"])
    cache.store(cmd, {"status": "ok", "reads": [cmd.file], "seconds": 3.25})
    assert (cache.seconds_before(cmd), cache.seconds_before(other)) == (3.25, 0.0)
