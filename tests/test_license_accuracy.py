"""License decisions against ground truth nobody here wrote (issue 12): a slice of bench/license_accuracy.py,
which compares every file's decision with its package's Debian DEP-5 copyright file (cpp-data never sees it).

Where a file's own header names a license, DEP-5 is sometimes coarser (Eigen says MPL-2 for every file; its
BFloat16.h carries the Apache-2.0 notice of the TensorFlow code it came from): such a file is counted "copyleft
kept" by the benchmark, and the test accepts it only when the file's own header decided. No DEP-5 copyleft file
may be kept on an inherited, declared or guessed license."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SLICE = ["googletest", "nlohmann-json3-dev", "libpoco-dev", "libsigc++-2.0-dev", "libzstd-dev", "libeigen3-dev"]
HEADER_SOURCES = ("spdx_tag:", "header_notice:", "header_text:")


@pytest.mark.slow
def test_license_decisions_against_debian_copyright_files(tmp_path: Path):
    out = tmp_path / "result.json"
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "license_accuracy.py"), "--packages", ",".join(SLICE),
                           "--work", str(tmp_path / "work"), "--out-json", str(out)],
                          capture_output=True, text=True, timeout=1200)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    result = json.loads(out.read_text())
    assert not result["skipped"] and sorted(result["packages"]) == sorted(SLICE), result["skipped"]
    o = result["overall"]
    assert o["not_in_ledger"] == 0 and o["scored"] >= 1000 and o["copyleft_truth"] >= 400
    assert o["permissive_refused_pct"] <= 5.0, o["permissive_refused_by"]
    inherited = {k: n for k, n in o["copyleft_kept_by"].items() if not k.startswith(HEADER_SOURCES)}
    assert not inherited, (inherited, o["copyleft_kept_files"])
    assert o["copyleft_kept"] <= 5, o["copyleft_kept_files"]
