"""cpp-data diff: what changed between two builds."""

from __future__ import annotations

import json
import sys

from cpp_data.pipeline.commands.common import outside_published_builds, path_arg
from cpp_data.pipeline.commands.store_reads import build_arg
from cpp_data.pipeline.foundation.errors import EXIT_OK, BadInput


def add_parser(sub, leaf, group) -> None:
    d = leaf(sub, "diff", cmd_diff, reads=("a", "b"), help="what changed between two builds",
             description="Compare two sealed builds by (repo, path): documents added, removed and changed (with the "
                         "commit each side saw; a document whose text is the same under a moved pin is counted as "
                         "'same text, new pin', not changed), files newly refused by rule, documents and bytes per "
                         "license and repo, and schema differences.",
             epilog="example: cpp-data diff out/builds/v6-20261101-1a2b3c4d out/builds/v6-20261130-5e6f7a8b "
                    "--tables diff/ && .venv/bin/python -c \"import duckdb; duckdb.sql(\\\"select change, "
                    "count(*) from 'diff/documents.parquet' group by 1\\\").show()\" (duckdb, the Python "
                    "module setup installs)")
    d.add_argument("a", type=build_arg, help="the older build directory (or its s3:// URL)")
    d.add_argument("b", type=build_arg, help="the newer build directory (or its s3:// URL)")
    d.add_argument("--json", action="store_true", help="print JSON instead of text")
    d.add_argument("--tables", type=path_arg, help="also write documents/refusals/licenses Parquet tables here")


def cmd_diff(args) -> int:
    from cpp_data.pipeline.commands.diff import diff_builds, render, write_tables

    if args.tables and args.tables.exists() and not args.tables.is_dir():  # before the diff's work, not after
        raise BadInput(f"--tables {args.tables}: is a file; give a directory (it is made if missing)")
    if args.tables:
        outside_published_builds(args.tables, "--tables", "a directory of its own")
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
