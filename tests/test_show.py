"""`cpp-data show` (issue 17, point 5): sample documents with provenance, license, tokens and structure spans;
filters by repo and path glob; JSON for scripts; colour only in a terminal."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import run_cli, run_in_terminal

pytestmark = pytest.mark.slow  # full builds (pyproject.toml: markers)


def test_show_json_gives_provenance_tokens_and_spans(reference_build: Path):
    docs = json.loads(run_cli("show", str(reference_build.parent.parent), "-n", "4", "--json").stdout)
    assert len(docs) == 4
    for d in docs:
        assert d["source_repo"] and d["source_path"] and d["source_commit"] and d["doc_id"]
        assert d["license_spdx"] and len(d["token_ids"]) > 0
        assert d["structure_spans"], d["source_path"]
        for span in d["structure_spans"]:
            assert 0 <= span["start"] < span["end"] <= len(d["text"]) and span["category"] != "OTHER"


def test_show_filters_by_repo_and_glob(reference_build: Path):
    docs = json.loads(run_cli("show", str(reference_build), "--repo", "googletest", "--path", "*.cc", "-n", "5",
                              "--json").stdout)
    assert docs and all(d["source_repo"] == "googletest" and d["source_path"].endswith(".cc") for d in docs)
    proc = run_cli("show", str(reference_build), "--repo", "no-such-repo", check=False)
    assert proc.returncode == 2 and "no document matches --repo no-such-repo" in proc.stderr
    again = json.loads(run_cli("show", str(reference_build), "-n", "1", "--json", "--columns", "token_ids",
                               "source_path").stdout)  # columns shown anyway: asked again, once each
    assert len(again) == 1 and again[0]["token_ids"]


def test_show_colours_structure_in_a_terminal_only(reference_build: Path):
    plain = run_cli("show", str(reference_build), "-n", "1").stdout
    assert "\x1b[" not in plain and "span " in plain and "license " in plain
    rc, out = run_in_terminal(["show", str(reference_build), "-n", "1", "--lines", "12"], timeout=300)
    assert rc == 0, out[-2000:]
    assert "\x1b[" in out and "span " not in out


def test_builds_pointer_files_name_their_build(reference_build: Path, tmp_path: Path):
    """OUT/builds/LATEST (and PROMOTED, written by verify) are what a launch script points at: given as BUILD
    they mean the build they name; one naming no build here is a one-line error."""
    latest = reference_build.parent / "LATEST"
    assert latest.read_text().strip() == reference_build.name
    docs = json.loads(run_cli("show", str(latest), "-n", "1", "--json").stdout)
    assert len(docs) == 1 and docs[0]["source_repo"]
    stale = tmp_path / "builds" / "PROMOTED"
    stale.parent.mkdir()
    stale.write_text("v6-19700101-00000000\n")
    proc = run_cli("show", str(stale), check=False)
    err = proc.stderr.strip()
    assert proc.returncode == 2 and len(err.splitlines()) == 1, err
    assert "names 'v6-19700101-00000000', which is not a build" in err
