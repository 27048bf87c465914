"""Agreement of tree-sitter's function and class spans (stages/lib/syntax.py) with libclang's definitions.

    PYTHONPATH=... .venv/bin/python bench/structure_vs_libclang.py [--repos googletest,poco,...] [--workers 2]
        [--cache DIR] [--out STEM]

libclang is the judge (clang_index/definitions.py): on the files its TUs read, every function and class
definition located in project files, minus those whose name a macro spelled (`TEST(A, B) {...}`: tree-sitter
sees one macro call, libclang a class and a method; both sides' definitions on such lines are set aside and
counted). tree-sitter's spans of the same files are compared, minus those starting on lines the preprocessor
skipped in every TU (`#ifdef _WIN32` branches libclang never parsed). A definition matches when file, family
(function | class, where class covers class/struct/union) and first and last line agree; per repository and
family: counts, matched, precision, recall, F1, and the share of libclang's class definitions that tree-sitter
labelled `function` at the same lines. Definitions without a body are set aside on both sides: `= default` and
`= delete` (clang gives a body to those it had to generate and not to others) and explicit instantiations
(`template class A<int>;`, a class definition to libclang). Two extent conventions of libclang's are followed:
a function's leading `[[...]]` attributes are not in it, and a member template defined outside its class
template starts at its own `template <...>`, not its class's. A sample of disagreements is printed.

Repositories: googletest, configured by CMake as the pipeline does (clang_index/configure.py), one TU per source
file; and trees Debian installs without a build, judged through small synthetic TUs that include their headers
(`#include <Poco/X.h>`) or, for JUCE, the module sources a JUCE project compiles. Results are written to
bench/results/structure_vs_libclang.{md,json}.
"""

from __future__ import annotations

import bisect
import glob
import json
import os
import pickle
import re
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from cpp_data.clang_index.compile_db import CompileCommand, load_compile_commands
from cpp_data.clang_index.definitions import Definitions, collect_definitions
from cpp_data.stages.lib.syntax import analyze, new_parser

RESULTS = Path(__file__).resolve().parent / "results"
FAMILY = {"function": "function", "class": "class", "struct": "class", "union": "class"}
GOOGLETEST = Path("/usr/src/googletest")


def tree_sitter_definitions(paths, parser=None) -> list[dict]:
    """Function and class spans of each file as rows shaped like libclang's (1-based lines)."""
    parser = parser or new_parser()
    out = []
    for path in paths:
        try:
            text = Path(path).read_bytes().decode("utf-8", "replace")
        except OSError:
            continue
        line_starts = [0] + [i + 1 for i, ch in enumerate(text) if ch == "\n"]
        for sp in analyze(text, parser).spans:
            if sp.kind in FAMILY:
                # from the span's start, not Span.line: a template's span starts at its `template <...>` head
                first = bisect.bisect_right(line_starts, _libclang_start(text, sp.start))
                last = bisect.bisect_right(line_starts, max(sp.end - 1, sp.start))
                out.append({"file": path, "family": FAMILY[sp.kind], "kind": sp.kind, "name": sp.name,
                            "start_line": first, "end_line": last,
                            "bodiless": sp.kind == "function" and sp.body_start < 0})
    return out


_TEMPLATE_HEAD = re.compile(r"template\s*<")


def _skip_brackets(text: str, pos: int, open_: str, close: str) -> int:
    depth = 0
    while pos < len(text):
        depth += (text[pos] == open_) - (text[pos] == close)
        pos += 1
        if depth == 0:
            break
    while pos < len(text) and text[pos].isspace():
        pos += 1
    return pos


def _libclang_start(text: str, start: int) -> int:
    """Where libclang's extent of the definition at text[start:] begins: after leading `[[...]]` attributes,
    which its extents leave out, and at the last of several `template <...>` heads (a member template defined
    outside its class template, `template <class T> template <class U> void A<T>::f(U)`, starts at its own)."""
    while text.startswith("[[", start):
        start = _skip_brackets(text, start, "[", "]")
    last, pos = start, start
    while (m := _TEMPLATE_HEAD.match(text, pos)) is not None:
        last, pos = pos, _skip_brackets(text, m.end() - 1, "<", ">")
    return last


