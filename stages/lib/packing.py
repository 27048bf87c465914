"""Packing documents into fixed-length training rows, best-fit-decreasing (docs/DESIGN.md section 10): what the
packed_rows stage and `cpp-data export packed` write.

Each document becomes its token ids + EOD (on the training split, with FIM applied first at `fim_rate`).
A document longer than `seq_length` is cut into `seq_length` pieces; no other document is ever split. Pieces are
packed best-fit-decreasing within blocks of `block_docs` documents or `block_bytes` of text, whichever is
reached first (memory stays bounded by one block; the order of blocks follows the shuffled shards) and rows
are right-padded with EOD. Each block is a datatrove task on the build's executor; then one task per row group
of the rolled output files writes its rows with pack_id counted over the whole prefix, one task per file copies
its row groups into it (schemas/parquet_concat.py: the same bytes as one writer), and the driver joins the
blocks' partial bin/idx (join_partials: the bytes of megatron-core's add_index), so the bytes are
those of packing the blocks one after another. Columns per row:
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
import json
import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pyarrow as pa
import pyarrow.compute  # noqa: F401  (pa.compute)
import pyarrow.parquet as pq
from datatrove.pipeline.base import PipelineStep

from cpp_data.pipeline.foundation.fsutil import atomic_write_json
from cpp_data.schemas.generations import columns as generation_columns
from cpp_data.schemas.launch_spec import MAX_SEQ_LENGTH
from cpp_data.schemas.reader import iter_shard, read_row_group, shard_files
from cpp_data.stages.lib.list_columns import list_array
from cpp_data.tokenizer.files import tokenizer_info

PACKED_COMPRESSION: dict[str, Any] = {"compression": "zstd", "compression_level": None}  # zstd's default level


@dataclass(frozen=True)
class PackedParams:
    bounds: ClassVar[dict] = {"seq_length": (2, MAX_SEQ_LENGTH), "fim_rate": (0, 1), "fim_spm_rate": (0, 1),
                              "block_docs": (1, None), "block_bytes": (1, None), "rows_per_shard": (1, None),
                              "row_group_size": (1, None)}
    generation: str = "v6"
    seq_length: int = 4096
    fim_rate: float = 0.5
    fim_spm_rate: float = 0.5
    seed: int = 42
    block_docs: int = 16_384
    block_bytes: int = 16 * 2**20  # a block also closes at this much text: a task's memory follows its tokens
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


def _with_end(values: np.ndarray, end: int) -> np.ndarray:
    """`values` and then `end`, in values' own dtype. np.concatenate with a Python list would widen to int64, so a
    block's per-token columns would take 8 bytes a value instead of 1 or 2."""
    out = np.empty(len(values) + 1, values.dtype)
    out[:-1] = values
    out[-1] = end
    return out


PACK_FIELDS = [pa.field("pack_id", pa.int64()), pa.field("input_ids", pa.list_(pa.int32())),
               pa.field("target_ids", pa.list_(pa.int32())), pa.field("loss_mask", pa.list_(pa.uint8())),
               pa.field("doc_ids", pa.list_(pa.int32())), pa.field("valid_token_count", pa.int32()),
               pa.field("num_docs", pa.int32()), pa.field("segment_docs", pa.list_(pa.int64())),
               pa.field("segment_starts", pa.list_(pa.int32()))]


def packed_schema(generation: str, meta_cols: list[str]) -> pa.Schema:
    types = {c.name: c.type for c in generation_columns(generation)}
    return pa.schema(PACK_FIELDS + [pa.field(c, types[c]) for c in meta_cols])


def _rows_table(rows: list[dict], schema: pa.Schema) -> pa.Table:
    """The packed rows as a table of `schema`, built a column at a time: each list column from its rows' arrays
    joined, with offsets. pa.Table.from_pylist converted the rows' numpy arrays value by value, a quarter of
    the packing task's time; the table is the same."""
    columns = []
    for field in schema:
        values = [r[field.name] for r in rows]
        if pa.types.is_list(field.type):
            columns.append(list_array(values, field.type))
        else:
            columns.append(pa.array(values, field.type))
    return pa.Table.from_arrays(columns, schema=schema)


