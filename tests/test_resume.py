"""A build killed with SIGKILL, or stopped by Ctrl-C or SIGTERM to its process group (one line, exit 130 or 143, no
worker's traceback), in the middle of a stage resumes to the same bytes as a clean build: finished
datatrove tasks are kept, the rest run, and a killed build never publishes. A task whose process dies fails
its stage instead of leaving the build waiting, and the next run resumes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import (
    CLI,
    GOOGLETEST,
    NLOHMANN,
    build,
    build_dir,
    clang_fixture_source,
    data_digests,
    need,
    provenance_recipe,
    run_bounded,
    write_sources,
)

pytestmark = pytest.mark.slow  # full builds (pyproject.toml: markers)

# Four tasks on the local executor's pool of two processes (run_datatrove, as every stage calls it); task 1's
# process sends itself SIGSEGV the first time. Before pipeline/runner/executors/task_watch.py, run() waited for it
# forever.
CRASHING_TASK = """
import json, sys
from pathlib import Path
from cpp_data.pipeline.contract.executor import ExecutorConfig
from cpp_data.pipeline.runner.executors.run import run_datatrove

logs = Path(sys.argv[1])

def step(data, rank=0, world_size=1):
    import os, signal  # the step travels by value, without this script's globals

    flag = os.environ["CRASH_FLAG"]
    if rank == 1 and not os.path.exists(flag):
        open(flag, "w").close()
        os.kill(os.getpid(), signal.SIGSEGV)
    yield from data or []

def completed():
    done = logs / "completions"
    return sorted(p.name for p in done.iterdir()) if done.is_dir() else []

cfg = ExecutorConfig(workers=2, progress=False)
try:
    run_datatrove(cfg, [step], 4, logs, "crashing")
    first = None
except Exception as exc:
    first = f"{type(exc).__name__}: {exc}"
