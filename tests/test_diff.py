"""`cpp-data diff` between two real builds of a git source whose pin moved."""

from __future__ import annotations

import json
import subprocess

import pytest
from conftest import GOOGLETEST, build_dir, make_git_repo, need, provenance_build, run_cli, write_sources

pytestmark = pytest.mark.slow  # full builds (pyproject.toml: markers)

GPL_HEADER = ("// This program is free software: you can redistribute it and/or modify it under the terms of\n"
              "// the GNU General Public License as published by the Free Software Foundation, version 3.\n")


def _commit(repo, message):
    subprocess.run(["git", "add", "-A"], cwd=repo, check=True)
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@e.org", "commit", "-qm", message], cwd=repo,
                   check=True)


def test_diff_reports_documents_refusals_licenses_and_tables(tmp_path):
    need(GOOGLETEST)
    src = sorted((GOOGLETEST / "googletest/src").glob("*.cc"))
    files = {f"src/{p.name}": p.read_bytes() for p in src[:6]}
    repo = tmp_path / "repo"
    make_git_repo(repo, files)
    sources = write_sources(tmp_path / "s.toml", [{"name": "gt", "url": str(repo), "ref": "main",
                                                   "license": "BSD-3-Clause"}])
    out = tmp_path / "out"
    provenance_build(sources, out)
    first = (out / "builds" / "LATEST").read_text().strip()

    names = sorted(files)
    (repo / names[-1]).unlink()                                   # removed (a kept file)
    (repo / "src/new.cc").write_bytes(src[7].read_bytes())        # added
    (repo / names[1]).write_bytes((repo / names[1]).read_bytes() + b"\nint extra_symbol = 1;\n")  # changed
    (repo / names[2]).write_bytes(GPL_HEADER.encode() + (repo / names[2]).read_bytes().split(b"\n\n", 1)[1])
    _commit(repo, "second")
    run_cli("sources", "lock", str(sources))
    provenance_build(sources, out)
    second = (out / "builds" / "LATEST").read_text().strip()
    assert first != second

    a, b = out / "builds" / first, out / "builds" / second
    result = json.loads(run_cli("diff", str(a), str(b), "--json", "--tables", str(tmp_path / "t")).stdout)
    docs = result["documents"]
    assert docs["added"] == 1 and docs["removed"] == 2 and docs["changed"] == 1  # one file's text changed
    # the commit moved under every surviving document; those whose text did not change say so
    assert docs["unchanged"] == 0 and docs["same_text_new_pin"] == result["a"]["documents"] - 3
    assert result["newly_refused"] == {"license_refused:copyleft_not_opted_in": 1}
    assert result["licenses"]["b"]["BSD-3-Clause"]["documents"] == result["b"]["documents"]
    assert result["schema"]["columns_added"] == [] and result["schema"]["generation"] == ["v6", "v6"]
    text = run_cli("diff", str(a), str(b)).stdout
    assert "+1 added" in text and "copyleft_not_opted_in" in text

    import duckdb

    rows = duckdb.sql(f"select change, count(*) from '{tmp_path}/t/documents.parquet' group by 1 order by 1").fetchall()
    assert dict(rows) == {k: v for k, v in docs.items() if v}
    refused = duckdb.sql(f"select now, count(*) from '{tmp_path}/t/refusals.parquet' group by 1").fetchall()
    assert refused == [("license_refused:copyleft_not_opted_in", 1)]
    paths = duckdb.sql(f"select source_repo, source_path from '{tmp_path}/t/refusals.parquet'").fetchall()
    assert len(paths) == 1 and paths[0][1] in text  # the text output names the newly refused file too
    # one field, one name: the tables take the build's names (a side's with _a or _b), the ledger the shards'
    import pyarrow.parquet as pq

    assert {"source_commit_a", "text_sha256_b", "license_spdx_a", "size_bytes_b"} <= set(
        pq.read_schema(tmp_path / "t" / "documents.parquet").names)
    assert pq.read_schema(tmp_path / "t" / "licenses.parquet").names == ["license_spdx", "side", "documents",
                                                                         "size_bytes"]
    shared = {"source_repo", "source_commit", "source_path", "raw_sha256", "text_sha256", "size_bytes",
              "license_spdx", "license_source", "license_confidence"}
    assert shared <= set(pq.read_schema(b / "provenance" / "ledger.parquet").names)
    assert shared <= set(pq.read_schema(next((b / "shards").glob("*.parquet"))).names)


