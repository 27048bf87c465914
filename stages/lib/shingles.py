"""Code-aware shingles for near-duplicate detection (docs/DESIGN.md section 5).

Tokens are C/C++ lexemes: identifiers, numbers, multi-character operators and every other punctuation mark,
so `std::vector<int>` stays `std :: vector < int >` (generic text normalizers turn it into `std vector int` and
make unrelated short files collide). Whitespace is not a token, so reindented or reflowed copies match;
comments and string literals are kept (tokenized like code). The leading license/copyright comment block is
removed first, so two short files that share only a banner never match.

Shingle hashing is vectorized: each distinct token is hashed once per process (xxh64, kept in a bounded
vocabulary, since C++ token vocabularies repeat across files), then the 5-gram hashes are a polynomial over
consecutive token hashes in numpy. Hand-written because neither datasketch (hashes one
Python object per call) nor datatrove (joins and hashes each n-gram string in a Python loop, after a text
normalization that deletes C++ punctuation) offers a code tokenizer or vectorized n-gram hashing; the MinHash
itself is datasketch's.
"""

from __future__ import annotations

import re

import numpy as np
import xxhash

TOKEN = re.compile(
    r"[A-Za-z_][A-Za-z_0-9]*|\d[\w.']*|::|->\*?|<<=|>>=|<=>|\.\.\.|\+\+|--|&&|\|\||##|[-+*/%&|^!=<>]=|<<|>>|\.\*|\S"
)
# One item of a file's leading region: whitespace, a run of // lines, a /* */ block, or an include guard /
# #pragma once line (banners often sit just after those).
_LEAD_ITEM = re.compile(
    r"\s+|//[^\n]*(?:\n[ \t]*//[^\n]*)*|/\*.*?\*/"
    r"|#[ \t]*(?:pragma[ \t]+once|ifndef[ \t]+\w+|define[ \t]+\w+)[ \t]*(?=\n|\Z)",
    re.DOTALL,
)
_LICENSE_HINT = re.compile(r"copyright|licen[cs]e|spdx-|redistribut|permission is hereby granted|\(c\)", re.I)
# Odd 64-bit multipliers for the 5 positions of an n-gram (fixed: part of the shingle definition).
_MULT = np.array([0x9E3779B97F4A7C15, 0xC2B2AE3D27D4EB4F, 0x165667B19E3779F9, 0x27D4EB2F165667C5,
                  0xFF51AFD7ED558CCD, 0xC4CEB9FE1A85EC53, 0x85EBCA77C2B2AE63, 0x94D049BB133111EB], dtype=np.uint64)


class _Vocabulary(dict):
    """token -> xxh64, filled on first use; cleared when it grows past `limit` entries (memory bound)."""

    limit = 2_000_000

    def __missing__(self, token: str) -> int:
        if len(self) >= self.limit:
            self.clear()
        value = self[token] = xxhash.xxh64_intdigest(token)
        return value


_VOCAB = _Vocabulary()


def strip_license_header(text: str) -> str:
    """Drop the license/copyright comment blocks of the file's leading region (before the first line of code;
    include guards and #pragma once may come first), keeping everything else."""
    pos, kept, dropped = 0, [], False
    while (m := _LEAD_ITEM.match(text, pos)) and m.end() > pos:
        item = m.group()
        if item[:2] in ("//", "/*") and _LICENSE_HINT.search(item):
            dropped = True
        else:
            kept.append(item)
        pos = m.end()
    return "".join(kept) + text[pos:] if dropped else text


def tokens(text: str) -> list[str]:
    return TOKEN.findall(text)


def shingle_hashes(text: str, n: int = 5) -> np.ndarray:
    """Sorted unique uint32 hashes of the token n-grams of `text` (license header removed)."""
    if n > len(_MULT):
        raise ValueError(f"n-gram size {n} > {len(_MULT)}")
    h = _window_hashes(text, _MULT[:n], (29, 32))
    return np.unique((h & np.uint64(0xFFFFFFFF)).astype(np.uint32))


def _window_hashes(text: str, mult: np.ndarray, shifts: tuple[int, int]) -> np.ndarray:
    """uint64 hash of every window of len(mult) tokens of `text` (license header removed): a polynomial over
    the windows' token hashes, then a mix with the given xor-shifts (each caller's are fixed, as part of its
    hash's definition)."""
    n = len(mult)
    toks = tokens(strip_license_header(text))
    if len(toks) < n:
        return np.empty(0, dtype=np.uint64)
    token_hash = np.fromiter(map(_VOCAB.__getitem__, toks), dtype=np.uint64, count=len(toks))
    m = len(token_hash) - n + 1
    with np.errstate(over="ignore"):
        h = np.zeros(m, dtype=np.uint64)
        for i in range(n):
            h += token_hash[i:i + m] * mult[i]
        h ^= h >> np.uint64(shifts[0])
        h *= np.uint64(0xBF58476D1CE4E5B9)
        h ^= h >> np.uint64(shifts[1])
    return h


def jaccard(a: np.ndarray, b: np.ndarray) -> float:
    """Exact Jaccard similarity of two shingle sets (sorted unique arrays)."""
    if not len(a) and not len(b):
        return 1.0
    inter = len(np.intersect1d(a, b, assume_unique=True))
    return inter / (len(a) + len(b) - inter)


def _splitmix(seed: int, count: int) -> np.ndarray:
    out, x = [], seed
    for _ in range(count):
        x = (x + 0x9E3779B97F4A7C15) & 0xFFFFFFFFFFFFFFFF
        z = x
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & 0xFFFFFFFFFFFFFFFF
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & 0xFFFFFFFFFFFFFFFF
        out.append((z ^ (z >> 31)) | 1)
    return np.array(out, dtype=np.uint64)


def long_ngram_hashes(text: str, n: int = 50) -> np.ndarray:
    """Sorted unique uint64 hashes of the n-grams of C++ tokens of `text` (license header removed): the
    decontamination fingerprint (BigCode refused files sharing a 50-token n-gram with a benchmark). 64-bit,
    since a reference set of a few hundred thousand n-grams against billions must not collide by chance."""
    return np.unique(_window_hashes(text, _splitmix(n, n), (31, 29)))
