"""The `cpp-data` command line."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from cpp_data import __version__

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_NOTHING_TO_DO, EXIT_LOCKED = 0, 1, 2, 3, 75

MAIN_HELP = """\
cpp-data turns pinned C++ repositories into traceable, reproducible training shards.

typical use:
  cpp-data sources lock sources.toml            # resolve every ref to a commit -> sources.lock
  cpp-data build --version v6 --sources sources.toml --out out/
  cpp-data validate out/builds/<build>          # prove a build matches its manifest
  cpp-data status --out out/                    # what out/ holds -> out/status/current.{json,md}
  cpp-data diff out/builds/A out/builds/B       # what changed between two builds

exit codes: 0 success (build: a new build was published), 1 a stage or check failed,
2 bad input (the message names the file), 3 build: nothing to do (a build of these pins and this recipe
already exists), 75 another build holds the output directory (retry later or pass --wait).
"""

BUILD_HELP = """\
Run the recipe of a schema generation over the sources and publish a sealed build under OUT/builds/.

Stages run in recipe order; each output is cached under OUT/cache/<stage>/<fingerprint>/ and sealed with
_COMPLETE, so a rerun skips finished work and a killed build resumes where it stopped, ending with the
same bytes. Per-source stages rerun only for sources whose pinned commit changed.

examples:
  cpp-data build --version v6 --sources sources/debian.toml --out out/
  cpp-data build --version v6 --sources s.toml --out out/ --from shards       # rerun shards and after
  cpp-data build --version v6 --sources s.toml --out out/ --only license      # rerun one stage
  cpp-data build --version v6 --sources s.toml --out out/ --executor ray --ray-address 10.0.0.5:6379
