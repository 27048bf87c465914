"""Bad input gives a clear one-line message and a ledger row; nothing crashes."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from conftest import (
    GOOGLETEST,
    build,
    build_dir,
    make_git_repo,
    need,
    provenance_build,
    provenance_recipe,
    run_bounded,
    run_cli,
    write_sources,
)

pytestmark = pytest.mark.slow  # full builds (pyproject.toml: markers)


def _ledger(out: Path) -> dict[str, dict]:
    rows = pq.read_table(build_dir(out) / "provenance" / "ledger.parquet").to_pylist()
    return {r["source_path"]: r for r in rows}


def test_bad_files_are_recorded_with_reasons(tmp_path):
    need(GOOGLETEST)
    tree = tmp_path / "messy"
    (tree / "src").mkdir(parents=True)
    good = (GOOGLETEST / "googletest" / "src" / "gtest-printers.cc").read_text()
    (tree / "src" / "good.cc").write_text(good)
    (tree / "src" / "z_crlf.cc").write_bytes(good.replace("\n", "\r\n").encode())
    (tree / "src" / "binary.cpp").write_bytes(b"\x7fELF\x02\x01\x01\0\0\0" + os.urandom(4096))
    (tree / "src" / "latin1.cpp").write_bytes(good.encode()[:2000] + "// caf\xe9\n".encode("latin-1"))
    (tree / "src" / "latin1_b.cpp").write_bytes(good.encode()[:3000] + "// na\xefve\n".encode("latin-1"))
    with open(tree / "src" / "huge.cpp", "wb") as f:  # 50 MB
        line = b"int x = 0; // " + b"y" * 80 + b"\n"
        for _ in range(50 * 2**20 // len(line) + 1):
            f.write(line)
    (tree / "src" / "empty.h").write_bytes(b"")
    os.mkfifo(tree / "src" / "pipe.cpp")  # opened, it would block the build until something wrote to it
    (tree / "src" / "lfs.cpp").write_text(  # a file kept on an LFS server: the repository holds this pointer
        "version https://git-lfs.github.com/spec/v1\n"
        "oid sha256:4d7a214614ab2935c943f9e0ff69d22eadbb8f32b1258daaa5e2ca24d17e2393\nsize 123456\n")
    os.symlink("loop_b.h", tree / "src" / "loop_a.h")
    os.symlink("loop_a.h", tree / "src" / "loop_b.h")
    outside = tmp_path / "secret.h"
    outside.write_text("int secret_value = 42;\n" * 20)
    os.symlink(outside, tree / "src" / "escape.h")
    os.symlink(tmp_path, tree / "src" / "dir_escape")
    os.symlink(tmp_path / "appears_later.h", tree / "src" / "abs_dangling.h")  # its reason must not depend on it
    os.symlink("../../elsewhere.h", tree / "src" / "rel_escape.h")
    os.symlink("missing.h", tree / "src" / "rel_dangling.h")
    (tree / "CMakeLists.txt").write_text("project(x)\n")
    sources = write_sources(tmp_path / "s.toml", [{"name": "messy", "url": str(tree), "license": "BSD-3-Clause"}])
    out = tmp_path / "out"
    proc = provenance_build(sources, out)
    assert "Traceback" not in proc.stderr
    ledger = _ledger(out)
    expect = {
        "src/good.cc": ("kept", ""),
        "src/binary.cpp": ("filtered", "binary"),
        "src/huge.cpp": ("skipped", "too_large"),
        "src/empty.h": ("skipped", "empty_file"),
        "src/pipe.cpp": ("skipped", "not_regular_file"),
        "src/lfs.cpp": ("skipped", "lfs_pointer"),
        "src/loop_a.h": ("skipped", "symlink_loop"),
        "src/escape.h": ("skipped", "symlink_outside_tree"),
        "src/dir_escape": ("skipped", "symlink_outside_tree"),
        "src/abs_dangling.h": ("skipped", "symlink_outside_tree"),
        "src/rel_escape.h": ("skipped", "symlink_outside_tree"),
        "src/rel_dangling.h": ("skipped", "symlink_dangling"),
        "CMakeLists.txt": ("skipped", "not_cpp"),
    }
    for path, (decision, reason) in expect.items():
        assert (ledger[path]["decision"], ledger[path]["reason"]) == (decision, reason), (path, ledger[path])
    assert ledger["src/latin1.cpp"]["decision"] == "filtered"
    assert ledger["src/latin1.cpp"]["reason"].startswith("undecodable_utf8@")  # where the first bad byte is
    assert ledger["src/latin1.cpp"]["reason"] != ledger["src/latin1_b.cpp"]["reason"]
    # CRLF normalizes to the same text as good.cc: an exact duplicate with its keeper recorded
    crlf = ledger["src/z_crlf.cc"]
    assert crlf["decision"] == "exact_duplicate" and crlf["keeper_path"] == "src/good.cc"
    assert ledger["src/huge.cpp"]["size_bytes"] > 50 * 10**6
    assert not any("secret_value" in p for p in ledger)  # nothing was read through the escaping link
    summary = proc.stdout
    assert "skipped:symlink_outside_tree" in summary and "filtered:binary" in summary
    # counted by rule: the two files refused at different offsets make one line of the summary
    assert [line.split() for line in summary.splitlines() if "undecodable_utf8" in line] == \
        [["filtered:undecodable_utf8", "2"]]


def test_malformed_sources_files_give_one_line_errors(tmp_path):
    cases = {
        "not toml": "[[source]\nname = 'x'",
        "no sources": "title = 'nothing'\n",
        "missing url": "[[source]]\nname = 'a'\n",
        "bad name": "[[source]]\nname = 'a b'\nurl = '/tmp'\n",
        "name like an option": "[[source]]\nname = '-rf'\nurl = '/tmp'\n",
        "name not a string": "[[source]]\nname = 3\nurl = '/tmp'\n",
        "name with a line break": "[[source]]\nname = \"abc\\n\"\nurl = '/tmp'\n",
        "duplicate": "[[source]]\nname = 'a'\nurl = '/tmp'\n[[source]]\nname = 'a'\nurl = '/tmp'\n",
        "unknown key": "[[source]]\nname = 'a'\nurl = '/tmp'\nbranch = 'main'\n",
        "missing path": f"[[source]]\nname = 'a'\nurl = '{tmp_path}/nope'\n",
        "ref on a plain dir": f"[[source]]\nname = 'a'\nurl = '{tmp_path}'\nref = 'main'\n",
        # declared licenses the cascade cannot read: every file falling back to them would be refused as no_license
        "license not spdx": f"[[source]]\nname = 'a'\nurl = '{tmp_path}'\nlicense = 'MIT License'\n",
        "license typo": f"[[source]]\nname = 'a'\nurl = '{tmp_path}'\nlicense = 'BSD-3'\n",
    }
    for label, text in cases.items():
        f = tmp_path / f"{label.replace(' ', '_')}.toml"
        f.write_text(text)
        proc = run_cli("build", "--sources", str(f), "--out", str(tmp_path / "o"), check=False)
        assert proc.returncode == 2, (label, proc.stdout, proc.stderr)
        err = proc.stderr.strip()
        assert len(err.splitlines()) == 1 and str(f) in err, (label, err)
        assert "Traceback" not in err
        if label.startswith("license"):
            assert "is not an SPDX license expression" in err, err
        if "name" in label:
            assert ("'name' must be a string" if "string" in label else "must start with an ASCII letter") in err, err
        if label == "missing url":
            assert "'url' is missing" in err, err
    # a directory given as the sources file, to build and to lock
    for args in (("build", "--sources", str(tmp_path), "--out", str(tmp_path / "o")),
                 ("sources", "lock", str(tmp_path))):
        proc = run_cli(*args, check=False)
        err = proc.stderr.strip()
        assert proc.returncode == 2 and len(err.splitlines()) == 1, (args, proc.returncode, err)
        assert f"{tmp_path}: is a directory" in err, err


def test_out_that_is_a_file_is_a_one_line_error(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    (src / "a.cpp").write_text("int main() { return 0; }\n" * 20)
    sources = tmp_path / "sources.toml"
    sources.write_text(f"[[source]]\nname = 'a'\nurl = '{src}'\n")
    out = tmp_path / "out"
    out.write_text("not a directory")
    proc = run_cli("build", "--sources", str(sources), "--out", str(out), check=False)
    err = proc.stderr.strip()
    assert proc.returncode == 2 and len(err.splitlines()) == 1, (proc.returncode, err)
    assert str(out) in err and "is a file" in err and "Traceback" not in err
    assert out.read_text() == "not a directory"  # left as it was
    dangling = tmp_path / "dangling"
    dangling.symlink_to(tmp_path / "gone" / "out")  # a mount or volume that is absent
    proc = run_cli("build", "--sources", str(sources), "--out", str(dangling), check=False)
    err = proc.stderr.strip()
    assert proc.returncode == 2 and len(err.splitlines()) == 1, (proc.returncode, err)
    assert "symlink to" in err and str(tmp_path / "gone" / "out") in err and "does not exist" in err, err
    for name in ("st*ar", "a[1]", "a::b", "we\nird"):  # datatrove's fsspec listing reads these as patterns
        proc = run_cli("build", "--sources", str(sources), "--out", str(tmp_path / name), check=False)
        err = proc.stderr.strip()
        assert proc.returncode == 2 and len(err.splitlines()) == 1 and "without * [ ] ::" in err, (name, err)
        assert not (tmp_path / name).exists()


def test_empty_git_repository_is_a_clear_error(tmp_path):
    import subprocess

    repo = tmp_path / "empty"
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    sources = write_sources(tmp_path / "s.toml", [{"name": "empty", "url": str(repo)}])
    proc = run_cli("build", "--sources", str(sources), "--out", str(tmp_path / "o"), check=False)
    assert proc.returncode == 2
    assert "no commits" in proc.stderr and "empty" in proc.stderr


def test_an_empty_corpus_publishes_nothing_and_leaves_latest(tmp_path):
    """No file, or every file refused: exit 2 in one line naming why, nothing published, LATEST where it was,
    also with a recipe that has no lanes stage (whose own check stops the whole recipe)."""
    code = "".join(f"int f{k}(int x) {{ return x * {k} + {k * k}; }}\n" for k in range(12))
    (tmp_path / "kept").mkdir()
    (tmp_path / "kept" / "a.cc").write_text("// SPDX-License-Identifier: MIT\n" + code)
    provenance_build(write_sources(tmp_path / "kept.toml", [{"name": "kept", "url": str(tmp_path / "kept")}]),
                     tmp_path / "out")
    latest = (tmp_path / "out" / "builds" / "LATEST").read_text()
    (tmp_path / "nothing").mkdir()
    (tmp_path / "refused").mkdir()
    (tmp_path / "refused" / "a.cc").write_text(code)  # no license anywhere
    sources = write_sources(tmp_path / "s.toml", [{"name": "nothing", "url": str(tmp_path / "nothing")},
                                                  {"name": "refused", "url": str(tmp_path / "refused")}])
    proc = provenance_build(sources, tmp_path / "out", check=False)
    err = proc.stderr.strip()
    assert proc.returncode == 2 and len(err.splitlines()) == 1, err
    assert "no document kept (license_refused:no_license 1)" in err and "LATEST is unchanged" in err
    assert (tmp_path / "out" / "builds" / "LATEST").read_text() == latest
    assert [d.name for d in (tmp_path / "out" / "builds").glob("v6-*")] == [latest.strip()]


def test_directory_changed_after_lock_fails_loudly(tmp_path):
    need(GOOGLETEST)
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "a.cc").write_text((GOOGLETEST / "googletest" / "src" / "gtest-printers.cc").read_text())
    sources = write_sources(tmp_path / "s.toml", [{"name": "t", "url": str(tree)}])
    run_cli("sources", "lock", str(sources))
    (tree / "a.cc").write_text("int changed = 1;\n" * 20)
    proc = build(sources, tmp_path / "out", check=False)
    assert proc.returncode == 2  # bad input: the pins do not name what is on disk
    assert "changed since it was locked" in proc.stderr and "sources lock" in proc.stderr


def test_an_output_or_a_lock_inside_a_directory_source_is_refused_up_front(tmp_path):
    """The build's own files, or its lock, written inside a plain-directory source change the tree its pin
    names: the build failed in collect, and failed again after every relock. Now the build and `sources lock`
    refuse with one line saying where to put them; a lock written elsewhere builds; a git source, read at its
    commit, may hold the output."""
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "a.cpp").write_text("int main() { return 0; }\n" * 20)
    sources = write_sources(tree / "sources.toml", [{"name": "self", "url": str(tree)}])

    def one_line_error(*args: str) -> str:
        proc = run_cli(*args, check=False)
        err = proc.stderr.strip()
        assert proc.returncode == 2 and len(err.splitlines()) == 1 and "Traceback" not in err, (proc.returncode, err)
        return err

    err = one_line_error("build", "--sources", str(sources), "--out", str(tree / "out"), "--dry-run")
    assert "source 'self'" in err and "holds --out" in err and str(sources) in err
    assert not (tree / "out").exists()
    err = one_line_error("sources", "lock", str(sources))
    assert "would be written inside source 'self'" in err and "-o PATH" in err
    assert not (tree / "sources.lock").exists()
    lock = tmp_path / "self.lock"
    run_cli("sources", "lock", str(sources), "-o", str(lock))
    run_cli("build", "--sources", str(sources), "--lock", str(lock), "--out", str(tmp_path / "o"), "--dry-run")
    (tree / "sources.lock").write_text(lock.read_text())  # copied in by hand (or written by an older cpp-data)
    err = one_line_error("build", "--sources", str(sources), "--out", str(tmp_path / "o"), "--dry-run")
    assert "this lock lies inside source 'self'" in err
    (tree / "sources.lock").unlink()
    other = write_sources(tmp_path / "other.toml", [{"name": "other", "url": str(tree)}])
    err = one_line_error("build", "--sources", str(other), "--lock", str(lock), "--out", str(tmp_path / "o"),
                         "--dry-run")  # an explicit lock of another sources file is refused, not ignored
    assert f"{lock}: pins none of the sources of {other} (it pins self)" in err
    err = one_line_error("sources", "lock", str(sources), "-o", str(tmp_path))  # a directory
    assert str(tmp_path) in err and "cannot write the lock file" in err
    repo = tmp_path / "repo"
    make_git_repo(repo, {"a.cpp": "int a;\n" * 20})
    git_sources = write_sources(tmp_path / "g.toml", [{"name": "g", "url": str(repo)}])
    run_cli("build", "--sources", str(git_sources), "--out", str(repo / "out"), "--dry-run")


def test_git_source_symlinks_and_submodule_free_collect(tmp_path):
    need(GOOGLETEST)
    files = {f"include/{p.name}": p.read_bytes() for p in sorted((GOOGLETEST / "googletest/include/gtest").glob("*.h"))}
    repo = tmp_path / "repo"
    make_git_repo(repo, files)
    os.symlink("/etc/passwd", repo / "include" / "passwd.h")
    import subprocess

    subprocess.run(["git", "add", "-A"], cwd=repo, check=True)
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@e.org", "commit", "-qm", "link"], cwd=repo,
                   check=True)
    sources = write_sources(tmp_path / "s.toml", [{"name": "gt", "url": str(repo), "ref": "main"}])
    out = tmp_path / "out"
    provenance_build(sources, out)
    ledger = _ledger(out)
    assert ledger["include/passwd.h"]["reason"] == "symlink"
    assert ledger["include/gtest.h"]["decision"] == "kept"


def test_every_file_reached_gets_one_ledger_row(tmp_path):
    """Unreadable files and directories, a non-UTF-8 file name and a late NUL byte: each gets its row and the
    build goes on. CI runs as root, which reads anything, so the build runs without the capabilities that let
    root ignore permissions (CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH)."""
    need(GOOGLETEST)
    import subprocess

    from conftest import CLI

    tree = tmp_path / "tree"
    (tree / "locked").mkdir(parents=True)
    good = (GOOGLETEST / "googletest" / "src" / "gtest-printers.cc").read_text()
    (tree / "good.cc").write_text(good)
    (tree / "locked" / "hidden.cc").write_text(good + "// hidden\n")
    (tree / "unreadable.cc").write_text(good + "// unreadable\n")
    (tree / "late_nul.cc").write_bytes(good.encode()[:9000] + b"\0" + good.encode()[9000:])
    os.mkdir(os.fsencode(tree) + b"/caf\xe9")  # Latin-1 names: a directory and a file in it
    with open(os.fsencode(tree) + b"/caf\xe9/na\xefve.cc", "wb") as f:
        f.write(good.encode() + b"// naive\n")
    os.chmod(tree / "locked", 0)
    os.chmod(tree / "unreadable.cc", 0)
    sources = write_sources(tmp_path / "s.toml", [{"name": "t", "url": str(tree), "license": "MIT"}])
    drop = ["setpriv", "--inh-caps", "-dac_override,-dac_read_search",
            "--bounding-set", "-dac_override,-dac_read_search"]
    probe = subprocess.run([*drop, "cat", str(tree / "unreadable.cc")], capture_output=True)
    assert probe.returncode != 0, "the capabilities were not dropped: root still reads a mode-000 file"
    out = tmp_path / "out"
    proc = run_bounded([*drop, *CLI, "build", "--recipe", str(provenance_recipe(tmp_path / "recipe")), "--sources",
                        str(sources), "--out", str(out), "--workers", "2", "--no-progress"])
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    rows = pq.read_table(build_dir(out) / "provenance" / "ledger.parquet").to_pylist()
    paths = [r["source_path"] for r in rows]
    assert len(paths) == len(set(paths))  # one row per file reached
    ledger = {r["source_path"]: (r["decision"], r["reason"]) for r in rows}
    assert ledger == {
        "good.cc": ("kept", ""),
        "locked/": ("skipped", "unreadable"),
        "unreadable.cc": ("skipped", "unreadable"),
        "late_nul.cc": ("filtered", "binary"),
        "caf\\xe9/na\\xefve.cc": ("skipped", "undecodable_path"),
    }, ledger
    assert "skipped:unreadable" in proc.stdout and "skipped:undecodable_path" in proc.stdout
    assert "2 file(s) or directories could not be read" in proc.stdout + proc.stderr


def test_hostile_texts_are_structured_without_stalling_the_build(tmp_path):
    """Generated-looking files that pass the filter but find quadratic corners in an unbounded structure
    analysis (docs/DESIGN.md section 6): without the bounds, each of the three largest here runs for minutes
    alone, and the 25,000 nested namespaces take a process to gigabytes. The build must finish well inside the
    bound below and structure every one of them."""
    tree = tmp_path / "gen"
    tree.mkdir()
    files = {
        "deep_ns.hpp": "".join(f"namespace n{i} {{\n" for i in range(25_000)) + "int f() { return 1; }\n"
        + "}\n" * 25_000,
        "heads.hpp": "".join(f"class A_API B_API C{i}\n" for i in range(16_000)),
        "unclosed.cpp": "void f() {\n" + "".join(f"ABC_DEF(x{i}, \n" for i in range(32_000)) + "}\n",
        "parens.cpp": "".join("(" * k + "\n" for k in range(1, 1000)),
        "deep_err.cpp": "void f() {\n" + "".join(f"{{ int FOO_BAR{i} @;\n" for i in range(20_000)),
    }
    for name, text in files.items():
        (tree / name).write_text(text)
    sources = write_sources(tmp_path / "s.toml", [{"name": "gen", "url": str(tree), "license": "MIT"}])
    out = tmp_path / "out"
    proc = provenance_build(sources, out, stages=("structure",), timeout=300)
    assert "Traceback" not in proc.stderr
    assert {p: r["decision"] for p, r in _ledger(out).items()} == {name: "kept" for name in files}
    rows = pq.read_table(build_dir(out) / "shards", columns=["source_path", "text", "structure_ids",
                                                              "chunk_boundaries"]).to_pylist()
    got = {r["source_path"]: r for r in rows}
    assert set(got) == set(files)
    for r in rows:
        assert len(r["structure_ids"]) == len(r["text"])
    namespaces = [c for c in got["deep_ns.hpp"]["chunk_boundaries"] if c["kind"] == "namespace"]
    assert len(namespaces) == 25_000


def test_hostile_file_names_and_texts_print_as_escapes(tmp_path):
    """File names and texts come from the repositories: an escape sequence, a line break or a bidi override in
    them must reach the user as escapes (the build summary, `show`, the report's tables), while the ledger keeps
    the name exactly as read."""
    need(GOOGLETEST)
    good = (GOOGLETEST / "googletest" / "src" / "gtest-printers.cc").read_text()
    tree = tmp_path / "names"
    tree.mkdir()
    hostile = ["\x1b[2J\u202eA\n.cc", "\x1b]0;title\x07B.cc"]
    (tree / hostile[0]).write_text(good)
    (tree / hostile[1]).write_text(good.replace("Print", "Prnt", 3))  # a near duplicate: the summary names a keeper
    other = (GOOGLETEST / "googletest" / "src" / "gtest-port.cc").read_text()
    (tree / "body.cc").write_text("// \x1b[31mred\u202e\n" + other)
    sources = write_sources(tmp_path / "s.toml", [{"name": "names", "url": str(tree), "license": "MIT"}])
    out = tmp_path / "out"
    proc = provenance_build(sources, out)
    assert set(hostile) <= set(_ledger(out))  # kept as read
    summary = proc.stdout[proc.stdout.index("build summary"):]
    cluster = [line for line in summary.splitlines() if "cluster of" in line]
    assert cluster and cluster[0].split("kept ")[1] in {"names:\\x1b[2J\\u202eA\\n.cc", "names:\\x1b]0;title\\x07B.cc"}
    shown = run_cli("show", str(out), "-n", "10").stdout
    assert "// \\x1b[31mred\\u202e" in shown
    assert "names:\\x1b[2J\\u202eA\\n.cc" in shown or "names:\\x1b]0;title\\x07B.cc" in shown
    as_json = run_cli("show", str(out), "-n", "10", "--json").stdout
    assert set(hostile) & {d["source_path"] for d in json.loads(as_json)}  # the same values, escaped in the text
    run_cli("report", str(out))
    page = next((out / "reports").glob("*.html")).read_text()
    assert "names:\\x1b]0;title\\x07B.cc" in page  # the near duplicate's row
    for text in (proc.stdout, proc.stderr, shown, as_json, page):
        assert not any(c in text for c in "\x1b\x07\u202e")


def test_a_full_disk_is_named_with_what_to_do(tmp_path):
    """A stage that hits ENOSPC, raised by Python or by pyarrow's native writer (/dev/full fails every write as a
    full disk does), fails with one line that says the disk is full and that the same command resumes; any
    other error keeps its text."""
    import errno

    import pyarrow as pa
    import pyarrow.parquet as pq

    from cpp_data.pipeline.runner.dag import stage_failed

    # a native file, not the path: pq.write_table removes a path it failed to write, /dev/full too when root
    with pytest.raises(OSError) as arrow_error, pa.OSFile("/dev/full", "wb") as full:
        pq.write_table(pa.table({"a": list(range(100_000))}), full)
    for exc in (OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), "/x/part.parquet"), arrow_error.value):
        msg = str(stage_failed("stage shards", exc, tmp_path))
        assert msg.startswith(f"stage shards: no space left on device under {tmp_path} "), msg
        assert "run the same command again" in msg and len(msg.splitlines()) == 1, msg
    other = str(stage_failed("stage shards", PermissionError(errno.EACCES, "Permission denied"), tmp_path))
    assert other == "stage shards: PermissionError: [Errno 13] Permission denied", other


def test_special_files_named_in_the_sources_file_are_refused_not_read(tmp_path):
    """A FIFO as a decontamination reference or an opt-out list would hang the build (even --dry-run), and
    /dev/zero would grow it until the kernel killed it: each is refused in one line, before any read."""
    src = tmp_path / "src"
    src.mkdir()
    (src / "a.cpp").write_text("int main() { return 0; }\n" * 20)
    fifo = tmp_path / "pipe.txt"
    os.mkfifo(fifo)
    for table, value in (("decontaminate", f"paths = ['{fifo}']"), ("decontaminate", "paths = ['/dev/zero']"),
                         ("opt_out", f"files = ['{fifo}']")):
        sources = tmp_path / "sources.toml"
        sources.write_text(f"[[source]]\nname = 'a'\nurl = '{src}'\nlicense = 'MIT'\n\n[{table}]\n{value}\n")
        proc = run_cli("build", "--sources", str(sources), "--out", str(tmp_path / "o"), "--dry-run", check=False,
                       timeout=60)
        err = proc.stderr.strip()
        assert proc.returncode == 2 and len(err.splitlines()) == 1 and "not a regular file" in err, (value, err)


def test_a_reader_that_leaves_does_not_stop_the_build(tmp_path):
    """`cpp-data build ... | head -1`: the pipe closing had aborted the build with exit 2, blaming --out. The
    build goes on without its reader (every line is still in OUT/logs/) and publishes."""
    import shlex

    from conftest import CLI

    src = tmp_path / "src"
    src.mkdir()
    for i in range(3):
        (src / f"f{i}.cpp").write_text("// SPDX-License-Identifier: MIT\n" + "".join(
            f"int f{i}_{k}(int x) {{ return x * {i} + {k}; }}\n" for k in range(12)))  # kept: a build has documents
    sources = write_sources(tmp_path / "s.toml", [{"name": "a", "url": str(src)}])
    out = tmp_path / "o"
    command = shlex.join([*CLI, "build", "--sources", str(sources), "--out", str(out), "--no-progress", "--recipe",
                          str(provenance_recipe(tmp_path / "recipe"))])
    proc = run_bounded(["bash", "-c", f"{command} | head -1; exit ${{PIPESTATUS[0]}}"])
    assert proc.returncode == 0, proc.stderr
    assert (build_dir(out) / "_COMPLETE").is_file()
    assert "build summary" in next((out / "logs").glob("build-*.log")).read_text()


def test_a_full_disk_while_publishing_is_a_failure_to_retry_not_bad_input(tmp_path, monkeypatch, capsys):
    """ENOSPC outside a stage (publishing copies the cache into the build) had exited 2, 'bad input, do not
    retry', naming a cache file; it is exit 1 with what to do."""
    import errno

    import cpp_data.pipeline.runner.build as build_module
    from cpp_data.pipeline.cli import main

    def full(*args, **kw):
        raise OSError(errno.ENOSPC, "No space left on device", str(tmp_path / "o" / "cache" / "x.parquet"))

    monkeypatch.setattr(build_module, "run_build", full)
    src = tmp_path / "src"
    src.mkdir()
    (src / "a.cpp").write_text("int main() { return 0; }\n")
    sources = write_sources(tmp_path / "s.toml", [{"name": "a", "url": str(src), "license": "MIT"}])
    assert main(["build", "--sources", str(sources), "--out", str(tmp_path / "o"), "--no-progress"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no space left" in err[0] and "run the same command again" in err[0], err


def _git_tree_with(repo, extra: list[tuple[str, str]]) -> str:
    """A commit of `repo` whose root tree is its HEAD's plus `extra` (name, tree or blob entry line for git
    mktree): trees git stores but no checkout can write out."""
    import subprocess

    def git(*args, stdin=None):
        return subprocess.run(["git", *args], cwd=repo, input=stdin, capture_output=True, text=True,
                              check=True).stdout.strip()

    entries = git("ls-tree", "HEAD").splitlines() + [line for _, line in extra]
    tree = git("mktree", stdin="\n".join(entries) + "\n")
    commit = git("-c", "user.name=t", "-c", "user.email=t@e.org", "commit-tree", tree, "-p", "HEAD", "-m", "odd")
    git("update-ref", "refs/heads/main", commit)
    return commit


def test_a_tree_no_checkout_can_write_out_degrades_the_semantic_layer_not_the_build(tmp_path):
    """A path longer than PATH_MAX, or a tree entry named '..', both of which git stores, cannot be written out
    for the semantics stage (tar's or git archive's exit status); collect reads such trees. The build finishes,
    and the coverage line says what libclang could not see."""
    import subprocess

    code = "// SPDX-License-Identifier: MIT\n" + "".join(f"int twice{k}(int x) {{ return 2 * x + {k}; }}\n"
                                                          for k in range(12))  # kept: a build has documents
    long_repo, dots_repo = tmp_path / "long", tmp_path / "dots"
    for repo in (long_repo, dots_repo):
        make_git_repo(repo, {"LICENSE": "MIT License\n", "src/a.cpp": code})
    blob = subprocess.run(["git", "hash-object", "-w", "--stdin"], cwd=long_repo, input=code, capture_output=True,
                          text=True, check=True).stdout.strip()
    entry = f"100644 blob {blob}\tdeep.cpp"
    for level in range(25):  # 25 directories of 200 characters: a path of about 5,000, past Linux's 4,096
        tree = subprocess.run(["git", "mktree"], cwd=long_repo, input=entry + "\n", capture_output=True, text=True,
                              check=True).stdout.strip()
        entry = f"040000 tree {tree}\t{'d' * 199}{level % 10}"
    _git_tree_with(long_repo, [("deep", entry)])
    inner = subprocess.run(["git", "mktree"], cwd=dots_repo, input=f"100644 blob {blob}\tx.cpp\n",
                           capture_output=True, text=True, check=True).stdout.strip()
    _git_tree_with(dots_repo, [("dots", f"040000 tree {inner}\t..")])
    sources = write_sources(tmp_path / "s.toml", [{"name": "long", "url": str(long_repo), "ref": "main"},
                                                  {"name": "dots", "url": str(dots_repo), "ref": "main"}])
    out = tmp_path / "out"
    proc = provenance_build(sources, out, stages=("semantics",), check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert len(proc.stderr) < 5000, proc.stderr[:2000]  # tar's errors stay out of the user's terminal
    coverage = json.loads((build_dir(out) / "manifest.json").read_text())["semantic_coverage"]
    assert "tar could not write" in coverage["long"]["database_reason"], coverage["long"]
    assert "git archive could not write the tree out" in coverage["dots"]["database_reason"], coverage["dots"]


def test_a_lock_pinning_a_commit_the_repository_lacks_is_bad_input(tmp_path):
    """A lock whose commit a local repository lacks (history rewritten) is refused before any stage, exit 2,
    saying to relock, rather than failing in the collect stage."""
    repo = tmp_path / "repo"
    make_git_repo(repo, {"a.cpp": "int main() { return 0; }\n" * 20})
    sources = write_sources(tmp_path / "s.toml", [{"name": "r", "url": str(repo), "ref": "main"}])
    run_cli("sources", "lock", str(sources))
    import re

    lock = tmp_path / "s.lock"  # its commit replaced by one the repository never had
    text = lock.read_text()
    commit = re.search(r'commit = "([0-9a-f]{40})"', text).group(1)
    lock.write_text(text.replace(commit, "0123456789abcdef0123456789abcdef01234567"))
    proc = run_cli("build", "--sources", str(sources), "--out", str(tmp_path / "o"), "--dry-run", check=False)
    err = proc.stderr.strip()
    assert proc.returncode == 2 and len(err.splitlines()) == 1 and "does not hold" in err and "--relock" in err, err
