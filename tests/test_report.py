"""`cpp-data report`: a self-contained HTML report, rendered in a real headless browser (Debian's chromium)."""

from __future__ import annotations

import shutil
import subprocess

import pytest
from conftest import run_cli

pytestmark = pytest.mark.slow  # full builds (pyproject.toml: markers)

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
    for placeholder in ("not available", "placeholder", "TODO", "lorem", "coming soon"):
        assert placeholder.lower() not in text.lower(), placeholder
    titles = ("The numbers", "Which files were set aside, where and why", "The license mix by repository",
              "Document and token lengths", "How well the tokenizer compresses each repository",
              "Duplicate clusters", "Semantic coverage by repository", "Where the build&#x27;s time went",
              "Packing efficiency", "Examples of refused and deduplicated files")
    positions = [text.index(f"<h2>{t}</h2>") for t in titles]
    assert positions == sorted(positions) and positions[0] < text.index("<svg")  # the numbers come first
    import pyarrow.parquet as pq

    ledger = pq.read_table(build / "provenance" / "ledger.parquet").to_pylist()
    seen = f"<td>files seen</td><td>{len(ledger):,}</td>"
    assert seen in text
    refused = next(r for r in ledger if r["decision"] not in ("kept", "exact_duplicate", "near_duplicate"))
    assert f"{refused['source_repo']}:{refused['source_path']}" in text  # an example with its path
    plots = text.count("<svg")
    assert plots >= 7 and "http://" not in text.split("<svg", 1)[0].split("<style>")[0]
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
