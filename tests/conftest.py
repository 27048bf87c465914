"""Shared fixtures: small real corpora from Debian packages, and helpers to run the real CLI."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

import pytest

# Hugging Face datasets caches what it loads under a key of the files' paths and times; a build copied to a path
# an earlier run used (pytest numbers its directories again, copytree keeps the times) would load that run's
# rows. The suite's loads go to a cache of its own, set before any test imports datasets.
_RUN = os.environ.get("PYTEST_XDIST_TESTRUNUID", str(os.getpid()))  # one id for every worker of a run
os.environ.setdefault("HF_DATASETS_CACHE", os.path.join(tempfile.gettempdir(), f"cpp-data-hf-{_RUN}"))

GOOGLETEST = Path("/usr/src/googletest")
NLOHMANN = Path("/usr/include/nlohmann")
POCO = Path("/usr/include/Poco")
JUCE = Path("/usr/share/juce/modules")
CLI = [sys.executable, "-m", "cpp_data.pipeline.cli"]

# The test files in order of their wall time in a full run (longest first), handed out in this order:
# pyproject.toml turns off xdist's own reordering (by number of tests, which sends one-test files such as
# test_ray.py out last and leaves a process busy long after the others have finished). test_ray.py is the
# exception: its cluster's daemons burn CPU for as long as it lives, and started first, against the reference
# builds, it lives several times as long, so it goes out once the longest files have started. Files not named
# here follow in collection order.
LONGEST_FIRST = ("test_slurm.py", "test_resume.py", "test_front_door.py", "test_verify.py", "test_cache.py",
                 "test_megatron_lm.py", "test_harness.py", "test_harness_runs.py", "test_ray.py", "test_cli.py",
                 "test_build.py", "test_bad_input.py", "test_history.py", "test_clang_index.py",
                 "test_near_dedup.py", "test_syntax.py", "test_report.py", "test_context_graph.py",
                 "test_sources.py", "test_tokenizer.py", "test_export.py")


def pytest_collection_modifyitems(config, items) -> None:
    rank = {name: k for k, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: the rest keep their order


def need(*paths: Path) -> None:
    missing = [str(p) for p in paths if not p.exists()]
    if missing:  # .ci/run installs these; a developer machine without them gets a clear failure
        pytest.fail(f"test corpus missing: {missing}; run scripts/setup.sh (installs the Debian packages)")


def write_sources(path: Path, sources: list[dict]) -> Path:
    lines = []
    for s in sources:
        lines.append("[[source]]")
        lines += [f"{k} = {json.dumps(v)}" for k, v in s.items()]  # TOML's strings, booleans and numbers
        lines.append("")
    path.write_text("\n".join(lines))
    return path


@pytest.fixture
def small_sources(tmp_path: Path) -> Path:
    """googletest + nlohmann-json + POCO's Foundation headers, as plain directories."""
    need(GOOGLETEST, NLOHMANN, POCO)
    return write_sources(tmp_path / "sources.toml", [
        # configure = false: libclang's CMake configure and 99 TUs are tested on their own (test_clang_index,
        # test_configure, and the main job in CI); the many builds sharing this corpus stay fast
        {"name": "googletest", "url": str(GOOGLETEST), "license": "BSD-3-Clause", "configure": False},
        {"name": "nlohmann-json", "url": str(NLOHMANN)},
        {"name": "poco-json", "url": str(POCO / "JSON")},
        {"name": "poco-net", "url": str(POCO / "Net")},
    ])


# How long one command of a test may run. The longest, a whole build on Ray or under the Slurm stand-in, take a
# few minutes; a command that runs far longer is taken for hung (see run_bounded).
COMMAND_TIMEOUT_S = float(os.environ.get("CPP_DATA_TEST_COMMAND_TIMEOUT", 1200))


