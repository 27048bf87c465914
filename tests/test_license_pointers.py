"""License pointers ("For the license information refer to format.h", "See Copyright Notice in lua.h") and sidecar
license files (fmt.license.rst), on the real files of tests/fixtures/real_repos (README there says where from)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import build_dir, need, provenance_build, write_sources

from cpp_data.schemas.artifacts import COLLECTED_FILE, LICENSE_FILE
from cpp_data.stages.lib.license_match import policy
from cpp_data.stages.lib.license_pointers import find_pointer, is_license_file_name, resolve
from cpp_data.stages.license import DEFAULT_ALLOW, CollectedTree, file_license, repo_licenses

REAL = Path(__file__).parent / "fixtures" / "real_repos"
ALLOW = frozenset(DEFAULT_ALLOW)
COMMIT = "0" * 40
SPDLOG_FMT = "gabime+spdlog/include/spdlog/fmt/bundled"


def _collected(tmp_path: Path, files: dict[str, str], commit: str = COMMIT) -> Path:
    """collect's output for a tree of `files` (tree path -> fixture path): its C/C++ files as one part, its
    license texts (by collect's own rule) as license_files.parquet."""
    rows, lic = [], []
    for tree_path, fixture in sorted(files.items()):
        data = (REAL / fixture).read_bytes()
        if is_license_file_name(Path(tree_path).name):
            lic.append({"source_repo": "s", "source_path": tree_path, "content": data})
        else:
            rows.append({"source_repo": "s", "source_commit": commit, "source_path": tree_path,
                         "size_bytes": len(data), "raw_sha256": "", "content": data})
    tmp_path.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows, schema=COLLECTED_FILE), tmp_path / "files-00000.parquet")
    pq.write_table(pa.Table.from_pylist(lic, schema=LICENSE_FILE), tmp_path / "license_files.parquet")
    return tmp_path


def _judge(collected: Path, path: str, fixture: str, declared: str | None = None):
    """file_license of one file of the collected tree, as the license stage runs it."""
    licenses = repo_licenses(pq.read_table(collected / "license_files.parquet").to_pylist())
    answer = file_license((REAL / fixture).read_text(), path, licenses, declared, 400, CollectedTree(collected),
                          COMMIT)
    return answer, policy(answer.spdx, ALLOW, False)[0]


def test_the_pointers_of_real_headers_are_read():
    assert find_pointer((REAL / "fmtlib+fmt/include/fmt/std.h").read_text())[1:] == (
        "For the license information refer to format.h", "format.h")
    assert find_pointer((REAL / "lua+lua/lprefix.h").read_text())[1:] == ("See Copyright Notice in lua.h", "lua.h")
    assert find_pointer((REAL / "lua+lua/lua.h").read_text())[0] == "notice_at_end"
    assert find_pointer((REAL / "fmtlib+fmt/include/fmt/format.h").read_text()) is None  # it holds the notice


def test_a_pointer_resolves_in_the_same_folder_first_and_never_outside_the_tree():
    names = {"format.h": ["format.h", "include/fmt/format.h", "test/format.h"]}
    assert resolve("include/fmt/std.h", "format.h", names) == "include/fmt/format.h"
    assert resolve("include/fmt/detail/x.h", "format.h", names) == "include/fmt/format.h"  # the nearest above
    assert resolve("src/a.cc", "format.h", names) == "format.h"
    assert resolve("src/a.cc", "../format.h", names) is None
    assert resolve("src/a.cc", "/usr/include/format.h", names) is None
    # vendored code looks no higher than its component, then for the only file of that name inside it
    assert resolve("third_party/fmt/src/a.cc", "format.h", names) is None
    assert resolve("third_party/fmt/src/a.cc", "format.h",
                   {"format.h": ["format.h", "third_party/fmt/include/format.h"]}) == "third_party/fmt/include/format.h"


def test_fmt_headers_follow_their_pointer_to_format_h(tmp_path):
    """fmt's std.h says only "For the license information refer to format.h": with no license file in the tree
    it was refused as no_license; format.h's header states MIT."""
    collected = _collected(tmp_path, {"include/fmt/std.h": "fmtlib+fmt/include/fmt/std.h",
                                      "include/fmt/format.h": "fmtlib+fmt/include/fmt/format.h"})
    answer, allowed = _judge(collected, "include/fmt/std.h", "fmtlib+fmt/include/fmt/std.h")
    assert (answer.spdx, answer.source, allowed) == ("MIT", "pointer", True)
    assert answer.evidence == ("pointer 'For the license information refer to format.h' -> include/fmt/format.h "
                               "(mit_text)")
    # the pointer's target missing from the tree: refused, saying what was looked for
    alone = _collected(tmp_path / "alone", {"include/fmt/std.h": "fmtlib+fmt/include/fmt/std.h"})
    answer, allowed = _judge(alone, "include/fmt/std.h", "fmtlib+fmt/include/fmt/std.h")
    assert (answer.spdx, allowed) == ("NOASSERTION", False)
    assert "no format.h in the source tree" in answer.evidence


