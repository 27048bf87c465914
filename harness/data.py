"""Training data for the harness: megatron-core GPTDatasets over a launch spec's per-split blends.

megatron-core builds the sample index at launch from seed, sequence length and sample count (it is not part of
the export, docs/DESIGN.md section 10); it caches it under `cache_dir`.
"""

from __future__ import annotations

from collections import OrderedDict
from pathlib import Path


class SpecTokenizer:
    """What GPTDataset needs of a tokenizer (vocab size, EOD, an identity for its cache key), from the spec."""

    def __init__(self, spec: dict):
        self.spec = spec

    @property
    def unique_identifiers(self) -> OrderedDict:
        return OrderedDict(cls="cpp-data", model=self.spec["tokenizer"]["model"], vocab=self.spec["vocab_size"])

    @property
    def vocab_size(self) -> int:
        return self.spec["vocab_size"]

    @property
    def eod(self) -> int:
        return self.spec["eod"]

    @property
    def pad(self) -> int:
        return self.spec.get("pad", -1)


def build_datasets(spec: dict, seq_length: int, seed: int, train_samples: int, valid_samples: int,
                   cache_dir: Path | None):
    """(train, valid) GPTDatasets; valid is None when the spec has no validation data."""
    from megatron.core.datasets.blended_megatron_dataset_builder import BlendedMegatronDatasetBuilder
    from megatron.core.datasets.gpt_dataset import GPTDataset, GPTDatasetConfig

    blends = {}
    for split in ("train", "valid", "test"):
        b = spec["blend_per_split"].get(split) or []
        blends[split] = ([p for _, p in b], [float(w) for w, _ in b] if len(b) > 1 else None) if b else None
    config = GPTDatasetConfig(
        random_seed=seed, sequence_length=seq_length, tokenizer=SpecTokenizer(spec),
        blend_per_split=[blends["train"], blends["valid"], blends["test"]], split=None,
        path_to_cache=str(cache_dir) if cache_dir else None,
        reset_position_ids=False, reset_attention_mask=False, eod_mask_loss=False)
    sizes = [train_samples, valid_samples if blends["valid"] else None, None]
    train, valid, _ = BlendedMegatronDatasetBuilder(GPTDataset, sizes, lambda: True, config).build()
    return train, valid
