"""The stage cache is verified before reuse and knows its code; a published build shares no bytes with it."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import GOOGLETEST, copy_tree, need, run_bounded, run_cli, write_sources

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def first_build(tmp_path_factory) -> tuple[Path, Path]:
    """20 real googletest files as a directory source, and a first build of them (made once: each test damages
    a copy of it)."""
    need(GOOGLETEST)
    tmp = tmp_path_factory.mktemp("cache")
    copy_tree(GOOGLETEST / "googletest" / "src", tmp / "src", limit=20)
    sources = write_sources(tmp / "s.toml", [{"name": "gt", "url": str(tmp / "src"), "license": "BSD-3-Clause"}])
    _build(sources, tmp / "out")
    return sources, tmp / "out"


@pytest.fixture
def corpus(first_build, tmp_path) -> tuple[Path, Path]:
    """The sources and this test's own copy of the first build's output directory."""
    sources, out = first_build
    shutil.copytree(out, tmp_path / "out", symlinks=True)
    return sources, tmp_path / "out"


def _build(sources: Path, out: Path, *extra: str, env: dict | None = None) -> subprocess.CompletedProcess:
    proc = run_bounded([sys.executable, "-m", "cpp_data.pipeline.cli", "build", "--version", "v6", "--sources",
                        str(sources), "--out", str(out), "--workers", "2", "--no-progress", *extra], env=env)
    assert proc.returncode in (0, 3), proc.stdout + proc.stderr
    return proc


def _ran(proc: subprocess.CompletedProcess) -> list[str]:
    return [ln.split("] ", 1)[1].split(":")[0] for ln in proc.stdout.splitlines() if ": running" in ln]


def _latest(out: Path) -> Path:
    return out / "builds" / (out / "builds" / "LATEST").read_text().strip()


def _entry(out: Path, stage: str) -> Path:
    (entry,) = [d for d in (out / "cache" / stage).iterdir() if (d / "_COMPLETE").exists()]
    return entry


def test_bit_flip_in_the_cache_is_found_and_never_published(corpus):
    sources, out = corpus
    build = _latest(out)
    shard = sorted((_entry(out, "token_columns") / "shards").glob("train-*.parquet"))[0]
    published = build / "shards" / shard.name
    assert os.stat(shard).st_ino != os.stat(published).st_ino  # a copy, not a link
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0x01
    shard.write_bytes(bytes(data))
    run_cli("validate", str(build))  # the published copy is untouched
    proc = _build(sources, out)
    assert proc.returncode == 3  # the same build: nothing new to publish
    assert f"token_columns: cached output damaged (shards/{shard.name} does not match its sealed checksum)" \
        in proc.stdout
    assert _ran(proc) == ["token_columns"]
    assert _ran(_build(sources, out)) == []  # repaired: the next build trusts it again


def test_injected_parquet_in_a_cached_part_is_not_published(corpus):
    sources, out = corpus
    part = sorted(_entry(out, "license").glob("part-*.parquet"))[0]
    table = pq.read_table(part)
    text = table.column("text").to_pylist()
    text[0] = "// INJECTED\n" + text[0]
    pq.write_table(table.set_column(table.schema.get_field_index("text"), "text", pa.array(text)), part)
    proc = _build(sources, out, "--seed", "7")  # a new shuffle: shards and everything after run again
    assert proc.returncode == 0 and "license[gt]: cached output damaged" in proc.stdout
    build = _latest(out)
    for shard in build.glob("shards/*.parquet"):
        assert not any("INJECTED" in t for t in pq.read_table(shard, columns=["text"]).column("text").to_pylist())


def test_force_replaces_a_damaged_published_build(corpus):
    sources, out = corpus
    build = _latest(out)
    ledger = build / "provenance" / "ledger.parquet"
    ledger.chmod(0o644)
    data = bytearray(ledger.read_bytes())
    data[100] ^= 0xFF
    ledger.write_bytes(bytes(data))
    assert run_cli("validate", str(build), check=False).returncode == 1
    proc = _build(sources, out, "--force")
    assert "is damaged" in proc.stdout and proc.returncode == 0
    run_cli("validate", str(_latest(out)))


def test_editing_a_stage_reruns_it_and_early_cutoff_keeps_the_rest(corpus, tmp_path):
    """A copy of the package with one stage edited (no version bump) reruns that stage; the stages after it are
    reused when it wrote the same bytes (their fingerprints hash their inputs' checksums, not their inputs'
    fingerprints)."""
    sources, out = corpus
    site = tmp_path / "site" / "cpp_data"
    shutil.copytree(REPO / "pipeline" / "_namespace", site)
    for pkg in ("pipeline", "stages", "schemas", "tokenizer", "clang_index", "harness"):
        shutil.copytree(REPO / pkg, site / pkg, ignore=shutil.ignore_patterns("__pycache__", "_namespace"))
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "site")}
    probe = subprocess.run([sys.executable, "-c", "import cpp_data.stages.filter as m; print(m.__file__)"],
                           capture_output=True, text=True, env=env, check=True)
    assert probe.stdout.strip() == str(site / "stages" / "filter.py")
    # filter runs after collect and license: everything after it would run again if fingerprints chained
    stage = site / "stages" / "filter.py"
    stage.write_text(stage.read_text() + "\n# an edit that changes no output byte\n")
    first = _latest(out)
    proc = _build(sources, out, env=env)
    assert _ran(proc) == ["filter[gt]"], proc.stdout
    second = _latest(out)  # a new build (its code differs), with the same bytes
    assert second != first
    for shard in sorted(first.glob("shards/*.parquet")):
        assert shard.read_bytes() == (second / "shards" / shard.name).read_bytes()
    # a helper module a stage imports counts too: keys.py is imported by shards and ledger, not by collect
    keys = site / "stages" / "lib" / "keys.py"
    keys.write_text(keys.read_text() + "\n# another edit\n")
    ran = _ran(_build(sources, out, env=env))
    assert "shards" in ran and "ledger" in ran
    # shards wrote the same bytes, so structure and token_columns after it are reused
    assert not any(r.startswith(("collect", "filter", "license", "structure", "token_columns", "megatron_export"))
                   for r in ran), ran


def test_a_torn_stage_record_reruns_its_stage(corpus):
    """Cache records are written without fsync (pipeline/runner/cache.py): what a power loss can leave of one, an
    empty or cut stage.json, reads as damage and the stage runs again to the same bytes."""
    sources, out = corpus
    before = {p.name: p.read_bytes() for p in (_latest(out) / "shards").glob("*.parquet")}
    (_entry(out, "token_columns") / "stage.json").write_text("")
    record = _entry(out, "packed_rows") / "stage.json"
    record.write_bytes(record.read_bytes()[: record.stat().st_size // 2])
    proc = _build(sources, out)
    assert proc.returncode == 3, proc.stdout  # the same build: nothing new to publish
    assert "token_columns: cached output damaged (stage.json unreadable" in proc.stdout
    assert "packed_rows: cached output damaged (stage.json unreadable" in proc.stdout
    assert _ran(proc) == ["token_columns", "packed_rows"]
    assert {p.name: p.read_bytes() for p in (_latest(out) / "shards").glob("*.parquet")} == before
    assert _ran(_build(sources, out)) == []


NESTED_IMPORTS = '''
import a1
def f():
    import a2
    class C:
        from a3 import x
        def g(self):
            try:
                import a4
            except ImportError:
                import a5
            else:
                import a6
            finally:
                import a7
with open("x") as h:
    if h:
        import a8
    elif h:
        import a9
    else:
        for i in h:
            import a10
        else:
            while i:
                import a11
match h:
    case 1:
        import a12
async def k():
    async with h:
        import a13
    async for j in h:
        import a14
lambda: __import__("not_a_statement")
'''


def test_code_digest_reads_imports_at_any_depth_of_statements():
    """The code digest's statement walk finds every import ast.walk finds: in a text with each kind of block,
    and in every module of this package."""
    import ast

    from cpp_data.pipeline.runner.code_digest import _statements

    def found(tree, nodes):
        return sorted(a.name if isinstance(n, ast.Import) else f"{n.module}.{a.name}"
                      for n in nodes if isinstance(n, (ast.Import, ast.ImportFrom)) for a in n.names)

    tree = ast.parse(NESTED_IMPORTS)
    assert found(tree, _statements(tree)) == sorted([f"a{i}" for i in range(1, 15) if i != 3] + ["a3.x"])
    modules = [p for d in ("pipeline", "stages", "schemas", "tokenizer", "clang_index", "harness", "bench")
               for p in (REPO / d).rglob("*.py")]
    assert len(modules) > 100
    for path in modules:
        tree = ast.parse(path.read_bytes())
        assert found(tree, _statements(tree)) == found(tree, ast.walk(tree)), path
