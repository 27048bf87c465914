"""The rows of a length lane (schemas/lanes.py), built from whole-document rows that carry `token_ids`: chunk
rows (every document cut by stages/lib/chunking.py) and group rows (whole files joined, stages/lib/lane_groups.py).

A lane row keeps its document's columns, with what describes the text made the row's own:
  text, text_sha256, size_bytes   the row's text (context + body, or the group's files), its SHA-256 and bytes
  token_ids                       the exact ids of that text
  per-character columns           the document's values gathered through the chunk's character map (a context
                                  character keeps the value it has in the file: an opener stays a namespace or
                                  class declaration); in a group, each file's values, a file's header line
                                  painted COMMENT
  token_<name>                    mirrored from those at each token's first character (token_columns' rule)
  chunk_boundaries                the document's spans that overlap the body, clipped to it, in the row's
                                  characters; call_edges and type_edges between the spans kept, re-indexed
  constituents                    a whole-file document's one constituent narrowed to the body's range in the
                                  file; a document of several pieces (v4, v5) keeps its pieces
  chunk_index, chunk_count, chunk_kind, chunk_name, context_length, context_chars   (schemas/generations.py)
A group row's doc_id names the group (a hash of its files' doc_ids); its other columns are its first file's,
except the per-file measures (n_lines, max_line_length, ...) which take their fill: they describe no one file.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from tokenizers import Tokenizer

from cpp_data.schemas.generations import COMMENT, Column, write_schema
from cpp_data.schemas.generations import columns as generation_columns
from cpp_data.stages.lib.chunking import Chunk, FileChunker
from cpp_data.stages.lib.list_columns import list_array
from cpp_data.stages.lib.token_mirror import mirror_values, token_char_starts
from cpp_data.tokenizer.pretokenizer import encode_in_parts

_SPANS, _EDGES = "chunk_boundaries", ("call_edges", "type_edges")
_FILE_MEASURES = ("n_lines", "max_line_length", "unique_line_ratio", "comment_share", "byte_entropy")


@dataclass(frozen=True)
class ChunkSettings:
    budget: int
    max_context: float = 0.25
    min_fill: float = 0.25


class ListColumn:
    """A list column of a table as flat numpy values and offsets: row i is values[offsets[i]:offsets[i + 1]]."""

    def __init__(self, array: pa.ChunkedArray):
        combined = array.combine_chunks()
        self.type = combined.type
        self.values = combined.values.to_numpy(zero_copy_only=False)
        self.offsets = combined.offsets.to_numpy().astype(np.int64)

    def row(self, i: int) -> np.ndarray:
        return self.values[self.offsets[i]:self.offsets[i + 1]]


class LaneRows:
    """Builds lane rows of one generation from a table of its documents (every column the shards hold)."""

    def __init__(self, tok: Tokenizer, byte_lengths: np.ndarray, generation: str):
        self.tok, self.byte_lengths, self.generation = tok, byte_lengths, generation
        self.chunk_stats: dict[str, int] = {}

    def per_char(self, table: pa.Table) -> list[Column]:
        return [c for c in generation_columns(self.generation) if c.per_char and c.name in table.column_names]

    def per_token(self, table: pa.Table) -> list[Column]:
        return [c for c in generation_columns(self.generation) if c.per_token]

    # --- chunk rows ---------------------------------------------------------------------------------------
    def chunk_rows(self, table: pa.Table, settings: ChunkSettings) -> pa.Table:
        """Every document of `table` as its chunks, in order."""
        texts = table.column("text").to_pylist()
        ids = ListColumn(table.column("token_ids"))
        chunks = [self.chunks_of(texts[i], ids.row(i).tolist(), settings) for i in range(table.num_rows)]
        owners = [i for i, cs in enumerate(chunks) for _ in cs]
        flat = [c for cs in chunks for c in cs]
        counts = [len(cs) for cs in chunks for _ in cs]
        indexes = [k for cs in chunks for k in range(len(cs))]
        return self._assemble(table, owners, flat, counts, indexes)

    def chunks_of(self, text: str, ids: list[int], settings: ChunkSettings) -> list[Chunk]:
        chunker = FileChunker(text, ids, self.tok, self.byte_lengths)
        out = chunker.chunks(settings.budget, settings.max_context, settings.min_fill)
        self._count("retreats", chunker.retreats)
        self._count("documents_cut", len(out) > 1)
        for c in out:
            self._count(f"cut_{c.level}", 1)
        return out

    def _count(self, name: str, value: int) -> None:
        self.chunk_stats[name] = self.chunk_stats.get(name, 0) + int(value)

    def _assemble(self, table: pa.Table, owners: list[int], chunks: list[Chunk], counts: list[int],
                  indexes: list[int]) -> pa.Table:
        """The chunk rows: every column that describes the text made anew, the owners' other columns taken (the
        text's own columns are left out of the take: copying a file's per-character lists once per chunk only
        to replace them was the larger part of the cost)."""
        texts = [c.text for c in chunks]
        maps = [c.char_map() for c in chunks]
        replaced: dict[str, Any] = {
            "text": pa.array(texts, pa.string()),
            "text_sha256": pa.array([_sha(t) for t in texts], pa.string()),
            "size_bytes": pa.array([len(t.encode("utf-8", "surrogatepass")) for t in texts], pa.int64()),
            "token_ids": list_array([np.asarray(c.ids, np.int32) for c in chunks], pa.list_(pa.int32())),
        }
        for col in self.per_char(table):
            values = ListColumn(table.column(col.name))
            replaced[col.name] = list_array([values.row(o)[m] for o, m in zip(owners, maps)], values.type)
        if _SPANS in table.column_names:
            replaced |= _clipped_spans(table, owners, chunks)
        if "constituents" in table.column_names:
            replaced["constituents"] = _narrowed_constituents(table, owners, chunks)
        mirrored = {c.name for c in self.per_token(table)}
        kept = table.select([n for n in table.column_names if n not in replaced and n not in mirrored])
        out = kept.take(pa.array(owners, pa.int64())) if owners else kept.slice(0, 0)
        lane: dict[str, list] = {
            "chunk_index": indexes, "chunk_count": counts, "chunk_kind": [c.kind for c in chunks],
            "chunk_name": [c.name for c in chunks], "context_length": [c.context_tokens for c in chunks],
            "context_chars": [len(c.context) for c in chunks]}
        return self._finish(out, replaced, lane)

    # --- group rows ---------------------------------------------------------------------------------------
    def group_row_table(self, members: list[pa.Table]) -> pa.Table:
        """One row holding the rows of `members` (one-row tables of whole files), each under a header line."""
        first = members[0]
        headers = [file_header(m.column("source_path")[0].as_py()) for m in members]
        bodies = [m.column("text")[0].as_py() for m in members]
        pieces, starts = [], []
        at = 0
        for h, b in zip(headers, bodies):
            body = b if b.endswith("\n") else b + "\n"
            pieces += [h, body]
            starts.append(at + len(h))
            at += len(h) + len(body)
        text = "".join(pieces)
        ids = encode_in_parts(self.tok, [text])[0]
        replaced: dict[str, Any] = {
            "doc_id": pa.array([_group_id([m.column("doc_id")[0].as_py() for m in members])], pa.string()),
            "text": pa.array([text], pa.string()), "text_sha256": pa.array([_sha(text)], pa.string()),
            "size_bytes": pa.array([len(text.encode("utf-8", "surrogatepass"))], pa.int64()),
            "token_ids": list_array([np.asarray(ids, np.int32)], pa.list_(pa.int32())),
        }
        for col in self.per_char(first):
            replaced[col.name] = _joined_per_char(members, col, headers, bodies)
        if _SPANS in first.column_names:
            replaced |= _joined_spans(members, starts)
        if "constituents" in first.column_names:
            joined = [c for m in members for c in m.column("constituents")[0].as_py()]
            replaced["constituents"] = pa.array([joined], first.schema.field("constituents").type)
        for name in _FILE_MEASURES:
            if name in first.column_names:
                fill = next(c.fill for c in generation_columns(self.generation) if c.name == name)
                replaced[name] = pa.array([fill], first.schema.field(name).type)
        if "redactions" in first.column_names:
            replaced["redactions"] = pa.array([sum(m.column("redactions")[0].as_py() or 0 for m in members)],
                                              pa.int32())
        lane: dict[str, list] = {"chunk_index": [0], "chunk_count": [1], "chunk_kind": ["files"],
                                 "chunk_name": [""], "context_length": [0], "context_chars": [0]}
        return self._finish(first, replaced, lane)

    # --- both ---------------------------------------------------------------------------------------------
    def _finish(self, out: pa.Table, replaced: dict[str, Any], lane: dict[str, list]) -> pa.Table:
        """Replace columns, add the per-token mirrors and the lane columns, in the generation's order."""
        for name, array in replaced.items():
            if name in out.column_names:
                out = out.set_column(out.column_names.index(name), name, array)
            else:
                out = out.append_column(name, array)
        out = self._mirrors(out)
        for name, values in lane.items():
            array = pa.array(values, next(c.type for c in generation_columns(self.generation) if c.name == name))
            out = out.drop_columns([name]) if name in out.column_names else out
            out = out.append_column(name, array)
        schema = write_schema(self.generation, [n for n in out.column_names if not n.startswith("__")])
        return out.select(schema.names).cast(schema)

    def _mirrors(self, out: pa.Table) -> pa.Table:
        """The per-token columns again, from the rows' own per-character columns and ids."""
        names = [c for c in self.per_token(out) if c.name[len("token_"):] in out.column_names]
        out = out.drop_columns([c.name for c in self.per_token(out) if c.name in out.column_names])
        if not names or out.num_rows == 0:
            return out
        ids = ListColumn(out.column("token_ids"))
        counts = np.diff(ids.offsets)
        starts = token_char_starts(out.column("text").combine_chunks(), ids.values.astype(np.int64), counts,
                                   self.byte_lengths)
        lengths = pa.array(ids.offsets.astype(np.int32))
        for col in names:
            chars = ListColumn(out.column(col.name[len("token_"):]))
            picked = mirror_values(chars.values, chars.offsets, starts, counts, col.fill)
            out = out.append_column(col.name, pa.ListArray.from_arrays(
                lengths, pa.array(picked.astype(chars.values.dtype, copy=False))).cast(col.type))
        return out


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def _group_id(doc_ids: list[str]) -> str:
    return "g" + hashlib.blake2b("\0".join(doc_ids).encode(), digest_size=8).hexdigest()


