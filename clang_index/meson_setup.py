"""A compile database from a Meson project: `meson setup`, sandboxed, offline, never a build.

Always with `--wrap-mode=nofallback`: a subproject fallback downloads into `subprojects/packagecache` of the
(read-only) tree, which the sandbox refuses, so without it a project with any wrap fails. A failed setup is
tried again with the project's test/benchmark/example/doc options off (from meson_options.txt or meson.options),
then, round by round, with the boolean options that guard its error site (`get_option('x')` in the `if` blocks
open at `meson.build:L:C: ERROR`) turned off: libzim configures once `with_xapian=false`.

meson comes from PyPI (pure Python, Apache-2.0; scripts/setup.sh installs it); the one next to this Python is
used where none is on PATH.
"""

from __future__ import annotations

import re
import shutil
import sys
from pathlib import Path

from cpp_data.clang_index.sandbox import Attempt, run_sandboxed

# A switch for what a library's own code does not need: tests, benchmarks, examples, docs, fuzzers, tools
NON_LIBRARY = re.compile(r"(?i)(^|_)(build_?|enable_?|with_?)?(tests?|testing|bench(mark)?s?|examples?|samples?|"
                         r"docs?|documentation|fuzz(ers?|ing)?|tools?|demos?|apps?|utils?|perf|contrib)(_|$)")

_OPTION = re.compile(r"option\(\s*'([^']+)'\s*,\s*type\s*:\s*'(\w+)'")
_ERROR_AT = re.compile(r"(\S*meson\.build):(\d+):\d+: ERROR")
_GET_OPTION = re.compile(r"get_option\(\s*'([^']+)'")
ROUNDS = 3


def meson_program() -> str | None:
    """The meson executable: on PATH, else installed beside this Python (the venv's)."""
    found = shutil.which("meson")
    if found:
        return found
    beside = Path(sys.executable).parent / "meson"
    return str(beside) if beside.is_file() else None


def project_options(root: Path) -> dict[str, str]:
    """The project's own options: name -> type (boolean, feature, combo, ...)."""
    out: dict[str, str] = {}
    for name in ("meson_options.txt", "meson.options"):
        path = root / name
        if path.is_file():
            out.update(_OPTION.findall(path.read_text(errors="replace")))
    return out


def _off(name: str, kind: str) -> str:
    return f"-D{name}=" + ("disabled" if kind == "feature" else "false")


def _open_conditions(lines: list[str]) -> list[str]:
    """The conditions of the `if`/`elif` blocks open after `lines`."""
    stack: list[str] = []
    for raw in lines:
        s = raw.split("#", 1)[0].strip()
        if s.startswith(("if ", "if(")):
            stack.append(s)
        elif s.startswith("elif ") and stack:
            stack[-1] = s
        elif s == "endif" and stack:
            stack.pop()
    return stack


def guard_options(root: Path, output: str, cwd: Path | None = None) -> list[str]:
    """The options read by `get_option()` in the `if` blocks around each `meson.build:L:C: ERROR` site (meson
    names it relative to the directory it ran in, `cwd`, or to the root)."""
    names: list[str] = []
    for where, line in _ERROR_AT.findall(output):
        path = next((p.resolve() for p in (Path(where), (cwd or root) / where, root / where) if p.is_file()), None)
        if path is None or root.resolve() not in path.parents:
            continue
        lines = path.read_text(errors="replace").splitlines()[:int(line) - 1]
        for condition in _open_conditions(lines):
            names += [n for n in _GET_OPTION.findall(condition) if n not in names]
    return names


def configure_meson(root: Path, work: Path, sandbox: bool, timeout_s: float,
                    attempts: list[Attempt]) -> Path | None:
    """Set the project up (retries as the module says); the database of the first setup that works, or None."""
    meson = meson_program()
    if meson is None:
        return None
    options = project_options(root)
    off: list[str] = []
    for k in range(ROUNDS + 2):
        build = work / f"meson-{k}"
        a = Attempt("meson", ["setup", "--wrap-mode=nofallback", *off])
        attempts.append(a)
        output: list[str] = []
        if run_sandboxed(a, [meson, *a.options, str(build), str(root)], root, work, sandbox, timeout_s, output):
            db = build / "compile_commands.json"
            return db if db.is_file() else None
        new = ([_off(n, t) for n, t in sorted(options.items()) if NON_LIBRARY.search(n) and t in ("boolean", "feature")]
               if k == 0 else
               [_off(n, options[n]) for n in guard_options(root, output[0] if output else "", work)
                if options.get(n) in ("boolean", "feature")])
        new = [o for o in new if o not in off]
        if not new:
            return None
        off += new
    return None
