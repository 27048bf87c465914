"""FIM drawn per epoch (tokenizer/fim.py) and the harness's packed-row reader (harness/rows.py): every
arrangement is a permutation of its document around three sentinels that keeps the context prefix whole and
first in its part, epochs draw other splits, a row keeps its length, and the reader's labels and loss mask
follow the documents whatever FIM did."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from cpp_data.tokenizer.fim import MIDDLE, PREFIX, SUFFIX, FimSpec, draw, fim_order, fim_row, row_segments

SPEC = FimSpec(rate=1.0, spm_rate=0.5, seed=7, prefix_id=3, suffix_id=4, middle_id=5)
EOD, PAD = 2, 1


@pytest.mark.parametrize("n,context", [(2, 0), (10, 0), (50, 12), (400, 100)])
def test_an_arrangement_is_the_document_around_three_sentinels_with_its_context_whole(n, context):
    for doc in range(40):
        order = draw(SPEC, 0, doc, n, context)
        assert order is not None and len(order) == n + 3
        assert sorted(order[order >= 0].tolist()) == list(range(n))
        assert sorted(order[order < 0].tolist()) == [MIDDLE, SUFFIX, PREFIX]
        places = [int(np.flatnonzero(order == k)[0]) for k in range(context)]
        assert places == list(range(places[0], places[0] + context)) if context else True  # contiguous, in order


def test_epochs_draw_other_splits_and_one_epoch_draws_the_same():
    n = 200
    per_epoch = [tuple(fim_order(n, 0, np.random.default_rng(0), 0.5)) for _ in range(2)]
    assert per_epoch[0] == per_epoch[1]
    draws = {tuple(draw(SPEC, epoch, 11, n, 0)) for epoch in range(8)}
    assert len(draws) == 8
    assert draw(FimSpec(0.0, 0.5, 7, 3, 4, 5), 0, 11, n, 0) is None
    assert draw(SPEC, 0, 11, 1, 0) is None  # nothing to fill in


def _row(docs: list[list[int]], contexts: list[int], T: int):
    """A packed row the way stages/lib/packing.py lays it out: documents + EOD, EOD padding."""
    ids = np.full(T, EOD, np.int64)
    seg = np.zeros(T, np.int32)
    pos = 0
    for k, d in enumerate(docs, start=1):
        block = d + [EOD]
        ids[pos:pos + len(block)] = block
        seg[pos:pos + len(block)] = k
        pos += len(block)
    return ids, seg, row_segments(seg, list(range(len(docs))), contexts, [0] * len(docs), ids, EOD)


def test_a_row_with_fim_keeps_its_length_and_every_document():
    docs = [[10 + i for i in range(30)], [100 + i for i in range(50)], [300 + i for i in range(20)]]
    ids, seg, segments = _row(docs, [5, 0, 3], 128)
    tokens, new_seg, context = fim_row(ids, segments, SPEC, epoch=2, eod=EOD)
    assert len(tokens) == 128 and (new_seg > 0).sum() == sum(len(d) + 4 for d in docs)
    for k, d in enumerate(docs, start=1):
        block = tokens[new_seg == k]
        assert block[-1] == EOD and sorted(block[(block > 5) & (block != EOD)].tolist()) == sorted(d)
        assert sorted(block[block <= 5].tolist()) == sorted([3, 4, 5, EOD])
    assert context.sum() == 5 + 3  # the context tokens, wherever they went
    assert tokens[context].tolist()[:5] == docs[0][:5]


def test_a_piece_of_a_longer_document_gets_no_fim():
    ids = np.arange(10, 74, dtype=np.int64)  # a full row, no EOD: a piece
    seg = np.ones(64, np.int32)
    segments = row_segments(seg, [0], [0], [64], ids, EOD)
    assert not segments[0].whole
    tokens, _, _ = fim_row(ids, segments, SPEC, 0, EOD)
    assert np.array_equal(tokens, ids)


def test_the_reader_draws_fim_per_epoch_and_masks_context_targets(tmp_path):
    from cpp_data.harness.rows import PackedRows, labels_and_mask, position_ids

    docs = [[10 + i for i in range(40)], [200 + i for i in range(60)]]
    ids, seg, _ = _row(docs, [6, 0], 128)
    table = pa.table({"input_ids": [ids.tolist()], "doc_ids": [seg.tolist()], "segment_docs": [[0, 1]],
                      "segment_starts": [[0, 0]], "segment_context_lengths": [[6, 0]]})
    pq.write_table(table, tmp_path / "train-00000.parquet")
    rows = PackedRows([str(tmp_path / "train-00000.parquet")], samples=6, seed=1, eod=EOD, pad=PAD,
                      fim=SPEC.as_json())
    samples = [rows[s] for s in range(6)]
    assert len({tuple(s["tokens"].tolist()) for s in samples}) > 1  # one row, other splits in other epochs
    for s in samples:
        t, labels, mask, pos = (s[k].numpy() for k in ("tokens", "labels", "loss_mask", "position_ids"))
        assert t.shape == (128,) and pos[0] == 0
        trained = np.flatnonzero(mask)
        assert np.array_equal(labels[trained], t[trained + 1])  # a label is the next token of its document
    plain = PackedRows([str(tmp_path / "train-00000.parquet")], samples=1, seed=1, eod=EOD, pad=PAD, fim=None)[0]
    mask = plain["loss_mask"].numpy()
    assert mask[:5].sum() == 0 and mask[5] == 1  # predicting the context carries no loss; its first body token does
    assert mask[40] == 0 and mask[41] == 1  # the EOD's label (the next document) carries none
    labels, m = labels_and_mask(ids, seg, np.zeros(128, bool), PAD)
    assert m[:40].all() and not m[40] and labels[40] == PAD
    assert position_ids(seg)[41] == 0 and position_ids(seg)[40] == 40
