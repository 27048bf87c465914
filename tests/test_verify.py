"""`cpp-data verify` (issue 6): every gate passes on a real build and promotes it; a broken build fails
naming the gate and is not promoted."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from conftest import run_cli

pytestmark = pytest.mark.slow  # full builds (pyproject.toml: markers)


def _copy_build(build: Path, dst: Path) -> Path:
    """A writable copy of a build under dst/builds/<name> (the gates read only the build itself)."""
    target = dst / "builds" / build.name
    shutil.copytree(build, target)
    for p in target.rglob("*"):
        p.chmod(0o755 if p.is_dir() else 0o644)
    return target


def test_verify_passes_and_promotes(reference_build: Path, tmp_path: Path):
    """Run through the CLI's entry point in a fresh interpreter that then reports its own state, so that it also
    shows (issue 13, point 6) that the gates leave nothing behind in the verifying process: no process group
    (the gpt_dataset gate needs one for a moment), torch.cuda as torch made it (the train step patches it, in
    the child process that trains)."""
    import subprocess
    import sys

    build = _copy_build(reference_build, tmp_path)
    state = tmp_path / "state.json"
    probe = ("import json, sys, torch, torch.distributed as d\n"
             "names = ('is_available', 'device_count', 'current_device', 'set_device', 'synchronize')\n"
             "before = [id(getattr(torch.cuda, n)) for n in names]\n"
             "from cpp_data.pipeline.cli import main\n"
             "rc = main(['verify', sys.argv[1]])\n"
             "json.dump({'rc': rc, 'process_group': d.is_available() and d.is_initialized(),\n"
             "           'cuda_unchanged': before == [id(getattr(torch.cuda, n)) for n in names]},\n"
             "          open(sys.argv[2], 'w'))\n")
    proc = subprocess.run([sys.executable, "-c", probe, str(build), str(state)], capture_output=True, text=True,
                          timeout=900)
    assert json.loads(state.read_text()) == {"rc": 0, "process_group": False, "cuda_unchanged": True}, proc.stderr
    for gate in ("files", "counts", "token_range", "decode", "empty_documents", "megatron_read", "gpt_dataset",
                 "packed", "packed_binidx", "train_step"):
        assert f"PASS  {gate}" in proc.stdout, proc.stdout
    assert (tmp_path / "builds" / "PROMOTED").read_text().strip() == build.name
    receipt = json.loads((tmp_path / "verify" / f"{build.name}.json").read_text())
    assert receipt["passed"] and len(receipt["gates"]) == 10
    status = json.loads(run_cli("status", "--out", str(tmp_path), "--json").stdout)
    assert status["promoted"] == build.name
    v6 = status["generations"]["v6"]
    assert v6["last_verify"].startswith("passed") and v6["tokens"] > 0 and v6["documents"] > 0


def test_verify_catches_ids_past_the_vocabulary(reference_build: Path, tmp_path: Path):
    build = _copy_build(reference_build, tmp_path)
    manifest = json.loads((build / "manifest.json").read_text())
    manifest["tokenizer"]["vocab_size"] = 32_000  # as if the ids came from a larger vocabulary than declared
    (build / "manifest.json").write_text(json.dumps(manifest))
    proc = run_cli("verify", str(build), "--no-train-step", check=False)
    assert proc.returncode == 1
    assert "FAIL  token_range" in proc.stdout and "failed gate(s): token_range" in proc.stderr
    assert not (tmp_path / "builds" / "PROMOTED").exists()


def test_verify_catches_a_corrupted_bin(reference_build: Path, tmp_path: Path):
    build = _copy_build(reference_build, tmp_path)
    data = bytearray((build / "megatron" / "cpp_valid.bin").read_bytes())
    data[8] ^= 0xFF  # a flipped byte inside the first document
    (build / "megatron" / "cpp_valid.bin").write_bytes(bytes(data))
    proc = run_cli("verify", str(build), "--no-train-step", check=False)
    assert proc.returncode == 1
    assert "FAIL  files" in proc.stdout and "FAIL  decode" in proc.stdout, proc.stdout
    assert not (tmp_path / "builds" / "PROMOTED").exists()


def test_verify_catches_a_packed_row_that_does_not_give_back_its_document(reference_build: Path, tmp_path: Path):
    """The packed bin/idx is checked against the documents themselves, not only against its own counts."""
    build = _copy_build(reference_build, tmp_path)
    from cpp_data.schemas.indexed import read_sequences

    rows = read_sequences(build / "packed" / "cpp_packed_valid")
    itemsize = rows[0].dtype.itemsize
    data = bytearray((build / "packed" / "cpp_packed_valid.bin").read_bytes())
    data[5 * itemsize] ^= 0x01  # a token of the first validation row
    (build / "packed" / "cpp_packed_valid.bin").write_bytes(bytes(data))
    proc = run_cli("verify", str(build), "--no-train-step", check=False)
    assert proc.returncode == 1 and "FAIL  packed_binidx" in proc.stdout, proc.stdout


def test_a_missing_idx_fails_its_gates_by_name_without_tracebacks(reference_build: Path, tmp_path: Path):
    """megatron-core's IndexedDataset asserts on a missing file, then its __del__ prints an AttributeError
    traceback for every gate that tried; verify names the missing file instead. Its stderr is the one
    failure line: the 'Transformer Engine and Apex are not installed' warnings of megatron-core's optimizer
    modules are not shown either."""
    build = _copy_build(reference_build, tmp_path)
    (build / "megatron" / "cpp_train.idx").unlink()
    proc = run_cli("verify", str(build), "--no-train-step", check=False)
    assert proc.returncode == 1
    for gate in ("counts", "token_range", "decode", "megatron_read"):
        assert f"FAIL  {gate:<16} {build / 'megatron'}: cpp_train.idx missing" in proc.stdout, proc.stdout
    assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr, proc.stderr


def test_a_build_without_documents_fails_verify_in_words_not_tracebacks(tmp_path: Path):
    """A build whose only file is refused still publishes (with a warning); verify had printed megatron-core's
    'cannot mmap an empty file' and 'GPTDataset failed to build as a mock data generator' with six tracebacks
    from its readers' __del__, and said the v6 recipe lacked packed_rows. Each gate now says the splits are
    empty, and stderr is the one failure line."""
    from conftest import build, write_sources

    src = tmp_path / "src"
    src.mkdir()
    (src / "only.cpp").write_text("int f() { return 1; }\n" * 30)  # no license anywhere: refused
    sources = write_sources(tmp_path / "s.toml", [{"name": "a", "url": str(src)}])
    assert "the build has no documents" in build(sources, tmp_path / "out").stderr
    proc = run_cli("verify", str(tmp_path / "out"), "--no-train-step", check=False)
    assert proc.returncode == 1
    assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr, proc.stderr
    for gate in ("counts", "gpt_dataset", "packed_binidx"):
        assert f"FAIL  {gate:<16} the train and valid splits are empty" in proc.stdout, proc.stdout
    assert "FAIL  packed           the build has no documents, so no packed rows" in proc.stdout
    assert "FAIL  empty_documents  the build has no documents" in proc.stdout
