"""The decode step of the per-document stages: a collected file's bytes -> the text every later stage reads.

The first stage to read collect's files runs it (the license stage: docs/DESIGN.md section 2), so every later
stage sees one text: UTF-8 with LF line endings and no byte-order mark. What cannot be that text is refused
with its rule, and the ledger shows it.
"""

from __future__ import annotations

from datatrove.data import Document
from datatrove.pipeline.filters.base_filter import BaseFilter

# Byte-order marks of the wide encodings (UTF-32's first: its little-endian mark starts with UTF-16's).
_WIDE_BOMS = ((b"\xff\xfe\x00\x00", "utf-32le"), (b"\x00\x00\xfe\xff", "utf-32be"), (b"\xff\xfe", "utf-16le"),
              (b"\xfe\xff", "utf-16be"))


class DecodeNormalize(BaseFilter):
    """Raw bytes -> UTF-8 text with LF line endings; binary and undecodable files are rejected (decision
    `filtered`, rules `binary`, `not_utf8@<encoding>` for a text whose byte-order mark names UTF-16 or UTF-32,
    `undecodable_utf8@<offset>`, `empty_after_normalize`). Sets `size_bytes` to the normalized text's size,
    which is what a document's size means from here on (collect's is the file's)."""

    name = "decode"

    def filter(self, doc: Document) -> bool | tuple[bool, str]:
        raw: bytes = doc.text
        for bom, encoding in _WIDE_BOMS:  # before the NUL test, which every such text fails: not "binary"
            if raw.startswith(bom):
                return False, f"not_utf8@{encoding}"
        if b"\0" in raw:  # anywhere: a NUL past the leading window that binary tests read is still not source text
            return False, "binary"
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            return False, f"undecodable_utf8@{exc.start}"
        size = len(raw)
        if text.startswith("\ufeff"):
            text = text[1:]
            size -= 3
        if "\r" in text:
            size -= text.count("\r\n")
            text = text.replace("\r\n", "\n").replace("\r", "\n")
        if not text.strip():
            return False, "empty_after_normalize"
        doc.text = text
        doc.metadata["size_bytes"] = size
        return True
