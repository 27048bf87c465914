"""Arrow list columns built from one numpy array per row (the structure and packed_rows stages' columns)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa


def list_array(rows: Sequence[np.ndarray], list_type: pa.ListType) -> pa.ListArray:
    """One list of `list_type` per row: the rows converted to its value type's numpy dtype, joined in one
    concatenate and cut by int32 offsets. Written here because pa.array over a list of numpy arrays converts
    them value by value (a quarter of packed_rows' task time when it did), and the two stages that build such
    columns may not import each other."""
    dtype = list_type.value_type.to_pandas_dtype()
    offsets = np.zeros(len(rows) + 1, np.int32)
    np.cumsum([len(r) for r in rows], out=offsets[1:])
    values = np.concatenate([np.asarray(r, dtype) for r in rows]) if len(rows) else np.zeros(0, dtype)
    return pa.ListArray.from_arrays(pa.array(offsets), pa.array(values, list_type.value_type), type=list_type)
