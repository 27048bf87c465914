"""What a new user meets first: relative paths from any directory, a small build that verify promotes, truthful
state after edits, one-line errors with the exit-code table, and help that shows every default."""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from conftest import CLI, GOOGLETEST, copy_tree, make_git_repo, need, run_bounded, run_cli

pytestmark = pytest.mark.slow


def cli(*args: str, cwd: Path, check: bool = True) -> subprocess.CompletedProcess:
    proc = run_bounded([*CLI, *args], cwd=cwd)
    if check and proc.returncode != 0:
        raise AssertionError(f"cpp-data {' '.join(args)} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}")
    return proc


def _sources(cfg: Path, corpus: str, repo: str) -> Path:
    cfg.mkdir(parents=True, exist_ok=True)
    (cfg / "sources.toml").write_text(
        f'[[source]]\nname = "gt"\nurl = "{corpus}"\nlicense = "BSD-3-Clause"\n\n'
        f'[[source]]\nname = "lib"\nurl = "{repo}"\nref = "main"\nlicense = "MIT"\n')
    return cfg / "sources.toml"


@pytest.fixture(scope="module")
def small(tmp_path_factory) -> dict:
    """20 real googletest files as a directory source plus a 3-file git repository, both named by paths
    relative to the sources file, built from another working directory with a relative --out."""
    need(GOOGLETEST)
    root = tmp_path_factory.mktemp("front")
    files = copy_tree(GOOGLETEST / "googletest", root / "corpus", limit=20)
    repo_files = copy_tree(GOOGLETEST / "googlemock" / "src", None, limit=3)
    make_git_repo(root / "repo", repo_files)
    _sources(root / "cfg", "../corpus", "../repo")
    (root / "work").mkdir()
    proc = cli("build", "--version", "v6", "--sources", "../cfg/sources.toml", "--out", "out", "--workers", "2",
               "--no-progress", cwd=root / "work")
    out = root / "work" / "out"
    return {"root": root, "out": out, "proc": proc, "files": files,
            "build": out / "builds" / (out / "builds" / "LATEST").read_text().strip()}


def test_relative_paths_and_content_identity(small):
    root, out = small["root"], small["out"]
    manifest = json.loads((small["build"] / "manifest.json").read_text())
    urls = {s["name"]: s["url"] for s in manifest["sources"]}
    assert urls == {"gt": str(root / "corpus"), "lib": str(root / "repo")}  # relative to the sources file
    assert manifest["totals"]["documents"] >= 15
    # the same content at other paths, from another directory, with absolute paths: the same build
    shutil.copytree(root / "corpus", root / "elsewhere" / "corpus2")
    shutil.copytree(root / "repo", root / "elsewhere" / "repo2")
    again = _sources(root / "elsewhere", str(root / "elsewhere" / "corpus2"), "repo2")
    proc = cli("build", "--version", "v6", "--sources", str(again), "--out", str(out), "--workers", "1",
               "--no-progress", cwd=Path("/"), check=False)
    assert proc.returncode == 3, proc.stderr  # nothing to do: a source is its content, not its path
    assert "nothing to do" in proc.stdout and ": running" not in proc.stdout


def test_small_build_is_promoted(small):
    build = small["build"]
    summary = json.loads((build / "reports" / "summary.json").read_text())
    assert summary["valid_documents"] >= 1 and summary["train_documents"] >= 1
    assert any("validation document" in w for w in summary["warnings"])
    assert "warning: only" in small["proc"].stderr
    tok = json.loads((build / "manifest.json").read_text())["tokenizer"]
    # 23 files cannot fill 65,536 ids: the vocabulary is what they filled, rounded up to 128, no padding
    assert tok["requested_vocab_size"] == 65_536 and tok["vocab_size"] < 65_500 and tok["vocab_size"] % 128 == 0
    assert tok["padding_ids"] < 128 and tok["learned_ids"] + tok["padding_ids"] == tok["vocab_size"]
    proc = run_cli("verify", str(small["out"]))  # OUT means its latest build
    assert "gates passed" in proc.stdout
    assert (small["out"] / "builds" / "PROMOTED").read_text().strip() == build.name
    from megatron.core.datasets.indexed_dataset import IndexedDataset

    assert IndexedDataset(str(build / "megatron" / "4k" / "cpp_train")).index.dtype.__name__ == "uint16"


def test_validate_and_status_take_what_users_give(small, tmp_path):
    out = small["out"]
    assert "ok:" in run_cli("validate", str(out)).stdout  # an output directory: its latest build
    proc = run_cli("validate", str(tmp_path), check=False)
    assert proc.returncode == 2 and "give OUT/builds/NAME" in proc.stderr
    # a build whose manifest is broken is reported as broken; status goes on
    other = tmp_path / "o"
    shutil.copytree(out / "builds", other / "builds", symlinks=True)
    broken = other / "builds" / small["build"].name / "manifest.json"
    broken.chmod(0o644)
    broken.write_text("{ not json")
    proc = run_cli("status", "--out", str(other))
    assert "BROKEN" in proc.stdout and "Traceback" not in proc.stderr


