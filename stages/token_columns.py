"""token_columns: the v6 token-level columns (docs/DESIGN.md section 7), written as a new copy of the shards.

For every document of the structure stage's shards: `token_ids` from the build's tokenizer, and for each
per-character column the shard carries
(structure_ids, ast_depth, ...) its per-token mirror `token_<name>`, sampled at each token's first character
(the tokenizer's character offsets). Files, row groups, row order and every other column stay exactly as the
shards stage wrote them, so `text` is byte-identical. The work runs as datatrove tasks on the build's executor,
one per slice of `rows_per_task` documents, then one merge task per shard file (stages/lib/shard_tasks.py); the
bytes do not depend on the slicing or the number of workers.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from cpp_data.pipeline.contract.executor import stat_total
from cpp_data.pipeline.contract.stage import Stage, StageContext
from cpp_data.pipeline.foundation.fsutil import atomic_write_json
from cpp_data.pipeline.foundation.worker_cache import worker_cache
from cpp_data.schemas.generations import columns as generation_columns
from cpp_data.schemas.generations import write_schema
from cpp_data.schemas.reader import shard_files
from cpp_data.stages.lib.shard_tasks import SliceWork, clean_work, rewrite_shards_as_tasks
from cpp_data.tokenizer.files import load_tokenizer
from cpp_data.tokenizer.pretokenizer import PART_CHARS, byte_symbols, encode_in_parts


@dataclass(frozen=True)
class TokenColumnsParams:
    bounds: ClassVar[dict] = {"rows_per_task": (1, None)}
    generation: str = "v6"
    compression: str = "zstd"
    compression_level: int = 3
    rows_per_task: int = 1024  # documents per task, a row group of the shards: each task decodes its whole row
    # group's per-character columns, so smaller slices cost more decoding (the output bytes do not depend on it)


def token_byte_lengths(tok) -> np.ndarray:
    """Bytes of text each id stands for, indexed by id. A byte-level BPE entry spells one byte per character
    (GPT-2's printable remapping); an entry with a character outside that alphabet (a special token's literal)
    stands for its UTF-8 bytes."""
    alphabet = set(byte_symbols())
    lengths = np.zeros(tok.get_vocab_size(with_added_tokens=True), np.int64)
    for token, i in tok.get_vocab(with_added_tokens=True).items():
        lengths[i] = len(token) if alphabet.issuperset(token) else len(token.encode("utf-8"))
    return lengths


def token_char_starts(texts: pa.Array, ids: np.ndarray, counts: np.ndarray, byte_lengths: np.ndarray) -> np.ndarray:
    """For every token of every document (`ids` flat, `counts` tokens per document), the index in its document
    of the character holding the token's first byte: the start of the offsets tokenizers reports, without an
    Encoding's offsets list per document (converting those to numpy cost as much as half the encoding).

    Byte-level BPE tokens cover the text's UTF-8 bytes in order, so a token starts at its document's byte
    offset plus the lengths of the tokens before it; the character holding byte b is the number of UTF-8 lead
    bytes up to and including b, less one, taken over the column's one data buffer. Checked: each document's
    tokens must add up to its bytes, else ValueError (no silent misalignment)."""
    texts = texts.cast(pa.large_string()) if pa.types.is_string(texts.type) else texts
    offsets = np.frombuffer(texts.buffers()[1], np.int64, len(texts) + 1, texts.offset * 8)
    data = np.frombuffer(texts.buffers()[2], np.uint8, int(offsets[-1] - offsets[0]), int(offsets[0])) \
        if texts.buffers()[2] is not None else np.zeros(0, np.uint8)
    lead = np.cumsum((data & 0xC0) != 0x80, dtype=np.int64) - 1  # char index (in the buffer) of each byte
    doc_byte = offsets[:-1] - offsets[0]
    doc_char = lead[np.minimum(doc_byte, max(len(data) - 1, 0))] if len(data) else np.zeros(len(doc_byte), np.int64)
    sizes = byte_lengths[ids]
    covered = np.add.reduceat(sizes, (np.cumsum(counts) - counts)[counts > 0]) if len(sizes) else np.zeros(0, np.int64)
    if not np.array_equal(covered, np.diff(offsets)[counts > 0]) or (np.diff(offsets)[counts == 0] != 0).any():
        raise ValueError("the tokens do not spell their documents' bytes one for one (a tokenizer other than "
                         "byte-level BPE without a normalizer?): token character offsets cannot be derived")
    ends = np.cumsum(sizes)
    first = np.repeat(np.cumsum(counts) - counts, counts)  # flat index of each token's document's first token
    within = ends - sizes - (ends[first] - sizes[first])  # byte offset of each token in its document
    owner = np.repeat(np.arange(len(counts)), counts)
    return lead[doc_byte[owner] + within] - doc_char[owner]


def mirror_values(values: np.ndarray, offsets: np.ndarray, starts: np.ndarray, counts: np.ndarray,
                  fill) -> np.ndarray:
    """The values of a per-character list column (flat `values`, the documents' `offsets` into them) at each
    token's first character: `starts` flat over the documents, `counts` tokens per document. A start past its
    document's characters takes the last one, and a document whose list is empty gets `fill` (neither happens
    to a column of one value per character)."""
    owner = np.repeat(np.arange(len(counts)), counts)
    n = (offsets[1:] - offsets[:-1])[owner]
    at = offsets[:-1][owner] + np.minimum(starts, n - 1)
    picked = values[np.where(n > 0, at, 0)] if len(values) else np.zeros(len(at), values.dtype)
    if not (n > 0).all():
        picked = np.where(n > 0, picked, fill)
    return picked


def _batches(sizes: np.ndarray, limit: int) -> list[tuple[int, int]]:
    """Runs of consecutive documents of at most `limit` bytes together (a larger document alone)."""
    out, a, total = [], 0, 0
    for i, n in enumerate(sizes.tolist()):
        if i > a and total + n > limit:
            out.append((a, i))
            a, total = i, 0
        total += n
    if a < len(sizes):
        out.append((a, len(sizes)))
    return out


def add_token_columns(table: pa.Table, tok, generation: str, byte_lengths: np.ndarray | None = None,
                      batch_bytes: int = 1 << 18, part_chars: int | None = PART_CHARS) -> pa.Table:
    """token_ids and the per-token mirror of every per-character column, encoding `batch_bytes` of text at a
    time: a row group's Encodings and per-token index arrays at once took a task to 1 GB. 256 KiB rather than
    1 MiB: with two tokenizers threads (one local worker on two cores) the token_columns process of
    bench/scale.py's 4x build peaked at 448 MiB with 1 MiB batches and 395 with 256 KiB, in the same 15.3 s.
    A document longer than `part_chars` is encoded in parts cut where the pre-tokenizer always splits
    (tokenizer/pretokenizer.py's encoding_parts), since tokenizers' memory follows its largest input: a 0.84
    MB header alone took 89 MiB. The ids are those of the whole document (encode_in_parts asks
    pretokenizer.cuts_keep_ids whether the tokenizer allows the cuts; `part_chars` None: documents whole)."""
    texts = table.column("text").combine_chunks()
    mirrors = [c for c in generation_columns(generation) if c.per_char and c.name in table.column_names]
    chars = {c.name: table.column(c.name).combine_chunks() for c in mirrors}
    values = {name: col.values.to_numpy(zero_copy_only=False) for name, col in chars.items()}
    offsets = {name: col.offsets.to_numpy().astype(np.int64) for name, col in chars.items()}
    if mirrors and byte_lengths is None:
        byte_lengths = token_byte_lengths(tok)
    id_parts: list = []
    count_parts: list = []
    picked: dict[str, list] = {c.name: [] for c in mirrors}
    for a, b in _batches(pc.binary_length(texts).to_numpy(zero_copy_only=False), batch_bytes):
        part = texts.slice(a, b - a)
        id_lists = encode_in_parts(tok, part.to_pylist(), part_chars)
        counts = np.fromiter((len(x) for x in id_lists), np.int64, len(id_lists))
        ids = np.fromiter(itertools.chain.from_iterable(id_lists), np.int32, int(counts.sum()))
        del id_lists
        id_parts.append(ids)
        count_parts.append(counts)
        if mirrors:
            assert byte_lengths is not None  # loaded above whenever there are mirrors
            starts = token_char_starts(part, ids, counts, byte_lengths)
            for col in mirrors:
                picked[col.name].append(mirror_values(values[col.name], offsets[col.name][a:b + 1], starts, counts,
                                                      col.fill))
    counts = np.concatenate(count_parts) if count_parts else np.zeros(0, np.int64)
    lengths = pa.array(np.concatenate([[0], np.cumsum(counts)]).astype(np.int32))
    ids = np.concatenate(id_parts) if id_parts else np.zeros(0, np.int32)
    out = table.append_column("token_ids", pa.ListArray.from_arrays(lengths, pa.array(ids)))
    for col in mirrors:
        flat = np.concatenate(picked[col.name]) if picked[col.name] else np.zeros(0, values[col.name].dtype)
        out = out.append_column(f"token_{col.name}", pa.ListArray.from_arrays(
            lengths, pa.array(flat).cast(chars[col.name].type.value_type)))
    schema = write_schema(generation, out.column_names)
    return out.select(schema.names).cast(schema)


class Tokenize(SliceWork):
    """token_ids and the per-token mirrors of one slice's documents; counts the tokens per shard file."""

    def __init__(self, tokenizer: Path, generation: str, present: list[str]):
        self.tokenizer, self.generation = str(tokenizer), generation
        self.columns = ["text"] + [c.name for c in generation_columns(generation) if c.per_char and c.name in present]

    def transform(self, table: pa.Table, piece, rank: int, work: Path, stat) -> pa.Table:
        tok, byte_lengths = worker_cache(("tokenizer", self.tokenizer), self._load)
        out = add_token_columns(table, tok, self.generation, byte_lengths)
        stat(f"tokens_file_{piece.file}", int(pc.sum(pc.list_value_length(
            out.column("token_ids"))).as_py() or 0))
        return out.select([n for n in out.column_names if n not in table.column_names])

    def _load(self) -> tuple:
        tok = load_tokenizer(Path(self.tokenizer))
        return tok, token_byte_lengths(tok)

    def schema(self, names: list[str]) -> pa.Schema:
        return write_schema(self.generation, names)


class TokenColumns(Stage):
    name = "token_columns"
    libraries = ('pyarrow', 'numpy', 'tokenizers')
    version = 1
    scope = "corpus"
    inputs = ("structure", "tokenizer")
    resumable_tasks = True
    Params = TokenColumnsParams

    summary_counts = {"tokens": "tokens", "shard_bytes": "shard_bytes"}
    publishes = ("shards",)

    def run(self, ctx: StageContext) -> dict:
        p: TokenColumnsParams = self.params
        src = ctx.input("structure").path
        files = shard_files(src)
        present = pq.read_schema(files[0]).names if files else []
        job = Tokenize(ctx.input("tokenizer").path / "tokenizer", p.generation, present)
        listing, stats = rewrite_shards_as_tasks(ctx, src, job, p.rows_per_task,
                                                 p.compression, p.compression_level)
        for k, entry in enumerate(listing):
            entry["tokens"] = stat_total(stats, f"tokens_file_{k}")
        atomic_write_json(ctx.out / "shards.json", {"generation": p.generation, "files": listing})
        clean_work(ctx)
        tokens = sum(e["tokens"] for e in listing)
        return {"tokens": tokens, "shards": len(listing), "shard_bytes": sum(e["bytes"] for e in listing)}
