"""Find or make a compile database for a source, so libclang can index real repositories by default.

Repositories rarely commit `compile_commands.json`. In order, per source:
1. the repository's own database (`compile_commands.json` at its root or in `build/`);
2. a CMake project (`CMakeLists.txt` at the root): configure only, never build, into a directory of the stage's
   output, offline and sandboxed, with a time limit:
   - first with testing on (`BUILD_TESTING=ON`), which also lists the project's own options in its cache;
     header-only libraries have TUs only in their tests and examples, so the project's own test/example/sample
     switches found there (`gtest_build_tests`, `JSON_BuildTests`, `FOO_BUILD_EXAMPLES`, ...) are then turned
     on in a second configure;
   - if configuring with tests fails (a missing test submodule, FetchContent without network), configure again
     with every such switch off; if that fails too, up to GUARD_ROUNDS more times with the project options
     that guard its error sites off as well (clang_index/cmake_retry.py: a benchmark switch around an empty
     submodule, an optional dependency);
3. a Meson project (`meson.build` at the root), when meson is installed: `meson setup` without subproject
   downloads, sandboxed the same way, again with the project's test/benchmark/example options off, then with
   the options guarding its error site off (clang_index/meson_setup.py);
4. a Makefile or autotools project (also a CMake or Meson one whose configure failed), by a dry run:
   `make -n` after an out-of-tree `configure` (clang_index/make_dry.py), in the same sandbox;
5. otherwise none: stages/semantics.py infers commands from the tree, else files fall back to tree-sitter.
Every attempt (its options, whether it worked, its time and the last lines of a failure) goes into the receipt;
a failing configure is never fatal to the build.

Configuring runs the repository's own CMake or Meson code, so it runs under bubblewrap (clang_index/sandbox.py):
the whole filesystem read-only except the build directory, a private /tmp, a temporary HOME, no network, and
killed with its process group at the time limit. Where bwrap is missing or does not work (some containers forbid
namespaces), the receipt says so and configure runs unsandboxed only if the recipe allows it
(`allow_unsandboxed_configure`).

Hand-written because no library does this: CMake's File API would need a configured tree already, and the
option discovery reads `CMakeCache.txt`, the same entries `cmake -LH` prints, without another CMake process.
"""

from __future__ import annotations

import re
import shlex
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from cpp_data.clang_index.sandbox import Attempt, run_sandboxed, sandbox_problem

# An option that switches on a project's tests, examples or samples: FOO_BUILD_TESTS, gtest_build_samples,
# JSON_BuildTests, BUILD_TESTING, FOO_ENABLE_TESTING, FMT_TEST, ... but never a switch that disables them.
_TEST_OPTION = re.compile(r"(?i)(^|_)(build_?|enable_?|with_?)?(tests?|testing|examples?|samples?)$")
_NEGATIVE = re.compile(r"(?i)disable|skip|(^|_)no_")
# ... nor a switch for tests in another language of the GPU toolkits: pybind11's PYBIND11_CUDA_TESTS makes the
# database's commands nvcc's, which libclang cannot read, where BUILD_TESTING=ON's are C++
_OTHER_LANGUAGE = re.compile(r"(?i)(^|_)(cuda|hip|rocm|sycl|opencl)(_|$)")
_CACHE_BOOL = re.compile(r"^([A-Za-z0-9_.+-]+):BOOL=(.*)$")
_OPTION_DECL = re.compile(r"^\s*option\s*\(\s*([A-Za-z0-9_]+)", re.MULTILINE | re.IGNORECASE)
GUARD_ROUNDS = 3  # configures after tests-off, each turning off the options that guard the last one's errors


@dataclass
class Discovery:
    """Where a source's compile database came from (`database`), and why, for the coverage receipt."""
    database: str = "none"  # source | cmake | meson | make | none (inferred: stages/semantics.py)
    path: Path | None = None
    reason: str = ""
    sandbox: str | None = None  # bwrap | none (unsandboxed, allowed by the recipe) | None (nothing was run)
    attempts: list[Attempt] = field(default_factory=list)

    def receipt(self) -> dict:
        return {"database": self.database, "database_reason": self.reason, "configure_sandbox": self.sandbox,
                "configure_attempts": [vars(a) for a in self.attempts]}


