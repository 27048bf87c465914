"""What the commands share: argument types, the help formatter, the recipe and sources arguments, and the
checks of paths a command writes to."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from cpp_data.pipeline.foundation.errors import EXIT_USAGE, BadInput


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
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
    p.add_argument("--recipe", type=path_arg, help="a recipe file to use instead of the bundled one")
    p.add_argument("--sources", type=path_arg, required=True,
                   help="sources TOML; a relative local url in it is relative to the file's directory")
    p.add_argument("--lock", type=path_arg,
                   help="lock file with the pins (default: SOURCES.lock beside the sources file if present, "
                        "else every ref is resolved now)")
    p.add_argument("--relock", action="store_true",
                   help="resolve every ref again instead of using the lock (a directory edited since locking "
                        "otherwise stops the build)")
    p.add_argument("--out", type=path_arg, required=True, help="output directory (cache, builds, status)")
    p.add_argument("--seed", type=int, help="shuffle seed (default: the recipe's shards.seed)")
    p.add_argument("--tokenizer", type=path_arg, metavar="BUILD_OR_DIR",
                   help="reuse this tokenizer instead of training one (a tokenizer/ directory, a build, or OUT): "
                        "token ids stay those of that build; recorded by SHA-256 in the manifest")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="STAGE.PARAM=VALUE",
                   help="override a recipe parameter, checked like the recipe file and recorded in the manifest "
                        "(VALUE in TOML: 2048, 0.5, true, \"text\"); repeatable, e.g. "
                         "--set packed_rows.fim_rate=0.3")


def int_at_least(least: int, most: int | None = None):
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


def path_arg(text: str) -> Path:
    """An argparse type: a local path that is not empty. `Path("")` is the working directory, so `--out "$OUT"`
    with OUT unset built into whatever directory the scheduler ran in; a URL is refused (the commands that read
    a build from a store take pipeline/commands/store_reads.build_arg instead)."""
    if not text.strip():
        raise argparse.ArgumentTypeError("is empty (an unset variable?); give a path, or . for this directory")
    if _URL.match(text):  # Path("s3://b/x") is the local folder s3:/b/x, where a build went unnoticed
        raise argparse.ArgumentTypeError(
            f"{text} is a URL, and this takes a local path; a build is made in a local --out, then "
            f"`cpp-data publish OUT/builds/NAME s3://BUCKET/PREFIX` copies it to a store (docs/FORMATS.md, "
            f"Object storage)")
    return Path(text)


_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")


_SLURM_TIME = re.compile(r"\d+(:\d+){0,2}|\d+-\d+(:\d+){0,2}|(?i:unlimited|infinite)")


def slurm_time(text: str) -> str:
    """An argparse type: a time limit in one of sbatch's formats (anything else, `banana`, would reach the job
    script)."""
    if not _SLURM_TIME.fullmatch(text):
        raise argparse.ArgumentTypeError(f"{text!r} is not a Slurm time: MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM or "
                                         f"D-HH:MM:SS")
    return text


def file_prefix(text: str) -> str:
    """An argparse type: a file name prefix, with no path in it (`--name ../../evil` would write bin/idx files
    outside the export directory)."""
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", text):
        raise argparse.ArgumentTypeError(f"{text!r} is not a file prefix: use letters, digits, '.', '_' and '-', "
                                         f"starting with a letter or digit")
    return text


def number(lowest: float, highest: float | None = None, above: bool = False):
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


class Parser(argparse.ArgumentParser):
    """argparse's parser, whose usage errors are one line like every other error of cpp-data (argparse printed
    the whole usage block, 4 to 16 lines, above it): the command, the problem, and where the help is. Its
    subcommands' parsers are of this class too (add_subparsers takes the parent's class)."""

    def error(self, message: str):
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def parse_overrides(items: list[str]) -> dict[str, dict]:
    """--set STAGE.PARAM=VALUE items as {stage: {param: value}}; VALUE is read as a TOML value (a bare word
    that is not one is taken as a string). Names and types are checked later, by load_recipe."""
    import tomllib

    out: dict[str, dict] = {}
    for item in items:
        key, eq, raw = item.partition("=")
        stage, dot, param = key.strip().partition(".")
        if not eq or not dot or not stage or not param:
            raise BadInput(f"--set {item}: expected STAGE.PARAM=VALUE, e.g. packed_rows.fim_rate=0.3")
        try:
            value = tomllib.loads(f"v = {raw.strip()}")["v"]
        except tomllib.TOMLDecodeError:
            value = raw.strip()
        out.setdefault(stage, {})[param] = value
    return out


def need_output_directory(out: Path) -> None:
    """Refuse a directory no build wrote: gc would look for builds in it and status writes OUT/status/ into it."""
    if not (out / "builds").is_dir() and not (out / "cache").is_dir():
        raise BadInput(f"{out}: not an output directory (no builds/ or cache/); give the --out of a build")


def unmatched_warnings(sources: Path, entries: list[str]) -> list[str]:
    return [f"{sources}: [opt_out] repos entry {e!r} names no source (by name or URL), so it opts nothing out"
            for e in entries]


def pins(args, warnings: list[str] | None = None):
    """The sources' pins: from --lock or SOURCES.lock when present (a directory edited since is an error unless
    --relock), else resolved now. What a user should hear of the sources file goes to `warnings`."""
    from cpp_data.pipeline.runner.sources import (
        check_directory_pins,
        directory_source_holding,
        load_sources,
        lock_path_for,
        lock_sources,
        read_lock,
    )

    specs, unmatched = load_sources(args.sources)
    if warnings is not None:
        warnings += unmatched_warnings(args.sources, unmatched)
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


def recipe_of(args):
    from cpp_data.pipeline.runner.recipe import load_recipe

    overrides = parse_overrides(args.overrides)
    if args.seed is not None:
        overrides.setdefault("shards", {})["seed"] = args.seed
    if args.tokenizer is not None:
        overrides.setdefault("tokenizer", {})["frozen"] = str(args.tokenizer)
        if "vocab_size" in overrides["tokenizer"]:  # a frozen tokenizer keeps its own: the value would be ignored
            raise BadInput(f"--set tokenizer.vocab_size with --tokenizer {args.tokenizer}: a frozen tokenizer keeps "
                           f"its own vocabulary; drop one of them")
    if args.recipe is not None and args.recipe_version not in (DEFAULT_RECIPE, args.recipe.stem):
        raise BadInput(f"--version {args.recipe_version} with --recipe {args.recipe}: the recipe file is the "
                       f"recipe (its version is its file name, {args.recipe.stem}); give one of them")
    return load_recipe(args.recipe_version if args.recipe is None else None, args.recipe, overrides or None,
                       flags={**({"tokenizer.frozen": "--tokenizer"} if args.tokenizer is not None else {}),
                              **({"shards.seed": "--seed"} if args.seed is not None else {})})


_FSSPEC_SPECIAL = re.compile(r"[*\[\]]|::|[\x00-\x1f\x7f]")


def fsspec_safe(path: Path, option: str) -> None:
    """Refuse a path datatrove cannot name: its file listing goes through fsspec, which reads `*`, `[` and `]` as
    a glob, `::` as a chain of filesystems, and cuts at a newline, so such an --out failed a stage later with
    'No files found on ...'."""
    m = _FSSPEC_SPECIAL.search(str(path))
    if m:
        raise BadInput(f"{option} {str(path)!r}: holds {m.group()!r}, which the datatrove tasks' file listing "
                       f"(fsspec) reads as a pattern or a separator; give a path without * [ ] :: or control "
                       f"characters")


def outside_published_builds(path: Path, option: str, default: str) -> None:
    """Refuse a path a command would write inside a published build: its manifest fixes every file there, so a
    file written there (`report --output BUILD/reports/summary.json`, say) would break the build it describes."""
    from cpp_data.pipeline.foundation.fsutil import is_sealed

    for parent in [path, *path.parents]:
        if is_sealed(parent) and (parent / "manifest.json").is_file():
            raise BadInput(f"{option} {path}: inside the published build {parent}, whose files its manifest fixes; "
                           f"give a path outside it (the default is {default})")


def check_export_target(out: Path) -> None:
    """An export replaces its directory whole (the sealed rename), so --out must be new or empty, and outside
    every published build: `export --out OUT` would otherwise delete a whole output directory (builds, cache and
    logs), and `--out BUILD/packed` a promoted build's files."""
    outside_published_builds(out, "--out", "OUT/exports/BUILD/...")
    fsspec_safe(out, "--out")
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise BadInput(f"--out {out}: exists and holds other files, which the export would replace; give a new or "
                       f"empty directory")
