"""near_dedup: MinHash LSH over code shingles, at the file level, across every source (docs/DESIGN.md section 5).

1. Signatures (datatrove tasks, one per document part, resumable): each document that exact dedup kept gets a
   128-permutation MinHash (datasketch, affine32) of its 5-token shingles (stages/lib/shingles.py). A task writes
   its signatures (sig-RANK.npy), its documents' metadata (docs-RANK.parquet) and, per LSH band, the band keys
   sorted by key (band-BB-RANK.npy): the sorted runs that datatrove's own MinHash writes too.
2. Buckets: bands are processed one key range at a time; each range is a contiguous slice of every task's
   sorted run (found by binary search on memory-mapped files), so memory is bounded by the range size, not the
   corpus. Documents sharing a band key are candidate pairs with the bucket's first document, and with each
   other in buckets of at most `all_pairs_up_to` documents (otherwise two copies that share a bucket with an
   unrelated first document would never be compared once candidates are verified).
3. Verification: per band chunk as candidates appear, a pair whose signatures agree on fewer than threshold -
   estimate_margin positions is dropped and the others are spilled to disk (so candidates never pile up in
   memory); then the spilled pairs are made distinct, partition by partition (`pairs_in_memory`), and each
   distinct pair is decided once by the exact Jaccard of its shingle sets (stored per task beside the
   signatures), so no file below the threshold is ever removed: the MinHash estimate alone put a 0.61 pair
   above 0.7.
4. Clusters: union-find over verified pairs (its parent array a memory-mapped file); each cluster keeps its canonical
copy (upstream over vendored,
   permissive license, larger repository, smallest (repo, path)). Union-find chains (A~B, B~C while A and C
   differ), so members below the threshold against the keeper are split off into a cluster of their own with
   the next canonical keeper: every removed file is within the threshold of the copy that is kept. Removed
   files go to near_duplicates.parquet with keeper, cluster id and exact Jaccard similarity to the keeper.
   removed_keys.parquet holds the keys of every document exact and near dedup removed: the one record of the
   dedup decision that later stages read (the kept documents are decontaminate's parts minus these).
Hand-written parts (bucketing by key range, verification, union-find, keeper choice): datasketch's LSH index
lives in memory, and datatrove's pipeline neither verifies candidates nor knows our canonical rule.
"""

from __future__ import annotations

import math
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import xxhash
from datatrove.data import DocumentsPipeline
from datatrove.pipeline.base import PipelineStep

from cpp_data.pipeline.contract.stage import DOCUMENTS, Stage, StageContext
from cpp_data.schemas.provenance import IDENTITY, LICENSE, LICENSE_FAMILY, RAW_SHA256, SIZE_BYTES, TEXT_SHA256, names
from cpp_data.schemas.provenance import row as provenance_row
from cpp_data.stages.lib import dt_io, keys
from cpp_data.stages.lib.inputs import document_parts
from cpp_data.stages.lib.shingles import jaccard, shingle_hashes

_PROVENANCE = (*IDENTITY, TEXT_SHA256, RAW_SHA256, SIZE_BYTES, *LICENSE)
NEAR_DUPLICATE = pa.schema([
    *_PROVENANCE, ("keeper_repo", pa.string()), ("keeper_path", pa.string()),
    ("cluster_id", pa.string()), ("similarity", pa.float32()), ("cluster_size", pa.int32()),
])
_DOC_COLS = names(*IDENTITY, TEXT_SHA256, RAW_SHA256, SIZE_BYTES) + ["is_vendored"] + names(*LICENSE, LICENSE_FAMILY)
_BAND_DTYPE = np.dtype([("key", "<u8"), ("doc", "<u4")])


