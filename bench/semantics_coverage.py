"""How many of a repository's C/C++ source files get a compile command, from which database, and how many of
its TUs parse clean: the coverage the semantics stage gives each repository.

    PYTHONPATH=... .venv/bin/python bench/semantics_coverage.py TREE [TREE ...] [--sample 8] [--workers 2] \
        [--label after] [--out bench/results]

Each TREE is a repository's files (a `git archive` of its pin). Per tree: where the database came from
(configure.discover: the repository's own, CMake, Meson, make), the sources it compiles, and the share matched
once inferred commands (clang_index/infer.py) cover the rest: a source counts as matched when a command
compiles it or it is parsed through another source that includes it (a unity build's parts). `--sample N`
parses N TUs of each database kind (picked by a hash of the path) through the project's pool for the clean
share. Run with an older checkout's Python (no clang_index/infer.py) for the before column: it then reports
the build database alone. Writes OUT/semantics_coverage-LABEL.json.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import tempfile
from pathlib import Path

from cpp_data.clang_index.compile_db import load_compile_commands
from cpp_data.clang_index.configure import discover
from cpp_data.clang_index.index import index_tus
from cpp_data.stages.semantics import _SOURCES, source_files


def commands_of(tree: Path, work: Path) -> tuple[dict, list, dict]:
    """(discovery receipt, commands, file -> database kind) as the semantics stage makes them."""
    found = discover(tree, work / "configure", timeout_s=120)
    commands = load_compile_commands(found.path) if found.path else []
    kinds = {c.file: found.database for c in commands}
    files = source_files(tree)
    try:
        from cpp_data.clang_index.infer import IncludeGraph, infer_commands
    except ImportError:  # an older checkout: the build database alone
        return found.receipt(), commands, kinds
    inferred = infer_commands(tree, files, set(kinds), (work / "configure",), list(commands))
    kinds.update({x.command.file: "inferred" for x in inferred})
    commands += [x.command for x in inferred]
    graph = IncludeGraph(tree, [str(Path(f).relative_to(tree)) for f in files])
    for c in list(commands):
        rel = str(Path(c.file).relative_to(tree)) if c.file.startswith(str(tree)) else None
        for reached in (graph.closure(rel)[0] if rel in graph.files else []):
            kinds.setdefault(str(tree / reached), "through " + kinds[c.file])
    return found.receipt(), commands, kinds


def sample(commands: list, kinds: dict, n: int) -> list:
    by_kind: dict[str, list] = {}
    for c in sorted(commands, key=lambda c: hashlib.sha256(c.file.encode()).hexdigest()):
        by_kind.setdefault(kinds[c.file], []).append(c)
    return [c for picked in by_kind.values() for c in picked[:n]]


def measure(tree: Path, n: int, workers: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="coverage-") as work:
        receipt, commands, kinds = commands_of(tree, Path(work))
        sources = [f for f in source_files(tree) if Path(f).suffix.lower() in _SOURCES]
        row = {"repo": tree.name, "database": receipt["database"], "sources": len(sources),
               "matched": sum(1 for f in sources if f in kinds),
               "matched_by": {k: sum(1 for f in sources if kinds.get(f) == k) for k in sorted(set(kinds.values()))},
               "attempts": [" ".join([a["tool"], *a["options"]]) + (" ok" if a["ok"] else " failed")
                            for a in receipt["configure_attempts"]]}
        picked = sample(commands, kinds, n) if n else []
        results = index_tus(picked, tree, workers, 120) if picked else []
        clean: dict[str, list[int]] = {}
        for c, r in zip(picked, results):
            clean.setdefault(kinds[c.file], [0, 0])[1] += 1
            clean[kinds[c.file]][0] += r.get("status") == "ok"
        row["clean_of_sampled"] = {k: f"{a}/{b}" for k, (a, b) in sorted(clean.items())}
    return row


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trees", nargs="+")
    ap.add_argument("--sample", type=int, default=0, help="TUs parsed per repository and database kind")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--label", default="after")
    ap.add_argument("--out", default="bench/results")
    a = ap.parse_args(argv)
    rows = []
    for t in a.trees:
        rows.append(measure(Path(t).resolve(), a.sample, a.workers))
        print(json.dumps(rows[-1]), flush=True)
    total, matched = sum(r["sources"] for r in rows), sum(r["matched"] for r in rows)
    summary = {"label": a.label, "repositories": len(rows), "sources": total, "matched": matched,
               "matched_share": round(matched / max(1, total), 4), "rows": rows}
    Path(a.out).mkdir(parents=True, exist_ok=True)
    (Path(a.out) / f"semantics_coverage-{a.label}.json").write_text(json.dumps(summary, indent=1) + "\n")
    print(f"{a.label}: {matched}/{total} sources matched ({summary['matched_share']:.1%}) over {len(rows)} "
          f"repositories")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