def test_diff_refuses_an_incomplete_build(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "manifest.json").write_text("{}")  # a build whose _COMPLETE was never written
    proc = run_cli("diff", str(tmp_path / "a"), str(tmp_path / "a"), check=False)
    assert proc.returncode == 2 and "_COMPLETE" in proc.stderr


def test_diff_tables_into_a_file_is_a_one_line_error(reference_build, tmp_path):
    """--tables naming a file had ended in FileExistsError, after the diff's work; it is refused first."""
    (tmp_path / "taken").write_text("mine")
    proc = run_cli("diff", str(reference_build), str(reference_build), "--tables", str(tmp_path / "taken"),
                   check=False)
    assert proc.returncode == 2 and proc.stderr.strip() == (f"cpp-data: error: --tables {tmp_path / 'taken'}: is a "
                                                           f"file; give a directory (it is made if missing)")
    assert (tmp_path / "taken").read_text() == "mine"


def test_diff_names_files_refused_in_both_under_another_rule(reference_build, tmp_path):
    """A file refused in A as mostly_comments and in B for its license had appeared in no count of the diff."""
    import json
    import shutil

    import pyarrow as pa
    import pyarrow.parquet as pq

    b = tmp_path / "b"
    shutil.copytree(reference_build, b)
    ledger = b / "provenance" / "ledger.parquet"
    ledger.chmod(0o644)
    t = pq.read_table(ledger)
    pairs = list(zip(t.column("decision").to_pylist(), t.column("reason").to_pylist()))
    i = next(k for k, (d, r) in enumerate(pairs)  # a refused file, to be refused in B under another rule
             if d not in ("kept", "license_refused"))
    was = f"{t.column('decision')[i].as_py()}:{t.column('reason')[i].as_py().split('@')[0]}"
    decision = [("license_refused" if k == i else d) for k, d in enumerate(t.column("decision").to_pylist())]
    reason = [("no_license" if k == i else r) for k, r in enumerate(t.column("reason").to_pylist())]
    t = t.set_column(t.schema.get_field_index("decision"), "decision", pa.array(decision, pa.string()))
    t = t.set_column(t.schema.get_field_index("reason"), "reason", pa.array(reason, pa.string()))
    pq.write_table(t, ledger)
    out = json.loads(run_cli("diff", str(reference_build), str(b), "--json").stdout)
    assert out["refused_under_another_rule"] == {f"{was} -> license_refused:no_license": 1}
    assert out["newly_refused"] == {} and out["schema"]["columns_added"] == []


def test_a_license_change_under_the_same_text_is_named(tmp_path):
    """The declared license of a source moved (MIT -> Apache-2.0) while no text changed: diff had called every
    document unchanged; the license table alone showed it."""
    src = tmp_path / "src"
    src.mkdir()
    for i in range(4):
        (src / f"f{i}.cpp").write_text("".join(f"int f{i}_{k}(int x) {{\n  return x * {k + 2} + {i};\n}}\n"
                                               for k in range(8)))
    builds = []
    for n, lic in enumerate(("MIT", "Apache-2.0")):
        sources = write_sources(tmp_path / f"s{n}.toml", [{"name": "a", "url": str(src), "license": lic}])
        provenance_build(sources, tmp_path / f"out{n}")
        builds.append(build_dir(tmp_path / f"out{n}"))
    result = json.loads(run_cli("diff", str(builds[0]), str(builds[1]), "--json").stdout)
    assert result["documents"]["license_changed"] == result["b"]["documents"] == 4, result["documents"]
    assert "4 same text under another license" in run_cli("diff", str(builds[0]), str(builds[1])).stdout
