"""Compile databases for the libclang layer: read compile_commands.json, clean each command into parser
arguments, find clang's builtin headers, (clang_index/configure.py finds or makes the database).

The PyPI libclang wheel ships libclang.so but no builtin headers (stddef.h, ...): without `-resource-dir`
pointing at Debian's libclang-common-19-dev every TU fails. Commands are shell-split (splitting on whitespace
broke quoted -D values in the reference design), outputs, dependency files, -c and sanitizer flags are dropped,
and the language is left to the file name (`-x c++` is never forced onto a .c file).
"""

from __future__ import annotations

import glob
import json
import os
import re
import shlex
from dataclasses import dataclass
from pathlib import Path

import clang.cindex as ci

DROP_FLAGS = frozenset({"-c", "-MD", "-MMD", "-M", "-MM", "-MP", "-fcolor-diagnostics", "-fno-color-diagnostics",
                        "-Werror", "-pipe", "-Winvalid-pch"})

DROP_WITH_VALUE = frozenset({"-o", "-MF", "-MT", "-MQ"})

DROP_PREFIXES = ("-fsanitize", "-fno-sanitize", "-fdiagnostics-color", "-Werror=", "-MF", "-MT", "-MQ")




@dataclass(frozen=True)
class CompileCommand:
    """One compile database entry: `file` is absolute, `arguments` is the full argv (compiler first)."""
    directory: str
    file: str
    arguments: list[str]



def find_resource_dir() -> Path:
    """The newest installed clang resource dir (holds the builtin headers such as stddef.h)."""
    hits = glob.glob("/usr/lib/llvm-*/lib/clang/*/include/stddef.h")
    if not hits:
        raise RuntimeError("no clang builtin headers found (/usr/lib/llvm-*/lib/clang/*/include/stddef.h); "
                           "install the Debian package libclang-common-19-dev")
    def version(p: str) -> tuple[int, ...]:
        m = re.search(r"llvm-(\d+)/lib/clang/([\d.]+)/", p)
        return (int(m.group(1)), *map(int, m.group(2).split("."))) if m else (0,)
    return Path(max(hits, key=version)).parent.parent



def check_libclang() -> None:
    """Raise RuntimeError unless clang.cindex can load libclang and create an index."""
    try:
        ci.Index.create()
    except Exception as e:  # LibclangError, OSError, ...
        raise RuntimeError(f"clang.cindex cannot load libclang: {e}") from e



def load_compile_commands(path: str | Path) -> list[CompileCommand]:
    """Read compile_commands.json; `command` strings are shell-split, `file` is resolved against `directory`."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"{path}: cannot read compile database: {e}") from e
    if not isinstance(data, list):
        raise ValueError(f"{path}: compile database must be a JSON list, got {type(data).__name__}")
    out = []
    for i, e in enumerate(data):
        if not isinstance(e, dict) or not isinstance(e.get("directory"), str) or not isinstance(e.get("file"), str):
            raise ValueError(f"{path}: entry {i}: needs string 'directory' and 'file'")
        if isinstance(e.get("arguments"), list) and all(isinstance(a, str) for a in e["arguments"]):
            args = list(e["arguments"])
        elif isinstance(e.get("command"), str):
            try:
                args = shlex.split(e["command"])
            except ValueError as err:
                raise ValueError(f"{path}: entry {i}: cannot split 'command': {err}") from err
        else:
            raise ValueError(f"{path}: entry {i}: needs 'arguments' (list of str) or 'command' (str)")
        if not args:
            raise ValueError(f"{path}: entry {i}: empty command")
        d = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(path)), e["directory"]))
        out.append(CompileCommand(d, os.path.normpath(os.path.join(d, e["file"])), args))
    return out



def clean_args(cmd: CompileCommand, resource_dir: str | Path | None = None) -> list[str]:
    """Parser arguments: drops argv[0], the source file, outputs/dep-files, -c, sanitizers, colour, -Werror; adds
    -resource-dir. Keeps -I/-D/-std/-isystem/... and never adds `-x` (the language follows the file name)."""
    out: list[str] = []
    args, i = cmd.arguments[1:], 0
    while i < len(args):
        a = args[i]
        i += 1
        if a in DROP_WITH_VALUE:
            i += 1
        elif a in DROP_FLAGS or a.startswith(DROP_PREFIXES):
            pass
        elif not a.startswith("-") and os.path.normpath(os.path.join(cmd.directory, a)) == cmd.file:
            pass
        elif a == "-resource-dir":
            i += 1
        else:
            out.append(a)
    return out + ["-resource-dir", str(resource_dir or find_resource_dir())]
