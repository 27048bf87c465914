"""Near dedup, side by side: cpp-data's near_dedup stage vs datatrove's four-stage MinHash pipeline.

    .venv/bin/python bench/dedup_vs_datatrove.py CORPUS_DIR [--workers 2] [--parts 8] [--plant 300]

Our stage writes the list of files to remove; datatrove's stage 4 also rewrites the corpus without them, so
the bench prints the ratio over datatrove's whole pipeline and over its stages 1-3 (its ids to remove).
Both sides read the same Parquet parts (the C/C++ files of CORPUS_DIR, exact duplicates removed first, plus
`--plant` near-duplicate variants of random files: renamed identifiers, small insertions and deletions),
with the same n-gram size (5), 16 bands x 8 rows, the same worker count and a code-aware word tokenizer for
datatrove (our C++ lexer, and a text normalization that keeps case, punctuation, numbers and line breaks). Each side
runs
in its own process; peak RSS is sampled over its whole process tree (workers included). Prints wall times,
their ratio, peak RSS, how far the removal sets agree and the recall of each on planted pairs with exact
Jaccard >= 0.8 (resolved: the output keeps at most one file of the pair; co-clustered: both files landed in
one cluster), then one JSON line. Precision: removed files whose exact Jaccard with their cluster's kept copy is
at least 0.6.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import re
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve()


# ---------------------------------------------------------------- input
def prepare(corpus: Path, work: Path, parts: int, plant: int, seed: int = 7) -> dict:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from cpp_data.schemas.artifacts import DOCUMENT
    from cpp_data.stages.lib.repo_files import DEFAULT_EXTENSIONS, is_cpp

    docs, seen = [], set()
    for p in sorted(corpus.rglob("*")):
        if not p.is_file() or p.is_symlink() or p.stat().st_size > 1_000_000 or p.stat().st_size < 100:
            continue
        data = p.read_bytes()
        if not is_cpp(str(p), data[:256], DEFAULT_EXTENSIONS):
            continue
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            continue
        digest = hashlib.sha256(data).hexdigest()
        if digest in seen:
            continue
        seen.add(digest)
        docs.append((str(p.relative_to(corpus)), text, False))
    rng = random.Random(seed)
    planted = []
    ident = re.compile(r"\b[a-z][a-z_0-9]{3,}\b")
    for path, text, _ in rng.sample(docs, min(plant, len(docs))):
        words = sorted(set(ident.findall(text)))
        variant = text
        for w in rng.sample(words, min(2, len(words))):
            variant = re.sub(rf"\b{w}\b", w + "_v2", variant)
        lines = variant.split("\n")
        drop = set(rng.sample(range(len(lines)), max(1, len(lines) // 40)))
        variant = "\n".join(ln for i, ln in enumerate(lines) if i not in drop) + "\n// planted variant\n"
        vpath = f"third_party/planted/{path}"
        docs.append((vpath, variant, True))
        planted.append((path, vpath))
    rows = [{"source_repo": "corpus", "source_commit": "bench", "source_path": path,
             "text_sha256": hashlib.sha256(text.encode()).hexdigest(),
             "text": text, "size_bytes": len(text.encode()), "is_vendored": vendored, "license_spdx": "MIT",
             "license_source": "declared", "license_confidence": 1.0, "license_family": "permissive"}
            for path, text, vendored in docs]
    rng.shuffle(rows)
    (work / "parts").mkdir(parents=True, exist_ok=True)
    for i in range(parts):
        chunk = rows[i::parts]
        pq.write_table(pa.Table.from_pylist(chunk, schema=DOCUMENT), work / "parts" / f"part-{i:05d}.parquet")
    from cpp_data.schemas.artifacts import DUPLICATE

    pq.write_table(DUPLICATE.empty_table(), work / "no_exact_duplicates.parquet")
    texts = {path: text for path, text, _ in docs}
    (work / "planted.json").write_text(json.dumps(planted))
    return {"documents": len(docs), "bytes": sum(len(t.encode()) for t in texts.values()), "planted": len(planted),
            "texts": texts, "planted_pairs": planted}


# ---------------------------------------------------------------- sides
def side_ours(work: Path, workers: int) -> dict:
    import pyarrow.parquet as pq

    from cpp_data.pipeline.contract.executor import ExecutorConfig
    from cpp_data.pipeline.runner.executors.executor import DatatroveExecutor
    from cpp_data.pipeline.runner.executors.task_logging import quiet_datatrove
    from cpp_data.stages.near_dedup import NearDedupParams, near_dedup

    quiet_datatrove()
    parts = sorted((work / "parts").glob("part-*.parquet"))
    out = work / "ours"
    t0 = time.monotonic()
    counts = near_dedup(parts, work / "no_exact_duplicates.parquet", {"corpus": 1}, out, NearDedupParams(),
                        DatatroveExecutor(ExecutorConfig(kind="local", workers=workers, progress=False)))
    wall = time.monotonic() - t0
    t = pq.read_table(out / "near_duplicates.parquet", columns=["source_path", "keeper_path"])
    removed = t.column("source_path").to_pylist()
    clusters: dict[str, list[str]] = {}
    for path, keeper in zip(removed, t.column("keeper_path").to_pylist()):
        clusters.setdefault(keeper, [keeper]).append(path)
    return {"wall_s": wall, "removed": removed, "clusters": list(clusters.values()), "counts": counts}


class _CodeWords:
    """datatrove WordTokenizer over our C++ lexer (defined lazily: datatrove imports are heavy)."""


def side_datatrove(work: Path, workers: int) -> dict:
    from datatrove.executor import LocalPipelineExecutor
    from datatrove.pipeline.dedup.minhash import (
        MinhashConfig,
        MinhashDedupBuckets,
        MinhashDedupCluster,
        MinhashDedupFilter,
        MinhashDedupSignature,
    )
    from datatrove.pipeline.readers import ParquetReader
    from datatrove.pipeline.writers import ParquetWriter
    from datatrove.utils.text import TextNormConfig

    from cpp_data.pipeline.runner.executors.task_logging import quiet_datatrove

    quiet_datatrove()
    from bench_code_words import CodeWordTokenizer  # module beside this script, importable by workers

    parts = sorted((work / "parts").glob("part-*.parquet"))
    config = MinhashConfig(n_grams=5, num_buckets=16, hashes_per_bucket=8,
                           norm_config=TextNormConfig(lowercase=False, norm_whitespace=False, remove_punctuation=False,
                                                      norm_unicode_diacritics=False, norm_numbers=False))
    d = work / "datatrove"

    def reader():
        return ParquetReader(str(work / "parts"), glob_pattern="part-*.parquet", id_key="source_path")

    t0 = time.monotonic()
    marks = {}
    LocalPipelineExecutor([reader(), MinhashDedupSignature(str(d / "sigs"), config=config,
                                                           language=CodeWordTokenizer())],
                          tasks=len(parts), workers=workers, logging_dir=str(d / "logs/sig")).run()
    LocalPipelineExecutor([MinhashDedupBuckets(str(d / "sigs"), str(d / "buckets"), config=config)],
                          tasks=config.num_buckets, workers=workers, logging_dir=str(d / "logs/buckets")).run()
    LocalPipelineExecutor([MinhashDedupCluster(str(d / "buckets"), str(d / "remove_ids"), config=config,
                                               save_cluster_id=True)],
                          tasks=1, logging_dir=str(d / "logs/cluster")).run()
    marks["ids"] = time.monotonic() - t0  # stages 1-3: the ids to remove, the counterpart of our output
    LocalPipelineExecutor([reader(), MinhashDedupFilter(str(d / "remove_ids"), load_cluster_ids=True,
                                                        exclusion_writer=ParquetWriter(str(d / "removed"))),
                           ParquetWriter(str(d / "kept"))],
                          tasks=len(parts), workers=workers, logging_dir=str(d / "logs/filter")).run()
    wall = time.monotonic() - t0
    import pyarrow.parquet as pq

    removed, clusters = [], {}
    for kind in ("removed", "kept"):
        for f in sorted((d / kind).rglob("*.parquet")):
            for row in pq.read_table(f, columns=["id", "metadata"]).to_pylist():
                if kind == "removed":
                    removed.append(row["id"])
                cid = (row["metadata"] or {}).get("minhash_cluster_id", -1)
                if cid is not None and cid != -1:
                    clusters.setdefault(cid, []).append(row["id"])
    return {"wall_s": wall, "ids_s": marks["ids"], "removed": removed,
            "clusters": [c for c in clusters.values() if len(c) > 1]}


# ---------------------------------------------------------------- harness
def _tree_rss_kb(root: int) -> int:
    """Summed RSS (kB) of `root` and all its descendants, from /proc."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
                children.setdefault(ppid, []).append(int(entry))
            except (OSError, IndexError, ValueError):
                pass
    total, stack = 0, [root]
    while stack:
        pid = stack.pop()
        try:
            with open(f"/proc/{pid}/statm") as f:
                total += int(f.read().split()[1]) * (os.sysconf("SC_PAGE_SIZE") // 1024)
        except OSError:
            pass
        stack.extend(children.get(pid, []))
    return total


def run_side(name: str, work: Path, workers: int) -> dict:
    path = f"{HERE.parent}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"
    proc = subprocess.Popen([sys.executable, str(HERE), "--side", name, "--work", str(work), "--workers",
                             str(workers), "x"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": path})
    peak = [0]

    def sample():
        while proc.poll() is None:
            peak[0] = max(peak[0], _tree_rss_kb(proc.pid))
            time.sleep(0.1)

    t = threading.Thread(target=sample, daemon=True)
    t.start()
    out, err = proc.communicate()
    t.join()
    if proc.returncode != 0:
        raise SystemExit(f"{name} side failed:\n{err[-3000:]}")
    result = json.loads(out.strip().splitlines()[-1])
    result["peak_rss_mb"] = round(peak[0] / 1024, 1)
    return result


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("corpus", type=Path)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--parts", type=int, default=8)
    ap.add_argument("--plant", type=int, default=300)
    ap.add_argument("--side", choices=("ours", "datatrove"), help=argparse.SUPPRESS)
    ap.add_argument("--work", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.side:
        fn = side_ours if args.side == "ours" else side_datatrove
        print(json.dumps(fn(args.work, args.workers)))
        return 0

    from cpp_data.stages.lib.shingles import jaccard, shingle_hashes

    work = Path(tempfile.mkdtemp(prefix="dedup-bench-"))
    info = prepare(args.corpus, work, args.parts, args.plant)
    print(f"corpus {args.corpus}: {info['documents']} documents ({info['bytes'] / 1e6:.1f} MB) after exact dedup, "
          f"{info['planted']} planted variants, {args.parts} parts, {args.workers} workers")
    ours = run_side("ours", work, args.workers)
    theirs = run_side("datatrove", work, args.workers)
    a, b = set(ours["removed"]), set(theirs["removed"])
    texts = info["texts"]
    high = [(x, y) for x, y in info["planted_pairs"]
            if jaccard(shingle_hashes(texts[x]), shingle_hashes(texts[y])) >= 0.8]

    def resolved(removed: set) -> float:
        """Planted pairs (exact Jaccard >= 0.8) of which the output keeps at most one file."""
        return sum(1 for x, y in high if x in removed or y in removed) / len(high) if high else float("nan")

    def recall(clusters: list[list[str]]) -> float:
        """Planted pairs (exact Jaccard >= 0.8) whose two files ended up in the same cluster."""
        where = {x: i for i, c in enumerate(clusters) for x in c}
        hit = sum(1 for x, y in high if x in where and where.get(x) == where.get(y))
        return hit / len(high) if high else float("nan")

    def co_pairs(clusters: list[list[str]]) -> set:
        return {(x, y) for c in clusters for x in c for y in c if x < y}

    def precision(clusters: list[list[str]], removed: set) -> float:
        """Removed files whose exact Jaccard with the copy kept in their cluster is >= 0.6."""
        ok = total = 0
        for c in clusters:
            kept = [x for x in c if x not in removed]
            for x in c:
                if x in removed and kept:
                    total += 1
                    ok += jaccard(shingle_hashes(texts[x]), shingle_hashes(texts[kept[0]])) >= 0.6
        return ok / total if total else float("nan")

    pa_, pb_ = co_pairs(ours["clusters"]), co_pairs(theirs["clusters"])

    result = {
        "corpus": str(args.corpus), "documents": info["documents"], "mb": round(info["bytes"] / 1e6, 2),
        "workers": args.workers, "parts": args.parts,
        "ours_s": round(ours["wall_s"], 2), "datatrove_s": round(theirs["wall_s"], 2),
        "speedup": round(theirs["wall_s"] / ours["wall_s"], 2),
        "datatrove_stages_1_3_s": round(theirs["ids_s"], 2),
        "speedup_vs_stages_1_3": round(theirs["ids_s"] / ours["wall_s"], 2),
        "ours_peak_rss_mb": ours["peak_rss_mb"], "datatrove_peak_rss_mb": theirs["peak_rss_mb"],
        "ours_removed": len(a), "datatrove_removed": len(b), "both_removed": len(a & b),
        "removal_jaccard": round(len(a & b) / len(a | b), 3) if a | b else 1.0,
        "planted_pairs_j_ge_0.8": len(high),
        "ours_unresolved": sorted(f"{x} ~ {y}" for x, y in high if x not in a and y not in a),
        "ours_resolved": round(resolved(a), 3), "datatrove_resolved": round(resolved(b), 3),
        "ours_recall": round(recall(ours["clusters"]), 3),
        "datatrove_recall": round(recall(theirs["clusters"]), 3),
        "ours_precision": round(precision(ours["clusters"], a), 3),
        "datatrove_precision": round(precision(theirs["clusters"], b), 3),
        "co_cluster_pairs_ours": len(pa_), "co_cluster_pairs_datatrove": len(pb_),
        "co_cluster_pair_jaccard": round(len(pa_ & pb_) / len(pa_ | pb_), 3) if pa_ | pb_ else 1.0,
    }
    print(f"  cpp-data near_dedup  {result['ours_s']:>8.2f} s  peak RSS {result['ours_peak_rss_mb']:>7.1f} MB  "
          f"removed {len(a)}  planted pairs resolved {result['ours_resolved']} co-clustered {result['ours_recall']}  "
          f"precision {result['ours_precision']}")
    print(f"  datatrove MinHash    {result['datatrove_s']:>8.2f} s  "
          f"peak RSS {result['datatrove_peak_rss_mb']:>7.1f} MB  "
          f"removed {len(b)}  planted pairs resolved {result['datatrove_resolved']} co-clustered "
          f"{result['datatrove_recall']}  precision {result['datatrove_precision']}")
    print(f"  datatrove stages 1-3 (ids to remove, without rewriting the corpus) {result['datatrove_stages_1_3_s']} s")
    print(f"  speedup {result['speedup']}x over the whole pipeline, "
          f"{result['speedup_vs_stages_1_3']}x over stages 1-3; "
          f"removal sets agree on {len(a & b)} (Jaccard {result['removal_jaccard']}; "
          f"they keep different members of a cluster); co-clustered pairs agree: Jaccard "
          f"{result['co_cluster_pair_jaccard']} ({len(pa_)} ours, {len(pb_)} datatrove)")
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
