"""Fill-in-the-middle, drawn per epoch on packed rows (docs/FORMATS.md, packed rows; docs/CHUNKS.md).

Packed rows hold their documents as written; FIM is drawn when a row is read for training, from a seed, the
epoch and the document, so every epoch sees other splits (the same split every epoch teaches the model one
answer per document) and the rows on disk serve any FIM rate. The bundled harness draws it as it loads a row
(harness/rows.py); an export for Megatron-LM writes K epochs drawn ahead as K prefixes (stages/lib/packing.py).

One document, `n` tokens without its EOD, of which the first `context` are its context prefix: with probability
`rate`, two cut points uniform over the body (never inside the context), then
  PSM  <fim_prefix> context prefix <fim_suffix> suffix <fim_middle> middle          (1 - spm_rate)
  SPM  <fim_prefix> <fim_suffix> suffix <fim_middle> context prefix middle          (spm_rate)
and the EOD after. The context stays whole and keeps no loss wherever it lands; the sentinels are ordinary
tokens for the loss. A document only gets FIM where it is whole in its row (no piece of a longer document) and
the row has the three free slots every document reserves (schemas/lanes.RESERVE).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np

PREFIX, SUFFIX, MIDDLE = -1, -2, -3  # sentinel places in an order (fim_order)
SENTINELS = 3


@dataclass(frozen=True)
class FimSpec:
    """The FIM draw: rate, SPM share, seed, and the sentinel ids of the tokenizer (cpp_tokenizer.json roles)."""
    rate: float
    spm_rate: float
    seed: int
    prefix_id: int
    suffix_id: int
    middle_id: int

    @classmethod
    def from_roles(cls, rate: float, spm_rate: float, seed: int, roles: dict[str, int]) -> FimSpec:
        return cls(rate, spm_rate, seed, roles["fim_prefix"], roles["fim_suffix"], roles["fim_middle"])

    def as_json(self) -> dict:
        return {"rate": self.rate, "spm_rate": self.spm_rate, "seed": self.seed,
                "roles": {"fim_prefix": self.prefix_id, "fim_suffix": self.suffix_id, "fim_middle": self.middle_id}}

    @classmethod
    def from_json(cls, d: dict) -> FimSpec:
        return cls.from_roles(d["rate"], d["spm_rate"], d["seed"], d["roles"])


def document_rng(seed: int, epoch: int, document: int) -> np.random.Generator:
    """The generator of one document's draw in one epoch (`document`: its ordinal in its split)."""
    h = hashlib.blake2b(f"fim\0{seed}\0{epoch}\0{document}".encode(), digest_size=8).digest()
    return np.random.default_rng(int.from_bytes(h, "big"))


def fim_order(n: int, context: int, rng: np.random.Generator, spm_rate: float) -> np.ndarray:
    """The FIM arrangement of a document of n tokens whose first `context` are context: the source position of
    each output token, PREFIX/SUFFIX/MIDDLE where a sentinel goes (n + 3 entries)."""
    i, j = sorted(int(x) for x in rng.integers(context, n + 1, size=2))
    head, mid, suf = np.arange(0, i), np.arange(i, j), np.arange(j, n)
    s = np.array
    if rng.random() < spm_rate:
        parts = [s([PREFIX]), s([SUFFIX]), suf, s([MIDDLE]), head, mid]
    else:
        parts = [s([PREFIX]), head, s([SUFFIX]), suf, s([MIDDLE]), mid]
    return np.concatenate([p.astype(np.int64) for p in parts])


def draw(spec: FimSpec, epoch: int, document: int, n: int, context: int) -> np.ndarray | None:
    """The document's arrangement in this epoch, or None when it stays as it is (the draw said no, or it has
    fewer than two tokens of body)."""
    if spec.rate <= 0 or n - context < 2:
        return None
    rng = document_rng(spec.seed, epoch, document)
    if rng.random() >= spec.rate:
        return None
    return fim_order(n, context, rng, spec.spm_rate)


def arrange(tokens: np.ndarray, order: np.ndarray, spec: FimSpec) -> np.ndarray:
    """The tokens of a document in `order`, sentinels in their places."""
    out = tokens[np.maximum(order, 0)].astype(tokens.dtype, copy=True)
    out[order == PREFIX] = spec.prefix_id
    out[order == SUFFIX] = spec.suffix_id
    out[order == MIDDLE] = spec.middle_id
    return out


@dataclass
class RowSegment:
    """One document's tokens in a packed row: where (start, length, EOD included when it ends there), its
    ordinal in the split, its context length, and whether the row holds it whole."""
    start: int
    length: int
    document: int
    context: int
    whole: bool


def row_segments(doc_ids: np.ndarray, documents: list[int], contexts: list[int], starts: list[int],
                 input_ids: np.ndarray, eod: int) -> list[RowSegment]:
    """The segments of a packed row from its columns (doc_ids 1.. per segment, 0 for padding)."""
    out = []
    bounds = np.flatnonzero(np.diff(np.concatenate([[0], doc_ids, [0]])) != 0)
    for a, b in zip(bounds[:-1], bounds[1:]):
        seg = int(doc_ids[a])
        if seg == 0:
            continue
        whole = starts[seg - 1] == 0 and int(input_ids[b - 1]) == eod
        out.append(RowSegment(int(a), int(b - a), documents[seg - 1], contexts[seg - 1], whole))
    return out


def fim_row(input_ids: np.ndarray, segments: list[RowSegment], spec: FimSpec, epoch: int, eod: int
            ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A packed row with this epoch's FIM drawn on its whole documents: (tokens, segment id per token (1..,
    0 for padding), context flag per token). The row keeps its length; padding is EOD."""
    T = len(input_ids)
    tokens = np.full(T, eod, input_ids.dtype)
    seg_ids = np.zeros(T, np.int32)
    context = np.zeros(T, bool)
    pos = 0
    for k, s in enumerate(segments, start=1):
        block = input_ids[s.start:s.start + s.length]
        flags = np.zeros(s.length, bool)
        flags[:min(s.context, s.length)] = True
        order = draw(spec, epoch, s.document, s.length - 1, s.context) if s.whole else None
        if order is not None and pos + s.length + SENTINELS <= T:
            body = block[:-1]
            block = np.concatenate([arrange(body, order, spec), block[-1:]])
            flags = np.concatenate([(order >= 0) & (order < s.context), [False]])
        tokens[pos:pos + len(block)] = block
        seg_ids[pos:pos + len(block)] = k
        context[pos:pos + len(block)] = flags
        pos += len(block)
    return tokens, seg_ids, context
