"""cpp-data status: an output directory summarized into OUT/status/."""

from __future__ import annotations

import json

from cpp_data.pipeline.commands.common import (
    need_output_directory,
    path_arg,
)
from cpp_data.pipeline.foundation.errors import EXIT_OK, BadInput


def add_parser(sub, leaf, group) -> None:
    s = leaf(sub, "status", cmd_status, help="summarize an output directory into OUT/status/",
             description="Write OUT/status/current.json and current.md (sources, pins, builds by date, stage cache, "
                         "the per-TU index cache) "
                         "atomically, append to changelog.jsonl when something changed, and print the Markdown. "
                         "A build whose manifest cannot be read is listed as broken.")
    s.add_argument("--out", type=path_arg, required=True, help="the output directory of builds")
    s.add_argument("--json", action="store_true", help="print JSON instead of Markdown")


def cmd_status(args) -> int:
    from cpp_data.pipeline.commands.status import render_md, write_status

    if not args.out.is_dir():
        raise BadInput(f"{args.out}: no such output directory")
    need_output_directory(args.out)  # it writes OUT/status/: never into a source tree
    status = write_status(args.out)
    print(json.dumps(status, indent=2) if args.json else render_md(status))
    return EXIT_OK
