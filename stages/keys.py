"""Stable per-document keys: dedup lookups, the train/valid split and the seeded shuffle order.

All come from BLAKE2b over (repo, path) so they are reproducible across machines and runs, and the split does
not depend on the shuffle seed (changing the seed never moves a file between train and valid).
"""

from __future__ import annotations

import hashlib

import numpy as np
import pyarrow as pa


def doc_key(source: str, path: str) -> bytes:
    """16-byte identity of a file within a build (used to look up dedup decisions)."""
    return hashlib.blake2b(f"{source}\0{path}".encode("utf-8", "surrogatepass"), digest_size=16).digest()


def key_array(sources, paths) -> np.ndarray:
    return np.array([doc_key(s, p) for s, p in zip(sources, paths)], dtype="S16")


def is_valid_split(source: str, path: str, valid_fraction: float) -> bool:
    h = hashlib.blake2b(f"split\0{source}\0{path}".encode("utf-8", "surrogatepass"), digest_size=8).digest()
    return int.from_bytes(h, "big") < valid_fraction * 2**64


def shuffle_key(seed: int, source: str, path: str) -> int:
    h = hashlib.blake2b(f"{seed}\0{source}\0{path}".encode("utf-8", "surrogatepass"), digest_size=8).digest()
    return int.from_bytes(h, "big")


def doc_id(source: str, commit: str, path: str) -> str:
    return hashlib.blake2b(f"{source}\0{commit}\0{path}".encode("utf-8", "surrogatepass"), digest_size=8).hexdigest()


def removed_keys(tables: list[pa.Table]) -> np.ndarray:
    """Sorted S16 keys of every (source, path) listed in the given duplicate tables."""
    keys = [key_array(t.column("source").to_pylist(), t.column("path").to_pylist()) for t in tables if t.num_rows]
    return np.sort(np.concatenate(keys)) if keys else np.array([], dtype="S16")


def contains(sorted_keys: np.ndarray, keys: np.ndarray) -> np.ndarray:
    if not len(sorted_keys):
        return np.zeros(len(keys), dtype=bool)
    idx = np.searchsorted(sorted_keys, keys)
    idx[idx == len(sorted_keys)] = 0
    return sorted_keys[idx] == keys


def tokenizer_heldout(source: str, path: str, fraction: float) -> bool:
    """Training-split files the tokenizer never trains on (its held-out set, with the valid split)."""
    h = hashlib.blake2b(f"tokenizer-heldout\0{source}\0{path}".encode("utf-8", "surrogatepass"),
                        digest_size=8).digest()
    return int.from_bytes(h, "big") < fraction * 2**64
