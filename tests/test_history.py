"""History generations v2 and v3 (issue 7) on a real git repository the test scripts from real C++ files:
edits, a rename, a binary blob, a submodule bump, a merge commit and a license change."""

from __future__ import annotations

import difflib
import os
import subprocess
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from conftest import GOOGLETEST, build_dir, need, provenance_build, run_cli, write_sources

pytestmark = pytest.mark.slow  # full builds (pyproject.toml: markers)

SAMPLES = GOOGLETEST / "googletest" / "samples"
LICENSES = Path("/usr/share/common-licenses")


def _code(name: str) -> str:
    """A real googletest sample without its license banner (so the repository's LICENSE file decides)."""
    lines = (SAMPLES / name).read_text().splitlines(keepends=True)
    start = next(i for i, line in enumerate(lines) if not line.startswith("//") and line.strip())
    return "".join(lines[start:])


class Repo:
    def __init__(self, path: Path):
        self.path, self.n = path, 0
        subprocess.run(["git", "init", "-q", "-b", "main", str(path)], check=True)

    def git(self, *args: str) -> str:
        self.n += 1
        stamp = f"2024-01-{1 + self.n // 10:02d}T{self.n % 10:02d}:00:00Z"
        env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@e.org", "GIT_COMMITTER_NAME": "t",
               "GIT_COMMITTER_EMAIL": "t@e.org", "GIT_AUTHOR_DATE": stamp, "GIT_COMMITTER_DATE": stamp}
        return subprocess.run(["git", *args], cwd=self.path, check=True, capture_output=True, text=True,
                              env=env).stdout.strip()

    def write(self, rel: str, data: str | bytes) -> None:
        f = self.path / rel
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_bytes(data.encode() if isinstance(data, str) else data)

    def commit(self, message: str) -> str:
        self.git("add", "-A", ":!third_party")  # keep the gitlink, which has no working tree
        self.git("commit", "-q", "-m", message)
        return self.git("rev-parse", "HEAD")

    def show(self, commit: str, path: str) -> str:
        return self.git("show", f"{commit}:{path}") + "\n"


@pytest.fixture(scope="module")
def history(tmp_path_factory) -> dict:
    need(SAMPLES, LICENSES / "Apache-2.0", LICENSES / "GPL-3")
    root = tmp_path_factory.mktemp("history")
    r = Repo(root / "repo")
    c = {}
    r.write("LICENSE", (LICENSES / "Apache-2.0").read_text())
    r.write("src/sample1.cc", _code("sample1.cc"))
    r.write("src/sample2.cc", _code("sample2.cc"))
    r.write("src/sample4.h", _code("sample4.h"))
    r.write("README.md", "a history fixture\n")
    c["add"] = r.commit("import samples")
    text = _code("sample1.cc").replace("return result;", "return result;  // n!")
    r.write("src/sample1.cc", "\n".join(line for line in text.splitlines() if "Returns true" not in line) + "\n")
    c["edit"] = r.commit("edit sample1")
    (r.path / "include").mkdir()
    r.git("mv", "src/sample4.h", "include/sample4.h")
    r.write("include/sample4.h", (r.path / "include/sample4.h").read_text().replace("class Counter", "class Counter2"))
    c["rename"] = r.commit("move sample4.h to include/")
    r.write("src/blob.cc", b"\x00\x01binary\x00" * 64)
    r.git("add", "src/blob.cc")
    r.git("update-index", "--add", "--cacheinfo", f"160000,{c['add']},third_party/dep")  # a gitlink, no checkout
    r.git("commit", "-q", "-m", "add a binary blob and a submodule")
    c["binary_and_submodule"] = r.git("rev-parse", "HEAD")
    r.git("checkout", "-q", "-b", "feature")
    r.write("src/sample2.cc", _code("sample2.cc").replace("MyString", "MyStr"))
    c["feature"] = r.commit("rename MyString")
    r.git("checkout", "-q", "main")
    r.write("src/sample1.cc", (r.path / "src/sample1.cc").read_text() + "\n// trailing note\n")
    c["main_side"] = r.commit("note")
    r.git("merge", "-q", "--no-ff", "-m", "merge feature", "feature")
    c["merge"] = r.git("rev-parse", "HEAD")
    r.write("LICENSE", (LICENSES / "GPL-3").read_text())
    r.write("src/sample2.cc", (r.path / "src/sample2.cc").read_text() + "\n// relicensed\n")
    c["gpl"] = r.commit("relicense under GPL-3.0")
    sources = write_sources(root / "sources.toml", [{"name": "hist", "url": str(r.path)}])
    return {"repo": r, "commits": c, "sources": sources, "root": root}