@dataclass(frozen=True)
class NearDedupParams:
    bounds: ClassVar[dict] = {"ngram": (1, 8), "num_perm": (1, None), "bands": (1, None), "rows": (1, None),
                              "threshold": (0, 1), "estimate_margin": (0, 1), "entries_per_range": (1, None),
                              "all_pairs_up_to": (1, None), "pairs_in_memory": (1, None)}
    ngram: int = 5
    num_perm: int = 128
    bands: int = 16
    rows: int = 8
    threshold: float = 0.7  # exact Jaccard of the shingle sets a pair needs to be near duplicates
    seed: int = 1
    estimate_margin: float = 0.1  # pairs estimated below threshold - margin skip the exact check
    entries_per_range: int = 4_000_000  # band entries held in memory at once while bucketing
    all_pairs_up_to: int = 32  # buckets up to this size compare every pair, larger ones only with their first
    pairs_in_memory: int = 8_000_000  # candidate pairs made distinct at once before their exact check

    def check(self) -> str | None:
        if self.bands * self.rows > self.num_perm:
            return f"bands x rows = {self.bands * self.rows} exceeds num_perm = {self.num_perm}"
        return None


def _int(x):  # datasketch hash function: our shingle hashes are already 32-bit integers
    return x


class SignatureStep(PipelineStep):
    """Per task: MinHash signatures, document metadata and sorted band keys of the documents it reads."""

    type = "🫂 - DEDUP"
    name = "signatures"

    def __init__(self, out: Path, params: NearDedupParams, removed_file: Path):
        super().__init__()
        self.out, self.p, self.removed_file = Path(out), params, Path(removed_file)

    def run(self, data: DocumentsPipeline, rank: int = 0, world_size: int = 1) -> DocumentsPipeline:
        from datasketch import MinHash  # here, not at the top: it imports scipy, and every CLI command
        # that loads the recipe imports this module; the tasks' forkserver preloads it (executors/local.WORKER_PRELOAD)

        p = self.p
        dup = pq.read_table(self.removed_file, columns=["source_repo", "source_path", "source_commit"])
        removed = keys.removed_keys([dup])
        template = MinHash(num_perm=p.num_perm, seed=p.seed, hashfunc=_int, scheme="affine32")
        sigs, rows, sets, lineages = [], [], [], []
        for doc in data:
            meta = doc.metadata
            key = keys.key_array([meta["source_repo"]], [meta["source_path"]], [meta["source_commit"]])
            if keys.contains(removed, key)[0]:
                self.stat_update("exact_duplicate_skipped")
                continue
            h = shingle_hashes(doc.text, p.ngram)
            if not len(h):
                self.stat_update("too_short")
                continue
            m = MinHash(num_perm=p.num_perm, hashfunc=_int, permutations=template.permutations, scheme="affine32")
            m.update_batch(h.tolist())
            sigs.append(m.hashvalues.astype(np.uint32))
            sets.append(h)
            lineages.append(keys.lineage(meta["source_repo"],
                                         (meta.get("history") or {}).get("lineage") or meta["source_path"]))
            rows.append({c: meta.get(c) for c in _DOC_COLS})
            self.stat_update("signed")
        sig = np.vstack(sigs) if sigs else np.empty((0, p.num_perm), dtype=np.uint32)
        np.save(self.out / f"sig-{rank:05d}.npy", sig)
        np.save(self.out / f"shingles-{rank:05d}.npy",
                np.concatenate(sets) if sets else np.empty(0, dtype=np.uint32))
        np.save(self.out / f"shingle-offsets-{rank:05d}.npy", np.cumsum([0] + [len(x) for x in sets], dtype=np.int64))
        np.save(self.out / f"lineage-{rank:05d}.npy", np.array(lineages, dtype=np.uint64))
        pq.write_table(pa.Table.from_pylist(rows, schema=pa.schema([_doc_field(c) for c in _DOC_COLS])),
                       self.out / f"docs-{rank:05d}.parquet")
        for band in range(p.bands):
            block = np.ascontiguousarray(sig[:, band * p.rows:(band + 1) * p.rows])
            rec = np.empty(len(sig), dtype=_BAND_DTYPE)
            rec["key"] = [xxhash.xxh64_intdigest(r.tobytes(), seed=band) for r in block]
            rec["doc"] = np.arange(len(sig), dtype=np.uint32)
            rec.sort(order=["key", "doc"])
            np.save(self.out / f"band-{band:02d}-{rank:05d}.npy", rec)
        return
        yield  # a generator that yields nothing: the last step of its pipeline


