"""Secrets: detect-secrets' scanner alone against the prefiltered scan cpp-data runs (stages/lib/scrub.py), and the
labelled set's figures.

Prints, for C/C++ files under the given directories (default: the default corpus's trees):
  - MB/s per core of the scanner over every line, on a sample of `--sample-mb`;
  - MB/s per core of the prefiltered scan (prefilter + scanner on candidate lines) and of the whole scrub
    (redaction and PII included), over every file;
  - whether both scans report exactly the same findings on the sample;
  - the findings over every file, by type (on /usr/include and /usr/src, what would change in real code);
  - recall on tests/fixtures/secrets/planted.jsonl and the share of look-alikes changed.
Writes the same as JSON with --out. One process, so the rates are per core.
"""

from __future__ import annotations

import argparse
import json
import time
from collections import Counter
from pathlib import Path

EXT = {".h", ".hh", ".hpp", ".hxx", ".c", ".cc", ".cpp", ".cxx", ".ipp", ".inl", ".tcc"}
DEFAULT = ["/usr/src/googletest", "/usr/include/nlohmann", "/usr/include/Poco", "/usr/share/juce/modules"]
FIXTURES = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "secrets"


def texts(dirs: list[str]) -> list[str]:
    out = []
    for d in dirs:
        for p in sorted(Path(d).rglob("*")):
            if p.suffix in EXT and p.is_file() and not p.is_symlink():
                out.append(p.read_text(encoding="utf-8", errors="replace"))
    return out


def rate(fn, docs: list[str]) -> tuple[float, list]:
    mb = sum(len(t.encode()) for t in docs) / 1e6
    t0 = time.process_time()
    results = [fn(t) for t in docs]
    return mb / (time.process_time() - t0), results


def labelled() -> dict:
    from cpp_data.stages.lib.scrub import scrub

    def doc(line: str) -> str:
        return f"#include <string>\n\nnamespace app {{\n{line}\n}}  // namespace app\n"

    planted = [json.loads(x) for x in (FIXTURES / "planted.jsonl").read_text().splitlines()]
    look = [json.loads(x) for f in ("lookalikes_real", "lookalikes_synthetic")
            for x in (FIXTURES / f"{f}.jsonl").read_text().splitlines()]
    found = 0
    for r in planted:
        res = scrub(doc(r["line"]))
        found += res.refused is not None or r["secret"] not in res.text
    changed = sum(scrub(doc(r["line"])).text != doc(r["line"]) for r in look)
    return {"planted": len(planted), "kinds": len({r["kind"] for r in planted}),
            "recall": round(found / len(planted), 4),
            "lookalikes": len(look), "lookalikes_changed": changed,
            "lookalikes_changed_share": round(changed / len(look), 4)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dirs", nargs="*", default=DEFAULT, help="directories of C/C++ files")
    ap.add_argument("--sample-mb", type=float, default=1.0, help="MB the scanner alone runs on (it is slow)")
    ap.add_argument("--out", type=Path, help="write the figures as JSON")
    args = ap.parse_args()
    from cpp_data.stages.lib.scrub import find_secrets, scrub

    docs = texts(args.dirs)
    total = sum(len(t.encode()) for t in docs) / 1e6
    sample, size = [], 0
    for t in docs[:: max(1, len(docs) // 200)]:  # spread over the trees
        if size >= args.sample_mb * 1e6:
            break
        sample.append(t)
        size += len(t.encode())
    scrub("warm up")
    alone_rate, alone = rate(lambda t: find_secrets(t, prefilter=False), sample)
    _, pre = rate(find_secrets, sample)
    pre_rate, findings = rate(find_secrets, docs)
    scrub_rate, _ = rate(scrub, docs)
    out = {"files": len(docs), "mb": round(total, 2), "sample_mb": round(size / 1e6, 2),
           "scanner_alone_mb_s": round(alone_rate, 3), "prefiltered_mb_s": round(pre_rate, 2),
           "scrub_mb_s": round(scrub_rate, 2), "speedup": round(pre_rate / alone_rate, 1),
           "same_findings_on_sample": alone == pre, "findings_on_sample": sum(map(len, alone)),
           "findings": sum(map(len, findings)),
           "findings_by_type": dict(sorted(Counter(f.type for fs in findings for f in fs).items())), **labelled()}
    for k, v in out.items():
        print(f"{k:<28} {v}")
    if args.out:
        args.out.write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    main()
