"""Packing documents into fixed-length training rows, best-fit-decreasing (docs/DESIGN.md section 10): what the
packed_rows stage writes per lane and `cpp-data export packed` writes for a build's documents.

Each document becomes its token ids + EOD, with three more slots reserved for the sentinels FIM adds when it is
drawn (tokenizer/fim.py); a document longer than `seq_length` is cut into `seq_length` pieces (no reserve, no
FIM), and no other document is ever split. A lane's documents fit its rows by construction (schemas/lanes.py),
so nothing of a lane is cut. Pieces are packed best-fit-decreasing within blocks of `block_docs` documents or
`block_bytes` of text, whichever is reached first (memory stays bounded by one block; the order of blocks follows
the shuffled shards) and rows are right-padded with EOD. Each block is a datatrove task on the build's
executor; then one task per row group of the rolled output files writes its rows with pack_id counted over the
whole prefix, one task per file copies its row groups into it (schemas/parquet_concat.py: the same bytes as one
writer), and the driver joins the blocks' partial bin/idx (join_partials: the bytes of megatron-core's
add_index), so the bytes are those of packing the blocks one after another. Columns per row:
  input_ids, target_ids      seq_length ids; target_ids[k] is the next token of the same document, PAD where
                             there is none (a document's EOD, padding, the last token of a cropped piece)
  loss_mask                  1 where target_ids is a real next token outside the document's context prefix
  doc_ids                    1.. for the documents of the row in order, 0 for padding
  valid_token_count, num_docs, pack_id (0.. per split)
  segment_docs, segment_starts   per segment k (doc_ids == k): its document's ordinal in the split's shard
                             order and its first token's offset in that (EOD-ended) document, so pieces of a
                             document longer than a row can be put back in order
  segment_context_lengths    per segment: the tokens of its document's context prefix it starts with (a
                             lane's chunk; 0 elsewhere): no loss, and FIM never cuts them
  token_<name>               the per-token metadata columns of the shards, when present, aligned with
                             input_ids (the column's fill value on specials and padding)
The Parquet rows hold no FIM: the harness draws it per epoch as it reads them. The same rows are written per
split as a Megatron indexed dataset, one sequence per row of exactly seq_length ids: the validation split as
packed/cpp_packed_valid, the training split once per FIM epoch, `cpp_packed_train_e<k>` for k < fim_epochs,
each row with epoch k's FIM drawn (tokenizer/fim.fim_row, at `fim_rate`, SPM at `fim_spm_rate`), so
Megatron-LM too sees other splits in other epochs. Telemetry: slot utilization (real tokens / slots, before
FIM), documents per row, cropped-token share (tokens of documents longer than a row), FIM documents of epoch 0.

Why rows of exactly seq_length ids: GPTDataset cuts samples of seq_length + 1 tokens from the sequences laid
end to end; with every sequence exactly seq_length long, each sample's inputs are exactly one row and only its
last label is the first token of another row. The loss rule: no loss where the input is EOD (under
Megatron-LM's --eod-mask-loss), which covers padding, the step from one document to the next and, because the
tail is EOD rather than PAD, the cross-row label of every padded row (with PAD padding GPTDataset would train
that label: it masks only labels equal to PAD). A row filled by a piece of a document longer than a row ends
without EOD: there Megatron-LM trains one cross-row label per row (1 of seq_length), while the bundled harness
masks it. Megatron-LM has no per-token loss mask, so it trains a chunk's context prefix too; the harness does
not. FIM sentinels are ordinary tokens for the loss.
"""

from __future__ import annotations

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
from cpp_data.tokenizer.fim import SENTINELS as FIM_SENTINELS
from cpp_data.tokenizer.fim import FimSpec, fim_row, row_segments

PACKED_COMPRESSION: dict[str, Any] = {"compression": "zstd", "compression_level": None}  # zstd's default level


