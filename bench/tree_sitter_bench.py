"""tree-sitter throughput of the structure layer on C/C++ trees: files/s, MB/s, ERROR byte share, call edges.

    .venv/bin/python bench/tree_sitter_bench.py /usr/src/googletest /usr/share/juce/modules /usr/include/Poco

Times are CPU seconds of one process (one core), and `parse alone` is tree-sitter's bare parse: the floor.
"""

from __future__ import annotations

from cpp_data.stages.lib.name_graph import call_graph
from cpp_data.stages.lib.syntax import CPP_SUFFIXES, analyze, new_parser


def main(argv: list[str] | None = None) -> None:
    import argparse
    import os
    import time

    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("dirs", nargs="+")
    args = ap.parse_args(argv)
    parser = new_parser()
    for root in args.dirs:
        paths = sorted(os.path.join(d, f) for d, _, fs in os.walk(root) for f in fs
                       if f.lower().endswith(CPP_SUFFIXES))
        texts = {}
        for p in paths:
            with open(p, "rb") as fh:
                texts[p] = fh.read().decode("utf-8", "replace")
        t0 = time.process_time()
        for t in texts.values():
            parser.parse(t.encode("utf-8", "surrogatepass"))
        t0, parse_s = time.process_time(), time.process_time() - t0
        results = {p: analyze(t, parser) for p, t in texts.items()}
        t1 = time.process_time()
        edges = call_graph(results)
        t2 = time.process_time()
        all_edges = len(call_graph(results, None))
        n_bytes = sum(r.n_bytes for r in results.values())
        err = sum(r.error_bytes for r in results.values()) / max(n_bytes, 1)
        n_funcs = sum(sp.kind == "function" for r in results.values() for sp in r.spans)
        print(f"{root}: {len(paths)} files {n_bytes / 1e6:.1f} MB in {t1 - t0:.2f}s = {len(paths) / (t1 - t0):.0f} "
              f"files/s {n_bytes / 1e6 / (t1 - t0):.2f} MB/s; ERROR byte share {err:.1%}; {n_funcs} functions, "
              f"{len(edges)} call edges ({t2 - t1:.2f}s; {all_edges} without the candidate cap); "
              f"parse alone {n_bytes / 1e6 / parse_s:.2f} MB/s")


if __name__ == "__main__":
    main()
