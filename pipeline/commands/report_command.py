"""cpp-data report: a self-contained HTML report of a build."""

from __future__ import annotations

import errno

from cpp_data.pipeline.commands.common import (
    outside_published_builds,
    path_arg,
)
from cpp_data.pipeline.foundation.errors import EXIT_OK, BadInput


def add_parser(sub, leaf, group) -> None:
    rp = leaf(sub, "report", cmd_report, reads=("build",), help="write a self-contained HTML report of a build",
              description="Write OUT/reports/BUILD.html (never into the sealed build): sources and pins, license "
                          "distribution by repo, refusal reasons, duplicate clusters, document and token lengths, "
                          "semantic coverage and stage times, as inline SVG plots (no scripts, no network).")
    rp.add_argument("build", type=path_arg, help="a build directory (OUT/builds/NAME), OUT for its latest build, "
                                             "or OUT/builds/PROMOTED")
    rp.add_argument("--output", type=path_arg, help="the HTML file to write (default OUT/reports/BUILD.html)")


def cmd_report(args) -> int:
    from cpp_data.pipeline.commands.report import build_report, default_report_path

    if args.output is not None:
        outside_published_builds(args.output, "--output", "OUT/reports/BUILD.html")
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