def _rows(build: Path) -> list[dict]:
    rows = []
    for f in sorted((build / "shards").glob("*.parquet")):
        rows += pq.read_table(f).to_pylist()
    return rows


def _ledger(build: Path) -> list[dict]:
    return pq.read_table(build / "provenance" / "ledger.parquet").to_pylist()


def test_v2_pairs(history):
    r, c = history["repo"], history["commits"]
    out = history["root"] / "out-v2"
    run_cli("build", "--version", "v2", "--sources", str(history["sources"]), "--out", str(out), "--workers", "2",
            "--no-progress")
    build = build_dir(out)
    rows = _rows(build)
    by = {(x["source_path"], x["text_commit"]): x for x in rows}
    # every kept version's text is the blob at the commit it was read at
    for x in rows:
        assert x["text"] == r.show(x["text_commit"], x["source_path"]), (x["source_path"], x["side"])
        assert x["author_time"] > 0 and x["commit_time"] >= x["author_time"]
    # the edit: the after-version; its before-version is the import's after-version, emitted once
    edit = by[("src/sample1.cc", c["edit"])]
    assert edit["side"] == "after" and edit["source_commit"] == c["edit"] and edit["parent_commit"] == c["add"]
    assert edit["change_type"] == "M" and by[("src/sample1.cc", c["add"])]["change_type"] == "A"
    assert sum(1 for x in rows if x["source_path"] == "src/sample1.cc" and x["text_commit"] == c["add"]) == 1
    # the rename keeps where it came from
    moved = by[("include/sample4.h", c["rename"])]
    assert moved["change_type"] == "R" and moved["rename_from"] == "src/sample4.h"
    # the merge commit is diffed against its first parent and marked
    merged = by[("src/sample2.cc", c["merge"])]
    assert merged["is_merge"] and merged["parent_commit"] == c["main_side"]
    # binary blob and submodule bump: recorded with their reason, never documents
    reasons = {(x["source_path"], x["reason"]) for x in _ledger(build) if x["decision"] == "skipped"}
    assert ("src/blob.cc", "binary") in reasons and ("third_party/dep", "submodule") in reasons
    assert not any(x["source_path"] in ("src/blob.cc", "third_party/dep") for x in rows)
    # the license as of each commit: Apache-2.0 before the relicensing, GPL-3.0 (refused) after it
    assert all(x["license_spdx"] == "Apache-2.0" for x in rows), {x["license_spdx"] for x in rows}
    refused = [x for x in _ledger(build) if x["decision"] == "license_refused"]
    assert any(x["source_path"] == "src/sample2.cc" and x["source_commit"] == c["gpl"] for x in refused), refused
    assert ("src/sample2.cc", c["gpl"]) not in by
    # the previous version of a refused after-version is still kept (it was Apache-2.0 at its commit)
    assert ("src/sample2.cc", c["merge"]) in by
    # versions of one file are not near duplicates of each other, and a document id per version
    assert not any(x["decision"] == "near_duplicate" for x in _ledger(build))
    assert len({x["doc_id"] for x in rows}) == len(rows)
    # every version of a file is on the same side of the split
    for path in {x["source_path"] for x in rows}:
        assert len({x.get("split") for x in rows if x["source_path"] == path}) == 1


def test_v2_range_starts_after_history_from(history, tmp_path):
    r, c = history["repo"], history["commits"]
    sources = write_sources(tmp_path / "s.toml", [{"name": "hist", "url": str(r.path),
                                                   "history_from": c["rename"]}])
    out = tmp_path / "out"
    run_cli("build", "--version", "v2", "--sources", str(sources), "--out", str(out), "--workers", "1",
            "--no-progress")
    rows = _rows(build_dir(out))
    commits = {x["source_commit"] for x in rows}
    assert c["add"] not in commits and c["edit"] not in commits and c["feature"] not in commits
    assert c["main_side"] in commits
    # the first commit in range: its before-version (outside the range) is emitted as a "before" document
    before = [x for x in rows if x["side"] == "before"]
    assert any(x["source_commit"] == c["main_side"] and x["text_commit"] == c["binary_and_submodule"]
               for x in before)
    lock = (out / "sources.lock").read_text()
    assert f'history_from_commit = "{c["rename"]}"' in lock