def _documents(files: list[Path], meta_cols: list[str], lo: int = 0, hi: int | None = None
               ) -> Iterator[tuple[int, str, str, np.ndarray, dict]]:
    """(ordinal, doc_id, source_repo, token ids, per-token metadata) of the split's documents with ordinal in
    [lo, hi) (all without bounds), reading only the row groups that hold them."""
    ordinal = 0
    for f in files:
        pf = pq.ParquetFile(f, page_checksum_verification=True)
        for rg in range(pf.num_row_groups):
            n = pf.metadata.row_group(rg).num_rows
            if hi is not None and ordinal >= hi:
                return
            if ordinal + n <= lo:
                ordinal += n
                continue
            t = read_row_group(pf, rg, ["doc_id", "source_repo", "token_ids", *meta_cols])
            ids = t.column("token_ids").combine_chunks()
            values, offsets = ids.values.to_numpy(zero_copy_only=False), ids.offsets.to_numpy()
            metas = {}
            for c in meta_cols:
                col = t.column(c).combine_chunks()
                metas[c] = (col.values.to_numpy(zero_copy_only=False), col.offsets.to_numpy())
            repos = t.column("source_repo").to_pylist()
            for r, doc_id in enumerate(t.column("doc_id").to_pylist()):
                k = ordinal + r
                if k < lo or (hi is not None and k >= hi):
                    continue
                a, b = offsets[r], offsets[r + 1]
                meta = {c: v[o[r]:o[r + 1]] for c, (v, o) in metas.items()}
                yield k, doc_id, repos[r], values[a:b].astype(np.int32), meta
            ordinal += n


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


def block_plan(files: list[Path], split: str, groups: list, block_docs: int, block_bytes: int | None = None
               ) -> list[dict]:
    """The packing blocks of one split: per prefix key (the split plus a weight group's suffix), runs of the
    group's documents in shard order of `block_docs` documents, or fewer once they hold `block_bytes` of text
    (size_bytes; a larger document alone), each as the ordinal range [lo, hi) it spans. One streaming pass over
    two small columns."""
    blocks: list[dict] = []
    state: dict[str, dict[str, Any]] = {suffix: {"count": 0, "bytes": 0, "lo": None, "last": None}
                                        for suffix, _, _ in groups}

    def close(suffix: str, keep) -> None:
        st = state[suffix]
        if st["count"]:
            blocks.append({"key": split + suffix, "split": split, "lo": st["lo"], "hi": st["last"] + 1,
                           "documents": st["count"], "sources": sorted(keep) if keep is not None else None})
        st.update(count=0, bytes=0, lo=None, last=None)

    ordinal = 0
    for f in files:
        for t in iter_shard(f, None, ["source_repo", "size_bytes"]):
            for repo, size in zip(t.column("source_repo").to_pylist(), t.column("size_bytes").to_pylist()):
                for suffix, _, keep in groups:
                    if keep is None or repo in keep:
                        st = state[suffix]
                        if st["count"] and block_bytes is not None and st["bytes"] + size > block_bytes:
                            close(suffix, keep)
                        st["lo"] = ordinal if st["lo"] is None else st["lo"]
                        st["last"], st["count"], st["bytes"] = ordinal, st["count"] + 1, st["bytes"] + size
                        if st["count"] == block_docs:
                            close(suffix, keep)
                ordinal += 1
    for suffix, _, keep in groups:
        close(suffix, keep)
    order = {split + suffix: k for k, (suffix, _, _) in enumerate(groups)}
    return sorted(blocks, key=lambda b: (order[b["key"]], b["lo"]))  # per key, in shard order