@dataclass(frozen=True)
class PackingParams:
    """How to pack (the packed_rows stage's parameters: each lane brings its own sequence length)."""
    bounds: ClassVar[dict] = {"fim_rate": (0, 1), "fim_spm_rate": (0, 1), "fim_epochs": (1, 64),
                              "block_docs": (1, None), "block_bytes": (1, None), "rows_per_shard": (1, None),
                              "row_group_size": (1, None)}
    generation: str = "v6"
    fim_rate: float = 0.5  # drawn per epoch: by the harness as it reads rows, ahead for Megatron-LM's bin/idx
    fim_spm_rate: float = 0.5
    fim_epochs: int = 1  # training bin/idx prefixes, one per epoch of FIM drawn ahead
    seed: int = 42
    block_docs: int = 16_384
    block_bytes: int = 16 * 2**20  # a block also closes at this much text: a task's memory follows its tokens
    rows_per_shard: int = 8192
    row_group_size: int = 256


@dataclass(frozen=True)
class PackedParams(PackingParams):
    """Packing at one sequence length (`cpp-data export packed`, and each lane of the packed_rows stage)."""
    bounds: ClassVar[dict] = {**PackingParams.bounds, "seq_length": (2, MAX_SEQ_LENGTH)}
    seq_length: int = 4096


@dataclass
class Doc:
    tokens: np.ndarray  # ids + EOD
    meta: dict[str, np.ndarray]
    context: int = 0  # tokens of its context prefix
    ordinal: int = -1  # the document's place in its split's shard order


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
               pa.field("segment_starts", pa.list_(pa.int32())),
               pa.field("segment_context_lengths", pa.list_(pa.int32()))]


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
               ) -> Iterator[tuple[int, str, np.ndarray, int, dict]]:
    """(ordinal, source_repo, token ids, context tokens, per-token metadata) of the split's documents with
    ordinal in [lo, hi) (all without bounds), reading only the row groups that hold them."""
    ordinal = 0
    for f in files:
        pf = pq.ParquetFile(f, page_checksum_verification=True)
        with_context = "context_length" in pf.schema_arrow.names
        for rg in range(pf.num_row_groups):
            n = pf.metadata.row_group(rg).num_rows
            if hi is not None and ordinal >= hi:
                return
            if ordinal + n <= lo:
                ordinal += n
                continue
            t = read_row_group(pf, rg, ["source_repo", "token_ids", *meta_cols]
                               + (["context_length"] if with_context else []))
            ids = t.column("token_ids").combine_chunks()
            values, offsets = ids.values.to_numpy(zero_copy_only=False), ids.offsets.to_numpy()
            metas = {}
            for c in meta_cols:
                col = t.column(c).combine_chunks()
                metas[c] = (col.values.to_numpy(zero_copy_only=False), col.offsets.to_numpy())
            repos = t.column("source_repo").to_pylist()
            contexts = t.column("context_length").to_pylist() if with_context else [0] * t.num_rows
            for r in range(t.num_rows):
                k = ordinal + r
                if k < lo or (hi is not None and k >= hi):
                    continue
                a, b = offsets[r], offsets[r + 1]
                meta = {c: v[o[r]:o[r + 1]] for c, (v, o) in metas.items()}
                yield k, repos[r], values[a:b].astype(np.int32), int(contexts[r] or 0), meta
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


@dataclass
class Piece:
    """A document's tokens in one row: the whole document, or a seq_length cut of a longer one."""
    doc: Doc
    span: slice
    room: int  # slots it takes when packed: its tokens, and the FIM reserve of a whole document that has it

    @property
    def context(self) -> int:
        return self.doc.context if self.span.start == 0 else 0


def pieces_of(docs: list[Doc], T: int) -> list[Piece]:
    """Every document as one piece with its FIM reserve when that fits a row, else as seq_length cuts."""
    out = []
    for d in docs:
        n = len(d.tokens)
        if n + FIM_SENTINELS <= T:
            out.append(Piece(d, slice(0, n), n + FIM_SENTINELS))
        else:
            out += [Piece(d, slice(a, min(n, a + T)), min(n, a + T) - a) for a in range(0, n, T)]
    return out


