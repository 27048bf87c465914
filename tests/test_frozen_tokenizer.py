"""A frozen tokenizer (issue 17, point 10): `build --tokenizer BUILD_OR_DIR` reuses an earlier build's
tokenizer instead of training one, so token ids stay stable across scheduled builds; the manifest records it
by SHA-256; plan says the tokenizer stage changes because of it; a path without a tokenizer is bad input."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from conftest import build, run_cli

pytestmark = pytest.mark.slow  # full builds (pyproject.toml: markers)


def test_build_reuses_a_frozen_tokenizer(reference_build: Path, tmp_path: Path):
    out = tmp_path / "out"
    shutil.copytree(reference_build.parent.parent, out, symlinks=True)  # plan compares with its build
    sources = reference_build.parent.parent.parent / "sources.toml"
    frozen = tmp_path / "frozen"
    shutil.copytree(reference_build / "tokenizer", frozen)  # outside any build: a tokenizer directory
    # (`--set tokenizer.vocab_size` beside it is refused: tests/test_cli.py)
    plan = run_cli("plan", "--version", "v6", "--sources", str(sources), "--out", str(out), "--tokenizer",
                   str(frozen)).stdout
    assert "frozen" in next(line for line in plan.splitlines() if " tokenizer " in line)
    proc = build(sources, out, "--tokenizer", str(frozen))
    assert "tokenizer: running" in proc.stdout and "shards: running" not in proc.stdout
    new = out / "builds" / (out / "builds" / "LATEST").read_text().strip()
    ref_manifest = json.loads((reference_build / "manifest.json").read_text())
    manifest = json.loads((new / "manifest.json").read_text())
    assert manifest["tokenizer"]["sha256"] == ref_manifest["tokenizer"]["sha256"]
    assert manifest["tokenizer"]["frozen_from"] == str(frozen)
    assert manifest["recipe"]["params"]["tokenizer"]["frozen"] == str(frozen)
    for f in sorted(reference_build.glob("shards/*.parquet")):  # the same ids for every document
        assert pq.read_table(f, columns=["token_ids"]).equals(pq.read_table(new / "shards" / f.name,
                                                                               columns=["token_ids"]))


def test_a_path_without_a_tokenizer_is_bad_input(reference_build: Path, tmp_path: Path):
    sources = reference_build.parent.parent.parent / "sources.toml"
    proc = run_cli("plan", "--version", "v6", "--sources", str(sources), "--out", str(tmp_path / "o"),
                   "--tokenizer", str(tmp_path), check=False)
    assert proc.returncode == 2 and "no cpp-data tokenizer there" in proc.stderr.strip().splitlines()[-1]


def test_a_broken_or_unsealed_frozen_tokenizer_is_refused_before_any_stage(reference_build: Path, tmp_path: Path):
    """A tokenizer.json that does not load had failed the build at the tokenizer stage, naming the cache's copy;
    a build without _COMPLETE was taken as a tokenizer source though no reader of builds reads one."""
    import shutil

    sources = reference_build.parent.parent.parent / "sources.toml"

    def refused(given: Path) -> str:
        proc = run_cli("plan", "--version", "v6", "--sources", str(sources), "--out", str(tmp_path / "o"),
                       "--tokenizer", str(given), check=False)
        lines = proc.stderr.strip().splitlines()
        assert proc.returncode == 2 and len(lines) == 1, proc.stderr
        return lines[0]

    broken = tmp_path / "broken"
    shutil.copytree(reference_build, broken)
    (broken / "tokenizer" / "tokenizer.json").chmod(0o644)
    (broken / "tokenizer" / "tokenizer.json").write_text("{")
    assert f"{broken}/tokenizer/tokenizer.json: does not match the manifest of build broken" in refused(broken)
    bare = tmp_path / "bare"  # a tokenizer directory outside any build: loaded before anything runs
    shutil.copytree(broken / "tokenizer", bare)
    assert f"{bare}/tokenizer.json: not a loadable tokenizer" in refused(bare)
    unsealed = tmp_path / "unsealed"
    shutil.copytree(reference_build, unsealed)
    (unsealed / "_COMPLETE").unlink()
    assert "no _COMPLETE marker" in refused(unsealed)
    assert not (tmp_path / "o").exists()
