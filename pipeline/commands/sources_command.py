"""cpp-data sources lock: every ref resolved to a commit, in a lock file."""

from __future__ import annotations

import sys

from cpp_data.pipeline.commands.common import (
    path_arg,
    unmatched_warnings,
)
from cpp_data.pipeline.foundation.errors import EXIT_OK, BadInput


def add_parser(sub, leaf, group) -> None:
    src = group("sources", help="work with sources files")
    lk = leaf(src, "lock", cmd_sources_lock, help="resolve every ref to a commit and write a lock file",
              description="Resolve each source's ref (tag, branch or commit) to a commit SHA, or pin a plain "
                          "directory by its tree digest, and write SOURCES.lock (or -o).")
    lk.add_argument("sources", type=path_arg, help="the sources TOML file")
    lk.add_argument("-o", "--output", type=path_arg, help="lock file to write (default: SOURCES with .lock suffix)")


def cmd_sources_lock(args) -> int:
    from cpp_data.pipeline.runner.sources import (
        directory_source_holding,
        load_sources,
        lock_path_for,
        lock_sources,
        write_lock,
    )

    specs, unmatched = load_sources(args.sources)
    for warning in unmatched_warnings(args.sources, unmatched):
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