class PackBlock(PipelineStep):
    """Task r: block r of the plan packed into rows, written as pieces/r.arrow (pack_id counted from 0 within
    the block), a partial bin/idx parts/r (schemas/indexed.PartialWriter) and its telemetry parts/r.json."""

    type = "📦 - PACK"
    name = "pack"

    def __init__(self, files: dict[str, list[str]], work: Path, info: dict, p: PackedParams, meta_cols: list[str],
                 fills: dict):
        super().__init__()
        self.files, self.work, self.info, self.p = files, Path(work), info, p
        self.meta_cols, self.fills = meta_cols, fills

    def run(self, data, rank: int = 0, world_size: int = 1):
        from cpp_data.schemas.indexed import PartialWriter

        block = json.loads((self.work / "blocks.json").read_text())[rank]
        p, roles, T = self.p, self.info["roles"], self.p.seq_length
        pad, eod = roles["pad"], roles["eos"]
        meta_cols, fills = self.meta_cols, self.fills
        keep = set(block["sources"]) if block["sources"] is not None else None
        split = block["split"]
        (self.work / "pieces").mkdir(exist_ok=True)
        (self.work / "parts").mkdir(exist_ok=True)
        indexed = PartialWriter(self.work / "parts" / f"{rank:05d}", self.info["vocab_size"])
        schema = packed_schema(p.generation, meta_cols)
        meta_types = {c: schema.field(c).type.value_type.to_pandas_dtype() for c in meta_cols}
        stats = {"rows": 0, "documents": 0, "tokens": 0, "cropped_tokens": 0, "fim_documents": 0, "pieces": 0}
        docs: list[Doc] = []
        for ordinal, doc_id, repo, tokens, meta in _documents([Path(f) for f in self.files[split]], meta_cols,
                                                              block["lo"], block["hi"]):
            if keep is not None and repo not in keep:
                continue
            d = Doc(_with_end(tokens, eod), {c: _with_end(v, fills[c]) for c, v in meta.items()})
            if split == "train" and p.fim_rate > 0 and len(tokens) >= 2:
                h = hashlib.blake2b(f"fim\0{p.seed}\0{doc_id}".encode(), digest_size=8).digest()
                rng = np.random.default_rng(int.from_bytes(h, "big"))
                if rng.random() < p.fim_rate:
                    f = _fim(Doc(tokens, meta), rng, roles, p.fim_spm_rate, fills)
                    d = Doc(_with_end(f.tokens, eod), {c: _with_end(v, fills[c]) for c, v in f.meta.items()})
                    stats["fim_documents"] += 1
            d.ordinal = ordinal
            stats["documents"] += 1
            stats["tokens"] += len(d.tokens)
            if len(d.tokens) > T:
                stats["cropped_tokens"] += len(d.tokens)
            docs.append(d)
        if stats["documents"] != block["documents"]:
            raise RuntimeError(f"block {rank} of {block['key']}: {stats['documents']} documents, planned "
                               f"{block['documents']}")
        pieces: list[tuple[Doc, slice]] = []
        for d in docs:
            n = len(d.tokens)
            pieces += [(d, slice(start, min(n, start + T))) for start in range(0, n, T)]
        tmp = self.work / "pieces" / f".{rank:05d}.rows"
        rows: list[dict] = []
        with pa.ipc.new_file(tmp, schema, options=pa.ipc.IpcWriteOptions(compression="lz4")) as out:
            for members in best_fit_decreasing([s.stop - s.start for _, s in pieces], T):
                inp = np.full(T, eod, dtype=np.int32)  # EOD, not PAD, fills the tail: see the module docstring
                tgt = np.full(T, pad, dtype=np.int32)
                mask = np.zeros(T, dtype=np.uint8)
                ids = np.zeros(T, dtype=np.int32)
                meta = {c: np.full(T, fills[c], dtype=meta_types[c]) for c in meta_cols}
                pos = 0
                for k, m in enumerate(members, start=1):
                    d, sl = pieces[m]
                    seg = d.tokens[sl]
                    L = len(seg)
                    inp[pos:pos + L] = seg
                    tgt[pos:pos + L - 1] = seg[1:]
                    mask[pos:pos + L - 1] = 1
                    ids[pos:pos + L] = k
                    for c in meta_cols:
                        meta[c][pos:pos + L] = d.meta[c][sl]
                    pos += L
                indexed.add(inp)
                rows.append({"pack_id": stats["rows"], "input_ids": inp, "target_ids": tgt, "loss_mask": mask,
                             "doc_ids": ids, "valid_token_count": pos, "num_docs": len(members),
                             "segment_docs": [pieces[m][0].ordinal for m in members],
                             "segment_starts": [pieces[m][1].start for m in members],
                             **{c: meta[c] for c in meta_cols}})
                stats["rows"] += 1
                if len(rows) == p.row_group_size:  # stream: a block's rows never sit in memory at once
                    out.write_table(_rows_table(rows, schema))
                    rows = []
            if rows:
                out.write_table(_rows_table(rows, schema))
        os.replace(tmp, self.work / "pieces" / f"{rank:05d}.arrow")
        stats["pieces"] = len(pieces)
        written = indexed.close()
        (self.work / "parts" / f"{rank:05d}.json").write_text(json.dumps({"stats": stats, "indexed": written}))
        for name, value in stats.items():
            self.stat_update(name, value=value)
        return
        yield


