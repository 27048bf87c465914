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

    tk = sub.add_parser("tokenizer", help="measure a build's tokenizer")
    tk_sub = tk.add_subparsers(dest="tokenizer_command", metavar="SUBCOMMAND")
    te = tk_sub.add_parser("eval", help="bytes per token against a generic BPE, and a table of C++ idioms",
                           description="Train a generic byte-level BPE (HF defaults, GPT-2 pre-tokenizer) of the "
                                       "build tokenizer's vocabulary size on the same training documents, then "
                                       "compare bytes per token on the held-out set (the tokenizer's held-out "
                                       "training files plus the validation split), per repo and overall, and "
                                       "the tokens of C++ idioms. Exits 1 when a target of REFERENCE section 8 "
                                       "is not met (>= 8%% fewer tokens; std::vector<std::string> in <= 3).",
                           formatter_class=fmt)
    te.add_argument("build", type=Path, help="a build directory (OUT/builds/<name>) whose recipe has a tokenizer")
    te.add_argument("--json", type=Path, help="also write the full result as JSON here")

    vf = sub.add_parser("verify", help="run the promotion gates on a build (REFERENCE section 11)",
                        description="Run every gate: files and checksums, counts across manifest/shards/bin-idx, "
                                    "max(token_id) < vocab_size, first documents decode exactly, empty-document "
                                    "ratio, megatron-core IndexedDataset and GPTDataset over the export, packed "
                                    "rows, and one training step of the bundled harness. Exits 1 naming each "
                                    "failed gate; on success writes OUT/verify/BUILD.json and points "
                                    "OUT/builds/PROMOTED at the build.",
                        formatter_class=fmt)
    vf.add_argument("build", type=Path, help="a build directory (OUT/builds/<name>)")
    vf.add_argument("--max-empty-ratio", type=float, default=0.001, help="empty-document gate (default 0.001)")
    vf.add_argument("--no-train-step", action="store_true", help="skip the training-step gate")

    ex = sub.add_parser("export", help="export a build for training (Megatron bin/idx, packed rows)")
    ex_sub = ex.add_subparsers(dest="export_command", metavar="FORMAT")
    em = ex_sub.add_parser("megatron", help="Megatron bin/idx per split, plus a launch spec",
                           description="Write <name>_train and <name>_valid .bin/.idx with megatron-core's "
                                       "IndexedDatasetBuilder (one document per sequence, EOD appended, dtype by "
                                       "megatron-core's rule for the vocabulary size), export.json with each "
                                       "file's SHA-256, and launch.json for a training launch. A v6 build already "
                                       "holds this export under megatron/; use this for other names, sequence "
                                       "lengths or builds without it.",
                           formatter_class=fmt)
    em.add_argument("build", type=Path)
    em.add_argument("--out", type=Path, help="export directory (default OUT/exports/<build>/megatron-<name>)")
    em.add_argument("--name", default="cpp")
    em.add_argument("--seq-length", type=int, default=2048, help="sequence length for the launch spec")
    em.add_argument("--workers", type=int, default=os.cpu_count() or 1, help="tokenizer threads")
    ep = ex_sub.add_parser("packed", help="fixed-length packed rows (best-fit-decreasing, FIM)",
                           description="Write Parquet rows of --seq-len tokens packed best-fit-decreasing with "
                                       "input_ids, target_ids, loss_mask, doc_ids, valid_token_count, num_docs, "
                                       "pack_id and the token metadata columns; FIM on the training split.",
                           formatter_class=fmt)
    ep.add_argument("build", type=Path)
    ep.add_argument("--seq-len", type=int, default=4096)
    ep.add_argument("--fim-rate", type=float, default=0.5)
    ep.add_argument("--fim-spm-rate", type=float, default=0.5)
    ep.add_argument("--seed", type=int, default=42)
    ep.add_argument("--out", type=Path, help="export directory (default OUT/exports/<build>/packed-<seq-len>)")

    tr = sub.add_parser("train", help="train a small GPT on an export (bundled harness)",
                        description="Train a megatron-core GPTModel on the data a launch spec names, through "
                                    "GPTDataset/BlendedMegatronDatasetBuilder. Logs loss and tokens/s to "
                                    "OUT/log.jsonl, checkpoints to OUT/checkpoints/, and resumes from the latest "
                                    "checkpoint when OUT already holds one. bf16 autocast on CUDA.",
                        epilog="example: cpp-data train --launch-spec out/builds/NAME/megatron/launch.json "
                               "--out runs/tiny --model tiny --steps 50",
                        formatter_class=fmt)
    tr.add_argument("--launch-spec", type=Path, required=True)
    tr.add_argument("--out", type=Path, required=True, help="run directory (log, checkpoints, summary)")
    tr.add_argument("--model", default="tiny", help="tiny, small, gpt-125m or gpt-350m (default tiny)")
    tr.add_argument("--steps", type=int, default=50)
    tr.add_argument("--batch-size", type=int, default=8, help="sequences per optimizer step")
    tr.add_argument("--micro-batch-size", type=int, help="sequences per forward pass (gradient accumulation)")
    tr.add_argument("--seq-length", type=int, help="default: the launch spec's")
    tr.add_argument("--lr", type=float, default=3e-3)
    tr.add_argument("--warmup", type=int, default=10)
    tr.add_argument("--device", default="auto", help="auto, cpu or cuda")
    tr.add_argument("--log-every", type=int, default=10)
    tr.add_argument("--eval-every", type=int, default=0)
    tr.add_argument("--save-every", type=int, default=0)
    tr.add_argument("--num-workers", type=int, default=0, help="DataLoader workers")
    tr.add_argument("--seed", type=int, default=1234)
    tr.add_argument("--stop-after", type=int, help="checkpoint and stop after this step; run again to resume")

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


