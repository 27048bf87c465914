"""cpp-data gc: old builds and the cache entries no kept build needs, removed."""

from __future__ import annotations

from cpp_data.pipeline.commands.common import (
    need_output_directory,
    path_arg,
)
from cpp_data.pipeline.foundation.errors import EXIT_OK, BadInput


def add_parser(sub, leaf, group) -> None:
    gc = leaf(sub, "gc", cmd_gc, help="remove old builds and the cache entries no kept build needs",
              description="Keep the builds LATEST and PROMOTED name and the newest --keep builds of each schema "
                          "generation; remove every other build (with its exports, verify receipt and report) "
                          "and every cache entry that no kept build lists among its stages, so rebuilding a kept "
                          "build stays 'nothing to do', and the per-TU index results (OUT/shared/tus/) no "
                          "remaining semantics entry used. Entries of an interrupted build (.partial) stay for its "
                          "resume. Holds the output lock; prints what it removed and how much.",
              epilog="example: cpp-data gc --out out --keep 2 --dry-run")
    gc.add_argument("--out", type=path_arg, required=True, help="output directory")
    gc.add_argument("--keep", type=int, default=2, help="newest builds kept per schema generation (default 2)")
    gc.add_argument("--dry-run", action="store_true", help="say what would go, remove nothing")
    gc.add_argument("--wait", action="store_true", help="if a build holds OUT, wait for it instead of exiting 75")


def cmd_gc(args) -> int:
    from cpp_data.pipeline.commands.gc import collect_garbage, format_result

    if args.keep < 1:
        raise BadInput("--keep must be at least 1")
    need_output_directory(args.out)
    print(format_result(collect_garbage(args.out, args.keep, args.dry_run, args.wait), args.dry_run))
    return EXIT_OK
