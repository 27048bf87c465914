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
from pathlib import Path
from typing import ClassVar

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from cpp_data.pipeline.contract.executor import stat_total
from cpp_data.pipeline.contract.stage import SHARDS, Stage, StageContext
from cpp_data.pipeline.foundation.fsutil import atomic_write_json
from cpp_data.pipeline.foundation.worker_cache import worker_cache
from cpp_data.schemas.generations import columns as generation_columns
from cpp_data.schemas.generations import write_schema
from cpp_data.schemas.reader import shard_files
from cpp_data.stages.lib.shard_tasks import SliceWork, clean_work, rewrite_shards_as_tasks
from cpp_data.stages.lib.token_mirror import add_token_columns, token_byte_lengths
from cpp_data.tokenizer.files import load_tokenizer


@dataclass(frozen=True)
class TokenColumnsParams:
    bounds: ClassVar[dict] = {"rows_per_task": (1, None)}
    generation: str = "v6"
    compression: str = "zstd"
    compression_level: int = 3
    rows_per_task: int = 1024  # documents per task, a row group of the shards: each task decodes its whole row
    # group's per-character columns, so smaller slices cost more decoding (the output bytes do not depend on it)


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
    inputs = (SHARDS, "tokenizer")
    resumable_tasks = True
    Params = TokenColumnsParams

    summary_counts = {"tokens": "tokens", "shard_bytes": "shard_bytes"}
    publishes = ("shards",)

    def run(self, ctx: StageContext) -> dict:
        p: TokenColumnsParams = self.params
        src = ctx.input(SHARDS).path
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
