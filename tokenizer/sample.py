"""Which documents the tokenizer trains on and which it holds out for its evaluation: keyed hashes, so both sets
are the same on every run and machine whatever the document order."""

from __future__ import annotations

import hashlib


def tokenizer_sampled(seed: int, source: str, path: str, commit: str, fraction: float) -> bool:
    """Whether a training document is in the tokenizer's training sample: a keyed hash under `fraction` of the
    hash space, so the sample is the same on every run and machine whatever the document order, and growing the
    budget only adds documents."""
    if fraction >= 1.0:
        return True
    h = hashlib.blake2b(f"tokenizer-sample\0{seed}\0{source}\0{path}\0{commit}".encode("utf-8", "surrogatepass"),
                        digest_size=8).digest()
    return int.from_bytes(h, "big") < fraction * 2**64


def tokenizer_heldout(source: str, path: str, fraction: float) -> bool:
    """Training-split files the tokenizer never trains on (its held-out set, with the valid split)."""
    h = hashlib.blake2b(f"tokenizer-heldout\0{source}\0{path}".encode("utf-8", "surrogatepass"),
                        digest_size=8).digest()
    return int.from_bytes(h, "big") < fraction * 2**64