def _doc_field(name: str) -> pa.Field:
    from cpp_data.schemas.artifacts import DOCUMENT

    return DOCUMENT.field(name)


class UnionFind:
    """Union-find over n documents; with `path`, the parent array is a memory-mapped file, so the corpus's
    size costs disk, not memory (only the pages of documents in verified pairs are ever touched)."""

    def __init__(self, n: int, path: Path | None = None):
        if path is None:
            self.parent = np.arange(n, dtype=np.int64)
        else:
            self.parent = np.lib.format.open_memmap(path, mode="w+", dtype=np.int64, shape=(n,))
            for start in range(0, n, 1 << 22):  # filled in chunks: no n-sized temporary
                self.parent[start:start + (1 << 22)] = np.arange(start, min(n, start + (1 << 22)), dtype=np.int64)

    def find(self, x: int) -> int:
        root = x
        while self.parent[root] != root:
            root = self.parent[root]
        while self.parent[x] != root:
            self.parent[x], x = root, self.parent[x]
        return root

    def union(self, a: int, b: int) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            self.parent[max(ra, rb)] = min(ra, rb)


def verify(files: list[Path], exact_jaccard, threshold: float, pairs_in_memory: int
                    ) -> tuple[np.ndarray, int]:
    """Step 3: (verified pairs, exact checks): every distinct candidate pair of the spilled files scored once by its
    exact Jaccard. Pairs are split into partitions by their first document, each small enough to make
    distinct in memory (pairs_in_memory pairs), so a pair met in several bands is still checked once."""
    runs = [np.load(f, mmap_mode="r") for f in files]
    total = sum(len(r) for r in runs)
    parts = max(1, math.ceil(total / pairs_in_memory))
    verified, checks = [], 0
    for k in range(parts):
        chunk = [np.asarray(r[(r[:, 0] % parts) == k]) for r in runs] if parts > 1 else [np.asarray(r) for r in runs]
        pairs = np.unique(np.concatenate(chunk), axis=0) if chunk else np.empty((0, 2), dtype=np.int64)
        checks += len(pairs)
        keep = [(a, b) for a, b in pairs.tolist() if exact_jaccard(a, b) >= threshold]
        verified.append(np.array(keep, dtype=np.int64).reshape(-1, 2))
    out = np.unique(np.concatenate(verified), axis=0) if verified else np.empty((0, 2), dtype=np.int64)
    return out, checks


