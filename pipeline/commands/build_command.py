"""cpp-data build: run a recipe and publish a sealed build."""

from __future__ import annotations

import errno
import os
import re
import sys

from cpp_data.pipeline.commands.common import (
    fsspec_safe,
    int_at_least,
    number,
    pins,
    recipe_arguments,
    recipe_of,
    slurm_time,
)
from cpp_data.pipeline.foundation.errors import EXIT_NOTHING_TO_DO, EXIT_OK, BadInput
from cpp_data.pipeline.foundation.version import __version__


def add_parser(sub, leaf, group) -> None:
    b = leaf(sub, "build", cmd_build, help="run a recipe and publish a sealed build", description=BUILD_HELP)
    recipe_arguments(b)
    b.add_argument("--executor", choices=("local", "ray", "slurm"), default="local",
                   help="where per-document work runs (datatrove executors)")
    b.add_argument("--workers", type=int_at_least(1), default=os.cpu_count() or 1,
                   help="parallel tasks (the CPU count)")
    b.add_argument("--ray-address", help="Ray cluster to join (default: start a local Ray for this build)")
    b.add_argument("--ray-cpus-per-task", type=int_at_least(1), default=1,
                   help="CPUs Ray reserves per task (--executor ray)")
    b.add_argument("--ray-mem-per-cpu", type=number(0, above=True), default=0.5, metavar="GB",
                   help="memory Ray reserves per CPU of a task, GB (--executor ray)")
    b.add_argument("--ray-resource", action="append", default=[], metavar="NAME=AMOUNT",
                   help="a custom Ray resource every task needs, e.g. --ray-resource cpp_data_node=1 (repeatable)")
    b.add_argument("--slurm-partition", default="cpu", help="Slurm partition (--executor slurm)")
    b.add_argument("--slurm-time", type=slurm_time, default="04:00:00",
                   help="Slurm time limit per task (--executor slurm): MM, MM:SS, HH:MM:SS, D-HH[:MM[:SS]]")
    b.add_argument("--slurm-account", help="Slurm account to charge (sbatch --account)")
    b.add_argument("--slurm-qos", default="normal", help="Slurm quality of service (sbatch --qos)")
    b.add_argument("--slurm-cpus-per-task", type=int_at_least(1), default=1, help="CPUs per Slurm task")
    b.add_argument("--slurm-mem-per-cpu", type=int_at_least(1), default=2, metavar="GB",
                   help="memory per CPU of a Slurm task, GB")
    b.add_argument("--slurm-arg", action="append", default=[], metavar="KEY=VALUE",
                   help="an extra sbatch option, e.g. --slurm-arg constraint=skylake (repeatable)")
    g = b.add_mutually_exclusive_group()
    g.add_argument("--only", metavar="STAGE", help="rerun just this stage (its inputs must be built)")
    g.add_argument("--from", dest="from_stage", metavar="STAGE", help="rerun this stage and every stage after it")
    b.add_argument("--force", action="store_true", help="rerun every stage even if its output is sealed "
                   "(beside --only or --from, just the stages they name, which they rerun anyway)")
    b.add_argument("--wait", action="store_true", help="if another build holds OUT, wait for it instead of exiting 75")
    b.add_argument("--no-progress", action="store_true", help="no live display (plain lines only)")
    b.add_argument("--log-format", choices=("text", "json"), default="text",
                   help="text: a live display in a terminal, plain lines otherwise; json: one JSON object per "
                        "event on stdout, the summary last (for schedulers). Both go to OUT/logs/ too.")
    b.add_argument("--dry-run", action="store_true", help="say what would run and why, run nothing (cpp-data plan)")


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


