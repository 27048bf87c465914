"""Hostile use, kept as a suite: each case a user or a scheduler can run into, with the outcome it must have
(issue 56). Nothing wrong is published and nothing is lost in any of them.

Three small output directories are built once for the module and copied by the cases that damage them: POCO's
JSON headers (13 files) with the provenance recipe (collect .. shards, ledger), and with the whole v6 recipe
beside a v4 build. Race windows are opened deterministically: a driver (HOLD_DRIVER) runs the real CLI with one
stage paused before it seals until the test releases it. Nothing needs root or a second user: git's own
GIT_TEST_ASSUME_DIFFERENT_OWNER stands in for a repository owned by another user, and a directory is made
read-only with chmod (or `chattr +i` as root, where permission bits do not bind).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import CLI, NLOHMANN, POCO, make_git_repo, need, provenance_recipe, run_bounded, write_sources

pytestmark = pytest.mark.slow  # full builds (pyproject.toml: markers)

PJ = POCO / "JSON"  # 13 headers, BSL-1.0
PJ_DOCS = 13
TIMEOUT = 300

# Runs the CLI with Runner._seal of stage $HOLD_STAGE paused (once) until the file $HOLD_RELEASE exists; touches
# $HOLD_FLAG when the pause starts. `if __name__` guard: the executors' forkserver re-imports __main__.
HOLD_DRIVER = r'''
import os, sys, time
def _patch():
    from cpp_data.pipeline.runner import dag as runner
    seal, done = runner.Runner._seal, []
    def held(self, task, *a, **k):
        if task.name == os.environ["HOLD_STAGE"] and not done:
            done.append(1)
            open(os.environ["HOLD_FLAG"], "w").close()
            deadline = time.monotonic() + 120
            while not os.path.exists(os.environ["HOLD_RELEASE"]) and time.monotonic() < deadline:
                time.sleep(0.05)
        return seal(self, task, *a, **k)
    runner.Runner._seal = held
if __name__ == "__main__":
    _patch()
    from cpp_data.pipeline.cli import main
    sys.exit(main(sys.argv[1:]))
'''


# ---------------------------------------------------------------------------------------------------- helpers

def cli(*args, env: dict | None = None, timeout: float = TIMEOUT, **kw) -> subprocess.CompletedProcess:
    return run_bounded([*CLI, *map(str, args)], timeout=timeout, env=env, **kw)


def build(sources: Path, out: Path, *extra, recipe: Path | None = None, version: str = "v6", **kw):
    args = ["build", "--version", version, "--sources", sources, "--out", out, "--workers", "2", "--no-progress"]
    return cli(*args, *(["--recipe", recipe] if recipe else []), *extra, **kw)


def said(proc: subprocess.CompletedProcess) -> str:
    return f"rc={proc.returncode}\nstdout tail: {proc.stdout[-800:]}\nstderr tail: {proc.stderr[-1500:]}"


def latest(out: Path) -> Path | None:
    f = out / "builds" / "LATEST"
    return out / "builds" / f.read_text().strip() if f.is_file() else None


def documents(build_dir: Path) -> int:
    return json.loads((build_dir / "manifest.json").read_text())["totals"]["documents"]


def validates(build_dir: Path) -> bool:
    return cli("validate", build_dir).returncode == 0


def copy_out(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst, symlinks=True)
    for p in [dst, *dst.rglob("*")]:  # published builds are read-only; the cases below damage copies
        if not p.is_symlink():
            p.chmod(p.stat().st_mode | 0o200)
    return dst


def no_python_error(text: str) -> bool:
    return not any(k in text for k in ("Traceback", "TypeError", "JSONDecodeError", "AttributeError", "KeyError"))


def freeze(path: Path) -> None:
    """Make a directory unwritable for this process: chmod for a normal user, the immutable flag for root."""
    if os.geteuid() == 0:
        if subprocess.run(["chattr", "+i", str(path)], capture_output=True).returncode != 0:
            pytest.skip("running as root on a filesystem without chattr +i: cannot make a directory read-only")
    else:
        path.chmod(0o555)


def thaw(path: Path) -> None:
    if os.geteuid() == 0:
        subprocess.run(["chattr", "-i", str(path)], capture_output=True)
    else:
        path.chmod(0o755)


# ---------------------------------------------------------------------------------------------------- fixtures

@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    need(PJ)
    w = tmp_path_factory.mktemp("hostile")
    write_sources(w / "pj.toml", [{"name": "poco-json", "url": str(PJ)}])
    provenance_recipe(w / "prov-recipe")
    return w


@pytest.fixture(scope="module")
def prov(work) -> Path:
    """OUT of a provenance-recipe build of POCO's JSON headers (13 documents)."""
    out = work / "prov"
    proc = build(work / "pj.toml", out, recipe=work / "prov-recipe" / "v6.toml")
    assert proc.returncode == 0, said(proc)
    return out


