"""Per-file quality signals and filter rules of docs/DESIGN.md section 3, as pure functions.

Hand-written because they are small arithmetic over one file (no library computes C++ comment share or
flags embedded data arrays); everything tunable is a recipe parameter in `FilterParams`.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

# Comments and the literals that may contain comment-looking text, in one left-to-right scan (`comments`).
# Neither literal may send the scan back over a long stretch: were a literal left open no match, the scan would
# try again from each quote inside it, and text such as `"\"\"\"...` (or lines joined by trailing backslashes)
# would be quadratic. So a string left open ends at its line's end (where a compiler's lexer ends it, with an
# error) or the text's, and a character literal holds at most 10 characters or escapes (`'abcd'`; `'\U0001F600'`
# is 9): a quote that closes none within them, such as a digit separator's (`0x1'0000, ///< ...`), is passed
# over.
_LEXEMES = re.compile(
    r'//[^\n]*|/\*.*?(?:\*/|\Z)|"(?:\\.|[^"\\\n])*\\?(?:"|(?=\n)|\Z)|\'(?:\\.|[^\'\\\n]){0,10}\'',
    re.DOTALL,
)
_DATA_LINE = re.compile(r"^\s*(?:(?:0[xX][0-9a-fA-F]+|[-+]?\d+)[uUlL]*\s*,\s*){8,}(?:[^\n]{0,8})$")
_BASE64_RUN = re.compile(r"[A-Za-z0-9+/]{256,}={0,2}")
_BASE64_BYTE = np.zeros(256, dtype=bool)  # the bytes of _BASE64_RUN's class (all ASCII)
_BASE64_BYTE[np.frombuffer(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/", np.uint8)] = True
_VENDOR_DIRS = frozenset(
    {"third_party", "third-party", "thirdparty", "3rdparty", "3rd_party", "3rd-party", "external", "externals",
     "external_libs", "extern", "vendor", "vendors", "vendored", "bundled", "deps"}
)


@dataclass(frozen=True)
class Signals:
    size_bytes: int
    n_lines: int
    max_line_length: int
    unique_line_ratio: float
    comment_share: float
    byte_entropy: float
    data_share: float  # share of bytes in numeric-array lines or long base64 runs


def byte_entropy(data: bytes) -> float:
    """Shannon entropy of the bytes of UTF-8 text, in bits per byte, every byte of a non-ASCII character counted
    as one symbol; on ASCII text, the plain byte entropy.

    Why the fold: the rule on it refuses encoded data (line-wrapped base64, hex keys), which is ASCII. Counted
    byte by byte, the three bytes of each CJK character spread over a hundred values, so C++ commented in
    Chinese (googletest's gtest.cc with lines of zh_CN man-page text among its own) passes the limit of 6.0 bits
    that plain C/C++ stays under. Folded, the same texts measure below the code alone, and ASCII data keeps its
    value (line-wrapped base64 in a string array stays above the limit)."""
    if not data:
        return 0.0
    counts = np.bincount(np.frombuffer(data, dtype=np.uint8), minlength=256)
    if not data.isascii():
        counts[0x80] = counts[0x80:].sum()
        counts[0x81:] = 0
    p = counts[counts > 0] / len(data)
    return float(-(p * np.log2(p)).sum())


def _longest_run(data: bytes, member: np.ndarray) -> int:
    """Length of the longest run of bytes in `member` (a 256-entry mask). The base64 pattern tries a match at
    every character and took a quarter of `signals`; a file without a 256-byte run of its class, nearly every
    one, cannot match it (its class is ASCII, so a run of characters is a run of UTF-8 bytes)."""
    outside = np.flatnonzero(~member[np.frombuffer(data, np.uint8)])
    return int(np.diff(outside, prepend=-1, append=len(data)).max()) - 1 if len(data) else 0


def _lines_with(data: bytes, byte: int, n: int) -> np.ndarray:
    """Numbers (0-based) of the lines holding `byte` at least `n` times. A numeric-array line has 8 commas or
    more, so `_DATA_LINE` is tried on those lines only, not on every line from Python."""
    a = np.frombuffer(data, np.uint8)
    hits = np.flatnonzero(a == byte)
    if len(hits) < n:
        return hits[:0]
    return np.flatnonzero(np.bincount(np.searchsorted(np.flatnonzero(a == 10), hits)) >= n)


def comments(text: str) -> Iterator[re.Match]:
    """The // and /* */ comments of `text`, in order (string and char literals are skipped); the license cascade
    reads file headers with it too."""
    return (m for m in _LEXEMES.finditer(text) if m.group().startswith("/"))


def comment_chars(text: str) -> int:
    """Characters inside // and /* */ comments (string and char literals are skipped)."""
    return sum(m.end() - m.start() for m in comments(text))


def signals(text: str) -> Signals:
    """Compute every filter signal of one normalized file."""
    data = text.encode("utf-8")
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    content = [ln.strip() for ln in lines if ln.strip()]
    unique = len(set(content)) / len(content) if content else 0.0
    data_bytes = sum(len(lines[k]) + 1 for k in _lines_with(data, ord(","), 8).tolist() if _DATA_LINE.match(lines[k]))
    if _longest_run(data, _BASE64_BYTE) >= 256:
        data_bytes += sum(m.end() - m.start() for m in _BASE64_RUN.finditer(text))
    return Signals(
        size_bytes=len(data),
        n_lines=len(lines),
        max_line_length=max((len(ln) for ln in lines), default=0),
        unique_line_ratio=unique,
        comment_share=comment_chars(text) / len(text) if text else 0.0,
        byte_entropy=byte_entropy(data),
        data_share=min(1.0, data_bytes / len(text)) if text else 0.0,
    )


def is_vendored(path: str) -> bool:
    """True when a path lies under a vendored-code directory (third_party/, external/, vendor/, deps/, ...)."""
    return vendored_root(path) is not None


def vendored_root(path: str) -> str | None:
    """The directory of the vendored component a path lies in: its innermost vendored-code directory and the
    directory under it (`external_libs/eigen` for external_libs/eigen/Eigen/Dense), the vendored-code directory
    itself for a file directly in it; None for a path not under one."""
    parts = path.split("/")[:-1]
    for i in range(len(parts) - 1, -1, -1):
        if parts[i].lower() in _VENDOR_DIRS:
            return "/".join(parts[:i + 2])
    return None