class RowBuilder:
    """The columns of one packed row from its pieces (the module docstring's layout)."""

    def __init__(self, T: int, roles: dict[str, int], meta_types: dict[str, Any], fills: dict):
        self.T, self.eod, self.pad = T, roles["eos"], roles["pad"]
        self.meta_types, self.fills = meta_types, fills

    def row(self, pieces: list[Piece]) -> dict:
        T = self.T
        inp = np.full(T, self.eod, dtype=np.int32)  # EOD, not PAD, fills the tail: see the module docstring
        tgt = np.full(T, self.pad, dtype=np.int32)
        mask = np.zeros(T, dtype=np.uint8)
        ids = np.zeros(T, dtype=np.int32)
        meta = {c: np.full(T, self.fills[c], dtype=t) for c, t in self.meta_types.items()}
        pos = 0
        for k, piece in enumerate(pieces, start=1):
            seg = piece.doc.tokens[piece.span]
            L = len(seg)
            inp[pos:pos + L] = seg
            tgt[pos:pos + L - 1] = seg[1:]
            mask[pos + max(piece.context - 1, 0):pos + L - 1] = 1  # no loss on predicting the context
            ids[pos:pos + L] = k
            for c in meta:
                meta[c][pos:pos + L] = piece.doc.meta[c][piece.span]
            pos += L
        return {"input_ids": inp, "target_ids": tgt, "loss_mask": mask, "doc_ids": ids, "valid_token_count": pos,
                "num_docs": len(pieces), "segment_docs": [q.doc.ordinal for q in pieces],
                "segment_starts": [q.span.start for q in pieces],
                "segment_context_lengths": [q.context for q in pieces], **meta}


class EpochWriters:
    """A block's partial bin/idx: the validation split's rows as they are; the training split's once per FIM
    epoch, with that epoch's FIM drawn on each row (tokenizer/fim.fim_row)."""

    def __init__(self, parts: Path, rank: int, vocab_size: int, split: str, epochs: int, fim: FimSpec, eod: int):
        from cpp_data.schemas.indexed import PartialWriter

        self.keys = [f"e{k}" for k in range(epochs)] if split == "train" else [""]
        self.writers = [PartialWriter(parts / f"{rank:05d}{('.' + key) if key else ''}", vocab_size)
                        for key in self.keys]
        self.fim, self.eod = fim, eod
        self.fim_documents = 0

    def add(self, row: dict) -> None:
        if self.keys == [""]:
            self.writers[0].add(row["input_ids"])
            return
        segments = row_segments(row["doc_ids"], row["segment_docs"], row["segment_context_lengths"],
                                row["segment_starts"], row["input_ids"], self.eod)
        for epoch, writer in enumerate(self.writers):
            tokens, _, _ = fim_row(row["input_ids"], segments, self.fim, epoch, self.eod)
            writer.add(tokens)
            if epoch == 0:
                self.fim_documents += int((tokens == self.fim.prefix_id).sum()) \
                    - int((row["input_ids"] == self.fim.prefix_id).sum())

    def close(self) -> dict[str, dict]:
        return {key: w.close() for key, w in zip(self.keys, self.writers)}


