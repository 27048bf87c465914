"""semantics: the build-aware semantic index of a source with libclang (docs/DESIGN.md section 6).

Where the compile database comes from (clang_index/configure.py): the source's own `compile_commands.json`,
else a sandboxed, configure-only CMake (or Meson) run into this stage's output (never a build, never into the
source tree). The sources that database leaves out (every source, where there is none) and no other source
includes get inferred commands (clang_index/infer.py: include directories from where the tree's includes
live, -std and defines from the build files); a file no command reaches falls back to the tree-sitter layer,
and the receipt says why. Each TU's row and each document's build_info name the database its command came
from (`database`: source, cmake, meson, make or inferred). A sources file turns configuring and inferring off
for one source with `configure = false` (its own compile_commands.json is still used). A database generated at
HEAD is never reused for another pin (it lives in this stage's output, keyed by the pin). Git sources are
materialized at their pin with `git archive` for parsing.

What is parsed (clang_index/selection.py): the TUs whose main file is a kept document (the input DOCUMENTS:
the license, quality and decontamination verdicts), each main file once, plus the fewest refused TUs that reach
kept headers no kept TU includes; each file is walked by one TU, the same one for any number of workers. A
copyleft repository's TUs are not parsed at all when its files are refused.

A TU whose command, the files it does not walk and every file its parse read are unchanged is reused from
the per-TU cache every build of the output directory shares (clang_index/tu_cache.py, OUT/shared/tus/); the
counts say how many TUs were reused and parsed.

Outputs (Parquet): functions (with their source text), edges (call/ref), type_refs, includes, preamble,
tu_status (with the compile command, its paths written as <source>/... and <configure>/... so the bytes do not
depend on where the tree or its configure run lived), each function's dependency level, and coverage.json, the
receipt the build summary and manifest carry: kept files matched to a compile command, TUs indexed cleanly, TUs
with errors, kept files fallen back to tree-sitter. libclang or its builtin headers missing fails the stage
loudly; it never reports an empty success.

TUs are indexed as datatrove tasks; a killed or interrupted build keeps the tasks that finished, and the next
run indexes only the rest when its compile commands are the same (`_index_as_tasks`).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

import pyarrow as pa
import pyarrow.parquet as pq
from datatrove.pipeline.base import PipelineStep

from cpp_data.pipeline.contract.stage import DOCUMENTS, Stage, StageContext
from cpp_data.pipeline.foundation.fsutil import atomic_write_json, atomic_write_text
from cpp_data.stages.lib.dir_files import walk_directory
from cpp_data.stages.lib.repo_files import DEFAULT_EXTENSIONS, fetch_commit
from cpp_data.stages.lib.shard_tasks import WORK

if TYPE_CHECKING:
    from cpp_data.clang_index.infer import IncludeGraph
    from cpp_data.clang_index.selection import Selection
    from cpp_data.clang_index.tu_cache import Placeless, TUCache

@dataclass(frozen=True)
class SemanticsParams:
    bounds: ClassVar[dict] = {"configure_timeout_s": (1, None), "tus_per_task": (1, None), "timeout_s": (1, None),
                              "max_rss_mb": (256, None)}
    configure: bool = True  # configure CMake/Meson projects that ship no compile database (never build)
    cmake_args: tuple[str, ...] = ()
    configure_timeout_s: float = 300.0  # per configure attempt
    allow_unsandboxed_configure: bool = False  # without bubblewrap, run the project's CMake code anyway
    tus_per_task: int = 4  # TUs per datatrove task, fewer where that gives under MIN_TASKS (each TU its own process)
    timeout_s: float = 120.0  # per TU
    max_rss_mb: int = 4096  # per TU worker (address space)
    infer_commands: bool = True  # inferred commands (clang_index/infer.py) for sources no database compiles
    tu_cache: bool = True  # reuse a TU's result from OUT/shared/tus/ when every file its parse read is unchanged
    # TUs whose main file (relative to the source's root) matches one of these globs are not parsed (fnmatch:
    # `*` crosses directories): "*/test/*", "*_test.cc", "third_party/*"; their files fall back to tree-sitter
    skip_globs: tuple[str, ...] = ()
    only_kept: bool = True  # parse only the TUs reaching kept documents (clang_index/selection.py)
    walk_once: bool = True  # each file walked by one TU; false: every TU walks every project file it reads


def _materialize(src, into: Path) -> tuple[Path, str | None]:
    """The source's files on disk at its pin (a plain directory as it is, a git source via git archive), and
    what could not be written out, if anything. One odd path of an upstream repository (longer than PATH_MAX,
    or a tree entry git archive calls invalid) must not fail the whole build with tar's or git's exit status;
    the semantic layer is an addition, so the files that could be written are indexed, the others go to
    tree-sitter, and the coverage line says why."""
    if src.kind != "git":
        return Path(src.url), None
    repo = fetch_commit(src.url, src.commit, src.requested_ref, into / "repo.git")
    tree = into / "tree"
    tree.mkdir()
    archive = subprocess.run(["git", "archive", src.commit], cwd=repo, capture_output=True)
    if archive.returncode != 0:
        why = (archive.stderr.decode("utf-8", "replace").strip().splitlines() or [f"exit {archive.returncode}"])[-1]
        return tree, f"git archive could not write the tree out ({why[:200]}), so libclang indexed none of it"
    tar = subprocess.run(["tar", "-x", "-C", str(tree)], input=archive.stdout, capture_output=True)
    if tar.returncode != 0:  # GNU tar goes on past a member it cannot write and exits 2 at the end
        errors = [line for line in tar.stderr.decode("utf-8", "replace").splitlines()
                  if line.strip() and "Exiting with failure status" not in line]
        first = errors[0] if errors else f"exit {tar.returncode}"
        return tree, (f"tar could not write {len(errors)} path(s) of the tree out (first: "
                      f"{first[:120]}{'...' if len(first) > 120 else ''}); those go to tree-sitter")
    return tree, None


def _write(rows: list[dict], path: Path) -> None:
    pq.write_table(pa.Table.from_pylist(rows) if rows else pa.table({}), path, compression="zstd")


def source_files(root: Path) -> list[str]:
    """The C/C++ files under `root` (a resolved path), as absolute paths, symlinks left out.

    Listed by collect's walker (pipeline/sources.walk_directory): it never enters a symlinked directory and
    types each entry from the directory listing, without a stat call per file, so a path longer than the
    system's PATH_MAX (a tree nested thousands of characters deep) is not an error here: the directory it
    cannot list is left out, as collect leaves it out with a ledger row of its own. Path.rglob with is_file()
    stat'ed every file and raised ENAMETOOLONG on such a path, and the whole build failed. Each path is already
    its own resolved form, since none passes through a link."""
    return sorted(str(root / rel) for rel, entry in walk_directory(root)
                  if entry is not None and Path(rel).suffix.lower() in DEFAULT_EXTENSIONS
                  and entry.is_file(follow_symlinks=False))


class IndexTUs(PipelineStep):
    """Task r: TUs [r * k, (r + 1) * k) of commands.json (the selected commands, each with the files it does not
    walk; k its `per_task`, task_size), each in its own process (clang_index/pool.py: timeout, memory cap), their
    results into tus/r.json."""

    type = "🔎 - INDEX"
    name = "index"

    def __init__(self, work: Path, root: Path, p: SemanticsParams):
        super().__init__()
        self.work, self.root, self.p = Path(work), str(root), p

    def run(self, data, rank: int = 0, world_size: int = 1):
        from cpp_data.clang_index.compile_db import CompileCommand
        from cpp_data.clang_index.index import index_tus

        listed = json.loads((self.work / "commands.json").read_text())
        k = listed["per_task"]
        commands = [CompileCommand(**c) for c in listed["commands"][rank * k:(rank + 1) * k]]
        skips = [frozenset(s) for s in listed["skips"][rank * k:(rank + 1) * k]]
        results = index_tus(commands, self.root, 1, self.p.timeout_s, self.p.max_rss_mb, skips)
        (self.work / "tus").mkdir(exist_ok=True)
        tmp = self.work / "tus" / f".{rank:05d}.json"
        tmp.write_text(json.dumps(results))
        os.replace(tmp, self.work / "tus" / f"{rank:05d}.json")
        self.stat_update("tus", value=len(results))
        return
        yield


# What a killed run indexed and the next one keeps (resumable_tasks): the compile commands it indexed, each
# finished task's TU results and datatrove's completion markers. The tree and the configure run are made again.
_INDEX_RECORDS = frozenset({"commands.json", "tus", "_datatrove"})


def _clear_work(work: Path) -> None:
    """Empty the stage's scratch directory, except the index records of a run that was killed."""
    work.mkdir(exist_ok=True)
    for entry in work.iterdir():
        if entry.name in _INDEX_RECORDS:
            continue
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry, ignore_errors=True)
        else:
            entry.unlink(missing_ok=True)


