"""Which translation units a source's index parses, and which of the tree's files each one walks.

Parsing is where the semantic layer's time goes, so it parses only what a build keeps:
- **Kept main files.** The TUs whose main file is a kept document (the license, quality and decontamination
  stages' verdicts), each main file once: a database that compiles one file in several targets lists it
  several times, and the first command listed is the one used.
- **Kept headers no kept TU reaches.** A header is a document too; where no kept TU includes it, the fewest
  refused TUs that do are added. Fewest is a greedy set cover (take the TU reaching the most such headers,
  the earliest on a tie, until none reaches another): exact cover is NP-hard, and the reach it works on is the
  tree's textual include graph (clang_index/infer.IncludeGraph), itself an estimate of what a parse reads.
- **Each file walked once.** Every file a TU's include closure reaches is walked by one TU, its owner: the
  TU itself for its main file, else the first selected TU in command order that reaches it. The others skip
  it (walker.Walker.skip_files), and so does every TU for a file that is not kept. Ownership depends on the
  commands and the tree only, never on which worker finished first, so the rows are the same for any number
  of workers. Where the textual graph is wrong (an include behind an #if the parse does not take), a header an
  owner never walked is found after the parse and walked again by the first TU that skipped it
  (`lost_headers`), so a header is never lost to the ownership. What it does lose is a definition only
  another TU's configuration shows (a `= default` member a TU never uses, a header's C-only functions):
  0.2% to 0.6% of the definitions in kept files on real repositories (docs/DESIGN.md section 6).

Without a list of kept files (the stage run on its own) every TU is parsed; main files still once, headers
still walked once.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from cpp_data.clang_index.compile_db import CompileCommand
from cpp_data.clang_index.infer import IncludeGraph


@dataclass
class Selection:
    """The TUs to parse (in command order), the files each one skips (absolute paths), and what was left out."""
    commands: list[CompileCommand] = field(default_factory=list)
    skips: list[frozenset[str]] = field(default_factory=list)
    duplicates: int = 0  # commands for a main file an earlier command already compiles
    not_kept: int = 0  # TUs whose main file is refused and that reach no kept header another TU misses
    for_headers: int = 0  # refused TUs parsed because they reach kept headers no kept TU does


def first_command_per_file(commands: list[CompileCommand]) -> tuple[list[CompileCommand], int]:
    """The first command of each main file, in command order, and how many later ones were dropped."""
    seen: set[str] = set()
    out = []
    for c in commands:
        if c.file not in seen:
            seen.add(c.file)
            out.append(c)
    return out, len(commands) - len(out)


def _relative(root: Path, path: str) -> str:
    return os.path.relpath(path, root)


def fewest_covering(candidates: list[tuple[int, set[str]]], wanted: set[str]) -> list[int]:
    """Greedy set cover: indexes of the candidates (index, what it reaches) taken in turn for reaching the most
    of `wanted` not yet reached (the lowest index on a tie), until none reaches more; sorted."""
    left, chosen = set(wanted), []
    pool = [(i, reach & wanted) for i, reach in candidates if reach & wanted]
    while left and pool:
        best_i, best = max(pool, key=lambda p: (len(p[1] & left), -p[0]))
        if not best & left:
            break
        chosen.append(best_i)
        left -= best
        pool = [p for p in pool if p[0] != best_i]
    return sorted(chosen)


def tree_files(root: Path) -> list[str]:
    """Every file under `root` (absolute paths, .git left out): what an include could name."""
    out = []
    for directory, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d != ".git")
        out += [os.path.join(directory, f) for f in sorted(files)]
    return out


def select_tus(commands: list[CompileCommand], root: Path, files: list[str],
               kept: set[str] | None, graph: IncludeGraph | None = None) -> Selection:
    """The selection for `commands` (the database's, then inferred ones) over the tree at `root` (`files`: its
    files, absolute), with `kept` the kept documents' paths (relative to `root`), or None to parse every TU.
    `graph`: the include graph over `files`, when the caller has it already (infer_commands' closures)."""
    unique, duplicates = first_command_per_file(commands)
    graph = graph or IncludeGraph(root, sorted(_relative(root, f) for f in files))
    reach = [set(graph.closure(_relative(root, c.file))[0]) for c in unique]
    if kept is None:
        chosen = list(range(len(unique)))
        for_headers = 0
    else:
        chosen, for_headers = _kept_and_covering(unique, root, reach, kept)
    sel = Selection(commands=[unique[i] for i in chosen], duplicates=duplicates,
                    not_kept=len(unique) - len(chosen), for_headers=for_headers)
    sel.skips = _skips([unique[i] for i in chosen], [reach[i] for i in chosen], root, kept)
    return sel


def _kept_and_covering(unique: list[CompileCommand], root: Path, reach: list[set[str]],
                       kept: set[str]) -> tuple[list[int], int]:
    """Indexes of the TUs whose main file is kept, plus the fewest others reaching kept headers those miss."""
    mains = [_relative(root, c.file) for c in unique]
    kept_tus = [i for i, m in enumerate(mains) if m in kept]
    reached = set().union(*(reach[i] for i in kept_tus)) if kept_tus else set()
    missed = {f for f in kept if f not in reached} - set(mains)
    extra = fewest_covering([(i, reach[i]) for i in range(len(unique)) if mains[i] not in kept], missed)
    return sorted(kept_tus + extra), len(extra)


def _skips(chosen: list[CompileCommand], reach: list[set[str]], root: Path,
           kept: set[str] | None) -> list[frozenset[str]]:
    """Per TU, the files of its reach it does not walk: those another TU owns, and those not kept."""
    owner: dict[str, int] = {_relative(root, c.file): i for i, c in enumerate(chosen)}
    for i, files in enumerate(reach):
        for f in sorted(files):
            owner.setdefault(f, i)
    skips = []
    for i, files in enumerate(reach):
        skip = {f for f in files if owner[f] != i or (kept is not None and f not in kept)}
        skips.append(frozenset(str(root / f) for f in skip))
    return skips


def lost_headers(results: list[dict], root: Path, kept: set[str] | None) -> dict[int, frozenset[str]]:
    """After a parse: {TU index: the files it skipped that no TU walked} for the first TU (in command order)
    that skipped each such file. Only kept files (every file, without a kept list) count: a refused one is
    skipped on purpose. The walker reports in `skipped_files` the files of its skip set it met."""
    walked = set().union(*(r.get("walked_files") or () for r in results)) if results else set()
    first: dict[str, int] = {}
    for i, r in enumerate(results):
        for f in r.get("skipped_files") or ():
            if f not in walked and (kept is None or _relative(root, f) in kept):
                first.setdefault(f, i)
    out: dict[int, set[str]] = {}
    for f, i in first.items():
        out.setdefault(i, set()).add(f)
    return {i: frozenset(files) for i, files in sorted(out.items())}
