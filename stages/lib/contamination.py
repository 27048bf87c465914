"""The decontamination reference: the texts of a sources file's [decontaminate] files and their long n-grams
(docs/DESIGN.md section 3). A JSONL file gives every string value of every line (prompts, solutions, tests);
any other file its whole text. The n-grams are of C++ tokens (stages/lib/shingles.py), so reformatting does not
hide an overlap."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from cpp_data.stages.lib.shingles import long_ngram_hashes


class ReferenceError(ValueError):
    """A reference file that cannot be read as a reference; the message names the file and line."""


def _strings(value, texts: list[str]) -> None:
    """Append every string inside a JSON value to `texts`, depth first."""
    if isinstance(value, str):
        texts.append(value)
    elif isinstance(value, dict):
        for v in value.values():
            _strings(v, texts)
    elif isinstance(value, list):
        for v in value:
            _strings(v, texts)


def jsonl_values(text: str, name: str) -> list:
    """The JSON value of each non-blank line of a JSONL text; ReferenceError names the first line that is not."""
    values = []
    for n, line in enumerate(text.splitlines(), 1):
        if line.strip():
            try:
                values.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise ReferenceError(f"{name}:{n}: not JSON ({exc.msg})") from None
    return values


def reference_texts(files: list[str]) -> list[str]:
    """The texts of a decontamination reference: each JSONL line's string values, each other file's text."""
    texts: list[str] = []
    for f in files:
        try:
            text = Path(f).read_text(encoding="utf-8-sig", errors="replace")  # a leading BOM is not JSON's
        except OSError as exc:
            raise ReferenceError(f"cannot read {f} ({exc.strerror})") from None
        if f.endswith(".jsonl"):
            for value in jsonl_values(text, f):
                _strings(value, texts)
        else:
            texts.append(text)
    return texts


def reference_hashes(files: list[str], ngram: int) -> np.ndarray:
    """Sorted unique hashes of every `ngram`-token window of the reference's texts."""
    parts = [long_ngram_hashes(t, ngram) for t in reference_texts(files)]
    return np.unique(np.concatenate(parts)) if parts else np.empty(0, dtype=np.uint64)
