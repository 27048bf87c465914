"""Corpus text made safe to show: in a terminal (the build summary, `show`) and in the report's tables.

File names and file contents come from the repositories a user builds, not from the user. Printed raw, an
escape sequence in a file name (`\\x1b[2J`) would clear or recolour the user's terminal, a line break would split
a one-line summary entry, and Unicode bidirectional controls (U+202E and its kin, the "Trojan Source" trick)
would show code in another order than the compiler reads it. `printable` writes such characters as escapes
(`\\x1b`, `\\n`, `\\u202e`), much as `git` quotes unusual paths, though without its quotes and leaving
backslashes as they are (a display, not a form to parse back: a name holding the four characters `\\x1b` shows
the same). In the HTML report a bidi override would reorder a table cell the same way. The ledger and the shards
keep the names and texts exactly as read; `json_printable` does the same for JSON output.

Written here because the standard library's nearest tools do other jobs: `repr` also quotes and escapes
backslashes and every non-printable character (a zero-width joiner in an emoji), and `str.isprintable` has no
notion of keeping tabs and line breaks in a text body.
"""

from __future__ import annotations

import re

# C0 and C1 controls and DEL (escape sequences, carriage returns, bells), the bidirectional embedding, override
# and isolate controls and marks, the Unicode line and paragraph separators, and lone surrogates (a name read
# with surrogateescape).
_BEYOND_C0 = "\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069\ud800-\udfff"
_UNSAFE = re.compile(f"[\x00-\x1f{_BEYOND_C0}]")
_UNSAFE_IN_JSON = re.compile(f"[{_BEYOND_C0}]")  # json.dumps escapes the C0 controls in strings itself
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(m: re.Match) -> str:
    c = m.group()
    return _NAMED.get(c) or (f"\\x{ord(c):02x}" if ord(c) < 0x100 else f"\\u{ord(c):04x}")


def printable(text: str, keep: str = "") -> str:
    """`text` with every character that a terminal would act on written as an escape, except those in `keep`
    (a text body keeps "\\t\\n"); text without them is returned as it is."""
    if keep:
        return _UNSAFE.sub(lambda m: m.group() if m.group() in keep else _escape(m), text)
    return _UNSAFE.sub(_escape, text)


def json_printable(text: str) -> str:
    """JSON text (as `json.dumps` writes it) with the characters `printable` escapes and json.dumps does not (it
    escapes the C0 controls in strings; its line breaks between values are layout) written as JSON's `\\uXXXX`
    escapes: the same JSON value, safe to print. Such characters only occur inside JSON strings, where the
    escape means the character itself."""
    return _UNSAFE_IN_JSON.sub(lambda m: f"\\u{ord(m.group()):04x}", text)