def file_header(path: str) -> str:
    """The line that opens a file in a group: its path, control characters shown as '?'."""
    clean = "".join(ch if ch.isprintable() else "?" for ch in path)
    return f"// File: {clean}\n"


def _joined_per_char(members: list[pa.Table], col: Column, headers: list[str], bodies: list[str]) -> pa.Array:
    parts = []
    list_type = members[0].schema.field(col.name).type
    dtype = list_type.value_type.to_pandas_dtype()
    for m, h, b in zip(members, headers, bodies):
        parts.append(np.full(len(h), COMMENT if col.name == "structure_ids" else col.fill, dtype))
        parts.append(np.asarray(m.column(col.name)[0].values.to_numpy(zero_copy_only=False), dtype))
        if not b.endswith("\n"):
            parts.append(np.full(1, col.fill, dtype))
    return list_array([np.concatenate(parts)], list_type)


def _joined_spans(members: list[pa.Table], starts: list[int]) -> dict[str, pa.Array]:
    spans: list[dict] = []
    edges: dict[str, list[dict]] = {name: [] for name in _EDGES if name in members[0].column_names}
    for m, start in zip(members, starts):
        base = len(spans)
        spans += [{**s, "start": s["start"] + start, "end": s["end"] + start} for s in m.column(_SPANS)[0].as_py()]
        for name in edges:
            edges[name] += [{"from": e["from"] + base, "to": e["to"] + base} for e in m.column(name)[0].as_py()]
    out = {_SPANS: pa.array([spans], members[0].schema.field(_SPANS).type)}
    return out | {name: pa.array([v], members[0].schema.field(name).type) for name, v in edges.items()}


