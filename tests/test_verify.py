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
    assert receipt["passed"] and len(receipt["gates"]) == 11
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
    data = bytearray((build / "megatron" / "4k" / "cpp_valid.bin").read_bytes())
    data[8] ^= 0xFF  # a flipped byte inside the first document
    (build / "megatron" / "4k" / "cpp_valid.bin").write_bytes(bytes(data))
    proc = run_cli("verify", str(build), "--no-train-step", check=False)
    assert proc.returncode == 1
    assert "FAIL  files" in proc.stdout and "FAIL  decode" in proc.stdout, proc.stdout
    assert not (tmp_path / "builds" / "PROMOTED").exists()


def test_verify_catches_a_packed_row_that_does_not_give_back_its_document(reference_build: Path, tmp_path: Path):
    """The packed bin/idx is checked against the documents themselves, not only against its own counts."""
    build = _copy_build(reference_build, tmp_path)
    from cpp_data.schemas.indexed import read_sequences

    rows = read_sequences(build / "packed" / "4k" / "cpp_packed_valid")
    itemsize = rows[0].dtype.itemsize
    data = bytearray((build / "packed" / "4k" / "cpp_packed_valid.bin").read_bytes())
    data[5 * itemsize] ^= 0x01  # a token of the first validation row
    (build / "packed" / "4k" / "cpp_packed_valid.bin").write_bytes(bytes(data))
    proc = run_cli("verify", str(build), "--no-train-step", check=False)
    assert proc.returncode == 1 and "FAIL  packed_binidx" in proc.stdout, proc.stdout


def test_a_missing_idx_fails_its_gates_by_name_without_tracebacks(reference_build: Path, tmp_path: Path):
    """megatron-core's IndexedDataset asserts on a missing file, then its __del__ prints an AttributeError
    traceback for every gate that tried; verify names the missing file instead. Its stderr is the one
    failure line: the 'Transformer Engine and Apex are not installed' warnings of megatron-core's optimizer
    modules are not shown either."""
    build = _copy_build(reference_build, tmp_path)
    (build / "megatron" / "4k" / "cpp_train.idx").unlink()
    proc = run_cli("verify", str(build), "--no-train-step", check=False)
    assert proc.returncode == 1
    for gate in ("counts", "token_range", "decode", "megatron_read"):
        assert f"FAIL  {gate:<16} {build / 'megatron' / '4k'}: cpp_train.idx missing" in proc.stdout, proc.stdout
    assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr, proc.stderr


def test_a_build_without_documents_publishes_nothing_in_one_line(tmp_path: Path):
    """A build whose only file is refused has no training document for its lanes: it stops with one line and
    exit 2, publishes nothing, and leaves LATEST as it was (here: absent), so nothing downstream trains on an
    empty build."""
    from conftest import build, write_sources

    src = tmp_path / "src"
    src.mkdir()
    (src / "only.cpp").write_text("int f() { return 1; }\n" * 30)  # no license anywhere: refused
    sources = write_sources(tmp_path / "s.toml", [{"name": "a", "url": str(src)}])
    proc = build(sources, tmp_path / "out", check=False)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and "no training document came out" in proc.stderr
    assert not (tmp_path / "out" / "builds" / "LATEST").exists()
    assert not [d for d in (tmp_path / "out" / "builds").glob("v6-*")] if (tmp_path / "out" / "builds").exists() \
        else True


def _edit_manifest(build: Path, edit) -> None:
    manifest = json.loads((build / "manifest.json").read_text())
    edit(manifest)
    (build / "manifest.json").write_text(json.dumps(manifest))


def test_verify_holds_the_manifest_to_the_files_it_describes(reference_build: Path, tmp_path: Path):
    """A manifest that disagrees with its files had passed every gate and been promoted: a shard's token count
    raised, seq_length changed, a .bin token changed with only the manifest's checksum updated, the summary
    replaced. Each now fails the gate that reads the disagreeing file, naming it."""
    from cpp_data.schemas.manifest import sha256_file

    def first_shard(m: dict) -> dict:
        return next(e for e in m["files"] if e.get("kind") == "shard")

    def more_tokens(m: dict) -> None:
        first_shard(m)["tokens"] += 7

    def other_seq_length(m: dict) -> None:
        m["seq_length"] = 2048

    cases = [("tokens", more_tokens, "counts", "manifest.json says"),
             ("seq", other_seq_length, "packed", "launch.json says 4096")]
    for name, edit, gate, words in cases:
        build = _copy_build(reference_build, tmp_path / name)
        _edit_manifest(build, edit)
        proc = run_cli("verify", str(build), "--no-train-step", check=False)
        assert proc.returncode == 1 and f"FAIL  {gate}" in proc.stdout and words in proc.stdout, (name, proc.stdout)
        assert not (tmp_path / name / "builds" / "PROMOTED").exists()
    # one token of the last training document, the manifest's checksum brought along (a forged or half-redone
    # export): only the full comparison with the shards' token_ids sees it
    build = _copy_build(reference_build, tmp_path / "bin")
    from cpp_data.schemas.indexed import read_sequences

    sequences = read_sequences(build / "megatron" / "4k" / "cpp_train")
    data = bytearray((build / "megatron" / "4k" / "cpp_train.bin").read_bytes())
    at = len(data) - 2 * sequences[0].dtype.itemsize  # the token before the last document's EOD
    data[at] ^= 0x01
    (build / "megatron" / "4k" / "cpp_train.bin").write_bytes(bytes(data))
    digest = sha256_file(build / "megatron" / "4k" / "cpp_train.bin")
    _edit_manifest(build, lambda m: next(e for e in m["files"] if e["path"] == "megatron/4k/cpp_train.bin")
                   .update(sha256=digest))
    proc = run_cli("verify", str(build), "--no-train-step", check=False)
    assert proc.returncode == 1 and "FAIL  megatron_read" in proc.stdout and "is not row" in proc.stdout, \
        proc.stdout
    # the summary: garbage in it fails validate (and so the files gate), and report names the file
    build = _copy_build(reference_build, tmp_path / "summary")
    (build / "reports" / "summary.json").write_text("garbage")
    proc = run_cli("validate", str(build), check=False)
    assert proc.returncode == 1 and "summary.json: SHA-256" in proc.stderr, proc.stderr
    proc = run_cli("report", str(build), "--output", str(tmp_path / "r.html"), check=False)
    assert proc.returncode == 2 and "summary.json: not valid JSON" in proc.stderr, proc.stderr


def test_a_damaged_idx_or_manifest_fails_in_one_line_with_the_exit_code_validate_gives(reference_build: Path,
                                                                                       tmp_path: Path):
    """An emptied .idx fails in one line that names the file, without megatron-core's __del__ traceback or a
    bare 'AssertionError: '; an empty manifest gives verify the exit code validate gives (1)."""
    build = _copy_build(reference_build, tmp_path / "idx")
    (build / "megatron" / "4k" / "cpp_train.idx").write_bytes(b"")
    proc = run_cli("verify", str(build), "--no-train-step", check=False)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr and "Exception ignored" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert "FAIL  megatron_read" in proc.stdout and "cpp_train.idx" in proc.stdout, proc.stdout
    build = _copy_build(reference_build, tmp_path / "manifest")
    (build / "manifest.json").write_text("")
    codes = {cmd: run_cli(cmd, str(build), check=False) for cmd in ("validate", "verify")}
    assert {cmd: p.returncode for cmd, p in codes.items()} == {"validate": 1, "verify": 1}
    assert all("manifest.json" in p.stderr and len(p.stderr.strip().splitlines()) == 1 for p in codes.values())
