"""Document keys written once by near dedup (removed_keys.parquet) come back byte for byte, including keys
that end in zero bytes (numpy's bytes conversion would drop those; one in 256 keys ends in one)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from cpp_data.stages.lib import keys


def test_removed_keys_round_trip_with_trailing_zero_bytes(tmp_path):
    # find real (source, path, commit) triples whose key ends in a zero byte
    triples = [("s", f"p{i}.cc", "c") for i in range(5000)]
    ending_in_zero = [t for t in triples if keys.doc_key(*t)[-1] == 0][:3]
    assert ending_in_zero, "no key among 5000 ends in a zero byte"
    table = pa.table({name: [t[i] for t in ending_in_zero + triples[:5]]
                      for i, name in enumerate(("source_repo", "source_path", "source_commit"))})
    n = keys.write_removed(tmp_path / "removed_keys.parquet", [table])
    back = keys.read_removed(tmp_path / "removed_keys.parquet")
    assert n == len(back) == len(set(ending_in_zero + triples[:5]))
    assert pq.read_table(tmp_path / "removed_keys.parquet").schema.field("doc_key").type == pa.binary(16)
    assert keys.contains(back, keys.table_keys(table)).all()
    assert not keys.contains(back, keys.key_array(["s"], ["other.cc"], ["c"])).any()
    assert list(back) == sorted(back) and back.dtype == np.dtype("S16")