def cmd_tokenizer_eval(args) -> int:
    from cpp_data.pipeline.fsutil import atomic_write_json
    from cpp_data.schemas.reader import ShardError
    from cpp_data.tokenizer.evaluate import evaluate, format_eval

    try:
        result = evaluate(args.build)
    except (ShardError, ValueError) as exc:
        _err(f"tokenizer eval: {exc}")
        return EXIT_USAGE
    print(format_eval(result))
    if args.json:
        atomic_write_json(args.json, result)
    return EXIT_OK if all(v for k, v in result["targets"].items() if k.endswith("_met")) else EXIT_FAILED


def cmd_verify(args) -> int:
    from cpp_data.pipeline.verify import promote, record_failure, verify

    try:
        print(f"verify {args.build}")
        ok, gates = verify(args.build, max_empty_ratio=args.max_empty_ratio, train_step=not args.no_train_step)
    except ValueError as exc:
        _err(f"verify: {exc}")
        return EXIT_USAGE
    if not ok:
        record_failure(args.build, gates)
        _err(f"verify: failed gate(s): {', '.join(g.name for g in gates if not g.ok)}; the build is not promoted")
        return EXIT_FAILED
    receipt = promote(args.build, gates)
    print(f"all {len(gates)} gates passed; promoted {args.build.name} (receipt {receipt})")
    return EXIT_OK


def _default_export_dir(build: Path, leaf: str) -> Path:
    return build.resolve().parent.parent / "exports" / build.resolve().name / leaf


def cmd_export(args) -> int:
    import shutil

    from cpp_data.pipeline.fsutil import is_sealed, seal
    from cpp_data.schemas.reader import ShardError, require_complete

    try:
        require_complete(args.build)
    except ShardError as exc:
        _err(f"export: {exc}")
        return EXIT_USAGE
    if args.export_command == "megatron":
        os.environ["RAYON_NUM_THREADS"] = str(args.workers)
        out = args.out or _default_export_dir(args.build, f"megatron-{args.name}")
    else:
        out = args.out or _default_export_dir(args.build, f"packed-{args.seq_len}")
    if is_sealed(out):
        print(f"{out}: already exported (remove it to export again)")
        return EXIT_NOTHING_TO_DO
    partial = out.with_name(out.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    try:
        if args.export_command == "megatron":
            from cpp_data.stages.megatron_export import export_shards

            splits = export_shards(args.build, args.build / "tokenizer", partial, args.name, args.seq_length,
                                   tokenizer_ref=str((args.build / "tokenizer").resolve()))
            for s, v in splits.items():
                print(f"{s:<6} {v['documents']:>9,} documents {v['tokens']:>13,} tokens  {v['dtype']}  "
                      f"sha256 {v['bin_sha256'][:16]}")
        else:
            from cpp_data.stages.packed_rows import PackedParams, pack_shards

            p = PackedParams(seq_len=args.seq_len, fim_rate=args.fim_rate, fim_spm_rate=args.fim_spm_rate,
                             seed=args.seed)
            _, telemetry = pack_shards(args.build, args.build / "tokenizer", partial, p)
            for s, t in telemetry.items():
                print(f"{s:<6} {t['rows']:>7,} rows  {t['slot_utilization']:.1%} slots used  "
                      f"{t['docs_per_row']:.2f} docs/row  {t['cropped_token_share']:.1%} cropped  "
                      f"{t['fim_documents']:,} FIM")
    except ValueError as exc:
        _err(f"export: {exc}")
        return EXIT_USAGE
    out.parent.mkdir(parents=True, exist_ok=True)
    seal(partial, out)
    print(f"wrote {out}")
    return EXIT_OK


def cmd_train(args) -> int:
    from cpp_data.harness.train import TrainConfig, train

    c = TrainConfig(launch_spec=args.launch_spec, out=args.out, model=args.model, steps=args.steps,
                    batch_size=args.batch_size, micro_batch_size=args.micro_batch_size, seq_length=args.seq_length, lr=args.lr, warmup=args.warmup,
                    device=args.device, log_every=args.log_every, eval_every=args.eval_every,
                    save_every=args.save_every, num_workers=args.num_workers, seed=args.seed,
                    stop_after=args.stop_after)
    try:
        summary = train(c)
    except ValueError as exc:
        _err(f"train: {exc}")
        return EXIT_USAGE
    print(json.dumps(summary, indent=2))
    return EXIT_OK


def absolute_paths(args: argparse.Namespace) -> argparse.Namespace:
    """Every path a user gave becomes absolute here, once, against the working directory the command was
    started in: nothing below the CLI ever sees a relative path (datatrove and git resolve relative paths
    against other directories than the user's)."""
    for key, value in vars(args).items():
        if isinstance(value, Path):
            setattr(args, key, Path(os.path.abspath(os.path.expanduser(value))))
    return args


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = absolute_paths(parser.parse_args(argv))
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
    if args.command == "verify":
        return cmd_verify(args)
    if args.command == "export" and args.export_command in ("megatron", "packed"):
        return cmd_export(args)
    if args.command == "train":
        return cmd_train(args)
    if args.command == "tokenizer" and args.tokenizer_command == "eval":
        return cmd_tokenizer_eval(args)
    if args.command == "sources" and args.sources_command == "lock":
        return cmd_sources_lock(args)
    parser.print_help()
    return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())