def candidate_pairs(sig_dir: Path, ranks: list[int], offsets: np.ndarray, band: int, n_ranges: int,
                    all_pairs_up_to: int, prefilter) -> tuple[int, np.ndarray]:
    """Verified (a, b) global doc ids from the buckets of `band`, one key range at a time. Candidates are each
    member with the bucket's first document, and every pair in buckets of at most `all_pairs_up_to`
    documents; `prefilter` keeps the pairs worth verifying. Returns (candidates seen, verified pairs)."""
    runs = [np.load(sig_dir / f"band-{band:02d}-{r:05d}.npy", mmap_mode="r") for r in ranks]
    bounds = [i * 2**64 // n_ranges for i in range(n_ranges + 1)]
    out, verified, seen = [], [], 0
    for lo, hi in zip(bounds[:-1], bounds[1:]):
        keys_, docs = [], []
        for r, run in zip(ranks, runs):
            if not len(run):
                continue
            a = np.searchsorted(run["key"], np.uint64(lo))
            b = np.searchsorted(run["key"], np.uint64(hi - 1), side="right")
            if b > a:
                keys_.append(np.asarray(run["key"][a:b]))
                docs.append(np.asarray(run["doc"][a:b], dtype=np.int64) + offsets[r])
        if not keys_:
            continue
        k, d = np.concatenate(keys_), np.concatenate(docs)
        order = np.lexsort((d, k))
        k, d = k[order], d[order]
        starts = np.flatnonzero(np.r_[True, k[1:] != k[:-1]])
        sizes = np.diff(np.r_[starts, len(k)])
        first = np.repeat(d[starts], sizes)
        mask = first != d
        if mask.any():  # every member with the bucket's first document
            out.append(np.stack([first[mask], d[mask]], axis=1))
        for start, size in zip(starts[(sizes > 2) & (sizes <= all_pairs_up_to)].tolist(),
                               sizes[(sizes > 2) & (sizes <= all_pairs_up_to)].tolist()):
            i, j = np.triu_indices(size, k=1)  # small buckets: every pair, so two copies that share a bucket
            keep = i > 0                       # with an unrelated first document still meet
            out.append(np.stack([d[start + i[keep]], d[start + j[keep]]], axis=1))
        if out:
            pairs = np.concatenate(out)
            seen += len(pairs)
            verified.append(prefilter(pairs))
            out = []
    return seen, (np.concatenate(verified) if verified else np.empty((0, 2), dtype=np.int64))


class NearDedup(Stage):
    name = "near_dedup"
    libraries = ('pyarrow', 'numpy', 'datasketch', 'datatrove')
    version = 4
    scope = "corpus"
    inputs = ("collect", DOCUMENTS, "exact_dedup")
    Params = NearDedupParams
    resumable_tasks = True

    summary_counts = {"near_duplicates": "near_duplicates_removed", "near_duplicate_bytes": "near_duplicate_bytes",
                      "near_duplicate_clusters": "clusters", "largest_near_duplicate_clusters": "largest_clusters"}

    def run(self, ctx: StageContext) -> dict:
        repo_bytes = {a.source or "": a.counts.get("bytes_collected", 0) for a in ctx.inputs["collect"]}
        return near_dedup(document_parts(ctx), ctx.input("exact_dedup").path / "duplicates.parquet", repo_bytes,
                          ctx.out, self.params, ctx.executor, ctx.label)


class SignatureStore:
    """What the signature tasks wrote (step 1), read back by global document id: task r's documents are ids
    offsets[r] .. offsets[r] + counts[r] - 1. Signatures and shingle sets stay memory-mapped."""

    def __init__(self, sig_dir: Path, tasks: int, num_perm: int):
        self.dir, self.num_perm = sig_dir, num_perm
        self.ranks = list(range(tasks))
        self.sigs = [np.load(sig_dir / f"sig-{r:05d}.npy", mmap_mode="r") for r in self.ranks]
        counts = np.array([s.shape[0] for s in self.sigs], dtype=np.int64)
        self.offsets = np.r_[0, np.cumsum(counts)[:-1]] if len(counts) else np.zeros(0, dtype=np.int64)
        self.total = int(counts.sum())
        self.rank_of = np.repeat(np.arange(len(self.ranks)), counts)
        self.shingles = [np.load(sig_dir / f"shingles-{r:05d}.npy", mmap_mode="r") for r in self.ranks]
        self.shingle_offsets = [np.load(sig_dir / f"shingle-offsets-{r:05d}.npy") for r in self.ranks]
        # versions of one file (a history walk) are not each other's duplicates: they are the point of v2/v3
        self.lineage = np.concatenate([np.load(sig_dir / f"lineage-{r:05d}.npy") for r in self.ranks]) \
            if self.ranks else np.empty(0, dtype=np.uint64)

    def signatures(self, gids: np.ndarray) -> np.ndarray:
        buf = np.empty((len(gids), self.num_perm), dtype=np.uint32)
        for r in np.unique(self.rank_of[gids]):
            sel = self.rank_of[gids] == r
            buf[sel] = self.sigs[r][gids[sel] - self.offsets[r]]
        return buf

    def exact_jaccard(self, a: int, b: int) -> float:
        ra, rb = self.rank_of[a], self.rank_of[b]
        ia, ib = a - self.offsets[ra], b - self.offsets[rb]
        sa = self.shingles[ra][self.shingle_offsets[ra][ia]:self.shingle_offsets[ra][ia + 1]]
        sb = self.shingles[rb][self.shingle_offsets[rb][ib]:self.shingle_offsets[rb][ib + 1]]
        return jaccard(np.asarray(sa), np.asarray(sb))


class Prefilter:
    """Step 2's filter of candidate pairs: the pairs that are not versions of one file and whose estimated
    Jaccard reaches threshold - margin are written to disk (`spilled`), so nothing is kept in memory across
    bands; returns none (step 3 verifies the spilled pairs)."""

    def __init__(self, store: SignatureStore, p: NearDedupParams, spill: Path):
        self.store, self.p, self.spill = store, p, spill
        self.spilled: list[Path] = []

    def __call__(self, pairs: np.ndarray) -> np.ndarray:
        pairs = np.sort(pairs, axis=1)
        pairs = pairs[self.store.lineage[pairs[:, 0]] != self.store.lineage[pairs[:, 1]]]
        est = (self.store.signatures(pairs[:, 0]) == self.store.signatures(pairs[:, 1])).mean(axis=1)
        kept = pairs[est >= self.p.threshold - self.p.estimate_margin]
        if len(kept):
            self.spilled.append(self.spill / f"{len(self.spilled):06d}.npy")
            np.save(self.spilled[-1], kept.astype(np.int64))
        return np.empty((0, 2), dtype=np.int64)


def signatures(parts: list[Path], removed_file: Path, out: Path, p: NearDedupParams, executor,
               label: str) -> tuple[dict[str, int], SignatureStore]:
    """Step 1: the signature tasks (one per document part, across every source, in a fixed order), and what
    they wrote. The task listing holds absolute paths, so it lives with datatrove's bookkeeping, which is no
    part of the sealed output (pipeline/runner/cache.py: SCRATCH): the output's checksums, which later stages'
    fingerprints hash, must not depend on where OUT is."""
    sig_dir = out / "_signatures"
    sig_dir.mkdir(parents=True, exist_ok=True)
    (out / "_datatrove").mkdir(parents=True, exist_ok=True)
    listing = out / "_datatrove" / "inputs.txt"
    listing.write_text("".join(f"{x}\n" for x in parts))
    pipeline = [dt_io.paths_reader(listing), SignatureStep(sig_dir, p, removed_file)]
    stats = executor.run(pipeline, len(parts), out / "_datatrove", label)
    return stats, SignatureStore(sig_dir, len(parts), p.num_perm)


def buckets(store: SignatureStore, p: NearDedupParams, spill: Path) -> tuple[int, list[Path]]:
    """Step 2: the candidate pairs of every band's buckets, one key range at a time, prefiltered and spilled;
    (candidates seen, the spilled files)."""
    prefilter = Prefilter(store, p, spill)
    n_ranges = max(1, math.ceil(store.total / p.entries_per_range))
    candidates = 0
    for band in range(p.bands):
        seen, _ = candidate_pairs(store.dir, store.ranks, store.offsets, band, n_ranges, p.all_pairs_up_to, prefilter)
        candidates += seen
    return candidates, prefilter.spilled


def clusters(verified: np.ndarray, total: int, scratch: Path) -> tuple[np.ndarray, np.ndarray]:
    """Step 4: union-find over the verified pairs; (the documents in a pair, each one's cluster root)."""
    uf = UnionFind(total, scratch / "union_find.npy")
    for a, b in verified.tolist():
        uf.union(a, b)
    members = np.unique(verified) if len(verified) else np.empty(0, dtype=np.int64)
    return members, np.array([uf.find(int(x)) for x in members], dtype=np.int64)


def write_outputs(out: Path, rows: list[dict], removed_file: Path) -> None:
    """near_duplicates.parquet, and removed_keys.parquet: the dedup decision, once (exact's removals and ours),
    the one record later stages read."""
    near_table = pa.Table.from_pylist(rows, schema=NEAR_DUPLICATE)
    pq.write_table(near_table, out / "near_duplicates.parquet", compression="zstd")
    keys.write_removed(out / "removed_keys.parquet",
                       [pq.read_table(removed_file, columns=["source_repo", "source_path", "source_commit"]),
                        near_table.select(["source_repo", "source_path", "source_commit"])])


def near_dedup(parts: list[Path], removed_file: Path, repo_bytes: dict[str, int], out: Path,
               p: NearDedupParams, executor, label: str = "near_dedup") -> dict:
    """The whole stage on a list of document parts, as its four steps: signatures, buckets, verification,
    clusters (with the keeper of each); writes out/near_duplicates.parquet and removed_keys.parquet, returns
    counts. (bench/dedup_vs_datatrove.py calls this too, so the benchmark measures exactly the stage's code.)"""
    if problem := p.check():  # the recipe refuses these params already; a direct caller (a benchmark) too
        raise ValueError(problem)
    out = Path(out)
    t0 = time.monotonic()
    stats, store = signatures(parts, removed_file, out, p, executor, label)
    t1 = time.monotonic()
    scratch = out / "_work"  # pipeline/runner/cache.py: SCRATCH, never part of the sealed output
    shutil.rmtree(scratch, ignore_errors=True)
    (scratch / "candidates").mkdir(parents=True)
    candidates, spilled = buckets(store, p, scratch / "candidates")
    verified, checks = verify(spilled, store.exact_jaccard, p.threshold, p.pairs_in_memory)
    t2 = time.monotonic()
    members, roots = clusters(verified, store.total, scratch)
    shutil.rmtree(scratch, ignore_errors=True)
    meta = _metadata(store.dir, store.ranks, store.offsets, members, repo_bytes)
    rows, largest = _keepers(members, roots, meta, store.exact_jaccard, p.threshold)
    write_outputs(out, rows, removed_file)
    return {
        "documents_signed": store.total,
        "too_short": int(sum(v for k, v in stats.items() if k.endswith(".too_short"))),
        "candidate_pairs": int(candidates),
        "exact_jaccard_checks": checks,
        "verified_pairs": int(len(verified)),
        "clusters": len(largest),
        "near_duplicates_removed": len(rows),
        "near_duplicate_bytes": int(sum(r["size_bytes"] or 0 for r in rows)),
        "largest_clusters": largest[:5],
        "seconds": {"signatures": round(t1 - t0, 2), "buckets_and_verification": round(t2 - t1, 2),
                    "clusters": round(time.monotonic() - t2, 2)},
    }


def _metadata(sig_dir: Path, ranks: list[int], offsets: np.ndarray, members: np.ndarray, repo_bytes) -> dict:
    wanted = set(members.tolist())
    meta = {}
    for r in ranks:
        t = pq.read_table(sig_dir / f"docs-{r:05d}.parquet")
        base = int(offsets[r])
        for i, row in enumerate(t.to_pylist()):
            if base + i in wanted:
                row["repo_bytes"] = repo_bytes.get(row["source_repo"], 0)
                meta[base + i] = row
    return meta


def _keepers(members, roots, meta, exact_jaccard, threshold: float) -> tuple[list[dict], list[dict]]:
    clusters: dict[int, list[int]] = {}
    for gid, root in zip(members.tolist(), roots.tolist()):
        clusters.setdefault(root, []).append(gid)

    def rank(g: int):
        m = meta[g]
        return (bool(m["is_vendored"]), m["license_family"] != "permissive", -m["repo_bytes"], m["source_repo"],
                m["source_path"])

    rows: list[dict] = []
    largest: list[dict[str, Any]] = []
    for gids in clusters.values():
        pending = sorted(gids, key=rank)
        while len(pending) > 1:  # split chains: each removed file must itself reach the keeper's threshold
            keeper, others = pending[0], pending[1:]
            sims = np.array([exact_jaccard(keeper, g) for g in others])
            close = sims >= threshold
            k = meta[keeper]
            cluster_id = keys.doc_key(k["source_repo"], k["source_path"], k["source_commit"]).hex()[:16]
            size = 1 + int(close.sum())
            for g, s in zip(np.array(others)[close].tolist(), sims[close].tolist()):
                m = meta[g]
                rows.append({**provenance_row(m, *_PROVENANCE), "keeper_repo": k["source_repo"],
                             "keeper_path": k["source_path"],
                             "cluster_id": cluster_id, "similarity": round(float(s), 4), "cluster_size": size})
            if size > 1:
                largest.append({"size": size, "keeper": f"{k['source_repo']}:{k['source_path']}",
                                "cluster_id": cluster_id})
            pending = [g for g, c in zip(others, close.tolist()) if not c]
    rows.sort(key=lambda r: (r["source_repo"], r["source_path"]))
    largest.sort(key=lambda c: (-c["size"], c["keeper"]))
    return rows, largest