def compare(judge: Definitions, spans: list[dict]) -> dict:
    """Per family: libclang and tree-sitter counts, matched, precision, recall, F1; the share of libclang class
    definitions tree-sitter labelled function; what was set aside; samples of disagreements."""
    macro_lines = {(d["file"], d["start_line"]) for d in judge.definitions if d["macro"]}
    clang = [d for d in judge.definitions if not d["macro"] and not d.get("bodiless")]
    ts_all = [s for s in spans if s["start_line"] not in judge.dead_lines.get(s["file"], ())]
    ts = [s for s in ts_all if (s["file"], s["start_line"]) not in macro_lines and not s["bodiless"]]

    def key(r):
        return r["file"], r["family"], r["start_line"], r["end_line"]

    out: dict = {"set_aside": {"libclang_macro_spelled": sum(d["macro"] for d in judge.definitions),
                               "libclang_bodiless": sum(bool(d.get("bodiless")) and not d["macro"]
                                                                 for d in judge.definitions),
                               "tree_sitter_on_macro_lines": sum((s["file"], s["start_line"]) in macro_lines
                                                                 for s in ts_all),
                               "tree_sitter_bodiless": sum(s["bodiless"] for s in ts_all),
                               "tree_sitter_in_skipped_lines": len(spans) - len(ts_all)},
                 "files": len(judge.files),
                 "tus": dict(Counter(s["status"] for s in judge.tu_status))}
    ts_lines = Counter((s["file"], s["start_line"], s["end_line"]) for s in ts if s["family"] == "function")
    for fam in ("function", "class"):
        c = Counter(key(d) for d in clang if d["family"] == fam)
        t = Counter(key(s) for s in ts if s["family"] == fam)
        matched = sum((c & t).values())
        n_c, n_t = sum(c.values()), sum(t.values())
        p, r = matched / max(n_t, 1), matched / max(n_c, 1)
        out[fam] = {"libclang": n_c, "tree_sitter": n_t, "matched": matched, "precision": round(p, 4),
                    "recall": round(r, 4), "f1": round(2 * p * r / max(p + r, 1e-12), 4)}
        missed, extra = c - t, t - c
        out[fam]["missed_sample"] = [_show(d) for d in clang if d["family"] == fam and missed[key(d)] > 0][:25]
        out[fam]["extra_sample"] = [_show(s) for s in ts if s["family"] == fam and extra[key(s)] > 0][:25]
    classes = [d for d in clang if d["family"] == "class"]
    as_function = [d for d in classes if ts_lines[(d["file"], d["start_line"], d["end_line"])] > 0]
    out["class"]["labelled_function"] = len(as_function)
    out["class"]["labelled_function_share"] = round(len(as_function) / max(len(classes), 1), 4)
    return out


def _show(r: dict) -> str:
    try:
        with open(r["file"], errors="replace") as fh:
            first = next(ln for i, ln in enumerate(fh, 1) if i == r["start_line"]).strip()
    except (OSError, StopIteration):
        first = ""
    return f"{r['file']}:{r['start_line']}-{r['end_line']} {r.get('kind', '')} {r['name']!r}: {first[:100]}"


def judge_repo(make, root: str, workers: int, timeout_s: float, cache: Path | None = None) -> dict:
    """libclang's definitions (from `cache` when there, which must then be the same tree) against tree-sitter's."""
    t0 = time.monotonic()
    cached = cache is not None and cache.is_file()
    if cached:
        judge = Definitions(*pickle.loads(cache.read_bytes()))
    else:
        judge = collect_definitions(make(), root, workers, timeout_s)
        if cache is not None:
            cache.parent.mkdir(parents=True, exist_ok=True)
            cache.write_bytes(pickle.dumps(tuple(judge)))
    t1 = time.monotonic()
    spans = tree_sitter_definitions(sorted(judge.files))
    res = compare(judge, spans)
    res["seconds"] = {"libclang": "cached" if cached else round(t1 - t0, 1),
                      "tree_sitter": round(time.monotonic() - t1, 1)}
    return res


