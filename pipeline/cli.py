"""The `cpp-data` command line: a dispatcher. Each verb is a module of pipeline/commands/ that adds its own
sub-parser (`add_parser`) and runs it; this module parses, makes every path absolute, holds the builds a command
reads against gc, and turns errors into the exit-code table of pipeline/foundation/errors.py."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from cpp_data.pipeline.commands import (
    build_command,
    diff_command,
    export_command,
    gc_command,
    launch_command,
    plan_command,
    publish_command,
    recipes_command,
    report_command,
    show_command,
    sources_command,
    status_command,
    tokenizer_command,
    train_command,
    validate_command,
    verify_command,
)
from cpp_data.pipeline.commands.common import HelpFormatter, Parser
from cpp_data.pipeline.commands.outcome import clear_last_error, json_error_event, run_command
from cpp_data.pipeline.foundation.errors import EXIT_NOTHING_TO_DO, EXIT_OK, EXIT_USAGE
from cpp_data.pipeline.foundation.version import __version__

MAIN_HELP = """\
cpp-data turns pinned C++ repositories into traceable, reproducible training shards.

typical use:
  cpp-data sources lock sources.toml            # resolve every ref to a commit -> sources.lock
  cpp-data build --version v6 --sources sources.toml --out out/
  cpp-data validate out/builds/<build>          # prove a build matches its manifest
  cpp-data status --out out/                    # what out/ holds -> out/status/current.{json,md}
  cpp-data diff out/builds/A out/builds/B       # what changed between two builds
  cpp-data publish out s3://bucket/prefix       # copy the latest build into an object store, checked, sealed

exit codes: 0 success (build: a new build was published), 1 a stage or check failed,
2 bad input (the message names the file), 3 build: nothing to do (a build of these pins and this recipe
already exists), 75 another build holds the output directory (retry later or pass --wait), 130 interrupted
(Ctrl-C) and 143 terminated (SIGTERM): run the same command again, a build resumes from its finished tasks.
"""

# In the order `cpp-data --help` lists them
COMMANDS = (build_command, plan_command, validate_command, status_command, diff_command, report_command,
            tokenizer_command, verify_command, publish_command, export_command, launch_command, train_command,
            show_command, gc_command, recipes_command, sources_command)


def _parser() -> argparse.ArgumentParser:
    common = Parser(add_help=False)
    common.add_argument("--debug", action="store_true", help="on an error, print the traceback, not one line")
    p = Parser(prog="cpp-data", description=MAIN_HELP, formatter_class=HelpFormatter)
    p.add_argument("--version", action="version", version=f"cpp-data {__version__}")
    p.set_defaults(func=None, group=p, debug=False, reads=())
    sub = p.add_subparsers(dest="command", metavar="COMMAND")

    def leaf(parent, name: str, func, reads=(), **kw) -> argparse.ArgumentParser:
        """A command that runs: shares --debug and the help formatter, dispatches to `func`. `reads`: the
        arguments naming builds it reads (resolved, and held against gc), or a function returning them."""
        cmd = parent.add_parser(name, parents=[common], formatter_class=HelpFormatter, **kw)
        cmd.set_defaults(func=func, reads=reads)
        return cmd

    def group(name: str, **kw) -> argparse._SubParsersAction:
        """A command with subcommands: alone, it prints its help listing them."""
        g = sub.add_parser(name, formatter_class=HelpFormatter, **kw)
        g.set_defaults(func=None, group=g)
        return g.add_subparsers(dest=f"{name}_command", metavar="SUBCOMMAND")

    for command in COMMANDS:
        command.add_parser(sub, leaf, group)
    return p


def absolute_paths(args: argparse.Namespace) -> argparse.Namespace:
    """Every path a user gave becomes absolute here, once, against the working directory the command was
    started in: nothing below the CLI ever sees a relative path (datatrove and git resolve relative paths
    against other directories than the user's). The builds a command reads (its `reads`; a BUILD argument may
    name an output directory, meaning its latest build) are resolved and held against gc while it runs; one in
    an object store is fetched to a local copy first (pipeline/commands/store_reads.py)."""
    from cpp_data.pipeline.commands.store_reads import StoreURL, fetch_for_reading
    from cpp_data.pipeline.runner.outlock import hold_for_reading
    from cpp_data.schemas.reader import resolve_build

    for key, value in vars(args).items():
        if isinstance(value, Path):
            setattr(args, key, Path(os.path.abspath(os.path.expanduser(value))))
    if callable(args.reads):
        read = args.reads(args)
    else:
        for key in args.reads:
            value = getattr(args, key)
            setattr(args, key, fetch_for_reading(value, args.command) if isinstance(value, StoreURL)
                    else resolve_build(value))
        read = [getattr(args, key) for key in args.reads]
    for build in read:
        hold_for_reading(build)
    return args


def main(argv: list[str] | None = None) -> int:
    """Parse, dispatch from the parser's table (each command's `func`), and end as pipeline/commands/outcome.py
    says: the exit-code table of pipeline/foundation/errors.py, one line on stderr for an error."""
    parser = _parser()
    args = parser.parse_args(argv)
    if args.func is None:  # `cpp-data` or a command group alone: show what there is to run
        args.group.print_help()
        return EXIT_USAGE
    clear_last_error()
    rc = run_command(args, absolute_paths)
    if getattr(args, "log_format", None) == "json" and rc not in (EXIT_OK, EXIT_NOTHING_TO_DO):
        json_error_event(rc)
    return rc


if __name__ == "__main__":
    sys.exit(main())