def run_bounded(cmd: list[str], timeout: float = COMMAND_TIMEOUT_S, env: dict | None = None,
                **kw) -> subprocess.CompletedProcess:
    """subprocess.run(cmd, capture_output=True, text=True) that cannot hang the suite: the command runs in a
    session of its own with faulthandler on, and if it outlives `timeout`, every Python process of that session
    (the CLI and the executor's workers) is sent SIGABRT, which makes each print every thread's stack before it
    dies. The test then fails naming the command, with the end of what it printed, stacks included: where a
    build hung, instead of a suite that holds CI until CI's own limit."""
    env = {**(os.environ if env is None else env), "PYTHONFAULTHANDLER": "1"}
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            start_new_session=True, **kw)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        out, err = _stacks_then_kill(proc)
        err = "\n".join(ln for ln in err.splitlines() if not ln.startswith("Extension modules:"))
        tail = f"stdout:\n{out[-2000:]}\nstderr:\n{err[-10000:]}"
        pytest.fail(f"{' '.join(map(str, cmd))} ran past {timeout:.0f} s (hung); its stacks and output:\n{tail}",
                    pytrace=False)
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def _stacks_then_kill(proc: subprocess.Popen) -> tuple[str, str]:
    """SIGABRT to the command's session (faulthandler prints the stacks), then SIGKILL to what is left; returns
    what the command printed. Pipes still held by a process outside the session are given up after 30 s."""
    import signal

    for sig in (signal.SIGABRT, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            pass
        try:
            return proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            continue
    return "", "(its output pipes stayed open: a process outside its session holds them)"


def run_cli(*args: str, check: bool = True, **kw) -> subprocess.CompletedProcess:
    proc = run_bounded([*CLI, *args], **kw)
    if check and proc.returncode != 0:
        raise AssertionError(f"cpp-data {' '.join(args)} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}")
    return proc


def build(sources: Path, out: Path, *extra: str, check: bool = True, **kw) -> subprocess.CompletedProcess:
    return run_cli("build", "--version", "v6", "--sources", str(sources), "--out", str(out), "--workers", "2",
                   "--no-progress", *extra, check=check, **kw)


def clang_fixture_source(tmp_path: Path) -> Path:
    """tests/fixtures/clang_project as a plain directory source with its own compile_commands.json at its root
    (util.cc, main.cc, cfile.c, in that order; broken.cc left out)."""
    proj = tmp_path / "proj"
    shutil.copytree(Path(__file__).parent / "fixtures" / "clang_project", proj)
    (proj / "src" / "broken.cc").unlink()
    src = proj / "src"
    (proj / "compile_commands.json").write_text(json.dumps(
        [{"directory": str(src), "file": f, "command": f"c++ -I../include '-DNAME=\"x y\"' -std=c++17 -c {f}"}
         for f in ("util.cc", "main.cc")]
        + [{"directory": str(src), "file": "cfile.c", "command": "cc -std=c11 -c cfile.c"}]))
    return proj


def provenance_recipe(directory: Path, *extra: str) -> Path:
    """The v6 recipe cut down to the shards, the ledger, `extra` stages and what they read, written as
    directory/v6.toml (so its builds are still named v6-...): for tests of decisions that the later stages
    (structure, tokenizer, exports) never change, which then build in a fraction of the time."""
    from cpp_data.pipeline.runner.recipe import cut_recipe

    directory.mkdir(parents=True, exist_ok=True)
    cut_recipe("v6", ["shards", "ledger", *extra], directory / "v6.toml")
    return directory / "v6.toml"


def provenance_build(sources: Path, out: Path, *extra: str, stages: tuple[str, ...] = (), check: bool = True,
                     **kw) -> subprocess.CompletedProcess:
    """`build` with the provenance recipe (plus `stages`), written beside `out`."""
    recipe = provenance_recipe(Path(out).parent / f"{Path(out).name}-recipe", *stages)
    return build(sources, out, "--recipe", str(recipe), *extra, check=check, **kw)


def build_dir(out: Path) -> Path:
    builds = [d for d in (out / "builds").iterdir() if d.is_dir() and (d / "_COMPLETE").exists()]
    assert len(builds) == 1, builds
    return builds[0]


def data_digests(build: Path) -> dict[str, str]:
    """SHA-256 of every data file of a build (shards and ledger; the manifest holds timestamps)."""
    out = {}
    for p in sorted(build.rglob("*.parquet")):
        out[str(p.relative_to(build))] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


def shared_directory(tmp_path_factory, name: str, make) -> Path:
    """A directory the whole test session shares, made once by `make(directory)`: under pytest-xdist the first
    worker that needs it makes it while the others wait on a lock file, so N workers do not build it N times."""
    from filelock import FileLock

    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent  # the workers' common base
    target = root / name
    with FileLock(str(target) + ".lock"):
        if not (target / ".made").exists():
            shutil.rmtree(target, ignore_errors=True)
            target.mkdir()
            make(target)
            (target / ".made").touch()
    return target


def _reference(tmp: Path) -> None:
    sources = write_sources(tmp / "sources.toml", [
        # configure = false: libclang's CMake configure and 99 TUs are tested on their own (test_clang_index,
        # test_configure, and the main job in CI); the many builds sharing this corpus stay fast
        {"name": "googletest", "url": str(GOOGLETEST), "license": "BSD-3-Clause", "configure": False},
        {"name": "nlohmann-json", "url": str(NLOHMANN)},
        {"name": "poco-json", "url": str(POCO / "JSON")},
        {"name": "poco-net", "url": str(POCO / "Net")},
    ])
    build(sources, tmp / "out")


@pytest.fixture(scope="session")
def reference_build(tmp_path_factory) -> Path:
    """One clean build of the small corpus, shared by tests that compare against it (they copy it before
    changing anything)."""
    need(GOOGLETEST, NLOHMANN, POCO)
    return build_dir(shared_directory(tmp_path_factory, "reference", _reference) / "out")


TINY = [{"name": "nlohmann-json", "url": str(NLOHMANN)}, {"name": "poco-json", "url": str(POCO / "JSON")}]


@pytest.fixture(scope="session")
def tiny_reference(tmp_path_factory) -> tuple[Path, Path]:
    """(sources, build) of a local build of two small sources (nlohmann-json and POCO's JSON headers, about 80
    files): what the executors' tests rebuild on Ray and Slurm, where every task is a process of its own."""
    need(NLOHMANN, POCO)

    def make(tmp: Path) -> None:
        build(write_sources(tmp / "sources.toml", TINY), tmp / "out")

    tmp = shared_directory(tmp_path_factory, "tiny", make)
    return tmp / "sources.toml", build_dir(tmp / "out")


def make_git_repo(path: Path, files: dict[str, bytes | str], branch: str = "main") -> str:
    """A real git repository with one commit of `files`; returns the commit SHA."""
    path.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.org", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@example.org", "GIT_AUTHOR_DATE": "2024-01-01T00:00:00Z",
           "GIT_COMMITTER_DATE": "2024-01-01T00:00:00Z"}
    subprocess.run(["git", "init", "-q", "-b", branch, str(path)], check=True, env=env)
    for rel, content in files.items():
        f = path / rel
        f.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, str):
            content = content.encode()
        f.write_bytes(content)
    subprocess.run(["git", "add", "-A"], cwd=path, check=True, env=env)
    subprocess.run(["git", "commit", "-q", "-m", "import"], cwd=path, check=True, env=env)
    return subprocess.run(["git", "rev-parse", "HEAD"], cwd=path, check=True, env=env, capture_output=True,
                          text=True).stdout.strip()


