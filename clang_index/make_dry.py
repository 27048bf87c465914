"""A compile database from a Makefile or autotools project by a dry run (`make -n`), never a build.

- autotools: a `configure` script at the root runs out of tree (from the work directory), so the tree stays
  read-only; make then runs in that build directory;
- make: `make -C DIR -n -B -k -w [targets]` prints every command without running one (-B: all of them, as if
  nothing were built; -k: past errors; -w: directory changes), for `all` and the test, example, benchmark and
  tool targets the top Makefile names. GNU make still runs `$(shell ...)` and recursive `$(MAKE)` lines under
  -n, which is why this runs in configure.py's sandbox (read-only filesystem but the work directory, no
  network, a time limit) like CMake;
- the output is read as compiledb reads it: `make[N]: Entering directory 'X'` moves the working directory, each
  line splits into shell commands (`&&`, `;`, `cd X &&`), and a command is kept when its program is a C/C++
  compiler (cc, gcc, g++, c++, clang, clang++, with a target prefix or version suffix, behind ccache or
  `libtool --mode=compile`) compiling (-c) one C/C++ file; the first command for a file wins.

Hand-written: compiledb does the same but is GPL-3.0, and bear intercepts a real build (it compiles).
"""

from __future__ import annotations

import json
import os
import re
import shlex
from pathlib import Path

SOURCE = re.compile(r"\.(c|cc|cpp|cxx|c\+\+|cp)$", re.I)
COMPILER = re.compile(r"^(?:[\w.-]+-)?(cc|gcc|g\+\+|c\+\+|clang|clang\+\+)(?:-[\d.]+)?$")
WRAPPERS = frozenset({"ccache", "sccache", "distcc", "env", "nice", "time"})
DIRECTORY = re.compile(r"^\S*make(?:\[\d+\])?: (Entering|Leaving) directory ['`](.*)'")
EXTRA_TARGETS = ("all", "check", "test", "tests", "examples", "example", "contrib", "bench", "benchmarks", "tools",
                 "programs", "demo", "demos", "samples", "fuzz")
MAKEFILES = ("GNUmakefile", "makefile", "Makefile")
_SEPARATORS = frozenset({";", "&&", "||", "|", "&", "(", ")"})


def has_makefile(root: Path) -> bool:
    return any((root / n).is_file() for n in (*MAKEFILES, "configure"))


def shell_commands(line: str) -> list[list[str]]:
    """The simple commands of a shell line (split at ;, &&, ||, |, & and parentheses); [] where it does not
    split (an unclosed quote)."""
    try:
        lex = shlex.shlex(line, posix=True, punctuation_chars=";&|()")
        lex.whitespace_split = True
        tokens = list(lex)
    except ValueError:
        return []
    out: list[list[str]] = [[]]
    for t in tokens:
        if t in _SEPARATORS:
            out.append([])
        else:
            out[-1].append(t)
    return [c for c in out if c]


def _compiler_argv(argv: list[str]) -> list[str]:
    """argv without wrappers (ccache, env VAR=..., libtool --mode=compile)."""
    while argv and (os.path.basename(argv[0]) in WRAPPERS or ("=" in argv[0] and not argv[0].startswith("-"))):
        argv = argv[1:]
    if argv and (os.path.basename(argv[0]) == "libtool" or (len(argv) > 1 and argv[1].endswith("libtool"))):
        k = next((i for i, a in enumerate(argv) if a == "--mode=compile"), None)
        argv = [] if k is None else [a for a in argv[k + 1:] if not a.startswith("--tag")]
    return argv


def compile_entry(argv: list[str], cwd: str) -> dict | None:
    """A compile database entry for a command that compiles one C/C++ file, else None."""
    argv = _compiler_argv(argv)
    if not argv or not COMPILER.match(os.path.basename(argv[0])) or "-c" not in argv:
        return None
    sources = [a for a in argv[1:] if not a.startswith("-") and SOURCE.search(a)]
    if len(sources) != 1:
        return None
    return {"directory": cwd, "file": os.path.normpath(os.path.join(cwd, sources[0])), "arguments": argv}


def parse_dry_run(output: str, start: str) -> list[dict]:
    """The compile commands of a `make -n -w` output that started in directory `start`."""
    stack, out, seen = [start], [], set()
    for raw in output.splitlines():
        m = DIRECTORY.match(raw)
        if m:
            if m.group(1) == "Entering":
                stack.append(m.group(2))
            elif len(stack) > 1:
                stack.pop()
            continue
        cwd = stack[-1]
        for argv in shell_commands(raw.strip().lstrip("@+-")):
            if argv[0] == "cd" and len(argv) > 1:
                cwd = os.path.normpath(os.path.join(cwd, argv[1]))
                continue
            entry = compile_entry(argv, cwd)
            if entry and entry["file"] not in seen:
                seen.add(entry["file"])
                out.append(entry)
    return out


def extra_targets(directory: Path) -> list[str]:
    """`all` and the project's test/example/benchmark/tool targets that its top Makefile names."""
    text = ""
    for name in MAKEFILES:
        if (directory / name).is_file():
            text = (directory / name).read_text(errors="replace")
            break
    names = set(re.findall(r"(?m)^([A-Za-z][\w.-]*)\s*:(?!=)", text))
    names |= {n for line in re.findall(r"(?m)^\.PHONY\s*:(.*)$", text) for n in line.split()}
    return [t for t in EXTRA_TARGETS if t in names]


def write_database(entries: list[dict], path: Path) -> Path | None:
    """The entries as compile_commands.json at `path`, or None when there are none."""
    if not entries:
        return None
    path.write_text(json.dumps(entries, indent=1))
    return path
