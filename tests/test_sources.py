"""Locking: refs resolve to commits, directories to tree digests; builds record pins, never branch names."""

from __future__ import annotations

import json
import subprocess

import pytest
from conftest import GOOGLETEST, build_dir, make_git_repo, need, provenance_build, run_cli, write_sources

from cpp_data.pipeline.runner.sources import load_sources, read_lock


def _files():
    need(GOOGLETEST)
    return {f"src/{p.name}": p.read_bytes() for p in sorted((GOOGLETEST / "googletest/src").glob("*.cc"))[:6]}


def test_lock_resolves_branch_tag_and_file_url(tmp_path):
    repo = tmp_path / "repo"
    sha = make_git_repo(repo, _files(), branch="develop")
    subprocess.run(["git", "tag", "v1.0"], cwd=repo, check=True)
    sources = write_sources(tmp_path / "s.toml", [
        {"name": "by-branch", "url": str(repo), "ref": "develop"},
        {"name": "by-tag", "url": f"file://{repo}", "ref": "v1.0"},
        {"name": "by-sha", "url": str(repo), "ref": sha},
        {"name": "plain", "url": str(repo / "src")},
    ])
    proc = run_cli("sources", "lock", str(sources))
    locked = {s.name: s for s in read_lock(sources.with_suffix(".lock"))}
    assert locked["by-branch"].commit == sha and locked["by-branch"].requested_ref == "develop"
    assert locked["by-tag"].commit == sha
    assert locked["by-sha"].commit == sha
    assert locked["plain"].kind == "dir" and locked["plain"].commit.startswith("tree:")
    assert sha in proc.stdout


@pytest.mark.slow
def test_build_records_pins_and_moves_only_changed_sources(tmp_path):
    repo = tmp_path / "repo"
    first = make_git_repo(repo, _files())
    other = tmp_path / "other"
    make_git_repo(other, {f"x/{k}": v for k, v in list(_files().items())[:2]})
    sources = write_sources(tmp_path / "s.toml", [
        {"name": "moving", "url": f"file://{repo}", "ref": "main"},
        {"name": "steady", "url": str(other), "ref": "main"},
    ])
    (other / "x" / "draft.cc").write_text("int draft();\n")  # a user's edit, not committed
    out = tmp_path / "out"
    first_build = provenance_build(sources, out, stages=("semantics",))
    warning = next(ln for ln in first_build.stderr.splitlines() if ln.startswith("warning: source steady"))
    assert "1 file(s)" in warning and str(other) in warning and "not read" in warning, warning
    assert "source moving" not in first_build.stderr  # a file:// remote has no working tree of ours to look at
    manifest = json.loads((build_dir(out) / "manifest.json").read_text())
    pins = {s["name"]: s for s in manifest["sources"]}
    assert pins["moving"]["commit"] == first and pins["moving"]["requested_ref"] == "main"
    # move the branch: a new commit; relock; only `moving`'s per-source stages and corpus stages rerun
    (repo / "src" / "new.cc").write_bytes((GOOGLETEST / "googletest/src/gtest-port.cc").read_bytes())
    subprocess.run(["git", "add", "-A"], cwd=repo, check=True)
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@e.org", "commit", "-qm", "more"], cwd=repo,
                   check=True)
    run_cli("sources", "lock", str(sources))
    again = provenance_build(sources, out, stages=("semantics",))
    ran = {ln.split("] ", 1)[1].split(":")[0] for ln in again.stdout.splitlines() if ": running" in ln}
    assert ran == {"collect[moving]", "filter[moving]", "decontaminate[moving]", "license[moving]", "semantics[moving]",
                   "exact_dedup", "near_dedup", "shards", "ledger"}  # the recipe: provenance stages and semantics
    builds = sorted(d.name for d in (out / "builds").iterdir() if d.is_dir())
    assert len(builds) == 2  # the new snapshot beside the old one


def test_sources_file_with_license_field_parses(tmp_path):
    f = write_sources(tmp_path / "s.toml", [{"name": "a", "url": "/tmp", "license": "MIT"}])
    assert load_sources(f).specs[0].license == "MIT"


def test_a_git_url_that_does_not_answer_gives_gits_own_cause(tmp_path):
    """git ls-remote's last stderr lines are hints ('and the repository exists.'), not the cause; the fatal:
    line says what is wrong, and the error gives it."""
    sources = write_sources(tmp_path / "s.toml", [{"name": "x", "url": f"file://{tmp_path}/nothing.git",
                                                   "ref": "main"}])
    proc = run_cli("sources", "lock", str(sources), check=False)
    assert proc.returncode == 2 and "does not appear to be a git repository" in proc.stderr, proc.stderr


def test_source_names_that_differ_only_in_case_are_refused(tmp_path):
    """`DirectXTK` and `directxtk` would share a cache directory and ledger rows on a case-blind file system."""
    sources = write_sources(tmp_path / "s.toml", [{"name": "DirectXTK", "url": str(tmp_path)},
                                                  {"name": "directxtk", "url": str(tmp_path)}])
    proc = run_cli("build", "--sources", str(sources), "--out", str(tmp_path / "out"), check=False)
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert "'directxtk': differs from source 'DirectXTK' only in case" in proc.stderr
    assert not (tmp_path / "out").exists()


def test_a_set_typo_names_the_nearest_key(tmp_path):
    sources = write_sources(tmp_path / "s.toml", [{"name": "a", "url": str(tmp_path)}])
    for typo, nearest in (("near_dedup.treshold=0.9", "did you mean 'threshold'?"),
                          ("near_dedupe.threshold=0.9", "did you mean 'near_dedup'?")):
        proc = run_cli("build", "--sources", str(sources), "--out", str(tmp_path / "out"), "--set", typo,
                       check=False)
        assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
        assert nearest in proc.stderr, proc.stderr
