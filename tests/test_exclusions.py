"""Opt-out lists and decontamination (issue 12): what a sources file excludes, every build honours, each file
with its ledger row (`skipped:opt_out`, `decontaminate:contamination`)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from conftest import GOOGLETEST, build_dir, need, provenance_build, run_cli

# A benchmark solution (a HumanEval-style C++ task) and its prompt, as JSONL
SOLUTION = """#include <vector>
#include <algorithm>
std::vector<int> rolling_max(const std::vector<int>& numbers) {
    std::vector<int> result;
    int running_max = 0;
    bool first = true;
    for (std::size_t i = 0; i < numbers.size(); ++i) {
        if (first || numbers[i] > running_max) { running_max = numbers[i]; first = false; }
        result.push_back(running_max);
    }
    return result;
}
"""


def _tree(root: Path) -> dict[str, str]:
    good = (GOOGLETEST / "googletest" / "src" / "gtest-printers.cc").read_text()
    files = {
        "src/good.cc": good,
        "gen/generated_table.cc": good + "// generated\n",
        "src/same_bytes_as_listed.cc": good + "// listed by sha256\n",
        # the solution pasted into a file, reindented, with other code around it: still contaminated
        "src/contaminated.cc": good + "\n" + "\n".join("  " + ln for ln in SOLUTION.splitlines()) + "\n",
        # shares the includes and a few lines only: far less than 50 tokens in a row
        "src/similar.cc": (GOOGLETEST / "googletest" / "src" / "gtest-filepath.cc").read_text()
        + "\n#include <vector>\nstd::vector<int> result;\nint running_max = 0;\n",
    }
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return files


@pytest.mark.slow
def test_opt_out_and_decontamination_are_honoured(tmp_path: Path):
    need(GOOGLETEST)
    files = _tree(tmp_path / "a")
    other = tmp_path / "b"
    other.mkdir()
    (other / "x.cc").write_text(files["src/good.cc"] + "// in an opted-out repository\n")
    listed = hashlib.sha256((tmp_path / "a" / "src/same_bytes_as_listed.cc").read_bytes()).hexdigest()
    (tmp_path / "optout.toml").write_text(f'sha256 = ["{listed}"]\nrepos = ["b"]\n')
    bench = tmp_path / "bench"
    bench.mkdir()
    # a second task, long and unrelated to the corpus: the reference holds n-grams of 400 tokens too
    unrelated = " ".join(f"int task_{k}(int x) {{ return x * {k}; }}" for k in range(60))
    (bench / "tasks.jsonl").write_text(json.dumps({"task_id": "CPP/9", "prompt": "rolling max",
                                                   "canonical_solution": SOLUTION}) + "\n"
                                       + json.dumps({"task_id": "CPP/10", "canonical_solution": unrelated}) + "\n")
    sources = tmp_path / "sources.toml"
    sources.write_text(
        '[[source]]\nname = "a"\nurl = "a"\nlicense = "MIT"\n\n[[source]]\nname = "b"\nurl = "b"\nlicense = "MIT"\n\n'
        '[opt_out]\npaths = ["gen/*"]\nfiles = ["optout.toml"]\n\n[decontaminate]\npaths = ["bench/tasks.jsonl"]\n')
    proc = provenance_build(sources, tmp_path / "out")
    rows = pq.read_table(build_dir(tmp_path / "out") / "provenance" / "ledger.parquet").to_pylist()
    ledger = {(r["source_repo"], r["source_path"]): (r["decision"], r["reason"]) for r in rows}
    assert ledger == {
        ("a", "src/good.cc"): ("kept", ""),
        ("a", "src/similar.cc"): ("kept", ""),
        ("a", "gen/generated_table.cc"): ("skipped", "opt_out"),
        ("a", "src/same_bytes_as_listed.cc"): ("skipped", "opt_out"),
        ("a", "src/contaminated.cc"): ("filtered", "contamination"),
        ("b", "x.cc"): ("skipped", "opt_out"),
    }, ledger
    assert "skipped:opt_out" in proc.stdout and "filtered:contamination" in proc.stdout
    # a longer n-gram than the overlap lets it through; a new reference reruns from decontaminate on
    text = sources.read_text() + "ngram = 400\n"
    sources.write_text(text)
    proc = provenance_build(sources, tmp_path / "out")
    assert "decontaminate[a]: running" in proc.stdout and "collect[a]: running" not in proc.stdout
    newest = sorted((tmp_path / "out" / "builds").glob("v6-*"), key=lambda d: d.stat().st_mtime)[-1]
    rows = pq.read_table(newest / "provenance" / "ledger.parquet").to_pylist()
    assert {r["source_path"]: r["decision"] for r in rows}["src/contaminated.cc"] == "kept"


def test_bad_exclusion_tables_are_one_line_errors(tmp_path: Path):
    cases = {
        '[opt_out]\nsha256 = ["abc"]\n': "is not 64 hex digits",
        '[opt_out]\nfiles = ["missing.toml"]\n': "does not exist",
        '[decontaminate]\npaths = ["nope.jsonl"]\n': "does not exist",
        '[decontaminate]\nngram = 2\npaths = []\n': "'ngram' must be an integer of at least 5",
        '[optout]\n': "unknown tables ['optout']",
        '[decontaminate]\npaths = ["empty"]\n': "hold no file to decontaminate against",
        # read when the sources are, not when the decontaminate stage runs after collect and the filters
        '[decontaminate]\npaths = ["bad.jsonl"]\n': "bad.jsonl:2: not JSON (Expecting value)",
    }
    (tmp_path / "a").mkdir()
    (tmp_path / "empty").mkdir()
    (tmp_path / "bad.jsonl").write_text('{"prompt": "int f();"}\nnot json\n')
    bom = tmp_path / "bom.jsonl"  # a UTF-8 BOM (Windows editors write one) is not a JSON error
    prompt = " ".join(f"int f{k}();" for k in range(20))  # 100 C++ tokens: two n-grams of 50 and more
    bom.write_bytes(b"\xef\xbb\xbf" + json.dumps({"prompt": prompt}).encode() + b"\n")
    (tmp_path / "bom.toml").write_text('[[source]]\nname = "a"\nurl = "a"\n\n[decontaminate]\npaths = ["bom.jsonl"]\n')
    run_cli("sources", "lock", str(tmp_path / "bom.toml"), "-o", str(tmp_path / "bom.lock"))
    from cpp_data.stages.lib.contamination import reference_texts
    assert reference_texts([str(bom)]) == [prompt]
    # a reference that turns decontamination off: an empty file, texts shorter than the n-gram
    (tmp_path / "blank.jsonl").write_text("\n")
    (tmp_path / "short.jsonl").write_text(json.dumps({"prompt": prompt}) + "\n")
    cases['[decontaminate]\npaths = ["blank.jsonl"]\n'] = "hold no run of 50 C++ tokens"
    cases['[decontaminate]\nngram = 1000000\npaths = ["short.jsonl"]\n'] = "hold no run of 1,000,000 C++ tokens"
    for i, (table, message) in enumerate(cases.items()):
        f = tmp_path / f"s{i}.toml"
        f.write_text(f'[[source]]\nname = "a"\nurl = "a"\n\n{table}')
        proc = run_cli("sources", "lock", str(f), check=False)
        assert proc.returncode == 2, (table, proc.stderr)
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and message in lines[0] and str(f) in lines[0], (table, proc.stderr)
