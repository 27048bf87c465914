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

# A repository's own compile database is input nobody here wrote, and libclang runs clang's driver and front end
# with what it says. Tried with the libclang wheel here, these wrote files where the arguments pointed:
# `-MD -MF F` and `-Wp,-MD,F` (dependency files), `-MJ F` (a compile-database record), `-gen-cdb-fragment-path D`,
# `-fmodules-cache-path=D` beside a module map (D/<hash>/M-<hash>.pcm), and behind `-Xclang`: `-dependency-file`,
# `-dependency-dot`, `-header-include-file` and `-module-dependency-dir` (a copy of the headers). Plugins
# (`-fplugin=`, `-fpass-plugin=`, `-Xclang -load -Xclang X.so`) were not loaded, `-ftime-trace=F`,
# `--serialize-diagnostics F`, `-save-stats` and `-fproc-stat-report=F` wrote nothing, and `-save-temps` made the
# parse fail; none of them is needed to parse, so they go too. The driver's options are dropped by this list
# (found by trying, so not complete); the front end's, passed with `-Xclang`, are an open set that projects
# rarely need, so only those that look like language settings pass (`_cc1_kept`). A TU that turns modules on
# gets a module cache of its own (`clean_args`'s `module_cache`).
DROP_UNSAFE_PREFIXES = ("-fmodules-cache-path", "-fcrash-diagnostics-dir", "-ftime-trace", "-save-temps",
                        "-save-stats", "-fproc-stat-report", "-fplugin", "-fpass-plugin", "-plugin-arg",
                        "--serialize-diagnostics", "-MJ", "-gen-cdb-fragment-path", "-module-dependency-dir")
DROP_UNSAFE_WITH_VALUE = frozenset({"--serialize-diagnostics", "-MJ", "-gen-cdb-fragment-path",
                                    "-module-dependency-dir", "-mllvm", "-Xanalyzer"})
# Front-end options kept behind -Xclang (or -Xpreprocessor): language and warning settings, macros and include
# paths, and these options, each with its value behind another -Xclang.
CC1_KEPT_PREFIXES = ("-f", "-W", "-D", "-U", "-I", "-std=")
CC1_KEPT_WITH_VALUE = frozenset({"-include", "-include-pch", "-isystem", "-iquote", "-idirafter", "-triple"})


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
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path}: cannot read compile database: {exc}") from exc
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


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def relocate_commands(commands: list[CompileCommand], root: Path) -> tuple[list[CompileCommand], str | None, int]:
    """A repository's own compile database read as the tree at `root`: (commands, the path replaced by `root`
    or None, how many commands were left out).

    Such a database names the absolute paths of the checkout it was generated in (`/home/dev/proj/src/a.cpp`),
    while cpp-data parses the source at its pin somewhere else (a git source is extracted into the stage's work
    directory). Indexing those paths read another tree than the pinned one, or none: no file matched a
    command, and the TU status carried the other machine's paths. The generating root is found from the files
    themselves: for each command whose file is not under `root`, the longest tail of its path that names a
    file under `root` gives a candidate prefix (a directory, never `/` alone); the prefix most commands give
    (then the first in sort order) is replaced by `root` in every command's directory and file, and in each
    argument that starts with it, alone or after a flag (`-I/home/dev/proj/include`,
    `--include-directory=/home/dev/proj/include`). A command whose file is then still outside `root` is left
    out. Written here because no compile-database library at hand (libclang's CompilationDatabase reads
    databases, it does not move them) does this."""
    base = os.path.normpath(str(root))
    votes: dict[str, int] = {}
    for c in commands:
        if _under(c.file, base):
            continue
        parts = Path(c.file).parts
        for k in range(2, len(parts)):
            if os.path.isfile(os.path.join(base, *parts[k:])):
                candidate = os.path.join(*parts[:k])
                votes[candidate] = votes.get(candidate, 0) + 1
                break
    prefix = min(votes, key=lambda x: (-votes[x], x)) if votes else None
    if prefix is not None:
        at_start = re.compile(r"^(-{1,2}[A-Za-z][\w-]*=?)?" + re.escape(prefix) + r"(?=/|$)")

        def moved(text: str) -> str:  # a path, or an argument that starts with one, alone or after a flag
            return at_start.sub(lambda m: (m.group(1) or "") + base, text)

        commands = [CompileCommand(moved(c.directory), moved(c.file), [moved(a) for a in c.arguments])
                    for c in commands]
    kept = [c for c in commands if _under(c.file, base)]
    return kept, prefix, len(commands) - len(kept)


def clean_args(cmd: CompileCommand, resource_dir: str | Path | None = None,
               module_cache: str | Path | None = None) -> list[str]:
    """Parser arguments: drops argv[0], the source file, outputs/dep-files, -c, sanitizers, colour, -Werror and
    what would write files or load code (`_dropped`; behind `-Xclang` or `-Xpreprocessor`, all but `_cc1_kept`,
    each with the values behind the -Xclang that follow it); adds -resource-dir, and
    `-fmodules-cache-path=module_cache` to a command that turns on modules (else clang would write its cache
    under $HOME). Keeps -I/-D/-std/-isystem/... and never adds `-x` (the language follows the file name)."""
    out: list[str] = []
    args, i = cmd.arguments[1:], 0
    while i < len(args):
        a = args[i]
        i += 1
        if a in ("-Xclang", "-Xpreprocessor"):
            if i >= len(args):
                break
            v = args[i]
            i += 1
            if _cc1_kept(v):
                out += [a, v]
                if v in CC1_KEPT_WITH_VALUE and i + 1 < len(args) and args[i] == a:
                    out += args[i:i + 2]
                    i += 2
                continue
            while i + 1 < len(args) and args[i] == a and not args[i + 1].startswith("-"):
                i += 2  # the dropped option's values
        elif a in DROP_WITH_VALUE or a in DROP_UNSAFE_WITH_VALUE:
            i += 1
        elif _dropped(a):
            pass
        elif not a.startswith("-") and os.path.normpath(os.path.join(cmd.directory, a)) == cmd.file:
            pass
        elif a == "-resource-dir":
            i += 1
        else:
            out.append(a)
    if module_cache is not None and any(a in ("-fmodules", "-fcxx-modules") for a in out):
        out.append(f"-fmodules-cache-path={module_cache}")
    return out + ["-resource-dir", str(resource_dir or find_resource_dir())]


def _dropped(arg: str) -> bool:
    """Whether a flag without a value of its own is dropped from the command line (DROP_*, the unsafe ones)."""
    return arg in DROP_FLAGS or arg.startswith(DROP_PREFIXES) or _unsafe(arg) or _writes_dependencies(arg)


def _cc1_kept(option: str) -> bool:
    """Whether a front-end option passed with -Xclang is kept: CC1_KEPT_*, never one that is dropped on the
    command line itself (`-Werror`, `-MT`, the unsafe ones) nor a `-Wp,` one."""
    return (option in CC1_KEPT_WITH_VALUE or option.startswith(CC1_KEPT_PREFIXES)) and not _dropped(option) \
        and not option.startswith("-Wp,")


def _writes_dependencies(arg: str) -> bool:
    """`-Wp,-MD,F` and the like: preprocessor options that write a dependency file (`-Wp,-D...` stays)."""
    return arg.startswith("-Wp,") and any(part.startswith("-M") for part in arg.split(",")[1:])


def _unsafe(arg: str) -> bool:
    return arg in DROP_UNSAFE_WITH_VALUE or arg.startswith(DROP_UNSAFE_PREFIXES)
