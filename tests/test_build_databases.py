"""Compile databases from Makefile projects by a sandboxed dry run (clang_index/make_dry.py) and from Meson
projects with retries (clang_index/meson_setup.py), with real make, meson,
bubblewrap and libclang."""

from __future__ import annotations

import shutil

import pyarrow.parquet as pq
import pytest
from test_infer import run_semantics, write

from cpp_data.clang_index.compile_db import load_compile_commands
from cpp_data.clang_index.configure import discover
from cpp_data.clang_index.make_dry import parse_dry_run
from cpp_data.clang_index.meson_setup import meson_program

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="make not installed")

MAKEFILE = """CXX = c++
CXXFLAGS = -std=c++17 -Iinclude -DDEMO_MODE=2
all: prog
prog: src/a.o src/b.o
\t$(CXX) -o $@ $^
src/%.o: src/%.cc
\t$(CXX) $(CXXFLAGS) -c $< -o $@
test: tests/t.o
tests/t.o: tests/t.cc
\tcd tests && $(CXX) -std=c++17 -I../include -c t.cc -o t.o
.PHONY: all test
"""
TREE = {"Makefile": MAKEFILE, "include/demo.h": "#pragma once\nint twice(int x);\n",
        "src/a.cc": '#include "demo.h"\n#if DEMO_MODE != 2\n#error "needs the Makefile\'s flags"\n#endif\n'
                    "int twice(int x) { return 2 * x; }\n",
        "src/b.cc": '#include "demo.h"\nint main() { return twice(1); }\n',
        "tests/t.cc": '#include "demo.h"\nint t() { return twice(2); }\n'}


def test_a_makefile_project_gets_its_commands_from_a_dry_run(tmp_path):
    root = write(tmp_path / "p", TREE)
    d = discover(root, tmp_path / "work")
    assert d.database == "make" and d.sandbox == "bwrap", d.receipt()
    assert d.attempts[-1].options == ["-n", "-B", "-k", "-w", "all", "test"]
    commands = {c.file: c for c in load_compile_commands(d.path)}
    assert sorted(commands) == [str(root / f) for f in ("src/a.cc", "src/b.cc", "tests/t.cc")]
    assert "-DDEMO_MODE=2" in commands[str(root / "src/a.cc")].arguments
    assert commands[str(root / "tests/t.cc")].directory == str(root / "tests")  # `cd tests && ...`
    assert not list(root.rglob("*.o"))  # nothing was built
    counts = run_semantics(root, tmp_path / "out")
    assert counts["database"] == "make" and counts["tus"] == counts["tus_clean"] == 3, counts
    assert {t["database"] for t in pq.read_table(tmp_path / "out" / "tu_status.parquet").to_pylist()} == {"make"}


def test_a_hostile_or_hung_makefile_is_held_by_the_sandbox(tmp_path):
    """GNU make runs $(shell ...) even under -n: the tree stays read-only, and a hung one is killed."""
    root = write(tmp_path / "p", {**TREE, "Makefile": "X := $(shell touch $(CURDIR)/pwned; echo x)\n" + MAKEFILE})
    assert discover(root, tmp_path / "work").database == "make" and not (root / "pwned").exists()
    hung = write(tmp_path / "h", {**TREE, "Makefile": "X := $(shell sleep 60)\n" + MAKEFILE})
    d = discover(hung, tmp_path / "work2", timeout_s=2)
    assert d.database == "none" and "killed after 2s" in d.attempts[-1].tail[-1]


def test_the_dry_run_output_is_read_like_a_shell():
    out = ("make[1]: Entering directory '/p/lib'\n"
           "ccache g++-12 -O2 -DX='a b' -c x.cpp -o x.o && echo done\n"
           "libtool --tag=CXX --mode=compile clang++ -c y.cc -o y.lo\n"
           "make[1]: Leaving directory '/p/lib'\n"
           "gcc -o prog x.o\n"
           "gcc -c -o /p/z.o /p/z.c ; gcc -c /p/z.c\n")
    entries = parse_dry_run(out, "/p")
    assert [(e["directory"], e["file"]) for e in entries] == [("/p/lib", "/p/lib/x.cpp"), ("/p/lib", "/p/lib/y.cc"),
                                                              ("/p", "/p/z.c")]
    assert entries[0]["arguments"][:3] == ["g++-12", "-O2", "-DX=a b"]


@pytest.mark.skipif(meson_program() is None, reason="meson not installed (pyproject.toml dependency)")
def test_a_meson_project_whose_optional_dependency_is_missing_is_configured_without_it(tmp_path):
    """`meson setup` fails on a dependency that is not installed; the retry turns off the option whose `if`
    guards the failing line (libzim's with_xapian), and subprojects are never downloaded."""
    root = write(tmp_path / "p", {
        "meson.build": "project('demo', 'cpp')\nif get_option('with_fancy')\n"
                       "  dep = dependency('surely-not-installed-fancy')\nendif\n"
                       "executable('demo', 'src/a.cc', include_directories: include_directories('include'))\n",
        "meson_options.txt": "option('with_fancy', type: 'boolean', value: true)\n"
                             "option('tests', type: 'boolean', value: true)\n",
        "include/demo.h": "int twice(int x);\n", "src/a.cc": '#include "demo.h"\nint main() { return 0; }\n'})
    d = discover(root, tmp_path / "work")
    assert d.database == "meson", d.receipt()
    assert [a.options for a in d.attempts] == [["setup", "--wrap-mode=nofallback"],
                                               ["setup", "--wrap-mode=nofallback", "-Dtests=false"],
                                               ["setup", "--wrap-mode=nofallback", "-Dtests=false",
                                                "-Dwith_fancy=false"]]
    assert [c.file for c in load_compile_commands(d.path)] == [str(root / "src/a.cc")]
