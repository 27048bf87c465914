"""Training data for the harness: one lane's dataset of a launch spec, per split.

Which dataset: the packed rows (default), read from their Parquet files with FIM drawn per epoch
(harness/rows.py), or one sequence per document through megatron-core's GPTDataset over the per-split blend,
both named by launch.json's lanes. megatron-core builds its sample index at launch from seed, sequence length
and sample count (it is not part of the export, docs/DESIGN.md section 10); it caches it under `cache_dir`.
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


def lane_of(spec: dict, lane: str | None) -> str:
    """The lane a run trains on: `lane`, or the curriculum's first."""
    from cpp_data.pipeline.foundation.errors import BadInput

    if lane is None:
        return spec["phases"][0]["lane"]
    if lane not in spec["lanes"]:
        raise BadInput(f"the launch spec has no lane {lane!r} (it has: {', '.join(spec['lanes'])})")
    return lane


def dataset_of(spec: dict, data: str | None, lane: str | None = None) -> dict:
    """Lane `lane`'s dataset `data` ("packed" or "documents"; None: the spec's default), with the lane's
    sequence length as `seq_length`."""
    from cpp_data.pipeline.foundation.errors import BadInput

    entry = spec["lanes"][lane_of(spec, lane)]
    name = data or spec["default_dataset"]
    if name not in entry["datasets"]:
        raise BadInput(f"the launch spec has no {name!r} dataset (it has: {', '.join(entry['datasets'])})")
    return {**entry["datasets"][name], "seq_length": entry["seq_length"]}


def build_datasets(spec: dict, dataset: dict, seq_length: int, seed: int, train_samples: int,
                   valid_samples: int, cache_dir: Path | None, attention_mask: bool = True):
    """(train, valid) GPTDatasets over one dataset of the spec; valid is None when it has no validation data.

    Packed rows (docs/DESIGN.md section 10) are exactly seq_length ids each, so every sample's inputs are one
    row, taken whole in GPTDataset's seeded order (nothing is packed again); position ids and the causal mask
    restart after every EOD (`reset_position_ids`, `reset_attention_mask`: a document never attends to the one
    before it) and inputs equal to EOD carry no loss (`eod_mask_loss`). The row's last label, the first id of
    another row, is masked by the training loop (`loss_mask[:, -1] = 0`). `attention_mask=False` leaves out
    GPTDataset's [s, s] mask per sample (the harness's attention takes document segments instead)."""
    from megatron.core.datasets.blended_megatron_dataset_builder import BlendedMegatronDatasetBuilder
    from megatron.core.datasets.gpt_dataset import GPTDataset, GPTDatasetConfig

    from cpp_data.pipeline.foundation.errors import BadInput

    packed = dataset["kind"] == "packed"
    if packed and seq_length != dataset["seq_length"]:
        raise BadInput(f"packed rows are {dataset['seq_length']} tokens; --seq-length {seq_length} would cut samples "
                       f"across rows (use --data documents for another length)")
    if packed and "rows" in dataset:
        return _packed_rows(spec, dataset, seed, train_samples, valid_samples, attention_mask)
    blends = {}
    for split in ("train", "valid", "test"):
        b = dataset["blend_per_split"].get(split) or []
        blends[split] = ([p for _, p in b], [float(w) for w, _ in b] if len(b) > 1 else None) if b else None
    config = GPTDatasetConfig(
        random_seed=seed, sequence_length=seq_length, tokenizer=SpecTokenizer(spec),
        blend_per_split=[blends["train"], blends["valid"], blends["test"]], split=None,
        path_to_cache=str(cache_dir) if cache_dir else None,
        reset_position_ids=packed, reset_attention_mask=packed and attention_mask, eod_mask_loss=packed,
        create_attention_mask=attention_mask)
    sizes = [train_samples, valid_samples if blends["valid"] else None, None]
    train, valid, _ = BlendedMegatronDatasetBuilder(GPTDataset, sizes, lambda: True, config).build()
    return train, valid


def _packed_rows(spec: dict, dataset: dict, seed: int, train_samples: int, valid_samples: int,
                 attention_mask: bool):
    """(train, valid) over the packed rows' Parquet files (a blend's builds by their weights): FIM drawn per
    epoch on training rows only."""
    from cpp_data.harness.rows import blended_rows

    pad = spec["pad"] if spec.get("pad") is not None else spec["eod"]
    rows = dataset["rows"]
    train = blended_rows(rows["train"], train_samples, seed, spec["eod"], pad, True, attention_mask)
    valid = (blended_rows(rows["valid"], valid_samples, seed, spec["eod"], pad, False, attention_mask)
             if rows.get("valid") else None)
    return train, valid