def _clipped_spans(table: pa.Table, owners: list[int], chunks: list[Chunk]) -> dict[str, pa.Array]:
    """chunk_boundaries clipped to each chunk's body, in its characters; the edges between kept spans."""
    spans_col = table.column(_SPANS)
    edge_cols = {name: table.column(name) for name in _EDGES if name in table.column_names}
    rows: list[list[dict]] = []
    edges: dict[str, list[list[dict]]] = {name: [] for name in edge_cols}
    cache: dict[int, tuple[list[dict], dict[str, list[dict]]]] = {}
    for o, c in zip(owners, chunks):
        if o not in cache:
            cache = {o: (spans_col[o].as_py(), {n: col[o].as_py() for n, col in edge_cols.items()})}
        spans, doc_edges = cache[o]
        shift = len(c.context) - c.start
        kept = {}
        mine: list[dict] = []
        for i, s in enumerate(spans):
            if s["start"] < c.end and s["end"] > c.start:
                kept[i] = len(mine)
                mine.append({**s, "start": max(s["start"], c.start) + shift, "end": min(s["end"], c.end) + shift})
        rows.append(mine)
        for name in edge_cols:
            edges[name].append([{"from": kept[e["from"]], "to": kept[e["to"]]} for e in doc_edges[name]
                                if e["from"] in kept and e["to"] in kept])
    out = {_SPANS: pa.array(rows, table.schema.field(_SPANS).type)}
    return out | {name: pa.array(v, table.schema.field(name).type) for name, v in edges.items()}


def _narrowed_constituents(table: pa.Table, owners: list[int], chunks: list[Chunk]) -> pa.Array:
    """A whole-file document's constituent narrowed to each chunk's body; other documents' pieces as they are."""
    col = table.column("constituents")
    lengths = pc.utf8_length(table.column("text")).to_pylist()
    out = []
    for o, c in zip(owners, chunks):
        pieces = col[o].as_py()
        if len(pieces) == 1 and pieces[0]["start"] == 0 and pieces[0]["end"] == lengths[o]:
            pieces = [{**pieces[0], "start": c.start, "end": c.end}]
        out.append(pieces)
    return pa.array(out, table.schema.field("constituents").type)