class PackBlock(PipelineStep):
    """Task r: block r of the plan packed into rows, written as pieces/r.arrow (pack_id counted from 0 within
    the block), partial bin/idx parts/r[.e<k>] (schemas/indexed.PartialWriter) and its telemetry parts/r.json."""

    type = "📦 - PACK"
    name = "pack"

    def __init__(self, files: dict[str, list[str]], work: Path, info: dict, p: PackedParams, meta_cols: list[str],
                 fills: dict):
        super().__init__()
        self.files, self.work, self.info, self.p = files, Path(work), info, p
        self.meta_cols, self.fills = meta_cols, fills

    def run(self, data, rank: int = 0, world_size: int = 1):
        block = json.loads((self.work / "blocks.json").read_text())[rank]
        (self.work / "pieces").mkdir(exist_ok=True)
        (self.work / "parts").mkdir(exist_ok=True)
        docs, stats = self._load(block, rank)
        pieces = pieces_of(docs, self.p.seq_length)
        stats["pieces"] = len(pieces)
        indexed = EpochWriters(self.work / "parts", rank, self.info["vocab_size"], block["split"], self.p.fim_epochs,
                               fim_spec(self.p, self.info["roles"]), self.info["roles"]["eos"])
        stats["rows"] = self._write_rows(pieces, rank, indexed)
        stats["fim_documents"] = indexed.fim_documents
        written = indexed.close()
        (self.work / "parts" / f"{rank:05d}.json").write_text(json.dumps({"stats": stats, "indexed": written}))
        for name, value in stats.items():
            self.stat_update(name, value=value)
        return
        yield

    def _load(self, block: dict, rank: int) -> tuple[list[Doc], dict[str, int]]:
        """The block's documents with EOD appended, and their counts."""
        eod, fills = self.info["roles"]["eos"], self.fills
        keep = set(block["sources"]) if block["sources"] is not None else None
        stats = {"rows": 0, "documents": 0, "tokens": 0, "cropped_tokens": 0, "fim_documents": 0, "pieces": 0}
        docs: list[Doc] = []
        for ordinal, repo, tokens, context, meta in _documents([Path(f) for f in self.files[block["split"]]],
                                                               self.meta_cols, block["lo"], block["hi"]):
            if keep is not None and repo not in keep:
                continue
            d = Doc(_with_end(tokens, eod), {c: _with_end(v, fills[c]) for c, v in meta.items()}, context, ordinal)
            stats["documents"] += 1
            stats["tokens"] += len(d.tokens)
            if len(d.tokens) > self.p.seq_length:
                stats["cropped_tokens"] += len(d.tokens)
            docs.append(d)
        if stats["documents"] != block["documents"]:
            raise RuntimeError(f"block {rank} of {block['key']}: {stats['documents']} documents, planned "
                               f"{block['documents']}")
        return docs, stats

    def _write_rows(self, pieces: list[Piece], rank: int, indexed: EpochWriters) -> int:
        """Pack, then write the rows a row group at a time (a block's rows never sit in memory at once)."""
        schema = packed_schema(self.p.generation, self.meta_cols)
        meta_types = {c: schema.field(c).type.value_type.to_pandas_dtype() for c in self.meta_cols}
        builder = RowBuilder(self.p.seq_length, self.info["roles"], meta_types, self.fills)
        tmp = self.work / "pieces" / f".{rank:05d}.rows"
        rows: list[dict] = []
        count = 0
        with pa.ipc.new_file(tmp, schema, options=pa.ipc.IpcWriteOptions(compression="lz4")) as out:
            for members in best_fit_decreasing([q.room for q in pieces], self.p.seq_length):
                row = builder.row([pieces[m] for m in members])
                indexed.add(row)
                rows.append({"pack_id": count, **row})
                count += 1
                if len(rows) == self.p.row_group_size:
                    out.write_table(_rows_table(rows, schema))
                    rows = []
            if rows:
                out.write_table(_rows_table(rows, schema))
        os.replace(tmp, self.work / "pieces" / f"{rank:05d}.arrow")
        return count


