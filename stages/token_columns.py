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

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute  # noqa: F401  (pa.compute)
import pyarrow.parquet as pq

from pathlib import Path

from cpp_data.pipeline.executors import stat_total, worker_cache
from cpp_data.pipeline.fsutil import atomic_write_json
from cpp_data.pipeline.stage import Stage, StageContext
from cpp_data.schemas.generations import columns as generation_columns
from cpp_data.schemas.generations import write_schema
from cpp_data.schemas.reader import shard_files
from cpp_data.stages.lib.shard_tasks import SliceWork, clean_work, rewrite_shards_as_tasks
from cpp_data.tokenizer.files import load_tokenizer


@dataclass(frozen=True)
class TokenColumnsParams:
    generation: str = "v6"
    compression: str = "zstd"
    compression_level: int = 3
    rows_per_task: int = 1024  # documents per task, a row group of the shards: each task decodes its whole row
    # group's per-character columns, so smaller slices cost more decoding (the output bytes do not depend on it)


def mirror_column(col: pa.ListArray, token_starts: list[np.ndarray], fill) -> pa.ListArray:
    """A per-character list column sampled at each token's first character (vectorized per row group)."""
    values = col.values.to_numpy(zero_copy_only=False)
    offsets = col.offsets.to_numpy()
    picked = []
    for i, starts in enumerate(token_starts):
        n = offsets[i + 1] - offsets[i]
        picked.append(values[offsets[i] + np.minimum(starts, n - 1)] if n else np.full(len(starts), fill))
    lengths = np.zeros(len(token_starts) + 1, dtype=np.int32)
    np.cumsum([len(x) for x in token_starts], out=lengths[1:])
    flat = np.concatenate(picked) if picked else np.zeros(0)
    return pa.ListArray.from_arrays(pa.array(lengths), pa.array(flat).cast(col.type.value_type))


def add_token_columns(table: pa.Table, tok, generation: str) -> pa.Table:
    texts = table.column("text").to_pylist()
    mirrors = [c for c in generation_columns(generation) if c.per_char and c.name in table.column_names]
    # offsets are needed only to mirror character columns; without them the faster ids-only path does
    encodings = (tok.encode_batch(texts, add_special_tokens=False) if mirrors
                 else tok.encode_batch_fast(texts, add_special_tokens=False))
    out = table.append_column("token_ids", pa.array([e.ids for e in encodings], type=pa.list_(pa.int32())))
    if mirrors:
        starts = [np.fromiter((a for a, _ in e.offsets), dtype=np.int64, count=len(e.offsets)) for e in encodings]
        for col in mirrors:
            out = out.append_column(f"token_{col.name}",
                                    mirror_column(table.column(col.name).combine_chunks(), starts, col.fill))
    schema = write_schema(generation, out.column_names)
    return out.select(schema.names).cast(schema)


class Tokenize(SliceWork):
    """token_ids and the per-token mirrors of one slice's documents; counts the tokens per shard file."""

    carry_input = True  # the per-character columns are costly to decode: the merge takes them from the pieces

    def __init__(self, tokenizer: Path, generation: str, present: list[str]):
        self.tokenizer, self.generation = str(tokenizer), generation
        self.columns = ["text"] + [c.name for c in generation_columns(generation) if c.per_char and c.name in present]

    def transform(self, table: pa.Table, piece, rank: int, work: Path, stat) -> pa.Table:
        tok = worker_cache(("tokenizer", self.tokenizer), lambda: load_tokenizer(Path(self.tokenizer)))
        out = add_token_columns(table, tok, self.generation)
        stat(f"tokens_file_{piece.file}", int(pa.compute.sum(pa.compute.list_value_length(
            out.column("token_ids"))).as_py() or 0))
        return out.select([n for n in out.column_names if n not in table.column_names])

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
