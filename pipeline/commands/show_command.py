"""cpp-data show: sample documents of a build."""

from __future__ import annotations

import os
import sys

from cpp_data.pipeline.commands.common import int_at_least
from cpp_data.pipeline.commands.store_reads import build_arg
from cpp_data.pipeline.foundation.errors import EXIT_OK, BadInput


def add_parser(sub, leaf, group) -> None:
    sh = leaf(sub, "show", cmd_show, reads=("build",),
              help="print sample documents of a build (text, structure, tokens, license)",
              description="Print documents of a build in manifest order: provenance (repo, path, commit, doc_id), "
                          "license decision, size, tokens, and the text with tree-sitter's structure spans "
                          "(coloured in a terminal, as line ranges otherwise). --json gives the same for scripts.",
              epilog="examples:\n  cpp-data show out --repo googletest --path '*/gtest.cc'\n"
                     "  cpp-data show out -n 20 --json | jq '.[].source_path'")
    sh.add_argument("build", type=build_arg, help="a build directory, OUT for its latest build, or "
                                                  "OUT/builds/PROMOTED; or one of these in a store, s3://BUCKET/OUT")
    sh.add_argument("--repo", help="only documents of this source")
    sh.add_argument("--path", dest="path_glob", metavar="GLOB", help="only paths matching this glob (fnmatch)")
    sh.add_argument("-n", type=int_at_least(1), default=3, help="how many documents (default 3)")
    sh.add_argument("--columns", nargs="+", default=[], metavar="COLUMN", help="more shard columns to print")
    sh.add_argument("--lines", type=int_at_least(1), default=40, help="lines of text per document (default 40)")
    sh.add_argument("--json", action="store_true", help="JSON: every shown column, spans as character ranges")


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