@pytest.fixture(scope="module")
def full(work) -> Path:
    """OUT with a v4 build and then a whole v6 build (LATEST) of POCO's JSON headers."""
    out = work / "full"
    for version in ("v4", "v6"):
        proc = build(work / "pj.toml", out, version=version)
        assert proc.returncode == 0, said(proc)
    return out


# ---------------------------------------------------------------------------------------------------- the lock

def test_deleted_lock_file_does_not_let_a_second_build_race(work, tmp_path):
    """Build A paused just before sealing filter (its tasks done); `rm OUT/.lock`; build B runs; A goes on. B is
    refused (75: the lock is on OUT itself, not on a path a user can delete), and nothing empty is sealed or
    published: every build published holds the 13 documents, and the build after them too."""
    out, recipe = tmp_path / "out", work / "prov-recipe" / "v6.toml"
    driver, flag, release = tmp_path / "hold_driver.py", tmp_path / "held", tmp_path / "release"
    driver.write_text(HOLD_DRIVER)
    args = ["build", "--version", "v6", "--recipe", recipe, "--sources", work / "pj.toml", "--out", out,
            "--workers", "2", "--no-progress"]
    env = {**os.environ, "HOLD_STAGE": "filter", "HOLD_FLAG": str(flag), "HOLD_RELEASE": str(release)}
    a = subprocess.Popen([sys.executable, str(driver), *map(str, args)], env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while not flag.exists():
            assert a.poll() is None and time.monotonic() < deadline, "build A never reached filter's seal"
            time.sleep(0.05)
        (out / ".lock").unlink(missing_ok=True)
        b = cli(*args)
        release.touch()
        a_out, a_err = a.communicate(timeout=TIMEOUT)
    finally:
        release.touch()
        if a.poll() is None:
            os.killpg(a.pid, signal.SIGKILL)
    report = f"A: rc={a.returncode} {a_err[-600:]}\nB: {said(b)}"
    assert b.returncode == 75, report
    for d in (out / "builds").iterdir():
        if d.is_dir() and (d / "_COMPLETE").exists():
            assert documents(d) == PJ_DOCS, f"{d.name} published with {documents(d)} documents\n{report}"
    for entry in (out / "cache" / "filter").iterdir():
        if (entry / "_COMPLETE").exists():
            meta = json.loads((entry / "stage.json").read_text())
            assert meta["outputs"], f"filter entry {entry.name} sealed with no output, counts {meta['counts']}"
    again = build(work / "pj.toml", out, recipe=recipe)
    assert again.returncode in (0, 3) and documents(latest(out)) == PJ_DOCS, said(again)


def test_no_lock_file_with_a_dead_pid_is_left_behind(prov):
    """No build leaves OUT/.lock behind naming a dead process: it would invite deleting it."""
    lock = prov / ".lock"
    if lock.exists() and lock.read_text().strip():
        pid = json.loads(lock.read_text()).get("pid")
        try:
            os.kill(pid, 0)
            alive = True
        except ProcessLookupError:
            alive = False
        assert alive, f"{lock} left behind naming dead pid {pid}"


# ---------------------------------------------------------------------------------------------------- diff

def test_diff_counts_v4_documents_by_their_identity(full):
    """v4 against itself counts every document (one per function), not one per (repo, path)."""
    v4 = next(d for d in (full / "builds").iterdir() if d.name.startswith("v4-") and d.is_dir())
    proc = cli("diff", "--json", v4, v4)
    assert proc.returncode == 0, said(proc)
    result = json.loads(proc.stdout)
    assert result["a"]["documents"] == documents(v4), (result["a"], documents(v4))
    assert result["documents"]["unchanged"] == documents(v4), result["documents"]


def test_diff_says_when_document_identities_differ(full):
    """v6 (one document per file) against v4 (one per function): the diff says the documents are different
    things."""
    v4 = next(d for d in (full / "builds").iterdir() if d.name.startswith("v4-") and d.is_dir())
    proc = cli("diff", latest(full), v4)
    assert proc.returncode in (0, 2), said(proc)
    text = (proc.stdout + proc.stderr).lower()
    # the word, or each side's kind of document named (files vs functions)
    assert "identit" in text or ("file" in text and "function" in text), said(proc)


# ---------------------------------------------------------------------------------------------------- opt-out, secrets
# in paths

@pytest.fixture(scope="module")
def hostile_tree(work) -> tuple[Path, subprocess.CompletedProcess]:
    """One build of three small sources: opted out by a relative URL as written in [[source]], opted out by a
    file:// URL of a source given as a plain path, and a tree whose file names hold secrets."""
    root = work / "tree"
    for name, files in (("optrel", ("Array.h", "Object.h")), ("optabs", ("Handler.h", "ParseHandler.h"))):
        (root / name).mkdir(parents=True)
        for f in files:  # no file in two sources: an exact duplicate would hide what the opt-out did
            shutil.copy(PJ / f, root / name / f)
    (root / "secret" / "keys").mkdir(parents=True)
    shutil.copy(PJ / "Stringifier.h", root / "secret" / "keys" / "ghp_R4nd0mT0k3nV4lu3AbCdEfGhIjKlMnOpQrStUv.h")
    shutil.copy(PJ / "Template.h", root / "secret" / "keys" / "AKIAZ7QW3ERT5YUI8OPA.h")
    shutil.copy(PJ / "Parser.h", root / "secret" / "plain.h")
    sources = root / "sources.toml"
    sources.write_text(
        '[[source]]\nname = "rel"\nurl = "optrel"\n\n'
        f'[[source]]\nname = "abs"\nurl = "{root / "optabs"}"\n\n'
        '[[source]]\nname = "sec"\nurl = "secret"\nlicense = "BSL-1.0"\n\n'
        f'[opt_out]\nrepos = ["optrel", "file://{root / "optabs"}"]\n')
    return root / "out", build(sources, root / "out", recipe=work / "prov-recipe" / "v6.toml")


def _ledger(build_dir: Path) -> list[dict]:
    import pyarrow.parquet as pq

    return pq.read_table(build_dir / "provenance" / "ledger.parquet").to_pylist()


def test_opt_out_by_url_as_written_in_sources(hostile_tree):
    """Every file of `rel` (opt-out "optrel", the [[source]]'s relative url) and of `abs` (opt-out
    file://ABS of a plain-path source) is skipped:opt_out."""
    out, proc = hostile_tree
    assert proc.returncode == 0, said(proc)
    rows = _ledger(latest(out))
    for repo in ("rel", "abs"):
        got = {(r["source_path"], r["decision"], r["reason"]) for r in rows if r["source_repo"] == repo}
        assert got and all(d == "skipped" and why == "opt_out" for _, d, why in got), (repo, got)


def test_secret_in_a_file_name_is_not_published(hostile_tree):
    """No published file (shards, ledger, manifest, summary) holds the token or the key id of the file names."""
    import pyarrow.parquet as pq

    out, proc = hostile_tree
    assert proc.returncode == 0, said(proc)
    secrets = ("R4nd0mT0k3nV4lu3AbCdEfGhIjKlMnOpQrStUv", "AKIAZ7QW3ERT5YUI8OPA")
    found = []
    for f in latest(out).rglob("*"):
        if f.suffix == ".parquet":
            t = pq.read_table(f)
            text = json.dumps([t.column(c).to_pylist() for c in t.column_names
                               if str(t.schema.field(c).type) in ("string", "large_string")])
        elif f.is_file():
            text = f.read_text(errors="replace")
        else:
            continue
        found += [(f.name, s) for s in secrets if s in text]
    assert not found, found


def test_opt_out_entries_that_match_nothing_are_reported(work, tmp_path):
    """Every opt-out entry that matched no source or file is named (a warning, or bad input)."""
    sources = tmp_path / "s.toml"
    entries = ["no-such-source", "nomatch/*.h", "0" * 64]
    sources.write_text(f'[[source]]\nname = "poco-json"\nurl = "{PJ}"\n\n[opt_out]\nrepos = ["{entries[0]}"]\n'
                       f'paths = ["{entries[1]}"]\nsha256 = ["{entries[2]}"]\n')
    proc = build(sources, tmp_path / "out", recipe=work / "prov-recipe" / "v6.toml")
    assert proc.returncode in (0, 2), said(proc)
    missing = [e for e in entries if e not in proc.stdout + proc.stderr]
    assert not missing, f"not reported: {missing}\n{said(proc)}"


# ---------------------------------------------------------------------------------------------------- what is reused

def _swap_two_ids(tokenizer_json: Path) -> None:
    tok = json.loads(tokenizer_json.read_text())
    vocab = tok["model"]["vocab"]
    (a, i), (b, j) = sorted(vocab.items(), key=lambda kv: kv[1])[300:302]
    vocab[a], vocab[b] = j, i  # same size, loads fine; two token ids silently differ
    tokenizer_json.write_text(json.dumps(tok, ensure_ascii=False))


@pytest.mark.parametrize("given", ["build", "build/tokenizer"])
def test_frozen_tokenizer_changed_after_its_build_is_refused(work, full, tmp_path, given):
    """Exit 2 naming tokenizer.json and the build's manifest; nothing published."""
    out = copy_out(full, tmp_path / "out")
    source_build = latest(out)
    _swap_two_ids(source_build / "tokenizer" / "tokenizer.json")
    frozen = source_build if given == "build" else source_build / "tokenizer"
    proc = build(work / "pj.toml", out, "--tokenizer", frozen)
    assert proc.returncode == 2 and "tokenizer.json" in proc.stderr, said(proc)
    assert latest(out) == source_build


@pytest.mark.parametrize("damage", ["truncated_manifest", "deleted_shard"])
def test_damaged_latest_build_is_rebuilt_not_nothing_to_do(work, prov, tmp_path, damage):
    """A damaged LATEST is no "nothing to do" (3): the build publishes a whole build again (rc 0) and LATEST
    validates."""
    out = copy_out(prov, tmp_path / "out")
    b = latest(out)
    if damage == "truncated_manifest":
        m = b / "manifest.json"
        m.write_bytes(m.read_bytes()[:300])
    else:
        next(b.glob("shards/train-*.parquet")).unlink()
    proc = build(work / "pj.toml", out, recipe=work / "prov-recipe" / "v6.toml")
    assert proc.returncode == 0, said(proc)
    assert validates(latest(out)) and documents(latest(out)) == PJ_DOCS


LOAD = r'''
import sys, cpp_data
try:
    d = cpp_data.load_build(sys.argv[1], split="train")
    print("LOADED", d.num_rows)
except Exception as exc:
    print("REFUSED", type(exc).__name__, exc)
'''


def test_load_build_checks_complete_and_checksums(prov, tmp_path):
    """load_build refuses a build without _COMPLETE, and one whose shard does not match the
    manifest's checksum, naming the file."""
    import pyarrow.parquet as pq

    out = copy_out(prov, tmp_path / "out")
    b = latest(out)
    (b / "_COMPLETE").unlink()
    proc = run_bounded([sys.executable, "-c", LOAD, str(b)])
    assert "REFUSED" in proc.stdout and "_COMPLETE" in proc.stdout, said(proc)
    (b / "_COMPLETE").touch()
    shard = next(b.glob("shards/train-*.parquet"))
    pq.write_table(pq.read_table(shard).slice(0, 3), shard)
    proc = run_bounded([sys.executable, "-c", LOAD, str(b)])
    assert "REFUSED" in proc.stdout and shard.name in proc.stdout, said(proc)


def test_cache_file_rewritten_with_its_checksum_record_is_not_published(work, prov, tmp_path):
    """A cached shard rewritten as valid Parquet with other text, and its entry's stage.json re-checksummed.
    The build compares what it publishes with the shards' own record and fails (rc 1); nothing that fails
    validate is published, and the next build rebuilds the entry."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from cpp_data.pipeline.runner.cache import checksum_outputs

    out = copy_out(prov, tmp_path / "out")
    shutil.rmtree(out / "builds")
    for entry in (out / "cache" / "shards").iterdir():
        for f in entry.glob("shards/train-*.parquet"):
            t = pq.read_table(f)
            i = t.schema.get_field_index("text")
            t = t.set_column(i, t.schema.field(i), pa.array(["// injected\n" + s for s in t.column(i).to_pylist()]))
            pq.write_table(t, f)
        meta = json.loads((entry / "stage.json").read_text())
        meta["outputs"] = checksum_outputs(entry)
        (entry / "stage.json").write_text(json.dumps(meta))
    proc = build(work / "pj.toml", out, recipe=work / "prov-recipe" / "v6.toml")
    published = latest(out)
    assert proc.returncode == 1, said(proc)
    assert published is None or validates(published), f"{published} published and fails validate"
    again = build(work / "pj.toml", out, recipe=work / "prov-recipe" / "v6.toml")
    assert again.returncode == 0 and validates(latest(out)) and documents(latest(out)) == PJ_DOCS, said(again)


# ---------------------------------------------------------------------------------------------------- scripts

SBATCH = """#!/bin/sh
# keeps the submitted script, then refuses it: the test looks at what would have run on the cluster
for last; do :; done
cp "$last" "$SBATCH_SPOOL/$(date +%s%N).slurm"
echo "sbatch: error: stand-in refuses every job" >&2
exit 1
"""


@pytest.mark.parametrize("option", ["--slurm-partition", "--slurm-arg"])
def test_control_characters_never_reach_a_job_script(work, tmp_path, option):
    """Exit 2 naming the option, before any job is submitted: a line break would land in the job script as a
    shell line of its own."""
    bin_dir, spool = tmp_path / "bin", tmp_path / "spool"
    bin_dir.mkdir()
    spool.mkdir()
    (bin_dir / "sbatch").write_text(SBATCH)
    (bin_dir / "sbatch").chmod(0o755)
    for tool in ("squeue", "scontrol", "srun"):
        (bin_dir / tool).symlink_to("/bin/true")
    marker = tmp_path / "INJECTED"
    value = f"cpu\ntouch {marker}" if option == "--slurm-partition" else f"constraint=x\ntouch {marker}"
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "SBATCH_SPOOL": str(spool)}
    proc = build(work / "pj.toml", tmp_path / "out", "--executor", "slurm", option, value,
                 recipe=work / "prov-recipe" / "v6.toml", env=env, timeout=120)
    injected = [s.name for s in spool.glob("*.slurm") if f"touch {marker}" in s.read_text().splitlines()]
    assert not injected, f"job scripts with the injected shell line: {injected}\n{said(proc)}"
    assert proc.returncode == 2 and option in proc.stderr, said(proc)


# ---------------------------------------------------------------------------------------------------- messages

def test_git_repository_owned_by_another_user_says_so(tmp_path):
    """Exit 2 saying git refused the repository for its owner (safe.directory), not that it is no repository.
    GIT_TEST_ASSUME_DIFFERENT_OWNER is git's own switch
    for this check (git >= 2.35.2), so no second user is needed (root may also chown the repo to nobody)."""
    need(NLOHMANN)
    make_git_repo(tmp_path / "repo", {"a.hpp": (NLOHMANN / "json.hpp").read_bytes()[:4000]})
    sources = write_sources(tmp_path / "s.toml", [{"name": "g", "url": str(tmp_path / "repo"), "ref": "main"}])
    proc = cli("sources", "lock", sources, env={**os.environ, "GIT_TEST_ASSUME_DIFFERENT_OWNER": "1"})
    assert proc.returncode == 2, said(proc)
    text = proc.stderr.lower()
    assert "not a git repository" not in text and ("owner" in text or "safe.directory" in text), said(proc)


def test_git_repository_owned_by_another_user_is_not_pinned_as_a_directory(tmp_path):
    """Without 'ref', the same repository is not pinned silently as a plain directory: exit 2 saying why."""
    need(NLOHMANN)
    make_git_repo(tmp_path / "repo", {"a.hpp": (NLOHMANN / "json.hpp").read_bytes()[:4000]})
    sources = write_sources(tmp_path / "s.toml", [{"name": "g", "url": str(tmp_path / "repo")}])
    proc = cli("sources", "lock", sources, env={**os.environ, "GIT_TEST_ASSUME_DIFFERENT_OWNER": "1"})
    text = proc.stdout + proc.stderr
    assert (proc.returncode == 2 and ("owner" in text.lower() or "safe.directory" in text)) \
        or (proc.returncode == 0 and "(directory)" not in text), said(proc)


def test_out_read_only_mid_build_gives_one_line_not_a_childs_traceback(work, full, tmp_path):
    """The tokenizer's training process cannot write its result (its scratch directory made read-only once the
    build wrote the job): exit 1 with one line and no traceback."""
    out = copy_out(full, tmp_path / "out")
    cmd = [*CLI, "build", "--version", "v6", "--sources", str(work / "pj.toml"), "--out", str(out), "--workers", "2",
           "--no-progress", "--from", "tokenizer"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    frozen = None
    try:
        deadline = time.monotonic() + 120
        while frozen is None and time.monotonic() < deadline and proc.poll() is None:
            jobs = list((out / "cache" / "tokenizer").glob("*.partial/_work/job.json"))
            if jobs:
                frozen = jobs[0].parent
                freeze(frozen)
            time.sleep(0.01)
        stdout, stderr = proc.communicate(timeout=TIMEOUT)
    finally:
        if frozen is not None:
            thaw(frozen)
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    if frozen is None or proc.returncode == 0:
        pytest.skip("the training process finished before its scratch directory was made read-only")
    assert proc.returncode == 1, (proc.returncode, stderr[-2000:])
    assert "Traceback" not in stderr, stderr[-3000:]
    errors = [ln for ln in stderr.splitlines() if ln.strip() and not ln.startswith("warning:")]
    assert len(errors) == 1, errors


@pytest.mark.parametrize("damage", ["truncated", "files_null", "a_list"])
@pytest.mark.parametrize("command", ["plan", "gc", "show", "diff"])
def test_damaged_manifest_is_named_not_a_python_error(work, prov, tmp_path, damage, command):
    """Exit 2 (bad input) naming the manifest, never a Python error."""
    out = copy_out(prov, tmp_path / "out")
    b = latest(out)
    m = b / "manifest.json"
    if damage == "truncated":
        m.write_bytes(m.read_bytes()[:300])
    elif damage == "files_null":
        data = json.loads(m.read_text())
        data["files"] = None
        m.write_text(json.dumps(data))
    else:
        m.write_text("[]")
    args = {"plan": ["plan", "--version", "v6", "--recipe", work / "prov-recipe" / "v6.toml",
                     "--sources", work / "pj.toml", "--out", out],
            "gc": ["gc", "--out", out, "--dry-run"],
            "show": ["show", b],
            "diff": ["diff", b, b]}[command]
    proc = cli(*args)
    text = proc.stdout + proc.stderr
    assert no_python_error(text), said(proc)
    if damage == "files_null" and command in ("plan", "gc"):  # they never read `files`: going on is right
        assert proc.returncode in (0, 2), said(proc)
        return
    if command in ("plan", "gc"):  # may go on past a damaged build, but must say which and why
        assert proc.returncode in (0, 2) and "manifest.json" in text, said(proc)
        return
    assert proc.returncode == 2 and "manifest.json" in text, said(proc)


def test_report_output_directory_is_bad_input(prov, tmp_path):
    """Exit 2 naming the directory, not a temporary file's error."""
    target = tmp_path / "reports"
    target.mkdir()
    proc = cli("report", latest(prov), "--output", target)
    if proc.returncode == 0:
        assert list(target.glob("*.html")), said(proc)
    else:
        assert proc.returncode == 2 and ".tmp" not in proc.stderr and str(target) in proc.stderr, said(proc)