kept = completed()
run_datatrove(cfg, [step], 4, logs, "crashing")
print(json.dumps({"first": first, "kept": kept, "after": completed()}))
"""


def test_a_task_whose_process_dies_fails_the_stage_and_the_next_run_resumes(tmp_path):
    proc = run_bounded([sys.executable, "-c", CRASHING_TASK, str(tmp_path / "logs")], timeout=180,
                       env={**os.environ, "CRASH_FLAG": str(tmp_path / "crashed")})
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["first"] is not None and result["first"].startswith("TaskProcessDied: crashing: task 1's process")
    assert "task_00001.log" in result["first"] and "resume" in result["first"]
    assert "00001" not in result["kept"]
    assert result["after"] == ["00000", "00001", "00002", "00003"]


def _partials(out: Path, stage: str) -> list[Path]:
    return list((out / "cache" / stage).glob("*.partial")) if (out / "cache" / stage).is_dir() else []


def _small_parts_recipe(tmp_path: Path) -> Path:
    """The v6 recipe with many small datatrove tasks in every stage that has them: 25 files per part, small
    shuffle buckets and shard files, 16 documents per structure/token_columns/export task, packing blocks of 64
    documents."""
    from importlib import resources

    text = (resources.files("cpp_data.pipeline.recipes") / "v6.toml").read_text()
    text = text.replace("files_per_part = 500", "files_per_part = 25")
    text = text.replace("[params.shards]", "[params.shards]\nbucket_bytes = 65536")
    text = text.replace("docs_per_shard = 50_000", "docs_per_shard = 100")
    text = text.replace("[params.structure]", "[params.structure]\nrows_per_task = 16")
    text = text.replace("[params.megatron_export]", "[params.token_columns]\nrows_per_task = 16\n\n"
                        "[params.megatron_export]\nrows_per_task = 16")
    text = text.replace("block_docs = 16_384", "block_docs = 64")
    recipe = tmp_path / "small-parts.toml"
    recipe.write_text(text)
    return recipe


def test_sigkill_mid_stage_resumes_to_identical_bytes(tmp_path):
    need(GOOGLETEST, NLOHMANN)
    small_sources = write_sources(tmp_path / "sources.toml", [  # two sources: enough tasks in every stage
        {"name": "googletest", "url": str(GOOGLETEST), "license": "BSD-3-Clause", "configure": False},
        {"name": "nlohmann-json", "url": str(NLOHMANN)}])
    recipe = _small_parts_recipe(tmp_path)
    clean = tmp_path / "clean"
    build(small_sources, clean, "--recipe", str(recipe))
    for stage in ("filter", "decontaminate", "license"):  # both sources' tasks ran as one executor run
        metas = [json.loads(p.read_text()) for p in (clean / "cache" / stage).glob("*/stage.json")]
        assert [m["ran_with"]["sources"] for m in metas] == [2, 2], stage
    assert not list((clean / "cache").glob("*/batch-*")), "a finished build keeps no batch bookkeeping"
    out = tmp_path / "killed"
    cmd = [*CLI, "build", "--recipe", str(recipe), "--sources", str(small_sources), "--out", str(out),
           "--workers", "2", "--no-progress"]
    killed_in, resumed = [], []
    # shards, token_columns, export: the same task machinery. SIGKILL goes to the build's process; Ctrl-C (SIGINT)
    # and a scheduler's SIGTERM go to the whole process group, workers included, as a terminal and Slurm send them
    stages = {"filter": signal.SIGKILL, "structure": signal.SIGINT, "packed_rows": signal.SIGTERM}
    # Started as from a terminal, with SIGINT at its default: a process inherits an ignored SIGINT, and an earlier
    # test in this pytest worker may have left it so (seen in fresh clones' full suites: the build then finished)
    as_from_a_terminal = [sys.executable, "-c", "import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); "
                          "os.execv(sys.argv[1], sys.argv[1:])"]
    for stage, sig in stages.items():
        proc = subprocess.Popen([*as_from_a_terminal, *cmd], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True, start_new_session=True)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and proc.poll() is None:
            # kill once some of the stage's tasks finished, so the resume must keep them and run the rest
            done = [p for p in _partials(out, stage) if any(p.glob("**/_datatrove/**/completions/*"))]
            if done:
                os.kill(proc.pid, sig) if sig == signal.SIGKILL else os.killpg(proc.pid, sig)
                killed_in.append(stage)
                break
            time.sleep(0.005)
        output = proc.communicate()[0]
        resumed += [ln for ln in output.splitlines() if "resuming finished tasks" in ln]
        # no worker's traceback, whatever the signal: after a SIGKILL to the build's process, a worker whose task
        # finished found the pipe back to it broken (executors._quiet_pool_worker)
        assert "Traceback" not in output and "BrokenPipe" not in output, (stage, output[-3000:])
        if sig != signal.SIGKILL:  # one line and the exit code of pipeline/foundation/errors.py
            assert proc.returncode == 128 + sig, (stage, proc.returncode, signal.getsignal(signal.SIGINT),
                                                  output[-3000:])
            said = [ln for ln in output.splitlines() if ln.startswith("cpp-data: error:")]
            word = "interrupted" if sig == signal.SIGINT else "terminated by SIGTERM"
            assert len(said) == 1 and word in said[0], (stage, said)
        time.sleep(0.5)  # let orphaned datatrove workers notice their parent died (PR_SET_PDEATHSIG)
    assert killed_in == list(stages), killed_in
    assert len(resumed) >= len(stages) - 1, resumed  # each stage resumed with its finished tasks kept
    sealed_builds = [d for d in (out / "builds").glob("*") if (d / "_COMPLETE").exists()] \
        if (out / "builds").exists() else []
    assert sealed_builds == [], "a killed build must not publish"
    build(small_sources, out, "--recipe", str(recipe))
    assert data_digests(build_dir(out)) == data_digests(build_dir(clean))
    assert not list((out / "cache").glob("*/*.partial"))


def test_semantics_keeps_the_translation_units_a_killed_build_indexed(tmp_path):
    """semantics runs its TUs as datatrove tasks (one TU each here). A build killed while one TU hangs keeps the
    tasks that finished: the next run, in which util.cc's worker would crash if it ran again, indexes only the
    rest and gives the clean build's bytes."""
    from cpp_data.clang_index.pool import HOOK_ENV

    proj = clang_fixture_source(tmp_path)  # util.cc, main.cc, cfile.c: one task each
    sources = write_sources(tmp_path / "s.toml", [{"name": "fx", "url": str(proj), "license": "MIT"}])
    recipe = provenance_recipe(tmp_path / "recipe", "structure")  # structure reads semantics' edges
    args = ["--recipe", str(recipe), "--set", "semantics.tus_per_task=1"]
    clean = tmp_path / "clean"
    build(sources, clean, *args)
    out = tmp_path / "killed"
    log = open(tmp_path / "killed.log", "w")  # a file, not a pipe nobody reads until the end
    proc = subprocess.Popen([*CLI, "build", "--sources", str(sources), "--out", str(out), "--workers", "2",
                             "--no-progress", *args], stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True, env={**os.environ, HOOK_ENV: "hang:cfile.c"})
    deadline, done = time.monotonic() + 120, []
    while time.monotonic() < deadline and proc.poll() is None and len(done) < 2:
        done = [p.name for p in _partials(out, "semantics")[:1]
                for p in p.glob("_work/_datatrove/completions/*")]
        time.sleep(0.05)
    assert sorted(done) == ["00000", "00001"], (done, proc.poll(), (tmp_path / "killed.log").read_text()[-2000:])
    os.killpg(proc.pid, signal.SIGKILL)  # util.cc's and main.cc's tasks are done; cfile.c's hangs
    proc.wait()
    log.close()
    time.sleep(0.5)  # orphaned TU workers die with their parents (PR_SET_PDEATHSIG)
    resumed = build(sources, out, *args, env={**os.environ, HOOK_ENV: "crash:util.cc"})
    assert "semantics[fx]: running (resuming finished tasks)" in resumed.stdout + resumed.stderr
    assert data_digests(build_dir(out)) == data_digests(build_dir(clean))
    assert not _partials(out, "semantics")


def test_semantics_runs_again_a_task_whose_results_are_gone(tmp_path):
    """A kill while the finished stage removed its scratch, or a machine that went down before a task's results
    reached the disk, can leave a completion marker without readable results: that task is run again instead of
    failing every later build on a missing file."""
    from cpp_data.stages.semantics import _forget_unrecorded_tasks

    done = tmp_path / "_datatrove" / "completions"
    done.mkdir(parents=True)
    (tmp_path / "tus").mkdir()
    (tmp_path / "tus" / "00000.json").write_text("[]")
    (tmp_path / "tus" / "00002.json").write_text('[{"file": ')  # cut short
    for rank in range(3):
        (done / f"{rank:05d}").touch()
    _forget_unrecorded_tasks(tmp_path)
    assert sorted(p.name for p in done.iterdir()) == ["00000"]
    _forget_unrecorded_tasks(tmp_path / "nothing-yet")  # no scratch at all: nothing to do
