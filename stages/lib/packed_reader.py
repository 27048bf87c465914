"""Reading packed rows back into documents: the inverse of stages/lib/packing.py (docs/FORMATS.md), used by
verify's packed_binidx gate and the tests to show every training document comes back whole, and that every
bin/idx row is its Parquet row (with epoch k's FIM drawn, for training prefix `_e<k>`)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

from cpp_data.tokenizer.fim import FimSpec, fim_row, row_segments


def packed_documents(packed_dir: Path, split: str) -> dict[int, np.ndarray]:
    """A split's packed rows put back into documents ({document ordinal: ids with EOD}), every weight group's,
    from the Parquet rows' doc_ids, segment_docs and segment_starts. Checks that each of the split's bin/idx
    prefixes holds exactly the Parquet rows, FIM drawn as its epoch says; ValueError naming the prefix when
    not."""
    meta = json.loads((packed_dir / "packed.json").read_text())
    fim = FimSpec.from_json(meta["fim"]) if meta.get("fim") else None
    pieces: dict[int, list[tuple[int, np.ndarray]]] = {}
    for name, record in meta["prefixes"].items():
        if record["split"] != split:
            continue
        key = name[len("cpp_packed_"):]
        parquet_key = key.rsplit("_e", 1)[0] if record.get("epoch") is not None else key
        _check_prefix(packed_dir, name, parquet_key, record.get("epoch"), fim, meta["eod"],
                      pieces if record.get("epoch") in (None, 0) else None)
    return {doc: np.concatenate([p for _, p in sorted(parts, key=lambda x: x[0])]) for doc, parts in pieces.items()}


def _check_prefix(packed_dir: Path, name: str, key: str, epoch: int | None, fim: FimSpec | None, eod: int,
                  pieces: dict[int, list[tuple[int, np.ndarray]]] | None) -> None:
    from cpp_data.schemas.indexed import read_sequences

    rows = read_sequences(packed_dir / name)
    k = 0
    for f in sorted(packed_dir.glob(f"{key}-*.parquet")):
        t = pq.read_table(f, columns=["input_ids", "doc_ids", "segment_docs", "segment_starts",
                                      "segment_context_lengths"])
        for inp, ids, docs, starts, contexts in zip(*(t.column(c).to_pylist() for c in t.column_names)):
            inp, ids = np.asarray(inp, np.int64), np.asarray(ids)
            want = inp
            if epoch is not None and fim is not None:
                want, _, _ = fim_row(inp, row_segments(ids, docs, contexts, starts, inp, eod), fim, epoch, eod)
            if k >= len(rows) or not np.array_equal(np.asarray(rows[k], np.int64), want):
                raise ValueError(f"{packed_dir / name}: row {k} is not {f.name}'s row"
                                 + (f" with epoch {epoch}'s FIM" if epoch is not None else ""))
            if pieces is not None:
                for seg, (doc, start) in enumerate(zip(docs, starts), start=1):
                    pieces.setdefault(doc, []).append((start, inp[ids == seg]))
            k += 1
    if k != len(rows):
        raise ValueError(f"{packed_dir / name}: {len(rows)} rows, the Parquet rows hold {k}")
