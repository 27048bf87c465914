"""packed_rows: fixed-length training rows packed best-fit-decreasing (docs/DESIGN.md section 10).

Each document becomes its token ids + EOD (on the training split, with FIM applied first at `fim_rate`).
A document longer than `seq_length` is cut into `seq_length` pieces; no other document is ever split. Pieces are
packed best-fit-decreasing within blocks of `block_docs` documents (memory stays bounded by one block; the
order of blocks follows the shuffled shards) and rows are right-padded with EOD. Columns per row:
  input_ids, target_ids      seq_length ids; target_ids[k] is the next token of the same document, PAD where
                             there is none (a document's EOD, padding, the last token of a cropped piece)
  loss_mask                  1 where target_ids is a real next token, else 0
  doc_ids                    1.. for the documents of the row in order, 0 for padding
  valid_token_count, num_docs, pack_id (0.. per split)
  segment_docs, segment_starts   per segment k (doc_ids == k): its document's ordinal in the split's shard
                             order and its first token's offset in that (FIM-transformed, EOD-ended) document,
                             so pieces of a document longer than a row can be put back in order
  token_<name>               the per-token metadata columns of the shards, when present, aligned with
                             input_ids (the column's fill value on specials and padding)
FIM (training split only), seeded per document by (seed, doc_id): token-level, two cut points uniform over the
document; PSM `<fim_prefix> P <fim_suffix> S <fim_middle> M` with probability 1 - `fim_spm_rate`, else SPM
`<fim_prefix> <fim_suffix> S <fim_middle> P M`; EOD follows. Telemetry: slot utilization (real tokens /
slots), documents per row, cropped-token share (tokens of documents longer than a row), FIM documents.

The same rows, one sequence per row of exactly seq_length ids, are written per split as a Megatron indexed
dataset, packed/cpp_packed_{train,valid}.{bin,idx} (schemas/indexed.py), for Megatron's GPTDataset and the
bundled harness. Why this layout: GPTDataset cuts samples of seq_length + 1 tokens from the sequences laid end
to end; with every sequence exactly seq_length long, each sample's inputs are exactly one row and only its
last label is the first token of another row. The loss rule: no loss where the input is EOD (under
Megatron-LM's --eod-mask-loss), which covers padding, the step from one document to the next and, because the
tail is EOD rather than PAD, the cross-row label of every padded row (with PAD padding GPTDataset would train
that label: it masks only labels equal to PAD). A row filled by a piece of a document longer than a row ends
without EOD: there Megatron-LM trains one cross-row label per row (1 of seq_length), while the bundled harness
masks it (its loss mask is the Parquet rows' loss_mask). FIM sentinels are ordinary tokens for the loss.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from cpp_data.pipeline.fsutil import atomic_write_json
from cpp_data.pipeline.sources import source_weights
from cpp_data.pipeline.stage import Stage, StageContext
from cpp_data.schemas.generations import columns as generation_columns
from cpp_data.schemas.reader import iter_shard, shard_files
from cpp_data.schemas.shard_writer import ShardParams, ShardWriter
from cpp_data.tokenizer.files import tokenizer_info


@dataclass(frozen=True)
class PackedParams:
    generation: str = "v6"
    seq_length: int = 4096
    fim_rate: float = 0.5
    fim_spm_rate: float = 0.5
    seed: int = 42
    block_docs: int = 16_384
    rows_per_shard: int = 8192
    row_group_size: int = 256


@dataclass
class Doc:
    tokens: np.ndarray
    meta: dict[str, np.ndarray]
    long: bool = False
    ordinal: int = -1  # the document's place in its split's shard order


def _fim(doc: Doc, rng: np.random.Generator, roles: dict[str, int], spm_rate: float, fills: dict) -> Doc:
    n = len(doc.tokens)
    i, j = sorted(rng.integers(0, n + 1, size=2))
    pre, mid, suf = slice(0, i), slice(i, j), slice(j, n)
    fp, fs, fm = roles["fim_prefix"], roles["fim_suffix"], roles["fim_middle"]

    def special(tok):
        return ("special", tok)

    if rng.random() < spm_rate:
        parts = [special(fp), special(fs), suf, special(fm), pre, mid]
    else:
        parts = [special(fp), pre, special(fs), suf, special(fm), mid]

    def assemble(values: np.ndarray, fill) -> np.ndarray:
        out = [np.array([fill if fill is not None else p[1]], dtype=values.dtype) if isinstance(p, tuple)
               else values[p] for p in parts]
        return np.concatenate(out)

    return Doc(assemble(doc.tokens, None), {k: assemble(v, fills[k]) for k, v in doc.meta.items()})


def _documents(files: list[Path], meta_cols: list[str]) -> Iterator[tuple[str, str, np.ndarray, dict]]:
    for f in files:
        for t in iter_shard(f, None, ["doc_id", "source_repo", "token_ids", *meta_cols]):
            ids = t.column("token_ids").combine_chunks()
            values, offsets = ids.values.to_numpy(zero_copy_only=False), ids.offsets.to_numpy()
            metas = {}
            for c in meta_cols:
                col = t.column(c).combine_chunks()
                metas[c] = (col.values.to_numpy(zero_copy_only=False), col.offsets.to_numpy())
            repos = t.column("source_repo").to_pylist()
            for r, doc_id in enumerate(t.column("doc_id").to_pylist()):
                a, b = offsets[r], offsets[r + 1]
                yield doc_id, repos[r], values[a:b].astype(np.int32), {c: v[o[r]:o[r + 1]] for c, (v, o) in metas.items()}


def best_fit_decreasing(lengths: list[int], capacity: int) -> list[list[int]]:
    """Bins (lists of item indices) by best-fit-decreasing; items must fit `capacity`. Deterministic."""
    order = sorted(range(len(lengths)), key=lambda i: (-lengths[i], i))
    free_count = np.zeros(capacity + 1, dtype=np.int64)  # how many open bins have exactly c free slots
    bins_by_free: dict[int, list[int]] = {}
    bins: list[list[int]] = []
    for i in order:
        need = lengths[i]
        candidates = np.flatnonzero(free_count[need:])
        if len(candidates):
            free = need + int(candidates[0])
            b = bins_by_free[free].pop()
            free_count[free] -= 1
        else:
            b, free = len(bins), capacity
            bins.append([])
        bins[b].append(i)
        free -= need
        if free > 0:
            free_count[free] += 1
            bins_by_free.setdefault(free, []).append(b)
    return bins


def pack_split(files: list[Path], out: Path, split: str, info: dict, p: PackedParams, meta_cols: list[str],
               fills: dict, key: str | None = None, sources: set[str] | None = None) -> tuple[list[dict], dict]:
    """Pack one split's documents (only those of `sources` when given) into `<key>-NNNNN.parquet` and the
    bin/idx `cpp_packed_<key>`; `key` is the split, or the split plus a weight group's suffix. Document
    ordinals count every document of the split, so they name the same document whatever the grouping."""
    from cpp_data.schemas.indexed import IndexedWriter

    key = key or split
    roles, T = info["roles"], p.seq_length
    pad, eod = roles["pad"], roles["eos"]
    indexed = IndexedWriter(out / f"cpp_packed_{key}", info["vocab_size"])
    fields = [pa.field("pack_id", pa.int64()), pa.field("input_ids", pa.list_(pa.int32())),
              pa.field("target_ids", pa.list_(pa.int32())), pa.field("loss_mask", pa.list_(pa.uint8())),
              pa.field("doc_ids", pa.list_(pa.int32())), pa.field("valid_token_count", pa.int32()),
              pa.field("num_docs", pa.int32()), pa.field("segment_docs", pa.list_(pa.int64())),
              pa.field("segment_starts", pa.list_(pa.int32()))]
    types = {c.name: c.type for c in generation_columns(p.generation)}
    fields += [pa.field(c, types[c]) for c in meta_cols]
    # the one shard writer, rolling packed/<key>-NNNNN.parquet (zstd at the codec's default level)
    writer = ShardWriter(out, split, pa.schema(fields), ShardParams(
        generation=p.generation, docs_per_shard=p.rows_per_shard, row_group_size=p.row_group_size,
        compression="zstd", compression_level=None), stem=key, kind="packed", prefix="packed")
    stats = {"rows": 0, "documents": 0, "tokens": 0, "cropped_tokens": 0, "fim_documents": 0, "pieces": 0}
    pack_id = 0

    def flush_block(block: list[Doc]) -> None:
        nonlocal pack_id
        pieces: list[tuple[Doc, slice, bool]] = []
        for d in block:
            n = len(d.tokens)
            for start in range(0, n, T):
                pieces.append((d, slice(start, min(n, start + T)), start + T >= n))
        for members in best_fit_decreasing([s.stop - s.start for _, s, _ in pieces], T):
            inp = np.full(T, eod, dtype=np.int32)  # EOD, not PAD, fills the tail: see the module docstring
            tgt = np.full(T, pad, dtype=np.int32)
            mask = np.zeros(T, dtype=np.uint8)
            ids = np.zeros(T, dtype=np.int32)
            meta = {c: np.full(T, fills[c], dtype=np.int32) for c in meta_cols}
            pos = 0
            for k, m in enumerate(members, start=1):
                d, s, last = pieces[m]
                seg = d.tokens[s]
                L = len(seg)
                inp[pos:pos + L] = seg
                tgt[pos:pos + L - 1] = seg[1:]
                mask[pos:pos + L - 1] = 1
                ids[pos:pos + L] = k
                for c in meta_cols:
                    meta[c][pos:pos + L] = d.meta[c][s]
                pos += L
            indexed.add(inp)
            writer.add({"pack_id": pack_id, "input_ids": inp, "target_ids": tgt, "loss_mask": mask, "doc_ids": ids,
                        "valid_token_count": pos, "num_docs": len(members),
                        "segment_docs": [pieces[m][0].ordinal for m in members],
                        "segment_starts": [pieces[m][1].start for m in members], **{c: meta[c] for c in meta_cols}})
            pack_id += 1
            stats["rows"] += 1
        stats["pieces"] += len(pieces)

    block: list[Doc] = []
    ordinal = -1
    for doc_id, repo, tokens, meta in _documents(files, meta_cols):
        ordinal += 1
        if sources is not None and repo not in sources:
            continue
        d = Doc(np.concatenate([tokens, [eod]]).astype(np.int32),
                {c: np.concatenate([v, [fills[c]]]) for c, v in meta.items()})
        if split == "train" and p.fim_rate > 0 and len(tokens) >= 2:
            h = hashlib.blake2b(f"fim\0{p.seed}\0{doc_id}".encode(), digest_size=8).digest()
            rng = np.random.default_rng(int.from_bytes(h, "big"))
            if rng.random() < p.fim_rate:
                body = Doc(tokens, meta)
                f = _fim(body, rng, roles, p.fim_spm_rate, fills)
                d = Doc(np.concatenate([f.tokens, [eod]]).astype(np.int32),
                        {c: np.concatenate([v, [fills[c]]]) for c, v in f.meta.items()})
                stats["fim_documents"] += 1
        d.ordinal = ordinal
        stats["documents"] += 1
        stats["tokens"] += len(d.tokens)
        if len(d.tokens) > T:
            stats["cropped_tokens"] += len(d.tokens)
        block.append(d)
        if len(block) == p.block_docs:
            flush_block(block)
            block = []
    if block:
        flush_block(block)
    files = writer.close()
    info_idx = indexed.close()
    for suffix in (".bin", ".idx"):
        path = out / f"cpp_packed_{key}{suffix}"
        files.append({"path": f"packed/{path.name}", "split": split, "rows": info_idx["sequences"],
                      "bytes": path.stat().st_size, "sha256": info_idx[f"{suffix[1:]}_sha256"],
                      "kind": f"packed_{suffix[1:]}"})
    return files, stats


def pack_shards(shards_dir: Path, tokenizer_dir: Path, out: Path, p: PackedParams,
                weights: dict[str, float]) -> tuple[list[dict], dict]:
    """Both splits into `out`: the training split once per weight group of the sources
    (schemas/launch_spec.weight_groups: one group, unsuffixed, without weights), so a Megatron blend can weight
    them; writes packed.json (files, telemetry per split, and per prefix its split, sources and counts)."""
    from cpp_data.schemas.launch_spec import split_groups

    info = tokenizer_info(tokenizer_dir)
    out.mkdir(parents=True, exist_ok=True)
    cols = [c for c in generation_columns(p.generation) if c.per_token]
    present = set(pq.read_schema(shard_files(shards_dir)[0]).names) if shard_files(shards_dir) else set()
    meta_cols = [c.name for c in cols if c.name in present]
    fills = {c.name: c.fill for c in cols}
    files, telemetry, prefixes = [], {}, {}
    for split in ("train", "valid"):
        total: dict[str, int] = {}
        for suffix, members, keep in split_groups(split, weights):
            f, stats = pack_split(shard_files(shards_dir, split), out, split, info, p, meta_cols, fills,
                                  key=split + suffix, sources=keep)
            if suffix and not stats["documents"]:  # a weight group whose sources left no training document
                for entry in f:
                    (out / Path(entry["path"]).name).unlink()
                continue
            files += f
            prefixes[f"cpp_packed_{split}{suffix}"] = {"split": split, "sources": members,
                                                       "documents": stats["documents"], "tokens": stats["tokens"],
                                                       "rows": stats["rows"], "samples": stats["rows"]}
            total = {k: total.get(k, 0) + v for k, v in stats.items()}
        slots = total["rows"] * p.seq_length
        telemetry[split] = {
            **total,
            "slot_utilization": round(total["tokens"] / slots, 4) if slots else 0.0,
            "docs_per_row": round(total["pieces"] / total["rows"], 3) if total["rows"] else 0.0,
            "cropped_token_share": round(total["cropped_tokens"] / total["tokens"], 4) if total["tokens"] else 0.0,
        }
    atomic_write_json(out / "packed.json", {"seq_length": p.seq_length, "files": files, "telemetry": telemetry,
                                            "meta_columns": meta_cols, "prefixes": prefixes,
                                            "vocab_size": info["vocab_size"], "eod": info["roles"]["eos"],
                                            "pad": info["roles"].get("pad")})
    return files, telemetry


class PackedRows(Stage):
    name = "packed_rows"
    libraries = ('pyarrow', 'numpy', 'tokenizers')
    version = 4
    scope = "corpus"
    inputs = ("token_columns", "tokenizer")
    Params = PackedParams

    summary_counts = {"packed_seq_length": "seq_length", "packing": "telemetry"}
    publishes = ("packed",)

    def settings(self, source, sources) -> dict:
        from cpp_data.schemas.launch_spec import weight_groups

        return {"weight_groups": weight_groups(source_weights(sources))}

    def run(self, ctx: StageContext) -> dict:
        files, telemetry = pack_shards(ctx.input("token_columns").path, ctx.input("tokenizer").path / "tokenizer",
                                       ctx.out / "packed", self.params, source_weights(ctx.sources))
        return {"seq_length": self.params.seq_length, "files": len(files), "telemetry": telemetry}