def one_per_file(commands: list[CompileCommand]) -> list[CompileCommand]:
    """A file built by several targets (googletest builds gtest-all.cc four times) is judged once."""
    seen, out = set(), []
    for c in commands:
        if c.file not in seen:
            seen.add(c.file)
            out.append(c)
    return out


def googletest_commands(work: Path) -> list[CompileCommand]:
    from cpp_data.clang_index.configure import discover

    found = discover(GOOGLETEST, work / "googletest")
    if found.path is None:
        raise RuntimeError(f"googletest not configured: {found.receipt()}")
    return one_per_file(load_compile_commands(found.path))


def header_commands(work: Path, name: str, headers: list[str], args: list[str], per_tu: int = 12,
                    include_prefix: str = "") -> list[CompileCommand]:
    """Synthetic TUs, each including `per_tu` of the headers (`#include <PREFIX/H>`), compiled with `args`."""
    d = work / name
    d.mkdir(parents=True, exist_ok=True)
    out = []
    for i in range(0, len(headers), per_tu):
        tu = d / f"tu{i // per_tu:04d}.cc"
        tu.write_text("".join(f"#include <{include_prefix}{h}>\n" for h in headers[i:i + per_tu]))
        out.append(CompileCommand(str(d), str(tu), ["c++", *args, "-c", str(tu)]))
    return out


def _rel(root: str, pattern: str, exclude: tuple[str, ...] = ()) -> list[str]:
    return sorted(os.path.relpath(p, root) for p in glob.glob(os.path.join(root, pattern), recursive=True)
                  if not any(x in p for x in exclude))


def repositories(work: Path) -> dict[str, tuple[str, list[CompileCommand]]]:
    """name -> (project root, compile commands), for what is installed here."""
    std = ["-std=c++17", "-w"]
    repos = {}
    if GOOGLETEST.is_dir():
        repos["googletest"] = (str(GOOGLETEST), lambda: googletest_commands(work))
    poco = "/usr/include/Poco"
    if os.path.isdir(poco):
        # Poco's per-platform implementation headers (Mutex_WIN32.h, Thread_VX.h, ...) are included by their
        # platform-neutral header where they apply, and #error elsewhere: only the neutral ones are included
        heads = [h for m in ("", "Net/", "JSON/", "Util/", "XML/", "DOM/", "SAX/")
                 for h in _rel(poco, m + "*.h") if "_" not in os.path.basename(h)
                 and os.path.basename(h) not in ("UnWindows.h", "WindowsConsoleChannel.h", "EventLogChannel.h")]
        repos["poco"] = (poco, lambda h=heads: header_commands(work, "poco", h, std, include_prefix="Poco/"))
    juce = "/usr/share/juce/modules"
    if os.path.isdir(juce):
        mods = [m for m in ("juce_core", "juce_events", "juce_data_structures")
                if os.path.isfile(os.path.join(juce, m, m + ".cpp"))]
        args = [*std, f"-I{juce}", "-DJUCE_GLOBAL_MODULE_SETTINGS_INCLUDED=1", "-DJUCE_STANDALONE_APPLICATION=1",
                "-DNDEBUG=1", "-DJUCE_USE_CURL=0", "-DJUCE_WEB_BROWSER=0"]
        repos["juce"] = (juce, lambda: [CompileCommand(os.path.join(juce, m), os.path.join(juce, m, m + ".cpp"),
                                                       ["c++", *args, "-c", m + ".cpp"]) for m in mods])
    for name, root, pattern, prefix, extra in (
            ("yaml-cpp", "/usr/include/yaml-cpp", "**/*.h", "yaml-cpp/", []),
            ("jsoncpp", "/usr/include/jsoncpp/json", "*.h", "json/", ["-I/usr/include/jsoncpp"]),
            ("absl", "/usr/include/absl", "{strings,status,container,synchronization,time}/*.h", "absl/", []),
            ("spdlog", "/usr/include/spdlog", "*.h", "spdlog/", []),
            ("openbabel", "/usr/include/openbabel3/openbabel", "*.h", "openbabel/",
             ["-I/usr/include/openbabel3"])):
        if not os.path.isdir(root):
            continue
        if "{" in pattern:
            head, rest = pattern.split("{", 1)
            alts, tail = rest.split("}", 1)
            heads = [h for a in alts.split(",") for h in _rel(root, head + a + tail, ("internal",))]
        else:
            heads = _rel(root, pattern, ("internal",))
        repos[name] = (root, (lambda n=name, h=heads, p=prefix, x=extra:
                              header_commands(work, n, h, [*std, *x], include_prefix=p)))
    return repos