def test_v3_diffs(history):
    r, c = history["repo"], history["commits"]
    out = history["root"] / "out-v3"
    run_cli("build", "--version", "v3", "--sources", str(history["sources"]), "--out", str(out), "--workers", "2",
            "--no-progress")
    rows = _rows(build_dir(out))
    assert rows and {x["header_style"] for x in rows} <= {"doxygen", "simple"}
    for x in rows:
        text, commit, path = x["text"], x["source_commit"], x["source_path"]
        if x["header_style"] == "doxygen":
            head = f"/**\n * @file {path}\n * @brief "
            assert text.startswith(head) and f" * @commit {commit}\n" in text
            body = text.split(" */\n", 1)[1]
        else:
            assert text.startswith(f"// File: {path}\n// Commit: {commit} ")
            body = text.split("\n", 2)[2]
        new = [line for line in body.splitlines() if not line.startswith("// Removed: ")]
        removed = [line[len("// Removed: "):] for line in body.splitlines() if line.startswith("// Removed: ")]
        after = r.show(commit, path).splitlines()
        assert new == after, path
        if x["change_type"] != "A":
            before = r.show(x["parent_commit"], x["rename_from"] or path).splitlines()
            expect = [line[2:] for line in difflib.ndiff(before, after) if line.startswith("- ")]
            assert removed == expect
    edit = next(x for x in rows if x["source_path"] == "src/sample1.cc" and x["source_commit"] == c["edit"])
    assert "// Removed: " in edit["text"] and "Returns true" in edit["text"]


def test_diff_of_two_history_builds_goes_by_version(history, tmp_path):
    """A later pin adds versions; the diff is keyed by (repo, path, commit read at)."""
    r, c = history["repo"], history["commits"]
    older = write_sources(tmp_path / "old.toml", [{"name": "hist", "url": str(r.path), "ref": c["main_side"]}])
    run_cli("build", "--version", "v2", "--sources", str(older), "--out", str(tmp_path / "a"), "--no-progress")
    a, b = build_dir(tmp_path / "a"), build_dir(history["root"] / "out-v2")
    import json

    proc = run_cli("diff", str(a), str(b), "--json", "--tables", str(tmp_path / "t"))
    result = json.loads(proc.stdout)
    docs = pq.read_table(tmp_path / "t" / "documents.parquet").to_pylist()
    added = {(d["source_path"], d["version"]) for d in docs if d["change"] == "added"}
    assert ("src/sample2.cc", c["merge"]) in added
    assert not any(d["change"] == "removed" for d in docs)
    assert result["documents"]["added"] == len(added) > 0
    # against a build of another generation every version stays a document of its own (folding a v2 "before"
    # and the "after" of the same commit into one would count the v2 build short)
    plain = tmp_path / "plain"  # the pin's files are GPL: a build that refused them would have no document
    provenance_build(history["sources"], plain, "--set", "license.allow_copyleft=true")
    rows = sum(pq.read_metadata(f).num_rows for f in (b / "shards").glob("*.parquet"))
    across = json.loads(run_cli("diff", str(b), str(build_dir(plain)), "--json").stdout)
    assert across["a"]["documents"] == rows and across["schema"]["generation"] == ["v2", "v6"], across["a"]


def test_history_of_a_plain_directory_is_refused_clearly(tmp_path):
    need(SAMPLES)
    sources = write_sources(tmp_path / "s.toml", [{"name": "dir", "url": str(SAMPLES)}])
    proc = run_cli("build", "--version", "v3", "--sources", str(sources), "--out", str(tmp_path / "o"),
                   "--no-progress", check=False)
    assert proc.returncode == 1
    assert "history walk needs a git source" in proc.stderr.strip().splitlines()[-1]
