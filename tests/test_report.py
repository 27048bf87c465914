"""`cpp-data report`: a self-contained HTML report, rendered in a real headless browser (Debian's chromium)."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from conftest import run_cli

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--enable-logging=stderr", "--v=0"]


def test_report_renders_in_headless_chromium(reference_build, tmp_path):
    if CHROMIUM is None:
        pytest.fail("chromium is not installed; scripts/setup.sh installs it")
    build = tmp_path / "out" / "builds" / reference_build.name
    shutil.copytree(reference_build, build)
    before = sorted(p.relative_to(build) for p in build.rglob("*"))
    proc = run_cli("report", str(build))
    page = tmp_path / "out" / "reports" / f"{build.name}.html"  # beside the builds, never inside a sealed one
    assert str(page) in proc.stdout
    assert sorted(p.relative_to(build) for p in build.rglob("*")) == before
    text = page.read_text()
    assert "Not available" not in text and "not available" not in text
    import pyarrow.parquet as pq

    decisions = set(pq.read_table(build / "provenance" / "ledger.parquet", columns=["decision"])
                    .column("decision").to_pylist())
    # else a sentence says there are none; + tokens per document and semantic coverage (v6 has both stages)
    plots = (5 if decisions & {"exact_duplicate", "near_duplicate"} else 4) + 2
    assert text.count("<svg") == plots and "http://" not in text.split("<svg", 1)[0].split("<style>")[0]
    for title in ("License distribution by repository", "Refusal reasons", "Duplicate cluster sizes",
                  "Document lengths", "Stage times", "Tokens per document", "Semantic-index coverage"):
        assert title in text
    profile = tmp_path / "profile"
    dom = subprocess.run([CHROMIUM, *FLAGS, f"--user-data-dir={profile}", "--dump-dom", page.as_uri()],
                         capture_output=True, text=True, timeout=120)
    assert dom.returncode == 0, dom.stderr[-2000:]
    assert dom.stdout.count("<svg") == plots and "cpp-data build" in dom.stdout
    errors = [ln for ln in dom.stderr.splitlines() if "CONSOLE" in ln and ("Error" in ln or "Uncaught" in ln)]
    assert errors == []
    shot = tmp_path / "report.png"
    subprocess.run([CHROMIUM, *FLAGS, f"--user-data-dir={profile}", f"--screenshot={shot}",
                    "--window-size=1200,2400", page.as_uri()], capture_output=True, timeout=120, check=True)
    assert shot.stat().st_size > 20_000  # a rendered page with plots, not a blank one
    run_cli("validate", str(build))  # the report does not touch what the manifest lists