def markdown(results: dict) -> str:
    lines = ["# tree-sitter structure spans vs libclang definitions", "",
             "Made by `bench/structure_vs_libclang.py`; a definition matches on file, family and first/last line.",
             "", "| repository | TUs | files | family | libclang | tree-sitter | matched | precision | recall | F1 | "
             "classes labelled function |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for name, r in results.items():
        if "error" in r:
            lines.append(f"| {name} | error: {r['error']} |")
            continue
        for fam in ("function", "class"):
            f = r[fam]
            share = f"{f['labelled_function']} ({100 * f['labelled_function_share']:.1f}%)" if fam == "class" else ""
            lines.append(f"| {name} | {sum(r['tus'].values())} {r['tus']} | {r['files']} | {fam} | {f['libclang']} | "
                         f"{f['tree_sitter']} | {f['matched']} | {f['precision']:.3f} | {f['recall']:.3f} | "
                         f"{f['f1']:.3f} | {share} |")
    lines += ["", "Set aside (macro-spelled definitions, and tree-sitter spans on lines skipped by the preprocessor):",
              ""]
    lines += [f"- {name}: {r['set_aside']}" for name, r in results.items() if "set_aside" in r]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repos", default="", help="comma-separated subset (default: all installed)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=300)
    ap.add_argument("--out", default=str(RESULTS / "structure_vs_libclang"), help="path stem for .md and .json")
    ap.add_argument("--samples", type=int, default=8, help="disagreements printed per family")
    ap.add_argument("--cache", default="", help="keep libclang's definitions per repository in this directory and "
                    "reuse them (to compare two tree-sitter versions against one judge)")
    a = ap.parse_args(argv)
    results = {}
    with tempfile.TemporaryDirectory(prefix="structure-vs-libclang-") as work:
        repos = repositories(Path(work))
        wanted = [r for r in a.repos.split(",") if r] or list(repos)
        for name in wanted:
            if name not in repos:
                print(f"{name}: not installed here", file=sys.stderr)
                continue
            root, make = repos[name]
            try:
                results[name] = judge_repo(make, root, a.workers, a.timeout,
                                           Path(a.cache) / f"{name}.pickle" if a.cache else None)
            except RuntimeError as e:
                results[name] = {"error": str(e)}
                print(f"{name}: {e}")
                continue
            r = results[name]
            print(f"== {name}: TUs {r['tus']} files {r['files']} set aside {r['set_aside']} {r['seconds']}")
            for fam in ("function", "class"):
                f = r[fam]
                print(f"  {fam:8s} libclang {f['libclang']:5d} tree-sitter {f['tree_sitter']:5d} matched "
                      f"{f['matched']:5d}  P {f['precision']:.3f} R {f['recall']:.3f} F1 {f['f1']:.3f}"
                      + (f"  labelled function: {f['labelled_function']} ({100 * f['labelled_function_share']:.1f}%)"
                         if fam == "class" else ""))
                for s in f["missed_sample"][:a.samples]:
                    print(f"    libclang only: {s}")
                for s in f["extra_sample"][:a.samples]:
                    print(f"    tree-sitter only: {s}")
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(results, indent=1) + "\n")
    out.with_suffix(".md").write_text(markdown(results))
    print(f"wrote {out}.md and {out}.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
