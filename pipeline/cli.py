"""The `cpp-data` command line."""

from __future__ import annotations

import argparse
import errno
import json
import os
import re
import signal
import sys
import threading
from pathlib import Path

from cpp_data.pipeline.foundation.version import __version__
from cpp_data.pipeline.foundation.errors import (EXIT_FAILED, EXIT_INTERRUPTED, EXIT_NOTHING_TO_DO, EXIT_OK, EXIT_TERMINATED,
                                      EXIT_USAGE, BadInput, CheckFailed, CppDataError, Terminated)
from cpp_data.schemas.launch_spec import MAX_SEQ_LENGTH

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
already exists), 75 another build holds the output directory (retry later or pass --wait), 130 interrupted
(Ctrl-C) and 143 terminated (SIGTERM): run the same command again, a build resumes from its finished tasks.
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


class _Help(argparse.RawDescriptionHelpFormatter):
    """Descriptions keep their line breaks; every option's help ends with its default unless it names one."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        default = action.default
        if (action.option_strings and "default" not in text and default not in (None, False, argparse.SUPPRESS)
                and not isinstance(action, argparse._VersionAction)):
            text += " (default: %(default)s)"
        return text


DEFAULT_RECIPE = "v6"  # the recipe a build runs when --version is not given


def recipe_arguments(p: argparse.ArgumentParser) -> None:
    """What chooses a build's stages and their fingerprints: shared by build and plan."""
    p.add_argument("--version", dest="recipe_version", default=DEFAULT_RECIPE,
                   help="schema generation whose recipe to run: v2..v6")
    p.add_argument("--recipe", type=_path, help="a recipe file to use instead of the bundled one")
    p.add_argument("--sources", type=_path, required=True,
                   help="sources TOML; a relative local url in it is relative to the file's directory")
    p.add_argument("--lock", type=_path,
                   help="lock file with the pins (default: SOURCES.lock beside the sources file if present, "
                        "else every ref is resolved now)")
    p.add_argument("--relock", action="store_true",
                   help="resolve every ref again instead of using the lock (a directory edited since locking "
                        "otherwise stops the build)")
    p.add_argument("--out", type=_path, required=True, help="output directory (cache, builds, status)")
    p.add_argument("--seed", type=int, help="shuffle seed (default: the recipe's shards.seed)")
    p.add_argument("--tokenizer", type=_path, metavar="BUILD_OR_DIR",
                   help="reuse this tokenizer instead of training one (a tokenizer/ directory, a build, or OUT): "
                        "token ids stay those of that build; recorded by SHA-256 in the manifest")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="STAGE.PARAM=VALUE",
                   help="override a recipe parameter, checked like the recipe file and recorded in the manifest "
                        "(VALUE in TOML: 2048, 0.5, true, \"text\"); repeatable, e.g. --set packed_rows.seq_length=2048")


def _int_at_least(least: int, most: int | None = None):
    """An argparse type: an integer of at least `least` (and at most `most`); anything else is argparse's
    usage error (exit 2), not a failure deep in a stage or a launch.json holding a negative sequence length."""
    def integer(text: str) -> int:
        value = int(text)
        if value < least:
            raise argparse.ArgumentTypeError(f"must be at least {least}, got {value}")
        if most is not None and value > most:
            raise argparse.ArgumentTypeError(f"must be at most {most:,}, got {value}")
        return value
    return integer


def _path(text: str) -> Path:
    """An argparse type: a path that is not empty. `Path("")` is the working directory, so `--out "$OUT"` with
    OUT unset built into whatever directory the scheduler ran in."""
    if not text.strip():
        raise argparse.ArgumentTypeError("is empty (an unset variable?); give a path, or . for this directory")
    return Path(text)


_SLURM_TIME = re.compile(r"\d+(:\d+){0,2}|\d+-\d+(:\d+){0,2}|(?i:unlimited|infinite)")


def _slurm_time(text: str) -> str:
    """An argparse type: a time limit in one of sbatch's formats (`banana` had gone into the job script)."""
    if not _SLURM_TIME.fullmatch(text):
        raise argparse.ArgumentTypeError(f"{text!r} is not a Slurm time: MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM or "
                                         f"D-HH:MM:SS")
    return text


def _file_prefix(text: str) -> str:
    """An argparse type: a file name prefix, with no path in it (`--name ../../evil` had written bin/idx files
    outside the export directory)."""
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", text):
        raise argparse.ArgumentTypeError(f"{text!r} is not a file prefix: use letters, digits, '.', '_' and '-', "
                                         f"starting with a letter or digit")
    return text


def _number(lowest: float, highest: float | None = None, above: bool = False):
    """An argparse type: a number from `lowest` (excluded when `above`) up to `highest` (included)."""
    def number(text: str) -> float:
        value = float(text)
        low = value <= lowest if above else value < lowest
        if value != value or low or (highest is not None and value > highest):  # value != value: NaN
            bound = f"above {lowest}" if above else f"at least {lowest}"
            most = f" and at most {highest}" if highest is not None else ""
            raise argparse.ArgumentTypeError(f"must be {bound}{most}, got {text}")
        return value
    return number