def copy_tree(src: Path, dst: Path, limit: int | None = None) -> dict[str, bytes]:
    """Read up to `limit` C/C++ files of a real tree as {relative path: bytes}."""
    files = {}
    for p in sorted(src.rglob("*")):
        if p.is_file() and not p.is_symlink() and p.suffix in (".h", ".cc", ".hpp", ".cpp"):
            files[str(p.relative_to(src))] = p.read_bytes()
            if limit and len(files) >= limit:
                break
    if dst is not None:
        for rel, data in files.items():
            (dst / rel).parent.mkdir(parents=True, exist_ok=True)
            (dst / rel).write_bytes(data)
    return files


__all__ = ["build", "build_dir", "copy_tree", "data_digests", "make_git_repo", "need", "provenance_build",
           "provenance_recipe",
           "run_bounded", "run_cli",
           "write_sources", "shutil"]


def run_in_terminal(args: list[str], timeout: float = 900) -> tuple[int, str]:
    """Run the CLI with stdout and stderr on a pseudo-terminal of 120 x 40 (a user's terminal: isatty() is
    true and tqdm knows its width); returns the exit code and everything it wrote, carriage returns as line
    ends."""
    import fcntl
    import pty
    import struct
    import termios

    main, child = pty.openpty()
    fcntl.ioctl(child, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
    env = {k: v for k, v in os.environ.items() if k != "NO_COLOR"}
    proc = subprocess.Popen([*CLI, *args], stdout=child, stderr=child, env=env)
    os.close(child)  # the child holds the only other end: reading ends (EIO) when it exits
    out = b""
    while True:
        try:
            chunk = os.read(main, 65536)
        except OSError:
            break
        if not chunk:
            break
        out += chunk
    os.close(main)
    return proc.wait(timeout=timeout), out.decode("utf-8", "replace").replace("\r", "\n")


MEGATRON_LM = "megatron-lm-core_v0.16.1.tar.xz"
# beside the checkout (the workplace's layout), wherever the checkout is
MEGATRON_LM_AT = [Path(__file__).resolve().parent.parent.parent / "shared" / "peers" / MEGATRON_LM,
                  Path("/work/shared/peers") / MEGATRON_LM]


@pytest.fixture(scope="session")
def megatron_lm(tmp_path_factory) -> Path:
    given = os.environ.get("CPP_DATA_MEGATRON_LM")
    source = Path(given) if given else next((c for c in MEGATRON_LM_AT if c.exists()), MEGATRON_LM_AT[0])
    if source.is_dir():
        return source
    if not source.is_file():
        pytest.skip(f"Megatron-LM core_v0.16.1 not found at {source}; set CPP_DATA_MEGATRON_LM to a checkout or "
                    f"its tarball")
    dest = tmp_path_factory.mktemp("megatron-lm")
    with tarfile.open(source) as tar:
        tar.extractall(dest, filter="data")
    return next(p.parent for p in dest.rglob("pretrain_gpt.py"))