def fim_spec(p: PackedParams, roles: dict[str, int]) -> FimSpec:
    return FimSpec.from_roles(p.fim_rate, p.fim_spm_rate, p.seed, roles)


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

    def __init__(self, out: Path, work: Path, rel: str = "packed"):
        super().__init__()
        self.out, self.work, self.rel = Path(out), Path(work), rel

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
            {"path": f"{self.rel}/{final.name}", "split": job["split"], "rows": rows, "kind": "packed",
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


_STATS = ("rows", "documents", "tokens", "cropped_tokens", "fim_documents", "pieces")


def pack_shards(shards_dir: Path, tokenizer_dir: Path, out: Path, p: PackedParams, weights: dict[str, float],
                executor, label: str = "packed_rows", rel: str = "packed") -> tuple[list[dict], dict]:
    """Both splits into `out`: the training split once per weight group of the sources
    (schemas/launch_spec.weight_groups: one group, unsuffixed, without weights), so a Megatron blend can weight
    them; writes packed.json (files, telemetry per split, the FIM draw, and per prefix its split, epoch, sources
    and counts). `rel` is `out` as the build's files name it (packed, or packed/<lane>).

    As datatrove tasks on `executor`: one per packing block (`block_plan`), then one per row group of the output
    files and one per file to put them together; the driver joins each prefix's partial bin/idx
    (schemas/indexed.join_partials). Scratch under out/_work."""
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
    executor.run([ConcatPackedFile(out, work, rel)], len(plan), work / "_datatrove" / "concat",
                  f"{label}: concat")
    out_files, telemetry, prefixes = [], {}, {}
    for split in ("train", "valid"):
        total: dict[str, int] = dict.fromkeys(_STATS, 0)
        for suffix, members, _ in split_groups(split, weights):
            key = split + suffix
            mine = [r for r, b in enumerate(blocks) if b["key"] == key]
            stats = {k: sum(written[r]["stats"][k] for r in mine) for k in _STATS}
            if suffix and not stats["documents"]:  # a weight group whose sources left no training document
                continue
            out_files += [f for k, job in enumerate(plan) if job["key"] == key
                          for f in json.loads((work / "written" / f"{k:05d}.json").read_text())]
            for epoch in (range(p.fim_epochs) if split == "train" else [None]):
                name, record = _join_prefix(out, work, rel, key, epoch, mine, written, info["vocab_size"])
                out_files += record
                prefixes[name] = {"split": split, "epoch": epoch, "sources": members, "documents": stats["documents"],
                                  "tokens": stats["tokens"], "rows": stats["rows"], "samples": stats["rows"]}
            total = {k: total[k] + v for k, v in stats.items()}
        telemetry[split] = _telemetry(total, p.seq_length)
    shutil.rmtree(work, ignore_errors=True)
    atomic_write_json(out / "packed.json", {"seq_length": p.seq_length, "files": out_files, "telemetry": telemetry,
                                            "meta_columns": meta_cols, "prefixes": prefixes,
                                            "vocab_size": info["vocab_size"], "eod": info["roles"]["eos"],
                                            "pad": info["roles"].get("pad"), "fim_epochs": p.fim_epochs,
                                            "fim": fim_spec(p, info["roles"]).as_json()})
    return out_files, telemetry


def _join_prefix(out: Path, work: Path, rel: str, key: str, epoch: int | None, blocks: list[int],
                 written: list[dict], vocab_size: int) -> tuple[str, list[dict]]:
    """One prefix's bin/idx from its blocks' partials (a training prefix per FIM epoch): its name and files."""
    from cpp_data.schemas.indexed import join_partials

    part = "" if epoch is None else f".e{epoch}"
    name = f"cpp_packed_{key}" + ("" if epoch is None else f"_e{epoch}")
    info = join_partials(out / name, [(work / "parts" / f"{r:05d}{part}", written[r]["indexed"][part[1:]])
                                      for r in blocks], vocab_size)
    split = key.split("_")[0]
    return name, [{"path": f"{rel}/{name}{ext}", "split": split, "rows": info["sequences"],
                   "bytes": (out / f"{name}{ext}").stat().st_size, "sha256": info[f"{ext[1:]}_sha256"],
                   "kind": f"packed_{ext[1:]}"} for ext in (".bin", ".idx")]


def _telemetry(total: dict[str, int], seq_length: int) -> dict:
    slots = total["rows"] * seq_length
    return {
        **total,
        "slot_utilization": round(total["tokens"] / slots, 4) if slots else 0.0,
        "docs_per_row": round(total["pieces"] / total["rows"], 3) if total["rows"] else 0.0,
        "cropped_token_share": round(total["cropped_tokens"] / total["tokens"], 4) if total["tokens"] else 0.0,
    }


def _write_once(path: Path, value) -> None:
    """A task plan: written once; a resumed stage must find the one its finished tasks were part of."""
    text = json.dumps(value)
    if path.exists():
        if path.read_text() != text:
            raise RuntimeError(f"{path}: the task plan changed under a resumed stage")
        return
    path.write_text(text)