def cmd_build(args) -> int:
    from cpp_data.pipeline.contract.executor import ExecutorConfig
    from cpp_data.pipeline.runner.build import format_summary, run_build
    from cpp_data.pipeline.runner.executors.task_logging import quiet_datatrove
    from cpp_data.pipeline.runner.executors.task_setup import bind_children_to_this_process

    if args.dry_run:
        from cpp_data.pipeline.commands.plan_command import cmd_plan

        return cmd_plan(args)
    quiet_datatrove()
    bind_children_to_this_process()
    recipe = recipe_of(args)
    unread: list[str] = []
    sources = pins(args, unread)
    if args.out.exists() and not args.out.is_dir():
        raise BadInput(f"{args.out}: --out is a file; give a directory (it is made if missing)")
    fsspec_safe(args.out, "--out")
    if args.out.is_symlink() and not args.out.exists():
        raise BadInput(f"{args.out}: --out is a symlink to {os.readlink(args.out)}, which does not exist; "
                       "make that directory or give another --out")
    problem = _executor_problem(args.executor)
    if problem:
        raise BadInput(problem)
    executor = ExecutorConfig(kind=args.executor, workers=args.workers, ray_address=args.ray_address,
                              slurm=_slurm_options(args), ray=_ray_options(args),
                              progress=not args.no_progress and sys.stderr.isatty())
    if executor.kind == "ray":  # a task no node can hold would wait forever: say so before any stage runs
        from cpp_data.pipeline.runner.executors.ray import check_ray_cluster

        check_ray_cluster(executor)
    from cpp_data.pipeline.runner.buildlog import BuildLog
    from cpp_data.pipeline.runner.sources import uncommitted_files

    try:
        log = BuildLog(args.out, args.log_format, live=not args.no_progress and sys.stderr.isatty())
    except OSError as exc:
        raise BadInput(f"{exc.filename or args.out}: {exc.strerror or exc}") from exc
    try:
        log(f"cpp-data {__version__}: recipe {recipe.version} (schema {recipe.schema_generation}), "
            f"{len(sources)} source(s), executor {args.executor} x{args.workers}", event="start",
            recipe=recipe.version, sources={s.name: s.commit for s in sources}, log_file=str(log.path))
        for warning in unread:
            log(f"  warning: {warning}", event="warning")
        for s in sources:
            log(f"  {s.name:<24} {s.commit[:17]}  {s.url}", event="source", source=s.name)
            if n := uncommitted_files(s):
                unread.append(f"source {s.name}: {n} file(s) of {s.url} are modified or untracked and not read "
                              f"(the build reads commit {s.commit[:12]}); commit them to build them")
                log(f"  warning: {unread[-1]}", event="warning", source=s.name)
        try:
            result = run_build(args.out, recipe, sources, executor, only=args.only, from_stage=args.from_stage,
                               force=args.force, wait=args.wait, log=log)
        except OSError as exc:
            if exc.errno in (errno.ENOSPC, errno.EDQUOT):  # the machine's, not the user's input: exit 1, retry
                from cpp_data.pipeline.runner.dag import stage_failed

                raise stage_failed(f"publishing (writing {exc.filename or 'the build'})", exc, args.out) from exc
            raise BadInput(f"{exc.filename or args.out}: {exc.strerror or exc}") from exc
        if result.build_dir is None:
            log("stages done; not every stage is sealed yet, so no build was published", event="unpublished")
            return EXIT_NOTHING_TO_DO
        log.summary({**result.summary, "build": str(result.build_dir), "new_build": result.new_build},
                    format_summary(result.summary, result.build_dir, result.new_build))
    finally:
        log.close()
    for warning in unread + result.summary.get("warnings", []):
        print(f"warning: {warning}", file=sys.stderr)
    return EXIT_OK if result.new_build else EXIT_NOTHING_TO_DO


def _executor_problem(kind: str) -> str | None:
    import importlib.util
    import shutil

    if kind == "ray" and importlib.util.find_spec("ray") is None:
        return "--executor ray needs Ray: pip install 'cpp-data[ray]'"
    if kind == "slurm" and shutil.which("sbatch") is None:
        return "--executor slurm needs Slurm's sbatch on PATH (run cpp-data on a Slurm login node)"
    return None


def _pairs(items: list[str], flag: str) -> dict[str, str]:
    out = {}
    for item in items:
        key, eq, value = item.partition("=")
        if not eq or not key.strip():
            raise BadInput(f"{flag} {item}: expected KEY=VALUE")
        out[key.strip()] = value.strip()
    return out


_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def _script_safe(flag: str, value: object) -> None:
    """BadInput when a value that goes into the Slurm job script holds a control character: a line break in it
    would start a line of its own in the script, and that line runs."""
    if value is not None and _CONTROL.search(str(value)):
        raise BadInput(f"{flag} {str(value)!r}: holds a control character (a line break, a tab, ...); a value "
                       f"written into the Slurm job script must be one plain line")


def _slurm_options(args) -> dict:
    for item in args.slurm_arg:
        _script_safe("--slurm-arg", item)
    for flag, value in (("--slurm-partition", args.slurm_partition), ("--slurm-account", args.slurm_account),
                        ("--slurm-qos", args.slurm_qos), ("--slurm-time", args.slurm_time)):
        _script_safe(flag, value)
    sbatch = _pairs(args.slurm_arg, "--slurm-arg")
    if args.slurm_account:
        sbatch["account"] = args.slurm_account
    return {"partition": args.slurm_partition, "time": args.slurm_time, "qos": args.slurm_qos,
            "cpus_per_task": args.slurm_cpus_per_task, "mem_per_cpu_gb": args.slurm_mem_per_cpu,
            "sbatch_args": sbatch or None}


def _ray_options(args) -> dict:
    resources = {}
    for name, amount in _pairs(args.ray_resource, "--ray-resource").items():
        try:
            resources[name] = float(amount)
        except ValueError:
            raise BadInput(f"--ray-resource {name}={amount}: the amount must be a number") from None
    return {"cpus_per_task": args.ray_cpus_per_task, "mem_per_cpu_gb": args.ray_mem_per_cpu,
            "resources": resources}
