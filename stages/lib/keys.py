"""Stable per-document keys: dedup lookups, the train/valid split and the seeded shuffle order.

A document is identified by (repo, path, commit it was read at): at a pin every file of a repo has the same
commit, and in a history walk (v2, v3) the versions of one path differ by commit. All keys come from BLAKE2b, so
they are reproducible across machines and runs. The train/valid split hashes (repo, path) only, so every version
of a file lands on the same side, and it does not depend on the shuffle seed.
"""

from __future__ import annotations

import hashlib

import numpy as np
import pyarrow as pa


def doc_key(source: str, path: str, commit: str) -> bytes:
    """16-byte identity of a document within a build (the key dedup decisions are looked up by)."""
    return hashlib.blake2b(f"{source}\0{path}\0{commit}".encode("utf-8", "surrogatepass"), digest_size=16).digest()


def key_array(sources, paths, commits) -> np.ndarray:
    return np.array([doc_key(s, p, c) for s, p, c in zip(sources, paths, commits)], dtype="S16")


def table_keys(table: pa.Table) -> np.ndarray:
    """Keys of a table with source_repo, source_path and source_commit columns."""
    return key_array(table.column("source_repo").to_pylist(), table.column("source_path").to_pylist(),
                     table.column("source_commit").to_pylist())


def split_hash(source: str, path: str) -> int:
    """A file's place on the split line: validation when it falls under valid_fraction * 2**64."""
    h = hashlib.blake2b(f"split\0{source}\0{path}".encode("utf-8", "surrogatepass"), digest_size=8).digest()
    return int.from_bytes(h, "big")


def is_valid_split(source: str, path: str, valid_fraction: float) -> bool:
    return split_hash(source, path) < valid_fraction * 2**64


def shuffle_key(seed: int, source: str, path: str, commit: str) -> int:
    h = hashlib.blake2b(f"{seed}\0{source}\0{path}\0{commit}".encode("utf-8", "surrogatepass"),
                        digest_size=8).digest()
    return int.from_bytes(h, "big")


def doc_id(source: str, commit: str, path: str) -> str:
    return hashlib.blake2b(f"{source}\0{commit}\0{path}".encode("utf-8", "surrogatepass"), digest_size=8).hexdigest()


def lineage(source: str, path: str) -> int:
    """64-bit id of a file's lineage (every version of one path of one repo)."""
    return int.from_bytes(hashlib.blake2b(f"{source}\0{path}".encode("utf-8", "surrogatepass"),
                                          digest_size=8).digest(), "big")


def removed_keys(tables: list[pa.Table]) -> np.ndarray:
    """Sorted S16 keys of every (source, path, commit) listed in the given duplicate tables."""
    keys = [table_keys(t) for t in tables if t.num_rows]
    return np.sort(np.concatenate(keys)) if keys else np.array([], dtype="S16")


REMOVED_KEYS = pa.schema([pa.field("doc_key", pa.binary(16), nullable=False)])


def write_removed(path, tables: list[pa.Table]) -> int:
    """Write the dedup decision once: the sorted, unique keys of every document the given duplicate tables
    remove (near dedup writes exact's and its own), as removed_keys.parquet. Every later stage reads this one
    file (read_removed) instead of combining the duplicate tables again; a document is kept when its license
    stage row's key is not in it. Returns the number of keys."""
    import pyarrow.parquet as pq

    keys = np.unique(removed_keys(tables)).astype("S16")
    # from the raw 16 bytes: numpy's tolist() would drop a key's trailing zero bytes
    column = pa.FixedSizeBinaryArray.from_buffers(pa.binary(16), len(keys), [None, pa.py_buffer(keys.tobytes())])
    pq.write_table(pa.table({"doc_key": column}, schema=REMOVED_KEYS), path, compression="zstd")
    return len(keys)


def read_removed(path) -> np.ndarray:
    """The sorted S16 keys of removed_keys.parquet (write_removed), for `contains`."""
    import pyarrow.parquet as pq

    column = pq.read_table(path, columns=["doc_key"]).column("doc_key").combine_chunks()
    if not len(column):
        return np.array([], dtype="S16")
    data = column.buffers()[1]  # the keys' bytes back to back, 16 each (no nulls: the column is required)
    return np.frombuffer(data, dtype="S16", count=len(column), offset=column.offset * 16).copy()


def contains(sorted_keys: np.ndarray, keys: np.ndarray) -> np.ndarray:
    if not len(sorted_keys):
        return np.zeros(len(keys), dtype=bool)
    idx = np.searchsorted(sorted_keys, keys)
    idx[idx == len(sorted_keys)] = 0
    return sorted_keys[idx] == keys