@pytest.mark.parametrize("setting", [["--set", "shards.seed=-1"], ["--seed", "-1"], ["--set", "near_dedup.seed=-1"]])
def test_negative_seed_is_refused(work, prov, setting):
    """Exit 2 naming the seed, before any stage runs (datasketch takes seeds of 0 to 2**32 - 1)."""
    proc = cli("plan", "--version", "v6", "--recipe", work / "prov-recipe" / "v6.toml", "--sources",
               work / "pj.toml", "--out", prov, *setting)
    assert proc.returncode == 2 and "seed" in proc.stderr, said(proc)


@pytest.mark.parametrize("reference,ngram", [("empty.jsonl", 50), ("nostrings.jsonl", 50), ("Parser.h", 1_000_000)])
def test_decontamination_that_cannot_match_is_refused(work, tmp_path, reference, ngram):
    """A reference with no text, or an n-gram longer than any text: decontamination would refuse nothing.
    Exit 2 naming the [decontaminate] table."""
    (tmp_path / "empty.jsonl").write_text("")
    (tmp_path / "nostrings.jsonl").write_text('{"n": 1}\n')
    shutil.copy(PJ / "Parser.h", tmp_path / "Parser.h")  # a corpus file itself: ngram 50 refuses it
    sources = tmp_path / "s.toml"
    sources.write_text(f'[[source]]\nname = "poco-json"\nurl = "{PJ}"\n\n'
                       f'[decontaminate]\npaths = ["{reference}"]\nngram = {ngram}\n')
    proc = build(sources, tmp_path / "out", recipe=work / "prov-recipe" / "v6.toml")
    assert proc.returncode == 2 and "decontaminate" in proc.stderr, said(proc)
