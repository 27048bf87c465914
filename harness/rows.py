"""Packed rows for training, read from their Parquet files with FIM drawn per epoch (docs/FORMATS.md).

A lane's packed rows hold their documents as written (stages/lib/packing.py); this dataset gives sample `s`
of a run the row at place `s mod N` of epoch `s div N`'s order and draws that epoch's FIM on it
(tokenizer/fim.fim_row), so epochs see other FIM splits of each document, as the reference design asks. The
order is a shuffle of row groups, then of the rows inside each, seeded by (seed, epoch): reading stays a row
group at a time (a row group is a few MB; a fully random row order would read one per sample).

Sample: tokens, labels, loss_mask, position_ids (GPTDataset's keys), and attention_mask on request. Labels are
the next token of the same document; no loss where there is none (a document's EOD, padding, a piece cut at the
row's end), nor on predicting a document's context prefix. Position ids restart at every document and at the
padding, so harness/attention.document_segments cuts attention there.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np
import pyarrow.parquet as pq
import torch

from cpp_data.tokenizer.fim import FimSpec, fim_row, row_segments

COLUMNS = ["input_ids", "doc_ids", "segment_docs", "segment_starts", "segment_context_lengths"]


@dataclass(frozen=True)
class RowGroup:
    file: str
    group: int
    rows: int


def row_groups(files: list[str]) -> list[RowGroup]:
    out = []
    for f in files:
        md = pq.read_metadata(f)
        out += [RowGroup(f, g, md.row_group(g).num_rows) for g in range(md.num_row_groups)]
    return out


def epoch_order(groups: list[RowGroup], seed: int, epoch: int) -> list[tuple[int, int]]:
    """(row group, row) of every row in epoch `epoch`'s order."""
    rng = np.random.default_rng([seed, epoch])
    out = []
    for g in rng.permutation(len(groups)).tolist():
        out += [(g, r) for r in rng.permutation(groups[g].rows).tolist()]
    return out


def labels_and_mask(tokens: np.ndarray, seg_ids: np.ndarray, context: np.ndarray, pad: int
                    ) -> tuple[np.ndarray, np.ndarray]:
    """Next-token labels within each document, and the loss mask (no loss across documents, on padding, or on a
    context token as the target)."""
    labels = np.full(len(tokens), pad, np.int64)
    labels[:-1] = tokens[1:]
    same = np.zeros(len(tokens), bool)
    same[:-1] = (seg_ids[1:] == seg_ids[:-1]) & (seg_ids[:-1] > 0)
    target_context = np.zeros(len(tokens), bool)
    target_context[:-1] = context[1:]
    mask = same & ~target_context
    labels[~same] = pad
    return labels, mask.astype(np.float32)


def position_ids(seg_ids: np.ndarray) -> np.ndarray:
    """0, 1, ... restarting where the segment id changes (padding is a segment of its own)."""
    starts = np.flatnonzero(np.r_[True, seg_ids[1:] != seg_ids[:-1]])
    pos = np.arange(len(seg_ids))
    return pos - np.repeat(starts, np.diff(np.r_[starts, len(seg_ids)]))


class PackedRows(torch.utils.data.Dataset):
    """`samples` samples over the rows of `files` (one split of one lane), FIM drawn per epoch when `fim`."""

    def __init__(self, files: list[str], samples: int, seed: int, eod: int, pad: int, fim: dict | None,
                 attention_mask: bool = False):
        self.groups = row_groups(files)
        self.total = sum(g.rows for g in self.groups)
        if not self.total:
            raise ValueError(f"no packed rows in {files}")
        self.samples, self.seed, self.eod, self.pad = samples, seed, eod, pad
        self.fim = FimSpec.from_json(fim) if fim and fim.get("rate", 0) > 0 else None
        self.attention_mask = attention_mask

    def __len__(self) -> int:
        return self.samples

    @functools.lru_cache(maxsize=4)  # noqa: B019 (a dataset lives as long as its run)
    def _order(self, epoch: int) -> list[tuple[int, int]]:
        return epoch_order(self.groups, self.seed, epoch)

    @functools.lru_cache(maxsize=2)  # noqa: B019
    def _group(self, g: int) -> dict[str, list]:
        rg = self.groups[g]
        t = pq.ParquetFile(rg.file).read_row_group(rg.group, columns=COLUMNS)
        return {c: t.column(c).to_pylist() for c in COLUMNS}

    def row(self, g: int, r: int, epoch: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(tokens, segment ids, context flags) of row r of row group g, with epoch's FIM drawn."""
        cols = self._group(g)
        inp = np.asarray(cols["input_ids"][r], np.int64)
        seg = np.asarray(cols["doc_ids"][r], np.int32)
        segments = row_segments(seg, cols["segment_docs"][r], cols["segment_context_lengths"][r],
                                cols["segment_starts"][r], inp, self.eod)
        if self.fim is not None:
            return fim_row(inp, segments, self.fim, epoch, self.eod)
        context = np.zeros(len(inp), bool)
        for s in segments:
            context[s.start:s.start + min(s.context, s.length)] = True
        return inp, seg, context

    def __getitem__(self, s: int) -> dict[str, torch.Tensor]:
        epoch, place = divmod(int(s), self.total)
        g, r = self._order(epoch)[place]
        tokens, seg, context = self.row(g, r, epoch)
        labels, mask = labels_and_mask(tokens, seg, context, self.pad)
        out = {"tokens": torch.from_numpy(tokens), "labels": torch.from_numpy(labels),
               "loss_mask": torch.from_numpy(mask), "position_ids": torch.from_numpy(position_ids(seg))}
        if self.attention_mask:  # megatron-core's convention: True = masked out
            same = seg[:, None] == seg[None, :]
            causal = np.tril(np.ones((len(seg), len(seg)), bool))
            out["attention_mask"] = torch.from_numpy(~(same & causal))[None]
        return out


class Blend(torch.utils.data.Dataset):
    """Samples drawn from several datasets by weight, deterministically: sample s comes from the dataset whose
    share so far falls furthest behind its weight (megatron-core's blending rule), as that dataset's next
    sample."""

    def __init__(self, parts: list[torch.utils.data.Dataset], weights: list[float], samples: int):
        w = np.asarray(weights, float) / sum(weights)
        counts = np.zeros(len(parts), np.int64)
        self.index = np.zeros((samples, 2), np.int64)
        for s in range(samples):
            k = int(np.argmax(w * (s + 1) - counts))
            self.index[s] = (k, counts[k])
            counts[k] += 1
        self.parts = parts

    def __len__(self) -> int:
        return len(self.index)

    def __getitem__(self, s: int) -> dict[str, torch.Tensor]:
        k, i = self.index[s]
        return self.parts[int(k)][int(i)]


def blended_rows(parts: list[dict], samples: int, seed: int, eod: int, pad: int, train: bool,
                 attention_mask: bool) -> torch.utils.data.Dataset:
    """The packed rows of one split: one build's, or a blend's ({weight, files, fim} each); FIM only when
    `train`."""
    sets: list[torch.utils.data.Dataset] = [
        PackedRows(p["files"], samples, seed, eod, pad, p.get("fim") if train else None, attention_mask)
        for p in parts]
    return sets[0] if len(sets) == 1 else Blend(sets, [p["weight"] for p in parts], samples)