def find_database(root: Path) -> Path | None:
    for candidate in (root / "compile_commands.json", root / "build" / "compile_commands.json"):
        if candidate.is_file():
            return candidate
    return None


def switch_options(root: Path, cache: Path) -> dict[str, bool]:
    """The project's test/example/sample switches and their values: from the configure's CMakeCache.txt (what
    `cmake -LH` lists), plus `option(...)` declarations of the top CMakeLists.txt a failed configure never
    reached."""
    found: dict[str, bool] = {}
    if cache.is_file():
        for line in cache.read_text(errors="replace").splitlines():
            m = _CACHE_BOOL.match(line)
            if m and _is_switch(m.group(1)):
                found[m.group(1)] = m.group(2).strip().upper() in ("ON", "TRUE", "1", "YES", "Y")
    try:
        text = (root / "CMakeLists.txt").read_text(errors="replace")
    except OSError:
        text = ""
    for name in _OPTION_DECL.findall(text):
        if _is_switch(name):
            found.setdefault(name, False)
    found.pop("BUILD_TESTING", None)
    return found


def _is_switch(name: str) -> bool:
    """Whether an option turns on C/C++ tests, examples or samples (switch_options)."""
    return bool(_TEST_OPTION.search(name)) and not _NEGATIVE.search(name) and not _OTHER_LANGUAGE.search(name)


def _first_error(tail: list[str]) -> str:
    """The line that says why a configure failed: the one after CMake's `CMake Error at ...:` heading, else the
    last line of its output."""
    for k, line in enumerate(tail):
        if line.lstrip().startswith("CMake Error") and k + 1 < len(tail):
            return tail[k + 1].strip()
    return tail[-1].strip() if tail else ""


def _cmake(root: Path, build: Path, options: list[str], cmake_args: list[str]) -> list[str]:
    cmd = ["cmake", "-S", str(root), "-B", str(build), "-DCMAKE_EXPORT_COMPILE_COMMANDS=ON", *options, *cmake_args]
    return cmd + (["-G", "Ninja"] if shutil.which("ninja") else [])


def _configure_cmake(root: Path, work: Path, sandbox: bool, cmake_args: list[str], timeout_s: float,
                     d: Discovery) -> Path | None:
    output: list[str] = []

    def attempt(tag: str, options: list[str]) -> tuple[bool, Path | None]:
        build = work / tag
        a = Attempt("cmake", options)
        d.attempts.append(a)
        output.clear()
        ok = run_sandboxed(a, _cmake(root, build, options, cmake_args), root, work, sandbox, timeout_s, output)
        db = build / "compile_commands.json"
        return ok, db if ok and db.is_file() else None  # a project without TUs writes no database

    ok, db = attempt("tests-on", ["-DBUILD_TESTING=ON"])
    switches = switch_options(root, work / "tests-on" / "CMakeCache.txt")
    if ok:
        off = sorted(k for k, v in switches.items() if not v)
        if off:
            db = attempt("tests-all-on", ["-DBUILD_TESTING=ON", *(f"-D{k}=ON" for k in off)])[1] or db
        return db
    options = ["-DBUILD_TESTING=OFF", *(f"-D{k}=OFF" for k in sorted(switches))]
    ok, db = attempt("tests-off", options)
    return db if ok else _retry_guards(root, options, set(switches), output, attempt)


def _retry_guards(root: Path, options: list[str], off: set[str], output: list[str], attempt) -> Path | None:
    """Up to GUARD_ROUNDS more configures, each with the project options that guard the last failure's error
    sites turned off as well (clang_index/cmake_retry.py: leveldb's LEVELDB_BUILD_BENCHMARKS around an empty
    benchmark submodule); the first database, or None."""
    from cpp_data.clang_index.cmake_retry import declared_options, next_switches

    declared = declared_options(root)
    for k in range(GUARD_ROUNDS):
        new = next_switches(root, output[0] if output else "", declared, off)
        if not new:
            return None
        off.update(new)
        options = options + [f"-D{n}=OFF" for n in new]
        ok, db = attempt(f"guards-off-{k}", options)
        if ok:
            return db
    return None