# Where a diagnostic may point and still be published with its text: the tree and its configure run (written
# <source>/... and <configure>/... by then) and the system's headers, clang's resource directory among them
# (/usr/lib/llvm-*/lib/clang/*, compile_db.find_resource_dir). A compile database can name any file
# (`-include /etc/passwd`), and clang quotes the tokens it trips on.
SYSTEM_HEADER_DIRS = ("/usr/include/", "/usr/lib/", "/usr/local/include/")


def _withheld_outside(message: str) -> str:
    """A TU's error message as published: one located in a file outside the tree, its configure run and
    SYSTEM_HEADER_DIRS says only that it was withheld, since its text may quote that file."""
    if message.startswith("/") and not message.startswith(SYSTEM_HEADER_DIRS):
        return "<outside the tree>: a diagnostic in a file outside the source tree and the system headers (withheld)"
    return message


def _forget_unrecorded_tasks(work: Path) -> None:
    """Remove the completion marker of each task whose TU results cannot be read (a kill while the scratch was
    being removed, or a machine that went down before the file reached its disk), so that task runs again."""
    done = work / "_datatrove" / "completions"
    for marker in sorted(done.iterdir()) if done.is_dir() else ():
        try:
            json.loads((work / "tus" / f"{marker.name}.json").read_text())
        except (OSError, ValueError):
            marker.unlink(missing_ok=True)


