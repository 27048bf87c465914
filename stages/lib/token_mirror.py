"""Token ids and the per-token mirrors of per-character columns: how token_columns and lanes give every document
its `token_ids` and `token_<name>` columns (docs/DESIGN.md section 7).

A mirror value is the per-character value at the token's first character, found from the tokens' byte lengths
(byte-level BPE spells the text's UTF-8 bytes in order), so no Encoding's offset list is ever materialized.
"""

from __future__ import annotations

import itertools

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from cpp_data.schemas.generations import columns as generation_columns
from cpp_data.schemas.generations import write_schema
from cpp_data.tokenizer.pretokenizer import PART_CHARS, byte_symbols, encode_in_parts


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
    time: a row group's Encodings and per-token index arrays at once would take a task's memory with the row
    group's size. 1 << 18 bytes rather than 1 << 20: with two tokenizers threads the smaller batch peaks lower in the
    same time (docs/SCALING.md, memory). A document longer than `part_chars` is encoded in parts cut where the
    pre-tokenizer always splits (tokenizer/pretokenizer.py's encoding_parts), since tokenizers' memory follows
    its largest input, so one large header would set the process's peak. The ids are those of the whole
    document (encode_in_parts asks pretokenizer.cuts_keep_ids whether the tokenizer allows the cuts;
    `part_chars` None: documents whole)."""
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