def test_edited_directory_is_never_nothing_to_do(small, tmp_path):
    root, out = small["root"], small["out"]
    cfg = root / "cfg" / "sources.toml"
    cli("sources", "lock", str(cfg), cwd=tmp_path)
    before = (out / "builds" / "LATEST").read_text().strip()
    victim = next(p for p in sorted((root / "corpus").rglob("*")) if p.is_file() and "//" in p.read_text())
    text = victim.read_text()
    victim.write_text(text.replace("//", "// edited:", 1))
    args = ("build", "--version", "v6", "--sources", str(cfg), "--out", str(out), "--workers", "2", "--no-progress")
    proc = cli(*args, cwd=tmp_path, check=False)
    assert proc.returncode == 2 and "changed since it was locked" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    cli(*args, "--relock", cwd=tmp_path)
    (root / "cfg" / "sources.lock").unlink()  # the other tests resolve the pins afresh
    after = (out / "builds" / "LATEST").read_text().strip()
    assert after != before
    result = json.loads(run_cli("diff", str(out / "builds" / before), str(out / "builds" / after), "--json").stdout)
    docs = result["documents"]
    assert docs["changed"] == 1 and docs["added"] == docs["removed"] == 0
    assert docs["same_text_new_pin"] >= 10  # the rest of the edited directory: same text under its new digest
    assert docs["unchanged"] == result["repos"]["a"]["lib"]["documents"] >= 1  # the git source did not move


def test_exit_codes_and_one_line_errors(small, tmp_path):
    root = small["root"]
    cfg = root / "cfg" / "sources.toml"
    base = ("build", "--version", "v6", "--sources", str(cfg), "--out", str(tmp_path / "o"))
    proc = run_cli(*base, "--lock", str(tmp_path / "missing.lock"), check=False)
    assert proc.returncode == 2 and "missing.lock: no such lock file" in proc.stderr
    bad = tmp_path / "bad.lock"
    bad.write_text('[[source]]\nname = "gt"\nurl = "/x"\nkind = "dir"\ncommit = 5\nlocked_at = "now"\n')
    proc = run_cli(*base, "--lock", str(bad), check=False)
    assert proc.returncode == 2 and "commit = 5 has the wrong type" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    # a failing stage: one line naming the stage, no traceback with locals; --debug shows the traceback
    from importlib import resources

    # (a band entry the pre-tokenizer never yields whole: the band file reads, so the recipe is accepted, and
    # the tokenizer stage refuses it)
    band = tmp_path / "band.toml"
    band.write_text(resources.files("cpp_data.tokenizer").joinpath("cpp_band.toml").read_text()
                    + '\n[band.unusable]\nentries = ["never one piece"]\n')
    recipe = tmp_path / "r.toml"
    recipe.write_text(resources.files("cpp_data.pipeline.recipes").joinpath("v6.toml").read_text()
                      .replace("[params.tokenizer]\n", f'[params.tokenizer]\nband_file = "{band}"\n'))
    proc = run_cli("build", "--recipe", str(recipe), "--sources", str(cfg), "--out", str(small["out"]),
                   "--workers", "2", "--no-progress", check=False)
    assert proc.returncode == 1
    errors = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert errors == [next(ln for ln in errors if ln.startswith("cpp-data: error: stage tokenizer"))], proc.stderr
    proc = run_cli("build", "--recipe", str(recipe), "--sources", str(cfg), "--out", str(small["out"]),
                   "--workers", "2", "--no-progress", "--debug", check=False)
    assert proc.returncode != 0 and "Traceback" in proc.stderr


def test_export_with_new_arguments_exports_again(small):
    build = small["build"]
    outs = []
    for n in ("512", "1024"):
        proc = run_cli("export", "megatron", str(build), "--seq-length", n)
        outs.append(Path(proc.stdout.strip().splitlines()[-1].split("wrote ", 1)[1]))
    assert outs[0] != outs[1]
    for path, n in zip(outs, (512, 1024)):
        assert json.loads((path / "launch.json").read_text())["seq_length"] == n
    again = run_cli("export", "megatron", str(build), "--seq-length", "512", check=False)
    assert again.returncode == 3 and "already exported" in again.stdout
    shards = [pq.read_metadata(p).num_rows for p in sorted(build.glob("shards/*.parquet"))]
    assert sum(shards) == json.loads((build / "manifest.json").read_text())["totals"]["documents"]


def test_help_shows_every_default_and_groups_list_subcommands():
    from cpp_data.pipeline.cli import _parser

    def leaves(parser):
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for sub in action.choices.values():
                    yield from leaves(sub)
        yield parser

    checked = 0
    for parser in leaves(_parser()):
        text = parser.format_help()
        for action in parser._actions:
            if not action.option_strings or isinstance(action, (argparse._HelpAction, argparse._VersionAction)):
                continue
            assert action.help, (parser.prog, action.option_strings)
            if action.default not in (None, False):
                assert f"(default: {action.default})" in " ".join(text.split()) or "default" in action.help, \
                    (parser.prog, action.option_strings)
            checked += 1
    assert checked >= 50
    for group, sub in (("tokenizer", "eval"), ("export", "packed"), ("sources", "lock")):
        proc = run_cli(group, check=False)
        assert proc.returncode == 2 and sub in proc.stdout
    spellings = {s for p in leaves(_parser()) for a in p._actions for s in a.option_strings}
    assert "--seq-length" in spellings and "--seq-len" not in spellings
