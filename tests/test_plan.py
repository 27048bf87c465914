"""`cpp-data plan` / `build --dry-run` (issue 17, point 2): which stages are cached, which would run and why,
compared with OUT's LATEST build (or the newest of the recipe); nothing is written."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from conftest import build, run_cli

pytestmark = pytest.mark.slow  # full builds (pyproject.toml: markers)


def _tree(path: Path) -> set[tuple[str, int]]:
    return {(str(p.relative_to(path)), p.stat().st_mtime_ns) for p in path.rglob("*")}


def _plan(out: Path, sources: Path, *extra: str) -> dict:
    proc = run_cli("plan", "--version", "v6", "--sources", str(sources), "--out", str(out), "--json", *extra)
    return json.loads(proc.stdout)


def test_plan_names_what_changed_and_writes_nothing(reference_build: Path, tmp_path: Path):
    out = tmp_path / "out"
    shutil.copytree(reference_build.parent.parent, out, symlinks=True)
    sources = reference_build.parent.parent.parent / "sources.toml"
    build(sources, out, "--set", "packed_rows.fim_rate=0.4")  # a build whose stage records hold reasons
    before = _tree(out)

    same = _plan(out, sources, "--set", "packed_rows.fim_rate=0.4")
    assert same["run"] == 0 and same["cached"] == len(same["stages"])

    p = _plan(out, sources, "--set", "packed_rows.fim_rate=0.3", "--set", "tokenizer.vocab_size=4096")
    rows = {r["label"]: r for r in p["stages"]}
    assert p["compared_with"] == (out / "builds" / "LATEST").read_text().strip()
    assert rows["packed_rows"]["action"] == "run" and "fim_rate 0.4 -> 0.3" in rows["packed_rows"]["reason"]
    assert rows["tokenizer"]["action"] == "run" and "vocab_size" in rows["tokenizer"]["reason"]
    assert "input tokenizer runs again" in rows["token_columns"]["reason"]
    assert rows["shards"]["action"] == "cached" and rows["collect[googletest]"]["action"] == "cached"
    assert _tree(out) == before  # nothing written

    text = run_cli("build", "--dry-run", "--version", "v6", "--sources", str(sources), "--out", str(out),
                   "--set", "packed_rows.fim_rate=0.3").stdout
    assert "fim_rate 0.4 -> 0.3" in text and "nothing was run" in text
    assert _tree(out) == before

    # --force, --from and --only: the dry run had ignored them and said "up to date" for a build that reran
    def dry(*flags: str) -> dict:
        args = ("build", "--dry-run", "--version", "v6", "--sources", str(sources), "--out", str(out), "--set",
                "packed_rows.fim_rate=0.4", *flags)
        proc = run_cli(*args)
        return {line.split()[1]: line.split()[0] for line in proc.stdout.splitlines()[1:-1]}

    assert set(dry("--force").values()) == {"run"}
    after = dry("--from", "packed_rows")
    assert after["packed_rows"] == after["launch_spec"] == "run" and after["shards"] == "cached", after
    only = dry("--only", "tokenizer")
    assert only["tokenizer"] == "run" and only["shards"] == "cached" and only["packed_rows"] == "skipped", only
    assert _tree(out) == before

    # the plain build again: nothing to do, and LATEST names the reference build once more; the plan compares
    # with that build, not with the newer one of fim_rate 0.4
    assert build(sources, out, check=False).returncode == 3
    again = _plan(out, sources, "--set", "packed_rows.fim_rate=0.3")
    assert again["compared_with"] == reference_build.name == (out / "builds" / "LATEST").read_text().strip()
    assert "fim_rate 0.5 -> 0.3" in {r["label"]: r for r in again["stages"]}["packed_rows"]["reason"]


def test_plan_of_an_empty_output_directory_runs_everything(reference_build: Path, tmp_path: Path):
    sources = reference_build.parent.parent.parent / "sources.toml"
    p = _plan(tmp_path / "fresh", sources)
    assert p["cached"] == 0 and p["compared_with"] is None
    assert all(r["action"] == "run" and r["reason"].startswith("new") for r in p["stages"])
    assert not (tmp_path / "fresh").exists()