def test_lua_files_take_the_notice_that_closes_lua_h(tmp_path):
    """Lua's repository has no license file; every file says "See Copyright Notice in lua.h", and lua.h says
    its notice is at the end of the file (a comment after the code)."""
    collected = _collected(tmp_path, {"lua.h": "lua+lua/lua.h", "lprefix.h": "lua+lua/lprefix.h"})
    answer, allowed = _judge(collected, "lprefix.h", "lua+lua/lprefix.h")
    assert (answer.spdx, answer.source, allowed) == ("MIT", "pointer", True)
    assert answer.evidence == ("pointer 'See Copyright Notice in lua.h' -> lua.h "
                               "(mit_text in a comment after the header)")
    answer, allowed = _judge(collected, "lua.h", "lua+lua/lua.h")
    assert (answer.spdx, answer.source, allowed) == ("MIT", "pointer", True)


def test_a_pointer_never_lets_copyleft_code_in(tmp_path):
    """Under a GPL repository license, fmt's std.h pointing to an MIT format.h stays GPL (refused): a pointer
    replaces only a missing or permissive inherited answer."""
    gpl = Path("/usr/share/common-licenses/GPL-3")
    need(gpl)
    collected = _collected(tmp_path, {"include/fmt/std.h": "fmtlib+fmt/include/fmt/std.h",
                                      "include/fmt/format.h": "fmtlib+fmt/include/fmt/format.h"})
    pq.write_table(pa.Table.from_pylist([{"source_repo": "s", "source_path": "COPYING",
                                          "content": gpl.read_bytes()}], schema=LICENSE_FILE),
                   collected / "license_files.parquet")
    answer, allowed = _judge(collected, "include/fmt/std.h", "fmtlib+fmt/include/fmt/std.h")
    assert answer.spdx.startswith("GPL-3.0") and answer.source == "repo_file" and not allowed
    assert "not overriding it: pointer 'For the license information refer to format.h'" in answer.evidence


def test_a_sidecar_license_file_decides_its_folder(tmp_path):
    """spdlog bundles fmt as include/spdlog/fmt/bundled/ with fmt.license.rst beside it and no LICENSE: the
    sidecar states its license (askalono: MIT), and the bundled std.h is kept by it."""
    assert is_license_file_name("fmt.license.rst") and is_license_file_name("LICENSE.fmt")
    assert not any(map(is_license_file_name, ("licenses.cpp", "LicenseManager.java", "licenses.json")))
    bundled = "include/spdlog/fmt/bundled"
    collected = _collected(tmp_path, {f"{bundled}/std.h": f"{SPDLOG_FMT}/std.h",
                                      f"{bundled}/fmt.license.rst": f"{SPDLOG_FMT}/fmt.license.rst"})
    licenses = repo_licenses(pq.read_table(collected / "license_files.parquet").to_pylist())
    assert licenses[bundled][0] == "MIT"
    assert licenses[bundled][2] == f"{bundled}/: sidecar fmt.license.rst (MIT); no primary license file"
    answer, allowed = _judge(collected, f"{bundled}/std.h", f"{SPDLOG_FMT}/std.h")
    assert (answer.spdx, answer.source, allowed) == ("MIT", "repo_file", True)


@pytest.mark.slow
def test_a_build_follows_pointers_and_sidecars(tmp_path):
    """The stages as they run: collect keeps fmt.license.rst, the license stage follows the pointers of Lua's
    and fmt's files, and the ledger says what was followed."""
    tree = tmp_path / "tree"
    for tree_path, fixture in {"lua/lua.h": "lua+lua/lua.h", "lua/lprefix.h": "lua+lua/lprefix.h",
                               "fmt/include/fmt/std.h": "fmtlib+fmt/include/fmt/std.h",
                               "fmt/include/fmt/format.h": "fmtlib+fmt/include/fmt/format.h",
                               "third_party/fmt/std.h": f"{SPDLOG_FMT}/std.h",
                               "third_party/fmt/fmt.license.rst": f"{SPDLOG_FMT}/fmt.license.rst"}.items():
        (tree / tree_path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(REAL / fixture, tree / tree_path)
    sources = write_sources(tmp_path / "sources.toml", [{"name": "t", "url": str(tree)}])
    provenance_build(sources, tmp_path / "out")
    ledger = pq.read_table(build_dir(tmp_path / "out") / "provenance" / "ledger.parquet").to_pylist()
    got = {r["source_path"]: (r["decision"], r["license_spdx"], r["license_source"]) for r in ledger
           if r["decision"] != "skipped"}
    assert got == {"lua/lua.h": ("kept", "MIT", "pointer"), "lua/lprefix.h": ("kept", "MIT", "pointer"),
                   "fmt/include/fmt/std.h": ("kept", "MIT", "pointer"),
                   "fmt/include/fmt/format.h": ("kept", "MIT", "header_notice"),
                   "third_party/fmt/std.h": ("kept", "MIT", "repo_file")}
    evidence = {r["source_path"]: r["license_evidence"] for r in ledger}
    assert evidence["lua/lprefix.h"].startswith("pointer 'See Copyright Notice in lua.h' -> lua/lua.h")
    assert evidence["third_party/fmt/std.h"] == ("third_party/fmt/: sidecar fmt.license.rst (MIT); no primary license "
                                                 "file; pointer 'For the license information refer to format.h': "
                                                 "no format.h in the source tree")