def _dry_run_make(root: Path, work: Path, sandbox: bool, timeout_s: float, d: Discovery) -> Path | None:
    """A database from `make -n` (clang_index/make_dry.py), after an out-of-tree `configure` where the root has
    that script; None when the dry run printed no compile command."""
    from cpp_data.clang_index.make_dry import extra_targets, parse_dry_run, write_database

    make_dir = root
    if (root / "configure").is_file():
        build = work / "autotools"
        build.mkdir(parents=True, exist_ok=True)
        a = Attempt("configure", ["(out of tree)"])
        d.attempts.append(a)
        script = f"cd {shlex.quote(str(build))} && {shlex.quote(str(root / 'configure'))}"
        if run_sandboxed(a, ["sh", "-c", script], root, work, sandbox, timeout_s):
            make_dir = build
    targets = extra_targets(make_dir)
    a = Attempt("make", ["-n", "-B", "-k", "-w", *targets])
    d.attempts.append(a)
    output: list[str] = []
    run_sandboxed(a, ["make", "-C", str(make_dir), *a.options], root, work, sandbox, timeout_s, output)
    a.ok = bool(entries := parse_dry_run(output[0] if output else "", str(make_dir)))  # -k: some targets fail
    return write_database(entries, work / "make-compile_commands.json")


def discover(root: Path, work: Path, *, configure: bool = True, cmake_args: list[str] | None = None,
             timeout_s: float = 300, allow_unsandboxed: bool = False) -> Discovery:
    """Find or make `root`'s compile database; configure runs write only under `work`."""
    d = Discovery()
    db = find_database(root)
    if db is not None:
        d.database, d.path, d.reason = "source", db, f"the repository's own {db.relative_to(root)}"
        return d
    from cpp_data.clang_index.make_dry import has_makefile

    has_cmake, has_meson, has_make = ((root / "CMakeLists.txt").is_file(), (root / "meson.build").is_file(),
                                      has_makefile(root))
    if not (has_cmake or has_meson or has_make):
        d.reason = "no compile_commands.json, CMakeLists.txt, meson.build, Makefile or configure at the root"
        return d
    if not configure:
        d.reason = "configure is turned off for this source (configure = false)"
        return d
    from cpp_data.clang_index.meson_setup import meson_program

    tool = "cmake" if has_cmake else "meson" if has_meson else "make"
    if (meson_program() if tool == "meson" else shutil.which(tool)) is None:
        d.reason = f"{tool} is not installed, so the {tool} project was not configured"
        return d
    problem = sandbox_problem()
    if problem and not allow_unsandboxed:
        d.reason = f"not configured: no sandbox ({problem}); the recipe's allow_unsandboxed_configure is false"
        return d
    sandbox = problem is None
    d.sandbox = "bwrap" if sandbox else "none"
    work.mkdir(parents=True, exist_ok=True)
    db = None
    if has_cmake:
        db = _configure_cmake(root, work, sandbox, list(cmake_args or ()), timeout_s, d)
    elif has_meson:
        from cpp_data.clang_index.meson_setup import configure_meson

        db = configure_meson(root, work, sandbox, timeout_s, d.attempts)
    if db is None and has_make and shutil.which("make"):  # also a CMake or Meson project that ships a Makefile
        db = _dry_run_make(root, work, sandbox, timeout_s, d)
        tool = "make" if db is not None else tool  # else the first tool's failure is what the reason quotes
    if db is None:
        failed = all(not a.ok for a in d.attempts)
        why = _first_error(d.attempts[0].tail)[:160] if failed and d.attempts else ""
        d.reason = (f"every {tool} configure failed" + (f" ({why})" if why else "") if failed
                    else f"{tool} configured no translation units")
        return d
    d.database, d.path = tool, db
    used = next(a for a in reversed(d.attempts) if a.ok)
    d.reason = f"{tool} configure ({' '.join(used.options)})"
    return d
