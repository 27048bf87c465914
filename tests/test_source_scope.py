"""Source scope: per-source `include`/`exclude` path globs of the sources file, on real git repositories made here."""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq
import pytest
from conftest import build_dir, make_git_repo, provenance_build, write_sources

from cpp_data.pipeline.runner.sources import SourcesError, load_sources, lock_sources, read_lock, write_lock

LEVELDB = Path(__file__).parent / "fixtures" / "real_repos" / "google+leveldb"


def _leveldb() -> dict[str, bytes]:
    return {str(p.relative_to(LEVELDB)): p.read_bytes() for p in sorted(LEVELDB.rglob("*")) if p.is_file()}


def test_include_and_exclude_are_checked_locked_and_pinned(tmp_path):
    repo = tmp_path / "leveldb"
    make_git_repo(repo, _leveldb())
    sources = write_sources(tmp_path / "s.toml", [{"name": "leveldb", "url": str(repo), "include": ["util/*"],
                                                   "exclude": ["*_test.cc"]}])
    spec = load_sources(sources).specs[0]
    assert (spec.include, spec.exclude) == (("util/*",), ("*_test.cc",))
    pin = lock_sources([spec])[0]
    write_lock(tmp_path / "s.lock", [pin])
    locked = read_lock(tmp_path / "s.lock")[0]
    assert locked == pin and locked.pin()["scope"] == {"include": ["util/*"], "exclude": ["*_test.cc"]}
    assert locked.in_scope("util/coding.h") and not locked.in_scope("util/env_test.cc")
    assert not locked.in_scope("db/db_impl.cc")
    plain = lock_sources([load_sources(write_sources(tmp_path / "p.toml", [{"name": "l", "url": str(repo)}])).specs[0]])
    assert "scope" not in plain[0].pin()  # a source without globs keeps its fingerprint


@pytest.mark.parametrize("value, says", [
    ("util/*", "'include' must be a list of path globs"),
    ([""], "'include' must be a list of path globs"),
    (["../other/*"], "'include' glob '../other/*' must be a path inside the source"),
    (["/usr/include/*"], "'include' glob '/usr/include/*' must be a path inside the source"),
])
def test_a_bad_glob_list_is_refused_in_one_line(tmp_path, value, says):
    sources = write_sources(tmp_path / "s.toml", [{"name": "x", "url": str(tmp_path), "include": value}])
    with pytest.raises(SourcesError) as err:
        load_sources(sources)
    assert says in str(err.value) and str(sources) in str(err.value) and "\n" not in str(err.value)


@pytest.mark.slow
def test_a_build_collects_only_the_included_files(tmp_path):
    """leveldb with include = ["util/*", "table/*"], exclude = ["table/*.cc"]: only util/coding.h is collected,
    the other files are ledger rows `skipped:out_of_scope`, and the root LICENSE (itself out of scope) still
    gives coding.h its license."""
    repo = tmp_path / "leveldb"
    make_git_repo(repo, _leveldb())
    sources = write_sources(tmp_path / "s.toml", [{"name": "leveldb", "url": str(repo), "ref": "main",
                                                   "include": ["util/*", "table/*"], "exclude": ["table/*.cc"]}])
    provenance_build(sources, tmp_path / "out")
    ledger = pq.read_table(build_dir(tmp_path / "out") / "provenance" / "ledger.parquet").to_pylist()
    got = {r["source_path"]: (r["decision"], r["reason"], r["license_spdx"]) for r in ledger}
    assert got == {"util/coding.h": ("kept", "", "BSD-3-Clause"),
                   "db/db_impl.cc": ("skipped", "out_of_scope", None),
                   "table/block.cc": ("skipped", "out_of_scope", None),
                   "LICENSE": ("skipped", "out_of_scope", None)}