class _Parser(argparse.ArgumentParser):
    """argparse's parser, whose usage errors are one line like every other error of cpp-data (argparse printed
    the whole usage block, 4 to 16 lines, above it): the command, the problem, and where the help is. Its
    subcommands' parsers are of this class too (add_subparsers takes the parent's class)."""

    def error(self, message: str):
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def _parser() -> argparse.ArgumentParser:
    common = _Parser(add_help=False)
    common.add_argument("--debug", action="store_true", help="on an error, print the traceback, not one line")
    p = _Parser(prog="cpp-data", description=MAIN_HELP, formatter_class=_Help)
    p.add_argument("--version", action="version", version=f"cpp-data {__version__}")
    p.set_defaults(func=None, group=p, debug=False)
    sub = p.add_subparsers(dest="command", metavar="COMMAND")

    def leaf(parent, name: str, func, **kw) -> argparse.ArgumentParser:
        """A command that runs: shares --debug and the help formatter, dispatches to `func`."""
        cmd = parent.add_parser(name, parents=[common], formatter_class=_Help, **kw)
        cmd.set_defaults(func=func)
        return cmd

    def group(name: str, **kw) -> argparse._SubParsersAction:
        """A command with subcommands: alone, it prints its help listing them."""
        g = sub.add_parser(name, formatter_class=_Help, **kw)
        g.set_defaults(func=None, group=g)
        return g.add_subparsers(dest=f"{name}_command", metavar="SUBCOMMAND")

    b = leaf(sub, "build", cmd_build, help="run a recipe and publish a sealed build", description=BUILD_HELP)
    recipe_arguments(b)
    b.add_argument("--executor", choices=("local", "ray", "slurm"), default="local",
                   help="where per-document work runs (datatrove executors)")
    b.add_argument("--workers", type=_int_at_least(1), default=os.cpu_count() or 1,
                   help="parallel tasks (the CPU count)")
    b.add_argument("--ray-address", help="Ray cluster to join (default: start a local Ray for this build)")
    b.add_argument("--ray-cpus-per-task", type=_int_at_least(1), default=1,
                   help="CPUs Ray reserves per task (--executor ray)")
    b.add_argument("--ray-mem-per-cpu", type=_number(0, above=True), default=0.5, metavar="GB",
                   help="memory Ray reserves per CPU of a task, GB (--executor ray)")
    b.add_argument("--ray-resource", action="append", default=[], metavar="NAME=AMOUNT",
                   help="a custom Ray resource every task needs, e.g. --ray-resource cpp_data_node=1 (repeatable)")
    b.add_argument("--slurm-partition", default="cpu", help="Slurm partition (--executor slurm)")
    b.add_argument("--slurm-time", type=_slurm_time, default="04:00:00",
                   help="Slurm time limit per task (--executor slurm): MM, MM:SS, HH:MM:SS, D-HH[:MM[:SS]]")
    b.add_argument("--slurm-account", help="Slurm account to charge (sbatch --account)")
    b.add_argument("--slurm-qos", default="normal", help="Slurm quality of service (sbatch --qos)")
    b.add_argument("--slurm-cpus-per-task", type=_int_at_least(1), default=1, help="CPUs per Slurm task")
    b.add_argument("--slurm-mem-per-cpu", type=_int_at_least(1), default=2, metavar="GB",
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

    pl = leaf(sub, "plan", cmd_plan, help="what a build would run and why, running nothing",
              description="For every stage instance of the recipe over the sources: cached (its sealed output is "
                          "in OUT's cache) or run, and why: its code, a parameter (old -> new), the source's pin, "
                          "the sources' settings, or an input that runs again, compared with OUT's LATEST build "
                          "(or the newest of the same recipe when LATEST is of another). Writes nothing.",
              epilog="example: cpp-data plan --version v6 --sources sources/debian.toml --out out "
                     "--set packed_rows.seq_length=2048")
    recipe_arguments(pl)
    pl.add_argument("--json", action="store_true", help="the plan as JSON")

    v = leaf(sub, "validate", cmd_validate, help="check a build against its manifest and schemas",
             description="Check _COMPLETE, every checksum in the manifest and every shard against its generation's "
                         "schema. Exits 1 naming file, row group and column on the first problem.")
    v.add_argument("build", type=_path, help="a build directory (OUT/builds/NAME), OUT for its latest build, "
                                            "or OUT/builds/PROMOTED")

    s = leaf(sub, "status", cmd_status, help="summarize an output directory into OUT/status/",
             description="Write OUT/status/current.json and current.md (sources, pins, builds by date, stage cache) "
                         "atomically, append to changelog.jsonl when something changed, and print the Markdown. "
                         "A build whose manifest cannot be read is listed as broken.")
    s.add_argument("--out", type=_path, required=True, help="the output directory of builds")
    s.add_argument("--json", action="store_true", help="print JSON instead of Markdown")

    d = leaf(sub, "diff", cmd_diff, help="what changed between two builds",
             description="Compare two sealed builds by (repo, path): documents added, removed and changed (with the "
                         "commit each side saw; a document whose text is the same under a moved pin is counted as "
                         "'same text, new pin', not changed), files newly refused by rule, documents and bytes per "
                         "license and repo, and schema differences.",
             epilog="example: cpp-data diff out/builds/v6-20261101-1a2b3c4d out/builds/v6-20261130-5e6f7a8b "
                    "--tables diff/ && .venv/bin/python -c \"import duckdb; duckdb.sql(\\\"select change, "
                    "count(*) from 'diff/documents.parquet' group by 1\\\").show()\" (duckdb, the Python "
                    "module setup installs)")
    d.add_argument("a", type=_path, help="the older build directory")
    d.add_argument("b", type=_path, help="the newer build directory")
    d.add_argument("--json", action="store_true", help="print JSON instead of text")
    d.add_argument("--tables", type=_path, help="also write documents/refusals/licenses Parquet tables here")

    rp = leaf(sub, "report", cmd_report, help="write a self-contained HTML report of a build",
              description="Write OUT/reports/BUILD.html (never into the sealed build): sources and pins, license "
                          "distribution by repo, refusal reasons, duplicate clusters, document and token lengths, "
                          "semantic coverage and stage times, as inline SVG plots (no scripts, no network).")
    rp.add_argument("build", type=_path, help="a build directory (OUT/builds/NAME), OUT for its latest build, "
                                             "or OUT/builds/PROMOTED")
    rp.add_argument("--output", type=_path, help="the HTML file to write (default OUT/reports/BUILD.html)")

    tk = group("tokenizer", help="measure a build's tokenizer")
    te = leaf(tk, "eval", cmd_tokenizer_eval, help="bytes per token against a generic BPE, and C++ idioms",
              description="Train a generic byte-level BPE (HF defaults, GPT-2 pre-tokenizer) of the build "
                          "tokenizer's vocabulary size on the same training documents, then compare bytes per token "
                          "on the held-out set (the tokenizer's held-out training files plus the validation split), "
                          "per repo and overall, and the tokens of C++ idioms. Exits 1 when a target of "
                          "docs/DESIGN.md is not met (>= 8% fewer tokens; std::vector<std::string> in <= 3).")
    te.add_argument("build", type=_path, help="a build directory whose recipe has a tokenizer, or OUT")
    te.add_argument("--json", type=_path, help="also write the full result as JSON here")

    vf = leaf(sub, "verify", cmd_verify, help="run the promotion gates on a build",
              description="Run every gate: files and checksums, counts across manifest/shards/bin-idx, "
                          "max(token_id) < vocab_size, first documents decode exactly, empty-document ratio, "
                          "megatron-core IndexedDataset and GPTDataset over the export, packed rows, and one "
                          "training step of the bundled harness. Exits 1 naming each failed gate; on success writes "
                          "OUT/verify/BUILD.json and points OUT/builds/PROMOTED at the build.")
    vf.add_argument("build", type=_path, help="a build directory (OUT/builds/NAME), OUT for its latest build, "
                                             "or OUT/builds/PROMOTED")
    vf.add_argument("--max-empty-ratio", type=_number(0, 1), default=0.001, help="largest share of empty documents")
    vf.add_argument("--no-train-step", action="store_true", help="skip the training-step gate")

    ex = group("export", help="export a build for training (Megatron bin/idx, packed rows)")
    em = leaf(ex, "megatron", cmd_export, help="Megatron bin/idx per split, plus a launch spec",
              description="Write <name>_train and <name>_valid .bin/.idx as megatron-core's IndexedDatasetBuilder does "
                          "(one document per sequence, EOD appended, dtype by megatron-core's rule for the "
                          "vocabulary size; a training prefix per weight group when the sources set weights), "
                          "export.json with each file's SHA-256, arguments.json and a launch.json whose paths are "
                          "relative to it. A v6 build already holds this export under megatron/; use this for "
                          "other names or sequence lengths. Other arguments export into another directory.")
    em.add_argument("build", type=_path, help="a build directory, OUT for its latest build, or OUT/builds/PROMOTED")
    em.add_argument("--out", type=_path,
                    help="export directory (default OUT/exports/BUILD/megatron-NAME-<hash of the arguments>)")
    em.add_argument("--name", type=_file_prefix, default="cpp",
                    help="file prefix of the bin/idx pairs (letters, digits, '.', '_', '-')")
    em.add_argument("--seq-length", type=_int_at_least(2, MAX_SEQ_LENGTH), default=2048,
                    help="sequence length written into its launch.json")
    em.add_argument("--workers", type=_int_at_least(1), default=os.cpu_count() or 1,
                    help="parallel tasks (the CPU count)")
    ep = leaf(ex, "packed", cmd_export, help="fixed-length packed rows (best-fit-decreasing, FIM)",
              description="Write Parquet rows of --seq-length tokens packed best-fit-decreasing with input_ids, "
                          "target_ids, loss_mask, doc_ids, valid_token_count, num_docs, pack_id and the token "
                          "metadata columns; FIM on the training split; the same rows as a Megatron bin/idx "
                          "(cpp_packed_<split>) and a launch.json for them. Other arguments export into another "
                          "directory.")
    ep.add_argument("build", type=_path, help="a build directory, OUT for its latest build, or OUT/builds/PROMOTED")
    ep.add_argument("--seq-length", type=_int_at_least(2, MAX_SEQ_LENGTH), default=4096, help="tokens per packed row")
    ep.add_argument("--fim-rate", type=_number(0, 1), default=0.5,
                    help="share of training documents made fill-in-the-middle")
    ep.add_argument("--fim-spm-rate", type=_number(0, 1), default=0.5, help="share of FIM documents in SPM order")
    ep.add_argument("--seed", type=int, default=42, help="seed of the FIM choices")
    ep.add_argument("--workers", type=_int_at_least(1), default=os.cpu_count() or 1,
                    help="parallel tasks (the CPU count)")
    ep.add_argument("--out", type=_path,
                    help="export directory (default OUT/exports/BUILD/packed-SEQ_LENGTH-<hash of the arguments>)")

    tr = leaf(sub, "train", cmd_train, help="train a small GPT on an export (bundled harness)",
              description="Train a megatron-core GPTModel on the data a launch spec names, through "
                          "GPTDataset/BlendedMegatronDatasetBuilder. By default on the packed rows: one row per "
                          "sample in a seeded order, attention and positions reset at every EOD, no loss where "
                          "the input is EOD or on a row's last label (it belongs to the next row); --data "
                          "documents trains on the per-document export instead. Logs loss and tokens/s to "
                          "OUT/log.jsonl, checkpoints to OUT/checkpoints/, and resumes from the latest checkpoint "
                          "when OUT already holds one. bf16 autocast and fused AdamW on CUDA. Under torchrun "
                          "(--nproc-per-node N) it trains data parallel over N GPUs; --batch-size stays the global "
                          "batch.",
              epilog="example: cpp-data train --launch-spec out --out runs/tiny --model tiny --steps 50")
    tr.add_argument("--launch-spec", type=_path, required=True,
                    help="a launch.json, or a build (or OUT, its latest build) holding one")
    tr.add_argument("--data", choices=("packed", "documents"),
                    help="which dataset of the launch spec (default: its default_dataset, packed rows)")
    tr.add_argument("--out", type=_path, required=True, help="run directory (log, checkpoints, summary)")
    tr.add_argument("--model", default="tiny", help="tiny, small, gpt-125m or gpt-350m")
    tr.add_argument("--steps", type=_int_at_least(1), default=50, help="optimizer steps")
    tr.add_argument("--batch-size", type=_int_at_least(1), default=8, help="sequences per optimizer step")
    tr.add_argument("--micro-batch-size", type=_int_at_least(1),
                    help="sequences per forward pass (gradient accumulation; default: the batch size)")
    tr.add_argument("--seq-length", type=_int_at_least(2, MAX_SEQ_LENGTH),
                    help="tokens per sequence (default: the launch spec's; packed rows accept only theirs)")
    tr.add_argument("--lr", type=_number(0, above=True), default=3e-3, help="peak learning rate")
    tr.add_argument("--warmup", type=_int_at_least(0), default=10, help="linear warmup steps")
    tr.add_argument("--device", default="auto", help="auto, cpu or cuda")
    tr.add_argument("--log-every", type=_int_at_least(1), default=10, help="steps between log lines")
    tr.add_argument("--eval-every", type=_int_at_least(0), default=0, help="steps between validation passes (0: none)")
    tr.add_argument("--save-every", type=_int_at_least(0), default=0,
                    help="steps between checkpoints (0: only at the end)")
    tr.add_argument("--num-workers", type=_int_at_least(0), default=0, help="DataLoader workers")
    tr.add_argument("--seed", type=int, default=1234, help="seed of the model and the data order")
    tr.add_argument("--stop-after", type=_int_at_least(1),
                    help="checkpoint and stop after this step; run again to resume")
    tr.add_argument("--eval-batches", type=_int_at_least(1), default=4, help="batches per validation pass")
    tr.add_argument("--eval-data", choices=("packed", "documents"),
                    help="evaluate on this dataset's validation split (default: the one trained on); packed: "
                         "each validation document on its own, no FIM")
    tr.add_argument("--attention", choices=("sdpa", "local"), default="sdpa",
                    help="sdpa: PyTorch's FlashAttention, packed rows as per-document segments (default); local: "
                         "megatron-core's unfused attention with GPTDataset's masks")
    tr.add_argument("--compile", action="store_true", help="torch.compile the model (CUDA; pays off over many steps)")

    sh = leaf(sub, "show", cmd_show, help="print sample documents of a build (text, structure, tokens, license)",
              description="Print documents of a build in manifest order: provenance (repo, path, commit, doc_id), "
                          "license decision, size, tokens, and the text with tree-sitter's structure spans "
                          "(coloured in a terminal, as line ranges otherwise). --json gives the same for scripts.",
              epilog="examples:\n  cpp-data show out --repo googletest --path '*/gtest.cc'\n"
                     "  cpp-data show out -n 20 --json | jq '.[].source_path'")
    sh.add_argument("build", type=_path, help="a build directory, OUT for its latest build, or OUT/builds/PROMOTED")
    sh.add_argument("--repo", help="only documents of this source")
    sh.add_argument("--path", dest="path_glob", metavar="GLOB", help="only paths matching this glob (fnmatch)")
    sh.add_argument("-n", type=_int_at_least(1), default=3, help="how many documents (default 3)")
    sh.add_argument("--columns", nargs="+", default=[], metavar="COLUMN", help="more shard columns to print")
    sh.add_argument("--lines", type=_int_at_least(1), default=40, help="lines of text per document (default 40)")
    sh.add_argument("--json", action="store_true", help="JSON: every shown column, spans as character ranges")

    gc = leaf(sub, "gc", cmd_gc, help="remove old builds and the cache entries no kept build needs",
              description="Keep the builds LATEST and PROMOTED name and the newest --keep builds of each schema "
                          "generation; remove every other build (with its exports, verify receipt and report) "
                          "and every cache entry that no kept build lists among its stages, so rebuilding a kept "
                          "build stays 'nothing to do'. Entries of an interrupted build (.partial) stay for its "
                          "resume. Holds the output lock; prints what it removed and how much.",
              epilog="example: cpp-data gc --out out --keep 2 --dry-run")
    gc.add_argument("--out", type=_path, required=True, help="output directory")
    gc.add_argument("--keep", type=int, default=2, help="newest builds kept per schema generation (default 2)")
    gc.add_argument("--dry-run", action="store_true", help="say what would go, remove nothing")
    gc.add_argument("--wait", action="store_true", help="if a build holds OUT, wait for it instead of exiting 75")

    rc = group("recipes", help="the bundled recipes, one per schema generation")
    leaf(rc, "list", cmd_recipes_list, help="list the bundled recipes",
         description="One line per bundled recipe: its version, schema generation, stages and description.")
    rs = leaf(rc, "show", cmd_recipes_show, help="print a recipe: its TOML, or every parameter resolved",
              description="Print a bundled recipe's TOML as shipped; --resolved prints every stage's parameters "
                          "with their defaults filled in (and --set overrides applied), as JSON.",
              epilog="example: cpp-data recipes show v6 --resolved --set packed_rows.seq_length=2048")
    rs.add_argument("recipe_version", metavar="VERSION", help="v2..v6")
    rs.add_argument("--resolved", action="store_true", help="every parameter with defaults filled in, as JSON")
    rs.add_argument("--set", dest="overrides", action="append", default=[], metavar="STAGE.PARAM=VALUE",
                    help="as for build")

    src = group("sources", help="work with sources files")
    lk = leaf(src, "lock", cmd_sources_lock, help="resolve every ref to a commit and write a lock file",
              description="Resolve each source's ref (tag, branch or commit) to a commit SHA, or pin a plain "
                          "directory by its tree digest, and write SOURCES.lock (or -o).")
    lk.add_argument("sources", type=_path, help="the sources TOML file")
    lk.add_argument("-o", "--output", type=_path, help="lock file to write (default: SOURCES with .lock suffix)")
    return p


_LAST_ERROR: list[str] = []  # the line _err printed last: a JSON log's closing `error` event repeats it


def _err(msg: str) -> None:
    _LAST_ERROR[:] = [msg]
    print(f"cpp-data: error: {msg}", file=sys.stderr)


def _json_error_event(rc: int) -> None:
    """With --log-format json, a build that fails says so on stdout too, as its last event (a scheduler reading
    the JSON lines had seen the stream stop with no word of why)."""
    from cpp_data.pipeline.runner.buildlog import utc_now

    record = {"time": utc_now(), "event": "error",
              "exit_code": rc, "message": _LAST_ERROR[0] if _LAST_ERROR else ""}
    try:
        print(json.dumps(record, ensure_ascii=False), flush=True)
    except (BrokenPipeError, ValueError, OSError):
        pass


def parse_overrides(items: list[str]) -> dict[str, dict]:
    """--set STAGE.PARAM=VALUE items as {stage: {param: value}}; VALUE is read as a TOML value (a bare word
    that is not one is taken as a string). Names and types are checked later, by load_recipe."""
    import tomllib

    out: dict[str, dict] = {}
    for item in items:
        key, eq, raw = item.partition("=")
        stage, dot, param = key.strip().partition(".")
        if not eq or not dot or not stage or not param:
            raise BadInput(f"--set {item}: expected STAGE.PARAM=VALUE, e.g. packed_rows.seq_length=2048")
        try:
            value = tomllib.loads(f"v = {raw.strip()}")["v"]
        except tomllib.TOMLDecodeError:
            value = raw.strip()
        out.setdefault(stage, {})[param] = value
    return out


def cmd_show(args) -> int:
    from cpp_data.pipeline.commands.show import dumps, render, sample_documents

    docs = sample_documents(args.build, args.repo, args.path_glob, args.n, args.columns)
    if args.json:
        print(dumps(docs))
        return EXIT_OK
    if not docs:
        raise BadInput(f"{args.build}: no document matches" + (f" --repo {args.repo}" if args.repo else "")
                       + (f" --path {args.path_glob}" if args.path_glob else ""))
    colour = sys.stdout.isatty() and os.environ.get("NO_COLOR") is None
    print("\n\n".join(render(d, colour, args.lines, args.columns) for d in docs))
    return EXIT_OK


def _need_output_directory(out: Path) -> None:
    """Refuse a directory no build wrote: gc would look for builds in it and status writes OUT/status/ into it."""
    if not (out / "builds").is_dir() and not (out / "cache").is_dir():
        raise BadInput(f"{out}: not an output directory (no builds/ or cache/); give the --out of a build")


def cmd_gc(args) -> int:
    from cpp_data.pipeline.commands.gc import collect_garbage, format_result

    if args.keep < 1:
        raise BadInput("--keep must be at least 1")
    _need_output_directory(args.out)
    print(format_result(collect_garbage(args.out, args.keep, args.dry_run, args.wait), args.dry_run))
    return EXIT_OK


def cmd_recipes_list(args) -> int:
    from cpp_data.pipeline.runner.recipe import available_versions, load_recipe

    for version in available_versions():
        r = load_recipe(version)
        print(f"{version}  schema {r.schema_generation}  {len(r.stages)} stages: {' '.join(r.stages)}")
        if r.description:
            print(f"    {r.description}")
    return EXIT_OK


def cmd_recipes_show(args) -> int:
    from importlib import resources

    from cpp_data.pipeline.runner.recipe import available_versions, load_recipe

    if args.recipe_version not in available_versions():
        raise BadInput(f"no recipe {args.recipe_version!r}; available: {', '.join(available_versions())}")
    overrides = parse_overrides(args.overrides)
    if args.resolved or overrides:
        r = load_recipe(args.recipe_version, overrides=overrides or None)
        print(json.dumps({k: v for k, v in r.to_json().items() if k != "path"}, indent=2))
    else:
        print((resources.files("cpp_data.pipeline.recipes") / f"{args.recipe_version}.toml").read_text(), end="")
    return EXIT_OK


def cmd_sources_lock(args) -> int:
    from cpp_data.pipeline.runner.sources import (directory_source_holding, load_sources, lock_path_for, lock_sources,
                                           write_lock)

    specs, unmatched = load_sources(args.sources)
    for warning in _unmatched_warnings(args.sources, unmatched):
        print(f"warning: {warning}", file=sys.stderr)
    dest = args.output or lock_path_for(args.sources)
    if (holder := directory_source_holding(specs, dest)) is not None:
        raise BadInput(f"{args.sources}: the lock {dest} would be written inside source {holder.name!r} "
                       f"({holder.url}), a plain directory, and so change the directory its own pin describes; "
                       f"write it elsewhere (-o PATH) and build with --lock PATH")
    locked = lock_sources(specs, origin=args.sources)
    try:
        write_lock(dest, locked)
    except OSError as exc:
        raise BadInput(f"{dest}: cannot write the lock file ({exc.strerror or exc}); give another with -o PATH") \
            from None
    for s in locked:
        print(f"{s.name:<24} {s.requested_ref or '(directory)':<16} {s.commit}")
    print(f"wrote {dest}")
    return EXIT_OK


def _unmatched_warnings(sources: Path, entries: list[str]) -> list[str]:
    return [f"{sources}: [opt_out] repos entry {e!r} names no source (by name or URL), so it opts nothing out"
            for e in entries]


def _pins(args, warnings: list[str] | None = None):
    """The sources' pins: from --lock or SOURCES.lock when present (a directory edited since is an error unless
    --relock), else resolved now. What a user should hear of the sources file goes to `warnings`."""
    from cpp_data.pipeline.runner.sources import (check_directory_pins, directory_source_holding, load_sources,
                                           lock_path_for, lock_sources, read_lock)

    specs, unmatched = load_sources(args.sources)
    if warnings is not None:
        warnings += _unmatched_warnings(args.sources, unmatched)
    out = getattr(args, "out", None)
    if out is not None and (holder := directory_source_holding(specs, out)) is not None:
        raise BadInput(f"{args.sources}: source {holder.name!r} ({holder.url}) holds --out {out}, and the build's "
                       f"own files would change that directory under its pin; give an --out outside it")
    if args.lock is not None and not args.lock.is_file():
        raise BadInput(f"{args.lock}: no such lock file (write one with: cpp-data sources lock {args.sources})")
    lock_file = args.lock or lock_path_for(args.sources)
    existing = read_lock(lock_file) if lock_file.is_file() and not args.relock else None
    if args.lock is not None and existing is not None and not {p.name for p in existing} & {s.name for s in specs}:
        raise BadInput(f"{args.lock}: pins none of the sources of {args.sources} (it pins "
                       f"{', '.join(sorted(p.name for p in existing)) or 'nothing'}); give the lock of that file")
    pins = lock_sources(specs, existing, update=existing is None, origin=args.sources)
    if existing is not None:
        check_directory_pins(pins, lock_file, args.sources)
    return pins


def _executor_problem(kind: str) -> str | None:
    import importlib.util
    import shutil

    if kind == "ray" and importlib.util.find_spec("ray") is None:
        return "--executor ray needs Ray: pip install 'cpp-data[ray]'"
    if kind == "slurm" and shutil.which("sbatch") is None:
        return "--executor slurm needs Slurm's sbatch on PATH (run cpp-data on a Slurm login node)"
    return None


def _recipe_of(args):
    from cpp_data.pipeline.runner.recipe import load_recipe

    overrides = parse_overrides(args.overrides)
    if args.seed is not None:
        overrides.setdefault("shards", {})["seed"] = args.seed
    if args.tokenizer is not None:
        overrides.setdefault("tokenizer", {})["frozen"] = str(args.tokenizer)
        if "vocab_size" in overrides["tokenizer"]:  # had been recorded in the manifest and ignored
            raise BadInput(f"--set tokenizer.vocab_size with --tokenizer {args.tokenizer}: a frozen tokenizer keeps "
                           f"its own vocabulary; drop one of them")
    if args.recipe is not None and args.recipe_version not in (DEFAULT_RECIPE, args.recipe.stem):
        raise BadInput(f"--version {args.recipe_version} with --recipe {args.recipe}: the recipe file is the "
                       f"recipe (its version is its file name, {args.recipe.stem}); give one of them")
    return load_recipe(args.recipe_version if args.recipe is None else None, args.recipe, overrides or None,
                       flags={**({"tokenizer.frozen": "--tokenizer"} if args.tokenizer is not None else {}),
                              **({"shards.seed": "--seed"} if args.seed is not None else {})})


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


def cmd_plan(args) -> int:
    from cpp_data.pipeline.contract.executor import ExecutorConfig
    from cpp_data.pipeline.runner.plan import format_plan, plan
    from cpp_data.pipeline.runner.dag import Runner

    # build --dry-run carries --only, --from and --force, and the plan honours them as the build would
    runner = Runner(args.out, _recipe_of(args), _pins(args), ExecutorConfig(kind="local", workers=1),
                    only=getattr(args, "only", None), from_stage=getattr(args, "from_stage", None),
                    force=getattr(args, "force", False))
    p = plan(runner)
    print(json.dumps(p, indent=2) if getattr(args, "json", False) else format_plan(p))
    return EXIT_OK


def cmd_build(args) -> int:
    from cpp_data.pipeline.runner.build import format_summary, run_build
    from cpp_data.pipeline.contract.executor import ExecutorConfig
    from cpp_data.pipeline.runner.executors.task_setup import bind_children_to_this_process
    from cpp_data.pipeline.runner.executors.task_logging import quiet_datatrove

    if args.dry_run:
        return cmd_plan(args)
    quiet_datatrove()
    bind_children_to_this_process()
    recipe = _recipe_of(args)
    unread: list[str] = []
    sources = _pins(args, unread)
    if args.out.exists() and not args.out.is_dir():
        raise BadInput(f"{args.out}: --out is a file; give a directory (it is made if missing)")
    _fsspec_safe(args.out, "--out")
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


def cmd_validate(args) -> int:
    from cpp_data.schemas.reader import IncompleteBuild
    from cpp_data.schemas.validate import validate_build

    try:
        res = validate_build(args.build)
    except IncompleteBuild as exc:  # for validate, an unsealed build is a failed check, not a wrong argument
        raise CheckFailed(str(exc)) from exc
    print(f"ok: {args.build}: {res['shards']} shards, {res['rows']:,} documents, {res['files']} files checked "
          f"(schema {res['generation']})")
    return EXIT_OK


def cmd_status(args) -> int:
    from cpp_data.pipeline.commands.status import render_md, write_status

    if not args.out.is_dir():
        raise BadInput(f"{args.out}: no such output directory")
    _need_output_directory(args.out)  # it writes OUT/status/: never into a source tree
    status = write_status(args.out)
    print(json.dumps(status, indent=2) if args.json else render_md(status))
    return EXIT_OK


def cmd_report(args) -> int:
    from cpp_data.pipeline.commands.report import build_report, default_report_path

    if args.output is not None:
        _outside_published_builds(args.output, "--output", "OUT/reports/BUILD.html")
        if args.output.is_dir():  # before the report's work, and not as a temporary file's error after it
            raise BadInput(f"--output {args.output}: is a directory; give the HTML file to write "
                           f"(for example {args.output / 'report.html'})")
    target = args.output or default_report_path(args.build)
    try:
        out = build_report(args.build, target)
    except OSError as exc:
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            raise
        raise BadInput(f"{target}: cannot write the report ({exc.strerror or exc}); give another --output") \
            from None
    print(f"wrote {out}")
    return EXIT_OK


def cmd_diff(args) -> int:
    from cpp_data.pipeline.commands.diff import diff_builds, render, write_tables

    if args.tables and args.tables.exists() and not args.tables.is_dir():  # before the diff's work, not after
        raise BadInput(f"--tables {args.tables}: is a file; give a directory (it is made if missing)")
    if args.tables:
        _outside_published_builds(args.tables, "--tables", "a directory of its own")
    result = diff_builds(args.a, args.b)
    if args.tables:
        try:
            written = write_tables(result, args.tables)
        except OSError as exc:
            raise BadInput(f"--tables {exc.filename or args.tables}: {exc.strerror or exc}") from None
        for path in written:
            print(f"wrote {path}", file=sys.stderr)
    text = render(result)
    result.pop("_rows")
    result.pop("_refusals")
    print(json.dumps(result, indent=2) if args.json else text)
    return EXIT_OK


def cmd_tokenizer_eval(args) -> int:
    from cpp_data.pipeline.foundation.fsutil import atomic_write_json
    from cpp_data.tokenizer.evaluate import evaluate, format_eval

    result = evaluate(args.build)
    print(format_eval(result))
    if args.json:
        atomic_write_json(args.json, result)
    return EXIT_OK if all(v for k, v in result["targets"].items() if k.endswith("_met")) else EXIT_FAILED


def cmd_verify(args) -> int:
    from cpp_data.pipeline.commands.verify import promote, record_failure, verify

    out = args.build.parent.parent  # the receipt goes to OUT/verify/, PROMOTED to OUT/builds/: say so before the gates
    for place in (out, args.build.parent):
        if not os.access(place, os.W_OK):
            raise BadInput(f"{place}: not writable, and verify writes its receipt under OUT/verify/ and "
                           f"OUT/builds/PROMOTED; run it where the output directory can be written")
    print(f"verify {args.build}")
    ok, gates = verify(args.build, max_empty_ratio=args.max_empty_ratio, train_step=not args.no_train_step)
    if not ok:
        record_failure(args.build, gates)
        _err(f"verify: failed gate(s): {', '.join(g.name for g in gates if not g.ok)}; the build is not promoted")
        return EXIT_FAILED
    receipt = promote(args.build, gates)
    print(f"all {len(gates)} gates passed; promoted {args.build.name} (receipt {receipt})")
    return EXIT_OK


def export_directory(build: Path, kind: str, arguments: dict) -> Path:
    """OUT/exports/BUILD/<kind>-<hash of the arguments>: other arguments never meet an earlier export."""
    import hashlib

    digest = hashlib.sha256(json.dumps(arguments, sort_keys=True).encode()).hexdigest()[:8]
    return build.parent.parent / "exports" / build.name / f"{kind}-{digest}"


def cmd_export(args) -> int:
    import shutil

    from cpp_data.pipeline.foundation.fsutil import atomic_write_json, is_sealed, seal
    from cpp_data.schemas.reader import require_complete

    require_complete(args.build)
    if not (args.build / "tokenizer" / "cpp_tokenizer.json").is_file():
        raise BadInput(f"{args.build}: this build has no tokenizer (its recipe, schema generation v2 to v5, has no "
                       f"tokenizer stage), so it has no token ids to export; export a v6 build")
    if args.export_command == "megatron":
        os.environ["RAYON_NUM_THREADS"] = str(args.workers)
        arguments = {"format": "megatron", "name": args.name, "seq_length": args.seq_length}
        out = args.out or export_directory(args.build, f"megatron-{args.name}", arguments)
    else:
        arguments = {"format": "packed", "seq_length": args.seq_length, "fim_rate": args.fim_rate,
                     "fim_spm_rate": args.fim_spm_rate, "seed": args.seed}
        out = args.out or export_directory(args.build, f"packed-{args.seq_length}", arguments)
    if is_sealed(out):
        recorded = json.loads((out / "arguments.json").read_text()) if (out / "arguments.json").is_file() else None
        if recorded == arguments:
            print(f"{out}: already exported with these arguments")
            return EXIT_NOTHING_TO_DO
        if recorded is None:
            raise BadInput(f"--out {out}: a sealed directory that is not an export (a build?); give a new or empty "
                           f"directory")
        raise BadInput(f"{out}: holds an export with other arguments ({recorded}); choose another --out")
    _check_export_target(out)
    partial = out.with_name(out.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    from cpp_data.schemas.launch_spec import dataset_entry, write_launch_spec
    from cpp_data.schemas.manifest import load_manifest

    manifest = load_manifest(args.build)
    weights = {s["name"]: float(s.get("weight", 1.0)) for s in manifest["sources"]}
    if args.export_command == "megatron":
        from cpp_data.pipeline.contract.executor import ExecutorConfig
        from cpp_data.pipeline.runner.executors.executor import DatatroveExecutor
        from cpp_data.pipeline.runner.executors.task_logging import quiet_datatrove
        from cpp_data.stages.megatron_export import export_shards

        quiet_datatrove()

        prefixes = export_shards(args.build, args.build / "tokenizer", partial, args.name, weights,
                                 DatatroveExecutor(ExecutorConfig(workers=args.workers, progress=sys.stderr.isatty())))
        for p, v in prefixes.items():
            print(f"{p:<16} {v['documents']:>9,} documents {v['tokens']:>13,} tokens  {v['dtype']}  "
                  f"sha256 {v['bin_sha256'][:16]}")
        meta = json.loads((partial / "export.json").read_text())
        dataset = {"documents": dataset_entry("documents", prefixes, weights)}
    else:
        from cpp_data.pipeline.contract.executor import ExecutorConfig
        from cpp_data.pipeline.runner.executors.executor import DatatroveExecutor
        from cpp_data.pipeline.runner.executors.task_logging import quiet_datatrove
        from cpp_data.stages.packed_rows import PackedParams, pack_shards

        quiet_datatrove()

        p = PackedParams(seq_length=args.seq_length, fim_rate=args.fim_rate, fim_spm_rate=args.fim_spm_rate,
                         seed=args.seed)
        _, telemetry = pack_shards(args.build, args.build / "tokenizer", partial, p, weights,
                                   DatatroveExecutor(ExecutorConfig(workers=args.workers, progress=sys.stderr.isatty())))
        for s, t in telemetry.items():
            print(f"{s:<6} {t['rows']:>7,} rows  {t['slot_utilization']:.1%} slots used  "
                  f"{t['docs_per_row']:.2f} docs/row  {t['cropped_token_share']:.1%} cropped  "
                  f"{t['fim_documents']:,} FIM")
        meta = json.loads((partial / "packed.json").read_text())
        dataset = {"packed": dataset_entry("packed", meta["prefixes"], weights)}
    write_launch_spec(partial / "launch.json", args.name if args.export_command == "megatron" else "cpp", dataset,
                      meta["vocab_size"], args.seq_length, os.path.relpath(args.build / "tokenizer", out),
                      meta["eod"], meta.get("pad"), weights)
    atomic_write_json(partial / "arguments.json", arguments)
    out.parent.mkdir(parents=True, exist_ok=True)
    seal(partial, out)
    print(f"wrote {out}")
    return EXIT_OK


_FSSPEC_SPECIAL = re.compile(r"[*\[\]]|::|[\x00-\x1f\x7f]")


def _fsspec_safe(path: Path, option: str) -> None:
    """Refuse a path datatrove cannot name: its file listing goes through fsspec, which reads `*`, `[` and `]` as
    a glob, `::` as a chain of filesystems, and cuts at a newline, so such an --out failed a stage later with
    'No files found on ...'."""
    m = _FSSPEC_SPECIAL.search(str(path))
    if m:
        raise BadInput(f"{option} {str(path)!r}: holds {m.group()!r}, which the datatrove tasks' file listing "
                       f"(fsspec) reads as a pattern or a separator; give a path without * [ ] :: or control "
                       f"characters")


def _outside_published_builds(path: Path, option: str, default: str) -> None:
    """Refuse a path a command would write inside a published build: its manifest fixes every file there
    (`report --output BUILD/reports/summary.json` had replaced the summary with HTML, exit 0)."""
    from cpp_data.pipeline.foundation.fsutil import is_sealed

    for parent in [path, *path.parents]:
        if is_sealed(parent) and (parent / "manifest.json").is_file():
            raise BadInput(f"{option} {path}: inside the published build {parent}, whose files its manifest fixes; "
                           f"give a path outside it (the default is {default})")


def _check_export_target(out: Path) -> None:
    """An export replaces its directory whole (the sealed rename), so --out must be new or empty, and outside
    every published build: `export --out OUT` had deleted a whole output directory (builds, cache and logs) and
    `--out BUILD/packed` had replaced a promoted build's files, both with exit 0."""
    _outside_published_builds(out, "--out", "OUT/exports/BUILD/...")
    _fsspec_safe(out, "--out")
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise BadInput(f"--out {out}: exists and holds other files, which the export would replace; give a new or "
                       f"empty directory")


def cmd_train(args) -> int:
    from cpp_data.harness.megatron_cpu import quiet_missing_fast_kernels
    from cpp_data.harness.train import TrainConfig, train

    quiet_missing_fast_kernels()

    c = TrainConfig(launch_spec=args.launch_spec, out=args.out, model=args.model, steps=args.steps,
                    batch_size=args.batch_size, micro_batch_size=args.micro_batch_size, seq_length=args.seq_length,
                    lr=args.lr, warmup=args.warmup, device=args.device, log_every=args.log_every,
                    eval_every=args.eval_every, save_every=args.save_every, num_workers=args.num_workers,
                    seed=args.seed, stop_after=args.stop_after, data=args.data, eval_data=args.eval_data, eval_batches=args.eval_batches,
                    attention=args.attention, compile=args.compile)
    try:
        summary = train(c)
    except ValueError as exc:
        raise BadInput(f"train: {exc}") from exc
    print(json.dumps(summary, indent=2))
    return EXIT_OK


def absolute_paths(args: argparse.Namespace) -> argparse.Namespace:
    """Every path a user gave becomes absolute here, once, against the working directory the command was
    started in: nothing below the CLI ever sees a relative path (datatrove and git resolve relative paths
    against other directories than the user's). BUILD arguments may name an output directory (its latest
    build)."""
    from cpp_data.pipeline.runner.outlock import hold_for_reading
    from cpp_data.schemas.reader import resolve_build

    for key, value in vars(args).items():
        if isinstance(value, Path):
            setattr(args, key, Path(os.path.abspath(os.path.expanduser(value))))
    read: list[Path] = []  # the published builds this command reads: gc leaves them alone meanwhile
    if args.func in (cmd_validate, cmd_report, cmd_tokenizer_eval, cmd_verify, cmd_export, cmd_show):
        args.build = resolve_build(args.build)
        read.append(args.build)
    if args.func is cmd_diff:
        args.a, args.b = resolve_build(args.a), resolve_build(args.b)
        read += [args.a, args.b]
    if args.func is cmd_train:
        if args.launch_spec.is_dir() and not (args.launch_spec / "launch.json").is_file():
            args.launch_spec = resolve_build(args.launch_spec)  # OUT: its latest build's launch.json
        spec_dir = args.launch_spec if args.launch_spec.is_dir() else args.launch_spec.parent
        if (spec_dir / "manifest.json").is_file():  # a build's own launch.json
            read.append(spec_dir)
        else:  # an export's: it reads its build's tokenizer, and gc removes a build's exports with it
            read += _build_of_launch_spec(spec_dir)
    for build in read:
        hold_for_reading(build)
    return args


def _build_of_launch_spec(spec_dir: Path) -> list[Path]:
    """The build whose tokenizer an export's launch.json names ([] if none can be read): `train` on an export
    holds that build against gc too."""
    try:
        spec = json.loads((spec_dir / "launch.json").read_text())
        build = (spec_dir / spec["tokenizer"]["model"]).resolve().parent
    except (OSError, ValueError, KeyError, TypeError):  # train's own checks name what is wrong with the spec
        return []
    return [build] if (build / "manifest.json").is_file() else []


def main(argv: list[str] | None = None) -> int:
    """Parse, dispatch from the parser's table (each command's `func`), and turn errors into the exit-code table
    of pipeline/foundation/errors.py: one line on stderr, the traceback only with --debug."""
    parser = _parser()
    args = parser.parse_args(argv)
    if args.func is None:  # `cpp-data` or a command group alone: show what there is to run
        args.group.print_help()
        return EXIT_USAGE
    _LAST_ERROR.clear()
    rc = _run(args)
    if getattr(args, "log_format", None) == "json" and rc not in (EXIT_OK, EXIT_NOTHING_TO_DO):
        _json_error_event(rc)
    return rc


def _run(args: argparse.Namespace) -> int:
    """The command, with every error turned into its exit code and one line on stderr."""
    previous = _raise_on_sigterm()
    try:
        return args.func(absolute_paths(args))
    except Terminated:
        return _terminated()
    except CppDataError as exc:
        if _SIGTERM_SEEN:  # the signal went to the whole group: a worker's death surfaced first, as a failure
            return _terminated()
        if args.debug:
            raise
        _err(str(exc).splitlines()[0] if str(exc) else type(exc).__name__)
        return exc.exit_code
    except KeyboardInterrupt:
        _err("interrupted (run the same command again: a build resumes from its finished tasks)")
        return EXIT_INTERRUPTED
    except BrokenPipeError:  # `cpp-data recipes show v6 | head`: the reader left; stop quietly, as cat does
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_OK
    except OSError as exc:  # the file system said no: name the path, and whether to fix the input or retry
        if _SIGTERM_SEEN:
            return _terminated()
        if args.debug:
            raise
        where = f"{exc.filename}: " if exc.filename else ""
        if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
            _err(f"{where}{exc.strerror} (give a path this user can write, or change its permissions)")
            return EXIT_USAGE
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            _err(f"{where}no space left on its device; free space and run the same command again")
            return EXIT_FAILED
        _err(f"{where}{exc.strerror or exc} (run again with --debug for the traceback)".splitlines()[0])
        return EXIT_FAILED
    except Exception as exc:  # a bug or an unexpected environment: one line, the traceback on request
        if _SIGTERM_SEEN:
            return _terminated()
        if args.debug:
            raise
        _err(f"{type(exc).__name__}: {exc} (run again with --debug for the traceback)".splitlines()[0])
        return EXIT_FAILED
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


_SIGTERM_SEEN: list[int] = []  # the SIGTERMs this command received (a scheduler may signal every process at once)


def _terminated() -> int:
    _err("terminated by SIGTERM (run the same command again: a build resumes from its finished tasks)")
    return EXIT_TERMINATED


def _raise_on_sigterm():
    """Make SIGTERM raise Terminated in this (main) thread for the command's duration; the previous handler,
    or None where signals cannot be set (not the main thread)."""
    _SIGTERM_SEEN.clear()
    if threading.current_thread() is not threading.main_thread():
        return None

    def terminated(signum, frame):
        _SIGTERM_SEEN.append(signum)
        raise Terminated()

    return signal.signal(signal.SIGTERM, terminated)


if __name__ == "__main__":
    sys.exit(main())
