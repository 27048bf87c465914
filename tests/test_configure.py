"""Compile-database discovery on small real CMake projects: real cmake, real bubblewrap, nothing mocked."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from cpp_data.clang_index.configure import discover, sandbox_problem, switch_options

pytestmark = pytest.mark.skipif(shutil.which("cmake") is None, reason="cmake not installed (scripts/setup.sh)")

LIB = "int twice(int x) { return 2 * x; }\n"
TEST = '#include "../src/lib.h"\nint main() { return twice(1) == 2 ? 0 : 1; }\n'


def project(root: Path, cmake: str, files: dict[str, str] | None = None) -> Path:
    root.mkdir(parents=True)
    (root / "CMakeLists.txt").write_text("cmake_minimum_required(VERSION 3.13)\nproject(demo CXX)\n" + cmake)
    for rel, text in {"src/lib.cc": LIB, "src/lib.h": "int twice(int x);\n", "test/t.cc": TEST,
                      **(files or {})}.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


def tus(d) -> set[str]:
    return {Path(e["file"]).name for e in json.loads(d.path.read_text())} if d.path else set()


def test_sandbox_works_here():
    assert sandbox_problem() is None  # .ci/run installs bubblewrap; the tests below rely on it


def test_own_database_wins(tmp_path):
    root = project(tmp_path / "p", "add_library(demo src/lib.cc)\n")
    (root / "compile_commands.json").write_text("[]")
    d = discover(root, tmp_path / "work")
    assert d.database == "source" and d.attempts == [] and d.sandbox is None


def test_project_test_switches_are_turned_on(tmp_path):
    """A header-only-style project whose only TU is behind its own DEMO_BUILD_TESTS switch (default OFF)."""
    root = project(tmp_path / "p", 'option(DEMO_BUILD_TESTS "build tests" OFF)\nadd_library(demo INTERFACE)\n'
                                    "if(DEMO_BUILD_TESTS)\n  add_executable(t test/t.cc src/lib.cc)\nendif()\n")
    d = discover(root, tmp_path / "work")
    assert d.database == "cmake" and d.sandbox == "bwrap"
    assert [a.options for a in d.attempts] == [["-DBUILD_TESTING=ON"], ["-DBUILD_TESTING=ON", "-DDEMO_BUILD_TESTS=ON"]]
    assert tus(d) == {"t.cc", "lib.cc"}
    assert not (root / "CMakeCache.txt").exists()  # never configured into the source tree


def test_missing_test_submodule_falls_back_to_tests_off(tmp_path):
    root = project(tmp_path / "p", 'option(DEMO_BUILD_TESTS "tests" ON)\nadd_library(demo src/lib.cc)\n'
                                    "if(DEMO_BUILD_TESTS)\n  add_subdirectory(third_party/googletest)\n"
                                    "  add_executable(t test/t.cc)\nendif()\n")
    d = discover(root, tmp_path / "work")
    assert d.database == "cmake", d.receipt()
    first, last = d.attempts[0], d.attempts[-1]
    assert not first.ok and any("third_party/googletest" in ln for ln in first.tail)
    assert last.ok and "-DDEMO_BUILD_TESTS=OFF" in last.options
    assert tus(d) == {"lib.cc"}


def test_network_and_writes_outside_the_build_dir_are_refused(tmp_path):
    """The project's own CMake code runs sandboxed: no network, a read-only source tree; a failing configure
    is recorded, never fatal."""
    root = project(tmp_path / "p", 'file(WRITE "${CMAKE_SOURCE_DIR}/pwned" "x")\n'
                                    "file(DOWNLOAD http://127.0.0.1:9/x ${CMAKE_BINARY_DIR}/x STATUS s)\n"
                                    "add_library(demo src/lib.cc)\n")
    d = discover(root, tmp_path / "work")
    assert d.database == "none" and not (root / "pwned").exists()
    assert all(not a.ok for a in d.attempts) and d.reason.startswith("every cmake configure failed")
    assert any("pwned" in ln for ln in d.attempts[0].tail)


def test_hung_configure_is_killed(tmp_path):
    root = project(tmp_path / "p", 'execute_process(COMMAND sleep 60)\nadd_library(demo src/lib.cc)\n')
    d = discover(root, tmp_path / "work", timeout_s=2)
    assert d.database == "none" and all(a.seconds < 20 for a in d.attempts)
    assert "killed after 2s" in d.attempts[0].tail[-1]


def test_configure_off_and_no_build_system(tmp_path):
    root = project(tmp_path / "p", "add_library(demo src/lib.cc)\n")
    d = discover(root, tmp_path / "work", configure=False)
    assert d.database == "none" and "configure = false" in d.reason and d.attempts == []
    bare = tmp_path / "bare"
    bare.mkdir()
    assert "no compile_commands.json" in discover(bare, tmp_path / "w2").reason


def test_switch_names():
    # tests of a GPU language are not C++ for libclang: pybind11's PYBIND11_CUDA_TESTS made every command nvcc's
    cache_names = ["gtest_build_tests", "JSON_BuildTests", "FOO_BUILD_EXAMPLES", "FMT_TEST", "X_ENABLE_TESTING",
                   "INSTALL_GTEST", "FOO_DISABLE_TESTS", "gtest_disable_pthreads", "BUILD_TESTING",
                   "PYBIND11_CUDA_TESTS", "FOO_HIP_TESTS", "X_SYCL_EXAMPLES", "CUDA_BUILD_TESTS"]
    tmp = Path("/nonexistent")
    found = switch_options(tmp, tmp / "CMakeCache.txt")
    assert found == {}
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        cache = Path(d) / "CMakeCache.txt"
        cache.write_text("\n".join(f"{n}:BOOL=OFF" for n in cache_names))
        assert set(switch_options(Path(d), cache)) == {"gtest_build_tests", "JSON_BuildTests", "FOO_BUILD_EXAMPLES",
                                                       "FMT_TEST", "X_ENABLE_TESTING"}


def test_a_failed_configure_says_why(tmp_path):
    """A project needing a newer CMake than the machine's: the reason (the build summary's coverage line) carries
    CMake's own error line, not only "every cmake configure failed"."""
    root = project(tmp_path / "p", "")
    text = (root / "CMakeLists.txt").read_text().replace("VERSION 3.13", "VERSION 99.0")
    (root / "CMakeLists.txt").write_text(text)
    d = discover(root, tmp_path / "work")
    assert d.database == "none" and all(not a.ok for a in d.attempts)
    assert d.reason.startswith("every cmake configure failed (") and "99.0 or higher is required" in d.reason, d.reason


def test_a_benchmark_switch_around_an_empty_submodule_is_turned_off(tmp_path):
    """leveldb's shape: LEVELDB_BUILD_BENCHMARKS (not a test switch) guards add_subdirectory of an empty
    submodule; tests-off still fails, and the retry turns off the option guarding the error site."""
    root = project(tmp_path / "p", 'option(DEMO_BUILD_BENCHMARKS "benchmarks" ON)\nadd_library(demo src/lib.cc)\n'
                                    "if(DEMO_BUILD_BENCHMARKS)\n  add_subdirectory(third_party/benchmark)\nendif()\n")
    (root / "third_party" / "benchmark").mkdir(parents=True)  # a submodule nobody checked out
    d = discover(root, tmp_path / "work")
    assert d.database == "cmake", d.receipt()
    assert d.attempts[-1].options == ["-DBUILD_TESTING=OFF", "-DDEMO_BUILD_BENCHMARKS=OFF"]
    assert tus(d) == {"lib.cc"}