# At least this many tasks where there are TUs enough: a rebuild that parses a few dozen changed TUs (often the
# heaviest, those reading a changed core header) would otherwise leave workers idle behind the last big task
MIN_TASKS = 64


def task_size(tus: int, tus_per_task: int) -> int:
    """TUs per task: `tus_per_task`, fewer where that would give under MIN_TASKS tasks (at least 1)."""
    return max(1, min(tus_per_task, -(-tus // MIN_TASKS)))


def _index_as_tasks(ctx: StageContext, commands: list, skips: list[frozenset[str]], root: Path,
                    p: SemanticsParams, work: Path) -> list[dict]:
    """Every TU's result, in command order, from datatrove tasks of task_size TUs each on the build's
    executor (TUs per second scale with its workers); `skips`: per TU, the files it does not walk. The tasks a
    killed run finished are kept when this run indexes the same commands (the same tree at the same place,
    configured again); with other commands, none of them is. `work`: where the tasks keep their records."""
    per_task = task_size(len(commands), p.tus_per_task)
    listed = json.dumps({"commands": [vars(c) for c in commands], "skips": [sorted(s) for s in skips],
                         "per_task": per_task})
    recorded = work / "commands.json"
    if not (recorded.is_file() and recorded.read_text() == listed):
        shutil.rmtree(work / "tus", ignore_errors=True)
        shutil.rmtree(work / "_datatrove", ignore_errors=True)
    _forget_unrecorded_tasks(work)
    atomic_write_text(recorded, listed, durable=False)
    tasks = -(-len(commands) // per_task)
    if tasks:
        ctx.executor.run([IndexTUs(work, root, p)], tasks, work / "_datatrove", f"{ctx.label}: index")
    return [r for k in range(tasks) for r in json.loads((work / "tus" / f"{k:05d}.json").read_text())]


def _index_cached(ctx: StageContext, commands: list, skips: list[frozenset[str]], root: Path, p: SemanticsParams,
                  cache: TUCache | None, work: Path) -> tuple[list[dict], int]:
    """Every TU's result in command order, and how many came from the per-TU cache (`cache`, a TUCache, or
    None): the TUs it holds for the files as they are now are reused, the others parsed (`_index_as_tasks`)
    and recorded."""
    reused = {}
    if cache is not None:
        for i, (c, skip) in enumerate(zip(commands, skips)):
            hit = cache.lookup(c, skip)
            if hit is not None:
                reused[i] = {**hit, "file": c.file, "seconds": 0.0}
    misses = [i for i in range(len(commands)) if i not in reused]
    if cache is not None:  # the longest first (longest processing time first): the last tasks are then short
        misses.sort(key=lambda i: (-cache.seconds_before(commands[i], skips[i]), i))
    parsed = dict(zip(misses, _index_as_tasks(ctx, [commands[i] for i in misses], [skips[i] for i in misses],
                                              root, p, work)))
    results = [reused[i] if i in reused else parsed[i] for i in range(len(commands))]
    if cache is not None:
        for i in misses:
            cache.store(commands[i], results[i], skips[i])
    return results, len(reused)


def _walk_lost_headers(ctx: StageContext, results: list[dict], sel: Selection, root: Path, kept: set[str] | None,
                       p: SemanticsParams, cache: TUCache | None) -> int:
    """Walk again, in the first TU that skipped it, each kept file its owner never walked (an include the
    textual graph saw and the parse did not take: clang_index/selection.lost_headers); the TU's result is
    replaced. They run as tasks of their own on the build's executor, through the cache. Returns how many TUs
    ran again."""
    from cpp_data.clang_index.selection import lost_headers

    lost = lost_headers(results, root, kept)
    again, _ = _index_cached(ctx, [sel.commands[i] for i in lost], [sel.skips[i] - files for i, files in lost.items()],
                             root, p, cache, ctx.out / WORK / "again")
    for i, result in zip(lost, again):
        results[i] = result
    return len(lost)


def _kept_paths(ctx: StageContext) -> set[str] | None:
    """The paths of this source's kept documents (the input DOCUMENTS), or None where the stage runs without
    one (on its own: every TU is parsed)."""
    from cpp_data.stages.lib.inputs import document_parts

    if ctx.documents is None:
        return None
    return {path for part in document_parts(ctx, ctx.pin.name)
            for path in pq.read_table(part, columns=["source_path"]).column("source_path").to_pylist()}


def _commands(found, root: Path, files: list[str], tmp: Path, infer: bool,
              graph: IncludeGraph) -> tuple[list, dict, list]:
    """The compile commands to index (the database's, then inferred ones, `clang_index/infer.py`), the
    database each one came from (file -> `source`, `cmake`, `meson` or `inferred`), and the inferred commands
    with their receipts. `graph`: the tree's include graph (the selection reads the same one)."""
    from cpp_data.clang_index.compile_db import load_compile_commands, relocate_commands
    from cpp_data.clang_index.infer import infer_commands

    commands = load_compile_commands(found.path) if found.path else []
    if found.database == "source":  # written where it was generated; read as the tree at its pin
        commands, moved_from, left_out = relocate_commands(commands, root)
        if moved_from:
            found.reason += f" (its paths under {moved_from} read as this tree's)"
        if left_out:
            found.reason += f"; {left_out} command(s) for files outside the tree left out"
    kinds = {c.file: found.database for c in commands}
    inferred = infer_commands(root, files, set(kinds), (tmp / "configure",), commands, graph) if infer else []
    for x in inferred:
        kinds[x.command.file] = "inferred"
    if inferred:
        what = "the sources it leaves out" if commands else "every source no other source includes"
        found.reason += f"; {len(inferred)} inferred command(s) for {what}"
        if not commands:
            found.database = "inferred"
    elif not commands:
        found.reason += "; files fall back to tree-sitter"
    return commands + [x.command for x in inferred], kinds, inferred


def _skip(commands: list, inferred: list, root: Path, globs: tuple[str, ...]) -> tuple[list, list, int]:
    """The commands and inferred receipts whose main file no glob of `skip_globs` matches, and how many were
    left out."""
    import fnmatch

    kept = [c for c in commands if not any(fnmatch.fnmatchcase(os.path.relpath(c.file, root), g) for g in globs)]
    files = {c.file for c in kept}
    return kept, [x for x in inferred if x.command.file in files], len(commands) - len(kept)


def _publish_tus(res, commands: list, kinds: dict, root: Path, placeless: Placeless) -> float:
    """Rows as published: each function's level and text, each TU's command (placeless), database and withheld
    messages, paths relative to the root. Returns the TUs' summed seconds, which leave the rows: timings are
    counts, never output bytes (an output that differs on every run would rerun every later stage)."""
    from cpp_data.clang_index.levels import dependency_levels

    levels = dependency_levels(res.edges)
    texts: dict[str, bytes] = {}
    for f in res.functions:
        f["level"] = levels.get(f["usr"], 0)
        if f["file"] not in texts:
            texts[f["file"]] = Path(f["file"]).read_bytes()
        f["text"] = texts[f["file"]][f["start_offset"]:f["end_offset"]].decode("utf-8", "replace")
    by_file = {c.file: c for c in commands}
    tu_seconds = 0.0
    for s in res.tu_status:  # the compile command each TU was indexed with (build_info of v5 documents)
        c = by_file.get(s["file"])
        s["directory"], s["arguments"] = ((placeless.out(c.directory), placeless.out(" ".join(c.arguments)))
                                          if c else ("", ""))
        s["database"] = kinds.get(s["file"], "")
        s["error_messages"] = [_withheld_outside(placeless.out(m)) for m in s.get("error_messages") or []]
        tu_seconds += s.pop("seconds", 0.0)
        for k in ("parse_s", "walk_s"):
            s.pop(k, None)
    rel = len(str(root)) + 1
    for table in (res.functions, res.preamble, res.tu_status):
        for row in table:
            for k in ("file", "tu"):
                if k in row and row[k].startswith(str(root)):
                    row[k] = row[k][rel:]
    for row in res.includes:  # a header the configure run generated reads <configure>/..., as in tu_status
        for k in ("includer", "included"):
            row[k] = row[k][rel:] if row[k].startswith(str(root)) else placeless.out(row[k])
    return tu_seconds


_NOT_FOUND = re.compile(r"'([^']+)' file not found")


def _inferred_receipts(inferred: list, tu_status: list[dict], root: Path) -> list[dict]:
    """Per inferred command: its file, include directories and the headers its parse did not find."""
    messages = {s["file"]: s.get("error_messages") or [] for s in tu_status}
    out = []
    for x in inferred:
        r = x.receipt(root)
        found = [m.group(1) for msg in messages.get(r["file"], []) for m in [_NOT_FOUND.search(msg)] if m]
        out.append({**r, "unresolved": sorted(set(found))})
    return out


def _kept_files(files: list[str], root: Path, kept: set[str] | None) -> list[str]:
    """The files of the tree the coverage receipt counts: the kept ones (every one, without a kept list)."""
    return files if kept is None else [f for f in files if os.path.relpath(f, root) in kept]


def _coverage(found, res, files: list[str], root: Path, inferred: list) -> dict:
    """The coverage receipt (coverage.json, the build summary's line per source)."""
    from cpp_data.clang_index.infer import SOURCE_SUFFIXES

    sources = [f for f in files if Path(f).suffix.lower() in SOURCE_SUFFIXES]
    compiled = {str((root / s["file"]).resolve()) if not s["file"].startswith("/") else s["file"]
                for s in res.tu_status}
    walked = {str(root / f["file"]) for f in res.functions}
    status = [s["status"] for s in res.tu_status]
    by_database: dict[str, dict[str, int]] = {}
    for s in res.tu_status:
        counts = by_database.setdefault(s["database"] or "none", {"tus": 0, "clean": 0, "errors": 0, "failed": 0})
        counts["tus"] += 1
        counts[{"ok": "clean", "errors": "errors"}.get(s["status"], "failed")] += 1
    return {
        **found.receipt(),
        "source_files": len(sources),
        "files_matched_to_compile_command": sum(1 for f in sources if f in compiled),
        "tus": len(status),
        "tus_clean": status.count("ok"),
        "tus_with_errors": status.count("errors"),
        "tus_failed": len(status) - status.count("ok") - status.count("errors"),
        "tus_timeouts": status.count("timeout"),
        "tus_by_database": dict(sorted(by_database.items())),
        "files_indexed": len({f for f in files if f in walked or f in compiled}),
        "files_fallen_back_to_tree_sitter": len([f for f in files if f not in walked and f not in compiled]),
        "functions": len(res.functions), "edges": len(res.edges),
        "inferred_commands": _inferred_receipts(inferred, res.tu_status, root),
    }


class Semantics(Stage):
    name = "semantics"
    libraries = ('pyarrow', 'libclang')
    version = 5
    scope = "source"
    inputs = (DOCUMENTS,)  # parse only the TUs that reach kept documents (clang_index/selection.py)
    Params = SemanticsParams
    resumable_tasks = True  # a killed run's finished TU tasks are kept (_INDEX_RECORDS)

    summary_counts = {"semantic_coverage": "per_source:*"}

    def run(self, ctx: StageContext) -> dict:
        from cpp_data.clang_index.compile_db import find_resource_dir
        from cpp_data.clang_index.index import merge_tus
        from cpp_data.clang_index.infer import IncludeGraph
        from cpp_data.clang_index.selection import select_tus
        from cpp_data.clang_index.tu_cache import USED_FILE, Placeless, TUCache, tree_names

        p: SemanticsParams = self.params
        stage_started = time.monotonic()
        tmp = ctx.out / WORK  # on the output's filesystem, which executors on other nodes share
        root, found = self._database(ctx, tmp)
        files = source_files(root)
        graph = IncludeGraph(root, sorted(os.path.relpath(f, root) for f in files))  # read once, used twice
        commands, kinds, inferred = _commands(found, root, files, tmp,
                                              p.infer_commands and ctx.pin.configure, graph)
        commands, inferred, skipped = _skip(commands, inferred, root, p.skip_globs)
        kept = _kept_paths(ctx) if p.only_kept else None
        sel = select_tus(commands, root, files, kept, graph)
        if not p.walk_once:
            sel.skips = [frozenset() for _ in sel.commands]
        selected = {c.file for c in sel.commands}
        inferred = [x for x in inferred if x.command.file in selected]
        # where the tree and the configure run lived (temporary directories) is no part of the output: the same
        # tree at another path, or configured again, must give the same bytes
        placeless = Placeless([(str(tmp / "configure"), "<configure>"), (str(root), "<source>")])
        cache = (TUCache(ctx.shared / "tus", placeless, tree_names(root), str(find_resource_dir()))
                 if p.tu_cache and ctx.shared is not None else None)
        started = time.monotonic()
        results, reused = _index_cached(ctx, sel.commands, sel.skips, root, p, cache, ctx.out / WORK)
        walked_again = _walk_lost_headers(ctx, results, sel, root, kept, p, cache)
        res = merge_tus(results)
        index_seconds = time.monotonic() - started
        tu_seconds = _publish_tus(res, sel.commands, kinds, root, placeless)
        for name in ("functions", "edges", "type_refs", "includes", "preamble", "tu_status"):
            _write(getattr(res, name), ctx.out / f"{name}.parquet")
        coverage = _coverage(found, res, _kept_files(files, root, kept), root, inferred)
        receipt = {**coverage, "configure_attempts": [
            {**{k: v for k, v in a.items() if k != "seconds"}, "tail": [placeless.out(t) for t in a.get("tail", [])]}
            for a in coverage["configure_attempts"]]}
        atomic_write_json(ctx.out / "coverage.json", receipt)
        if cache is not None:  # what gc keeps of OUT/shared/tus/ while a build needs this artifact
            atomic_write_json(ctx.out / USED_FILE, sorted(cache.used))
        coverage |= {"configure_attempts": receipt["configure_attempts"],
                     "configure_seconds": round(sum(a.get("seconds", 0)
                                                    for a in found.receipt()["configure_attempts"]), 2),
                     "tu_seconds": round(tu_seconds, 2), "index_seconds": round(index_seconds, 2),
                     "tus_parsed": len(res.tu_status) - reused, "tus_reused": reused, "tus_skipped": skipped,
                     "tus_not_kept": sel.not_kept, "tus_for_kept_headers": sel.for_headers,
                     "duplicate_commands": sel.duplicates, "tus_walked_again": walked_again,
                     "semantics_seconds": round(time.monotonic() - stage_started, 2)}
        # the scratch goes once the stage is done (the completion markers first: a kill in between must not leave
        # a marker without its results); a killed or failed run leaves it for the next to resume
        shutil.rmtree(tmp / "_datatrove", ignore_errors=True)
        shutil.rmtree(tmp, ignore_errors=True)
        return coverage

    def _database(self, ctx: StageContext, tmp: Path):
        """The tree at its pin (resolved) and where its compile database comes from (configure.discover); libclang
        or its builtin headers missing fail loudly here, before any work."""
        from cpp_data.clang_index.compile_db import check_libclang, find_resource_dir
        from cpp_data.clang_index.configure import discover

        p: SemanticsParams = self.params
        check_libclang()
        find_resource_dir()
        _clear_work(tmp)
        root, unwritten = _materialize(ctx.source, Path(tmp))
        root = root.resolve()
        found = discover(root, Path(tmp) / "configure", configure=p.configure and ctx.pin.configure,
                         cmake_args=list(p.cmake_args), timeout_s=p.configure_timeout_s,
                         allow_unsandboxed=p.allow_unsandboxed_configure)
        if unwritten:
            found.reason += f"; {unwritten}"
        return root, found
