"""Reading packed rows back into documents: the inverse of stages/packed_rows.py's writer (docs/FORMATS.md),
used by verify's packed_binidx gate and the tests to show every training document comes back whole."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow.parquet as pq


def undo_fim(tokens: np.ndarray, roles: dict[str, int]) -> np.ndarray:
    """The document a FIM transform was made from (inverse of `_fim`): PSM `FP pre FS suf FM mid` and SPM
    `FP FS suf FM pre mid` both give back pre + mid + suf. Tokens without a leading FIM prefix are returned as
    they are."""
    fp, fs, fm = roles["fim_prefix"], roles["fim_suffix"], roles["fim_middle"]
    t = np.asarray(tokens)
    if len(t) == 0 or t[0] != fp:
        return t
    if len(t) > 1 and t[1] == fs:  # SPM
        m = 2 + int(np.argmax(t[2:] == fm))
        return np.concatenate([t[m + 1:], t[2:m]])
    s = int(np.argmax(t == fs))
    m = s + 1 + int(np.argmax(t[s + 1:] == fm))
    return np.concatenate([t[1:s], t[m + 1:], t[s + 1:m]])


def packed_documents(packed_dir: Path, split: str, roles: dict[str, int]) -> dict[int, np.ndarray]:
    """Read a split's packed bin/idx (every weight group's) back into documents: each row's segments (from the
    Parquet rows' doc_ids, segment_docs and segment_starts) put back in order per document, FIM undone,
    trailing EOD kept. Checks that every bin/idx row equals its Parquet row. Returns {document ordinal: ids}."""
    pieces: dict[int, list[tuple[int, np.ndarray]]] = {}
    for idx in sorted(packed_dir.glob(f"cpp_packed_{split}*.idx")):
        _group_pieces(packed_dir, idx.stem[len("cpp_packed_"):], pieces)
    out = {}
    for doc, parts in pieces.items():
        t = np.concatenate([p for _, p in sorted(parts, key=lambda x: x[0])])
        body, end = (t[:-1], t[-1:]) if len(t) and t[-1] == roles["eos"] else (t, t[:0])
        out[doc] = np.concatenate([undo_fim(body, roles), end])  # FIM was applied before the EOD was appended
    return out


def _group_pieces(packed_dir: Path, key: str, pieces: dict[int, list[tuple[int, np.ndarray]]]) -> None:
    from cpp_data.schemas.indexed import read_sequences

    rows = read_sequences(packed_dir / f"cpp_packed_{key}")
    k = 0
    for f in sorted(packed_dir.glob(f"{key}-*.parquet")):
        t = pq.read_table(f, columns=["input_ids", "doc_ids", "segment_docs", "segment_starts"])
        for inp, ids, docs, starts in zip(*(t.column(c).to_pylist() for c in t.column_names)):
            seq = np.asarray(rows[k], dtype=np.int64)
            if not np.array_equal(seq, np.asarray(inp)):
                raise ValueError(f"{packed_dir}/cpp_packed_{key}: row {k} differs from {f.name}")
            ids = np.asarray(ids)
            for seg, (doc, start) in enumerate(zip(docs, starts), start=1):
                pieces.setdefault(doc, []).append((start, seq[ids == seg]))
            k += 1
    if k != len(rows):
        raise ValueError(f"{packed_dir}/cpp_packed_{key}: {len(rows)} rows, the Parquet rows hold {k}")
