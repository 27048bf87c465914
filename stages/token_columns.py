"""token_columns: the v6 token-level columns (REFERENCE section 7), written as a new copy of the shards.

For every document of the structure stage's shards: `token_ids` from the build's tokenizer, and for each
per-character column the shard carries
(structure_ids, ast_depth, ...) its per-token mirror `token_<name>`, sampled at each token's first character
(the tokenizer's character offsets). Files, row groups, row order and every other column stay exactly as the
shards stage wrote them, so `text` is byte-identical.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute  # noqa: F401  (pa.compute)
import pyarrow.parquet as pq
from tqdm import tqdm

from cpp_data.pipeline.fsutil import atomic_write_json
from cpp_data.pipeline.stage import Stage, StageContext
from cpp_data.schemas.generations import columns as generation_columns
from cpp_data.schemas.generations import write_schema
from cpp_data.schemas.manifest import sha256_file
from cpp_data.tokenizer.files import load_tokenizer


@dataclass(frozen=True)
class TokenColumnsParams:
    generation: str = "v6"
    compression: str = "zstd"
    compression_level: int = 3


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


class TokenColumns(Stage):
    name = "token_columns"
    version = 1
    scope = "corpus"
    inputs = ("structure", "tokenizer")
    Params = TokenColumnsParams

    def run(self, ctx: StageContext) -> dict:
        p: TokenColumnsParams = self.params
        tok = load_tokenizer(ctx.input("tokenizer").path / "tokenizer")
        src = ctx.input("structure").path
        listing = []
        tokens = 0
        (ctx.out / "shards").mkdir()
        for entry in tqdm(json.loads((src / "shards.json").read_text())["files"], desc=f"{ctx.label}: tokenize",
                          unit="shard", leave=False, disable=not ctx.executor.progress):
            pf = pq.ParquetFile(src / entry["path"])
            final = ctx.out / entry["path"]
            tmp = final.with_name(f".{final.name}.tmp")
            writer, file_tokens = None, 0
            for rg in range(pf.num_row_groups):
                table = add_token_columns(pf.read_row_group(rg), tok, p.generation)
                file_tokens += int(pa.compute.sum(pa.compute.list_value_length(table.column("token_ids"))).as_py() or 0)
                if writer is None:
                    writer = pq.ParquetWriter(tmp, table.schema, compression=p.compression,
                                              compression_level=p.compression_level, write_page_checksum=True)
                writer.write_table(table, row_group_size=table.num_rows)
            if writer is not None:
                writer.close()
                os.replace(tmp, final)
            tokens += file_tokens
            listing.append({**entry, "tokens": file_tokens, "bytes": final.stat().st_size, "sha256": sha256_file(final)})
        atomic_write_json(ctx.out / "shards.json", {"generation": p.generation, "files": listing})
        return {"tokens": tokens, "shards": len(listing), "shard_bytes": sum(e["bytes"] for e in listing)}
