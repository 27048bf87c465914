"""Git submodules: walked recursively with `submodules = true`, each at the commit its parent records and with
its own license; real repositories made here, submodules added from local paths."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from conftest import build_dir, make_git_repo, provenance_build, write_sources

from cpp_data.pipeline.runner.sources import SourcesError, load_sources, lock_sources, read_lock, write_lock
from cpp_data.stages.lib.submodules import resolve_url

REAL = Path(__file__).parent / "fixtures" / "real_repos"
ENV = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.org", "GIT_COMMITTER_NAME": "t",
       "GIT_COMMITTER_EMAIL": "t@example.org", "GIT_AUTHOR_DATE": "2024-01-01T00:00:00Z",
       "GIT_COMMITTER_DATE": "2024-01-01T00:00:00Z"}


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", "-c", "protocol.file.allow=always", *args], cwd=cwd, env=ENV, check=True,
                          capture_output=True, text=True).stdout.strip()


def _commit(repo: Path, message: str) -> str:
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", message)
    return _git(repo, "rev-parse", "HEAD")


def test_relative_submodule_urls_are_read_against_the_parents():
    assert resolve_url("../googletest.git", "https://github.com/google/re2.git") == \
        "https://github.com/google/googletest.git"
    assert resolve_url("./sub", "/srv/git/top") == "/srv/git/top/sub"
    assert resolve_url("https://example.org/x.git", "/srv/top") == "https://example.org/x.git"


def test_submodules_need_a_git_source_and_are_pinned(tmp_path):
    repo = tmp_path / "repo"
    make_git_repo(repo, {"a.h": "int a;\n"})
    spec = load_sources(write_sources(tmp_path / "s.toml", [{"name": "r", "url": str(repo),
                                                             "submodules": True}])).specs[0]
    pin = lock_sources([spec])[0]
    write_lock(tmp_path / "s.lock", [pin])
    assert read_lock(tmp_path / "s.lock")[0] == pin and pin.pin()["submodules"] is True
    with pytest.raises(SourcesError, match="'submodules' must be true or false"):
        load_sources(write_sources(tmp_path / "b.toml", [{"name": "d", "url": str(repo), "submodules": "yes"}]))
    (tmp_path / "dir").mkdir()
    with pytest.raises(SourcesError, match="'submodules' needs a git source"):
        lock_sources(load_sources(write_sources(tmp_path / "d.toml", [{"name": "d", "url": str(tmp_path / "dir"),
                                                                      "submodules": True}])).specs)


def test_a_submodule_out_of_scope_is_not_fetched():
    from cpp_data.pipeline.contract.source import LockedSource

    src = LockedSource("s", "u", "git", None, "0" * 40, "", include=("src/*", "*/include/*"),
                       exclude=("third_party/big/*",), submodules=True)
    assert src.may_hold("third_party/gtest")  # */include/* may reach into it
    assert not src.may_hold("third_party/big")
    assert not LockedSource("s", "u", "git", None, "0" * 40, "", include=("src/*",)).may_hold("third_party/x")


@pytest.mark.slow
def test_submodules_are_walked_at_the_pinned_commits_each_with_its_own_license(tmp_path):
    """top (fmt's MIT LICENSE) holds leveldb (its BSD-3-Clause LICENSE) as third_party/leveldb, which holds an
    inner repository with no license file as deps/inner. leveldb moves on after the parent recorded it: the
    build reads the recorded commit. Each submodule's files take its own license, never the parent's, and the
    ledger's evidence names the submodule. A source without `submodules` skips the gitlink as before."""
    inner = tmp_path / "inner"
    inner_sha = make_git_repo(inner, {"inner.h": "#pragma once\nint inner_value(int x);\n" * 4})
    lib = tmp_path / "leveldb"
    make_git_repo(lib, {p: (REAL / "google+leveldb" / p).read_bytes() for p in ("LICENSE", "util/coding.h")})
    _git(lib, "submodule", "add", "-q", str(inner), "deps/inner")
    lib_sha = _commit(lib, "add inner")
    (lib / "util" / "later.h").write_text("#pragma once\nint later(int);\n" * 4)
    _commit(lib, "a file the parent does not pin")
    top = tmp_path / "top"
    make_git_repo(top, {"LICENSE": (REAL / "fmtlib+fmt" / "LICENSE").read_bytes(),
                        "src/format.h": (REAL / "fmtlib+fmt/include/fmt/format.h").read_bytes()})
    _git(top, "submodule", "add", "-q", str(lib), "third_party/leveldb")
    _git(top / "third_party/leveldb", "checkout", "-q", lib_sha)
    _commit(top, "add leveldb")
    sources = write_sources(tmp_path / "s.toml", [{"name": "top", "url": str(top), "submodules": True},
                                                  {"name": "flat", "url": str(top)}])
    provenance_build(sources, tmp_path / "out")
    build = build_dir(tmp_path / "out")
    ledger = pq.read_table(build / "provenance" / "ledger.parquet").to_pylist()
    got = {(r["source_repo"], r["source_path"]): (r["decision"], r["reason"], r["license_spdx"]) for r in ledger
           if r["source_path"].endswith(".h") and r["source_repo"] == "top" or r["reason"] == "submodule"}
    assert got == {
        ("top", "src/format.h"): ("kept", "", "MIT"),
        ("top", "third_party/leveldb/util/coding.h"): ("kept", "", "BSD-3-Clause"),
        ("top", "third_party/leveldb/deps/inner/inner.h"): ("license_refused", "no_license", "NOASSERTION"),
        ("flat", "third_party/leveldb"): ("skipped", "submodule", None),
    }
    evidence = {r["source_path"]: r["license_evidence"] for r in ledger if r["source_repo"] == "top"}
    assert evidence["third_party/leveldb/util/coding.h"] == (
        f"submodule third_party/leveldb at {lib_sha[:12]}: third_party/leveldb/: LICENSE (BSD-3-Clause); "
        "license file")
    assert evidence["third_party/leveldb/deps/inner/inner.h"] == (
        f"submodule third_party/leveldb/deps/inner at {inner_sha[:12]}: the submodule with no license notice or "
        "license file of its own (the repository's license does not cover it)")
    walked = [json.loads(p.read_text())["counts"].get("submodules")
              for p in (tmp_path / "out" / "cache" / "collect").glob("*/stage.json")]
    assert sorted(walked, key=str) == [None, [{"path": "third_party/leveldb", "url": str(lib), "commit": lib_sha},
                                              {"path": "third_party/leveldb/deps/inner", "url": str(inner),
                                               "commit": inner_sha}]]