"""


def _parser() -> argparse.ArgumentParser:
    fmt = argparse.RawDescriptionHelpFormatter
    p = argparse.ArgumentParser(prog="cpp-data", description=MAIN_HELP, formatter_class=fmt)
    p.add_argument("--version", action="version", version=f"cpp-data {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")

    b = sub.add_parser("build", help="run a recipe and publish a sealed build", description=BUILD_HELP,
                       formatter_class=fmt)
    b.add_argument("--version", dest="recipe_version", default="v6",
                   help="schema generation whose recipe to run: v2..v6 (default v6)")
    b.add_argument("--recipe", type=Path, help="a recipe file to use instead of the bundled one")
    b.add_argument("--sources", type=Path, required=True,
                   help="sources TOML; pins come from SOURCES.lock beside it when present, else are resolved now")
    b.add_argument("--lock", type=Path, help="use this lock file for the pins (default: SOURCES.lock if present)")
    b.add_argument("--out", type=Path, required=True, help="output directory (cache, builds, status)")
    b.add_argument("--executor", choices=("local", "ray", "slurm"), default="local",
                   help="where per-document work runs (datatrove executors; default local)")
    b.add_argument("--workers", type=int, default=os.cpu_count() or 1, help="parallel tasks (default: CPU count)")
    b.add_argument("--ray-address", help="Ray cluster to join (default: start a local Ray for this build)")
    b.add_argument("--slurm-partition", default="cpu", help="Slurm partition (--executor slurm)")
    b.add_argument("--slurm-time", default="04:00:00", help="Slurm time limit per task (--executor slurm)")
    g = b.add_mutually_exclusive_group()
    g.add_argument("--only", metavar="STAGE", help="rerun just this stage (its inputs must be built)")
    g.add_argument("--from", dest="from_stage", metavar="STAGE", help="rerun this stage and every stage after it")
    b.add_argument("--force", action="store_true", help="rerun every stage even if its output is sealed")
    b.add_argument("--seed", type=int, help="shuffle seed (overrides the recipe's shards.seed)")
    b.add_argument("--wait", action="store_true", help="if another build holds OUT, wait for it instead of exiting")
    b.add_argument("--no-progress", action="store_true", help="no progress bars (logs only)")

    v = sub.add_parser("validate", help="check a build against its manifest and schemas",
                       description="Check _COMPLETE, every checksum in the manifest and every shard against its "
                                   "generation's schema. Exits 1 naming file, row group and column on the first "
                                   "problem.")
    v.add_argument("build", type=Path, help="a build directory (OUT/builds/<name>)")

    s = sub.add_parser("status", help="summarize an output directory into OUT/status/",
                       description="Write OUT/status/current.json and current.md (sources, pins, builds, stage "
                                   "cache) atomically, append to changelog.jsonl when something changed, and "
                                   "print the Markdown.")
    s.add_argument("--out", type=Path, required=True)
    s.add_argument("--json", action="store_true", help="print JSON instead of Markdown")

    d = sub.add_parser("diff", help="what changed between two builds",
                       description="Compare two sealed builds by (repo, path): documents added, removed and changed "
                                   "(with the commit each side saw), files newly refused by rule, documents and bytes "
                                   "per license and repo, and schema differences.",
                       epilog="example: cpp-data diff out/builds/v6-20261101-1a2b3c4d out/builds/v6-20261130-5e6f7a8b "
                              "--tables diff/ && duckdb -c \"select change, count(*) from 'diff/documents.parquet' "
                              "group by 1\"")
    d.add_argument("a", type=Path, help="the older build directory")
    d.add_argument("b", type=Path, help="the newer build directory")
    d.add_argument("--json", action="store_true", help="print JSON instead of text")
    d.add_argument("--tables", type=Path, help="also write documents/refusals/licenses Parquet tables here")

    rp = sub.add_parser("report", help="write a self-contained HTML report of a build",
                        description="Write BUILD/reports/report.html: sources and pins, license distribution by "
                                    "repo, refusal reasons, duplicate cluster sizes, document lengths and stage "
                                    "times, as inline SVG plots (no scripts, no network).")
    rp.add_argument("build", type=Path, help="a build directory (OUT/builds/<name>)")

    src = sub.add_parser("sources", help="work with sources files")
    src_sub = src.add_subparsers(dest="sources_command", metavar="SUBCOMMAND")
    lk = src_sub.add_parser("lock", help="resolve every ref to a commit and write a lock file",
                            description="Resolve each source's ref (tag, branch or commit) to a commit SHA, or pin "
                                        "a plain directory by its tree digest, and write SOURCES.lock (or -o).")
    lk.add_argument("sources", type=Path)
    lk.add_argument("-o", "--output", type=Path, help="lock file to write (default: SOURCES with .lock suffix)")
    return p


def _err(msg: str) -> None:
    print(f"cpp-data: error: {msg}", file=sys.stderr)


def cmd_sources_lock(args) -> int:
    from cpp_data.pipeline.sources import SourcesError, load_sources, lock_path_for, lock_sources, write_lock

    try:
        locked = lock_sources(load_sources(args.sources), origin=args.sources)
    except SourcesError as exc:
        _err(str(exc))
        return EXIT_USAGE
    dest = args.output or lock_path_for(args.sources)
    write_lock(dest, locked)
    for s in locked:
        print(f"{s.name:<24} {s.requested_ref or '(directory)':<16} {s.commit}")
    print(f"wrote {dest}")
    return EXIT_OK


def _pins(args):
    from cpp_data.pipeline.sources import load_sources, lock_path_for, lock_sources, read_lock

    specs = load_sources(args.sources)
    lock_file = args.lock or lock_path_for(args.sources)
    existing = read_lock(lock_file) if lock_file.is_file() else None
    return lock_sources(specs, existing, update=existing is None, origin=args.sources)


def _executor_problem(kind: str) -> str | None:
    import importlib.util
    import shutil

    if kind == "ray" and importlib.util.find_spec("ray") is None:
        return "--executor ray needs Ray: pip install 'cpp-data[ray]'"
    if kind == "slurm" and shutil.which("sbatch") is None:
        return "--executor slurm needs Slurm's sbatch on PATH (run cpp-data on a Slurm login node)"
    return None


def cmd_build(args) -> int:
    from cpp_data.pipeline.build import format_summary, run_build
    from cpp_data.pipeline.executors import ExecutorConfig, bind_children_to_this_process, quiet_datatrove
    from cpp_data.pipeline.outlock import BuildLocked
    from cpp_data.pipeline.recipe import RecipeError, load_recipe
    from cpp_data.pipeline.runner import StageFailed
    from cpp_data.pipeline.sources import SourcesError

    quiet_datatrove()
    bind_children_to_this_process()
    overrides = {"shards": {"seed": args.seed}} if args.seed is not None else None
    try:
        recipe = load_recipe(args.recipe_version if args.recipe is None else None, args.recipe, overrides)
        sources = _pins(args)
    except (RecipeError, SourcesError) as exc:
        _err(str(exc))
        return EXIT_USAGE
    if args.workers < 1:
        _err("--workers must be at least 1")
        return EXIT_USAGE
    problem = _executor_problem(args.executor)
    if problem:
        _err(problem)
        return EXIT_USAGE
    executor = ExecutorConfig(kind=args.executor, workers=args.workers, ray_address=args.ray_address,
                              slurm={"partition": args.slurm_partition, "time": args.slurm_time},
                              progress=not args.no_progress and sys.stderr.isatty())
    print(f"cpp-data {__version__}: recipe {recipe.version} (schema {recipe.schema_generation}), "
          f"{len(sources)} source(s), executor {args.executor} x{args.workers}")
    for s in sources:
        print(f"  {s.name:<24} {s.commit[:17]}  {s.url}")
    try:
        result = run_build(args.out, recipe, sources, executor, only=args.only, from_stage=args.from_stage,
                           force=args.force, wait=args.wait)
    except BuildLocked as exc:
        _err(str(exc))
        return EXIT_LOCKED
    except ValueError as exc:
        _err(str(exc))
        return EXIT_USAGE
    except StageFailed as exc:
        _err(f"stage {str(exc).splitlines()[0]}")
        return EXIT_FAILED
    except OSError as exc:
        _err(f"{exc.filename or args.out}: {exc.strerror or exc}")
        return EXIT_USAGE
    if result.build_dir is None:
        print("stages done; not every stage is sealed yet, so no build was published")
        return EXIT_OK
    print(format_summary(result.summary, result.build_dir, result.new_build))
    if result.summary.get("documents", 0) == 0:
        print("warning: the build has no documents; see provenance/ledger.parquet for why", file=sys.stderr)
    return EXIT_OK if result.new_build else EXIT_NOTHING_TO_DO


def cmd_validate(args) -> int:
    from cpp_data.schemas.reader import ShardError
    from cpp_data.schemas.validate import validate_build

    try:
        res = validate_build(args.build)
    except ShardError as exc:
        _err(f"validate: {exc}")
        return EXIT_FAILED
    print(f"ok: {args.build}: {res['shards']} shards, {res['rows']:,} documents, {res['files']} files checked "
          f"(schema {res['generation']})")
    return EXIT_OK


def cmd_status(args) -> int:
    from cpp_data.pipeline.status import render_md, write_status

    if not args.out.is_dir():
        _err(f"{args.out}: no such output directory")
        return EXIT_USAGE
    status = write_status(args.out)
    print(json.dumps(status, indent=2) if args.json else render_md(status))
    return EXIT_OK


def cmd_report(args) -> int:
    from cpp_data.pipeline.report import build_report
    from cpp_data.schemas.reader import ShardError

    try:
        out = build_report(args.build)
    except (ShardError, ValueError) as exc:
        _err(f"report: {exc}")
        return EXIT_USAGE
    print(f"wrote {out}")
    return EXIT_OK


def cmd_diff(args) -> int:
    from cpp_data.pipeline.diff import diff_builds, render, write_tables
    from cpp_data.schemas.reader import ShardError

    try:
        result = diff_builds(args.a, args.b)
    except (ShardError, ValueError) as exc:
        _err(f"diff: {exc}")
        return EXIT_USAGE
    if args.tables:
        for path in write_tables(result, args.tables):
            print(f"wrote {path}", file=sys.stderr)
    result.pop("_rows")
    print(json.dumps(result, indent=2) if args.json else render(result))
    return EXIT_OK


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.command == "build":
        return cmd_build(args)
    if args.command == "validate":
        return cmd_validate(args)
    if args.command == "status":
        return cmd_status(args)
    if args.command == "diff":
        return cmd_diff(args)
    if args.command == "report":
        return cmd_report(args)
    if args.command == "sources" and args.sources_command == "lock":
        return cmd_sources_lock(args)
    parser.print_help()
    return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())
