"""Packed rows as a Megatron indexed dataset: what Megatron's GPTDataset (as pretrain_gpt.py builds it) makes of
them, and the packed documents read back."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from cpp_data.harness.data import SpecTokenizer
from cpp_data.harness.train import init_distributed
from cpp_data.schemas.indexed import read_sequences

pytestmark = pytest.mark.slow  # full builds (pyproject.toml: markers)


def test_gpt_dataset_samples_are_whole_rows(reference_build: Path, tmp_path: Path):
    import torch
    from megatron.core.datasets.blended_megatron_dataset_builder import BlendedMegatronDatasetBuilder
    from megatron.core.datasets.gpt_dataset import GPTDataset, GPTDatasetConfig

    packed = reference_build / "packed" / "4k"
    T = json.loads((packed / "packed.json").read_text())["seq_length"]
    spec = json.loads((reference_build / "launch.json").read_text())
    eod = spec["eod"]
    prefix = str(packed / "cpp_packed_valid")  # the validation rows: no FIM, so the bin/idx is the Parquet rows
    rows = read_sequences(packed / "cpp_packed_valid")
    parquet = [r for f in sorted(packed.glob("valid-*.parquet"))
               for r in pq.read_table(f, columns=["input_ids"]).column(0).to_pylist()]
    assert len(rows) == len(parquet) >= 2 and all(len(rows[i]) == T for i in range(len(rows)))
    assert all(np.array_equal(rows[i], parquet[i]) for i in range(len(rows)))
    by_content = {np.asarray(rows[i]).tobytes(): i for i in range(len(rows))}
    init_distributed(torch.device("cpu"), 1)
    # as pretrain_gpt.py configures it for packed rows: shuffling on, boundaries reset, loss masked at EOD
    config = GPTDatasetConfig(random_seed=1234, sequence_length=T, tokenizer=SpecTokenizer(spec),
                              blend_per_split=[([prefix], None), None, None], split=None,
                              path_to_cache=str(tmp_path / "cache"), reset_position_ids=True,
                              reset_attention_mask=True, eod_mask_loss=True,
                              # the attention mask (seq x seq per sample) is what pretrain_gpt.py builds too,
                              # but nothing here reads it, and it is most of this test's time
                              create_attention_mask=False)
    n = 2 * len(rows) - 1
    (train, _, _) = BlendedMegatronDatasetBuilder(GPTDataset, [n, None, None], lambda: True, config).build()
    seen = set()
    for i in range(len(train)):
        s = train[i]
        tokens = s["tokens"].numpy().astype(rows[0].dtype)
        k = by_content.get(tokens.tobytes())
        assert k is not None, f"sample {i} is not exactly one packed row"
        seen.add(k)
        labels = s["labels"].numpy()
        assert np.array_equal(labels[:-1], tokens[1:].astype(labels.dtype))
        mask = s["loss_mask"].numpy()
        assert (mask[tokens == eod] == 0).all()  # padding and every step out of a document carry no loss
        if tokens[-1] == eod:
            assert mask[-1] == 0  # so a padded row's cross-row label is masked too
    assert seen == set(range(len(rows)))