class WritePackedRowGroup(PipelineStep):
    """Task r: row group r of the row-group plan (`_row_group_plan`): rows [start, stop) of one packed file, taken
    from the blocks' pieces with pack_id counted over the whole prefix, written as a Parquet file of that one row
    group (rowgroups/r.parquet) with the settings of the packed files. A file's row groups are written by as many
    tasks, side by side: with one task per file, a corpus's single training file would be written on one core
    while the others idle."""

    type = "📦 - PACK"
    name = "write"

    def __init__(self, work: Path, p: PackedParams, meta_cols: list[str]):
        super().__init__()
        self.work, self.p, self.meta_cols = Path(work), p, meta_cols

    def run(self, data, rank: int = 0, world_size: int = 1):
        from cpp_data.stages.lib.shard_tasks import read_piece_rows, write_one_row_group

        group = json.loads((self.work / "rowgroups.json").read_text())[rank]
        job = json.loads((self.work / "files.json").read_text())[group["file"]]
        schema = packed_schema(self.p.generation, self.meta_cols)
        parts, at = [], 0  # at: the file's row where the current range starts
        for block, start, stop, offset in job["ranges"]:
            a, b = max(group["start"] - at, 0), min(group["stop"] - at, stop - start)
            if b > a:
                for rows in read_piece_rows(self.work / "pieces" / f"{block:05d}.arrow", start + a, start + b):
                    parts.append(rows.set_column(0, "pack_id", pa.compute.add(rows.column("pack_id"), offset)))
            at += stop - start
        table = pa.concat_tables(parts).combine_chunks()
        if table.num_rows != group["stop"] - group["start"]:
            raise RuntimeError(f"row group {rank}: {table.num_rows} rows, planned {group['stop'] - group['start']}")
        out = self.work / "rowgroups" / f"{rank:05d}.parquet"
        out.parent.mkdir(exist_ok=True)
        write_one_row_group(table.cast(schema), out, **PACKED_COMPRESSION)  # the same bytes as in the file
        self.stat_update("rows", value=table.num_rows)
        return
        yield


class ConcatPackedFile(PipelineStep):
    """Task k: packed file k of the file plan from its row groups, copied as they are encoded
    (schemas/parquet_concat.py), renamed into place and recorded (path, split, rows, kind, bytes, SHA-256)."""

    type = "📦 - PACK"
    name = "concat"

    def __init__(self, out: Path, work: Path):
        super().__init__()
        self.out, self.work = Path(out), Path(work)

    def run(self, data, rank: int = 0, world_size: int = 1):
        from cpp_data.schemas.manifest import sha256_file
        from cpp_data.schemas.parquet_concat import concat_parquet_file

        job = json.loads((self.work / "files.json").read_text())[rank]
        groups = json.loads((self.work / "rowgroups.json").read_text())
        parts = [self.work / "rowgroups" / f"{r:05d}.parquet" for r, g in enumerate(groups) if g["file"] == rank]
        final = self.out / f"{job['key']}-{job['index']:05d}.parquet"
        rows = concat_parquet_file(parts, final)
        (self.work / "written").mkdir(exist_ok=True)
        atomic_write_json(self.work / "written" / f"{rank:05d}.json", [
            {"path": f"packed/{final.name}", "split": job["split"], "rows": rows, "kind": "packed",
             "bytes": final.stat().st_size, "sha256": sha256_file(final)}], durable=False)
        return
        yield


def _row_group_plan(plan: list[dict], row_group_size: int) -> list[dict]:
    """The row groups of every planned file, in file order: {file, start, stop} in the file's rows."""
    groups = []
    for k, job in enumerate(plan):
        rows = sum(stop - start for _, start, stop, _ in job["ranges"])
        groups += [{"file": k, "start": a, "stop": min(a + row_group_size, rows)}
                   for a in range(0, rows, row_group_size)]
    return groups


def _file_plan(blocks: list[dict], written: list[dict], rows_per_shard: int) -> list[dict]:
    """Per output file of each prefix key: its key, split, index and the (block, start, stop, pack_id offset)
    ranges of rows it takes."""
    plan = []
    for key in dict.fromkeys(b["key"] for b in blocks):
        mine = [(r, b) for r, b in enumerate(blocks) if b["key"] == key]
        spans, total = [], 0
        for r, _ in mine:
            n = written[r]["stats"]["rows"]
            spans.append((r, total, total + n))
            total += n
        for index, first in enumerate(range(0, total, rows_per_shard)):
            last = min(total, first + rows_per_shard)
            ranges = [(r, max(first, a) - a, min(last, c) - a, a) for r, a, c in spans if a < last and c > first]
            plan.append({"key": key, "split": mine[0][1]["split"], "index": index, "ranges": ranges})
    return plan


