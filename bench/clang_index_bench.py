"""libclang indexing throughput on a compile database, and its overhead over a bare parse of the same TUs.

    .venv/bin/python bench/clang_index_bench.py BUILD/compile_commands.json --root SOURCE_DIR [--workers 2]

The floor is libclang's own parse of every TU with the same arguments and options and no AST walk, run through
the same process pool. Prints TUs/s, MB/s (main files, and with every header parsed) and the overhead.
"""

from __future__ import annotations

import sys
import time

from cpp_data.clang_index.compile_db import check_libclang, find_resource_dir, load_compile_commands
from cpp_data.clang_index.index import index_project
from cpp_data.clang_index.pool import run_pool
from cpp_data.clang_index.walker import bare_parse


def main(argv: list[str] | None = None) -> int:
    """Index a compile database; print throughput and the overhead against a bare parse of the same TUs."""
    import argparse
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("compile_commands")
    ap.add_argument("--root", required=True, help="project root: only files under it are indexed")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=60)
    ap.add_argument("--max-rss-mb", type=int, default=4096)
    ap.add_argument("--no-bare", action="store_true", help="skip the bare-parse baseline")
    ap.add_argument("--walk-once", action="store_true",
                    help="each main file once, each file walked by one TU (as the semantics stage indexes)")
    a = ap.parse_args(argv)
    try:
        cmds = load_compile_commands(a.compile_commands)
        check_libclang()
        rdir = str(find_resource_dir())
    except (ValueError, RuntimeError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if a.walk_once:  # the bare parse then covers the same TUs: each main file once
        from cpp_data.clang_index.selection import first_command_per_file

        cmds = first_command_per_file(cmds)[0]
    t0 = time.monotonic()
    res = index_project(cmds, a.root, a.workers, a.timeout, a.max_rss_mb, a.walk_once)
    wall = time.monotonic() - t0
    st = res.tu_status
    by: dict[str, int] = {}
    for s in st:
        by[s["status"]] = by.get(s["status"], 0) + 1
    src_mb = sum(s["source_bytes"] for s in st) / 1e6
    hdr_mb = sum(s["header_bytes"] for s in st) / 1e6
    parse_s, walk_s = sum(s["parse_s"] for s in st), sum(s["walk_s"] for s in st)
    print(f"TUs: {len(st)} {by}  ok: {100 * by.get('ok', 0) / max(1, len(st)):.1f}%  wall: {wall:.1f}s  "
          f"TUs/s: {len(st) / wall:.2f}")
    print(f"MB/s: main files {src_mb / wall:.3f} ({src_mb:.2f} MB), with headers {(src_mb + hdr_mb) / wall:.2f} "
          f"({src_mb + hdr_mb:.1f} MB)")
    print(f"rows: functions {len(res.functions)} edges {len(res.edges)} type_refs {len(res.type_refs)} "
          f"includes {len(res.includes)} preamble {len(res.preamble)}")
    print(f"in-worker: parse {parse_s:.1f}s walk {walk_s:.1f}s (walk/parse {100 * walk_s / max(parse_s, 1e-9):.0f}%)")
    for s in st:
        if s["status"] != "ok":
            print(f"  {s['status']}: {s['file']}: {s['error_messages'][:2]}")
    if not a.no_bare:
        t0 = time.monotonic()
        run_pool(bare_parse, cmds, (a.root, rdir), a.workers, a.timeout, a.max_rss_mb)
        bare = time.monotonic() - t0
        print(f"bare parse wall: {bare:.1f}s  indexing overhead vs bare parse: {100 * (wall - bare) / bare:+.0f}%")
    return 0



if __name__ == "__main__":
    sys.exit(main())