def pack_shards(shards_dir: Path, tokenizer_dir: Path, out: Path, p: PackedParams, weights: dict[str, float],
                executor, label: str = "packed_rows") -> tuple[list[dict], dict]:
    """Both splits into `out`: the training split once per weight group of the sources
    (schemas/launch_spec.weight_groups: one group, unsuffixed, without weights), so a Megatron blend can weight
    them; writes packed.json (files, telemetry per split, and per prefix its split, sources and counts).

    As datatrove tasks on `executor`: one per packing block (`block_plan`), then one per row group of the output
    files and one per file to put them together; the driver joins each prefix's partial bin/idx
    (schemas/indexed.join_partials). Scratch under out/_work."""
    from cpp_data.schemas.indexed import join_partials
    from cpp_data.schemas.launch_spec import split_groups
    from cpp_data.stages.lib.shard_tasks import WORK

    info = tokenizer_info(tokenizer_dir)
    out.mkdir(parents=True, exist_ok=True)
    work = out / WORK
    work.mkdir(exist_ok=True)
    cols = [c for c in generation_columns(p.generation) if c.per_token]
    present = set(pq.read_schema(shard_files(shards_dir)[0]).names) if shard_files(shards_dir) else set()
    meta_cols = [c.name for c in cols if c.name in present]
    fills = {c.name: c.fill for c in cols}
    files = {split: [str(f) for f in shard_files(shards_dir, split)] for split in ("train", "valid")}
    blocks = [b for split in ("train", "valid")
              for b in block_plan([Path(f) for f in files[split]], split, split_groups(split, weights), p.block_docs,
                                    p.block_bytes)]
    _write_once(work / "blocks.json", blocks)
    executor.run([PackBlock(files, work, info, p, meta_cols, fills)], len(blocks),
                  work / "_datatrove" / "pack", f"{label}: pack")
    written = [json.loads((work / "parts" / f"{r:05d}.json").read_text()) for r in range(len(blocks))]
    plan = _file_plan(blocks, written, p.rows_per_shard)
    _write_once(work / "files.json", plan)
    groups = _row_group_plan(plan, p.row_group_size)
    _write_once(work / "rowgroups.json", groups)
    executor.run([WritePackedRowGroup(work, p, meta_cols)], len(groups), work / "_datatrove" / "write",
                  f"{label}: write")
    executor.run([ConcatPackedFile(out, work)], len(plan), work / "_datatrove" / "concat",
                  f"{label}: concat")
    out_files, telemetry, prefixes = [], {}, {}
    for split in ("train", "valid"):
        total: dict[str, int] = {}
        for suffix, members, _ in split_groups(split, weights):
            key = split + suffix
            mine = [r for r, b in enumerate(blocks) if b["key"] == key]
            stats = {"rows": 0, "documents": 0, "tokens": 0, "cropped_tokens": 0, "fim_documents": 0, "pieces": 0}
            for r in mine:
                stats = {k: v + written[r]["stats"][k] for k, v in stats.items()}
            if suffix and not stats["documents"]:  # a weight group whose sources left no training document
                continue
            f = []
            for k, job in enumerate(plan):
                if job["key"] == key:
                    f += json.loads((work / "written" / f"{k:05d}.json").read_text())
            info_idx = join_partials(out / f"cpp_packed_{key}",
                                     [(work / "parts" / f"{r:05d}", written[r]["indexed"]) for r in mine],
                                     info["vocab_size"])
            for ext in (".bin", ".idx"):
                path = out / f"cpp_packed_{key}{ext}"
                f.append({"path": f"packed/{path.name}", "split": split, "rows": info_idx["sequences"],
                          "bytes": path.stat().st_size, "sha256": info_idx[f"{ext[1:]}_sha256"],
                          "kind": f"packed_{ext[1:]}"})
            out_files += f
            prefixes[f"cpp_packed_{key}"] = {"split": split, "sources": members, "documents": stats["documents"],
                                             "tokens": stats["tokens"], "rows": stats["rows"],
                                             "samples": stats["rows"]}
            total = {k: total.get(k, 0) + v for k, v in stats.items()}
        slots = total["rows"] * p.seq_length
        telemetry[split] = {
            **total,
            "slot_utilization": round(total["tokens"] / slots, 4) if slots else 0.0,
            "docs_per_row": round(total["pieces"] / total["rows"], 3) if total["rows"] else 0.0,
            "cropped_token_share": round(total["cropped_tokens"] / total["tokens"], 4) if total["tokens"] else 0.0,
        }
    shutil.rmtree(work, ignore_errors=True)
    atomic_write_json(out / "packed.json", {"seq_length": p.seq_length, "files": out_files, "telemetry": telemetry,
                                            "meta_columns": meta_cols, "prefixes": prefixes,
                                            "vocab_size": info["vocab_size"], "eod": info["roles"]["eos"],
                                            "pad": info["roles"].get("pad")})
    return out_files, telemetry


def _write_once(path: Path, value) -> None:
    """A task plan: written once; a resumed stage must find the one its finished tasks were part of."""
    text = json.dumps(value)
    if path.exists():
        if path.read_text() != text:
            raise RuntimeError(f"{path}: the task plan changed under a resumed stage")
        return
    path.write_text(text)
