"""launch_spec: the build's launch.json, describing both Megatron datasets of a build for a training launch
(format and flags in schemas/launch_spec.py, the layout choice in docs/DESIGN.md section 10).

It reads what megatron_export (one sequence per document) and packed_rows (rows of exactly seq_length ids)
recorded about their prefixes and writes one launch.json whose paths are relative to the build root, where the
build publishes it: `megatron/cpp_train`, `packed/cpp_packed_train`, `tokenizer`. The sequence length is the
packed rows' (one per build); the sources' weights become the training blend.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from cpp_data.harness.presets import megatron_flags
from cpp_data.pipeline.contract.source import source_weights
from cpp_data.pipeline.contract.stage import Stage, StageContext
from cpp_data.schemas.launch_spec import dataset_entry, weight_groups, write_launch_spec


@dataclass(frozen=True)
class LaunchSpecParams:
    name: str = "cpp"
    default_dataset: str = "packed"  # what `cpp-data train` and `megatron_args` use: "packed" or "documents"


class LaunchSpecStage(Stage):
    name = "launch_spec"
    libraries = ()
    version = 1
    scope = "corpus"
    inputs = ("megatron_export", "packed_rows", "tokenizer")
    Params = LaunchSpecParams

    summary_counts = {"seq_length": "seq_length"}
    publishes = (".",)

    def settings(self, source, sources) -> dict:
        weights = source_weights(sources)
        return {"weight_groups": weight_groups(weights), "weights": weights}

    def run(self, ctx: StageContext) -> dict:
        p: LaunchSpecParams = self.params
        if p.default_dataset not in ("packed", "documents"):
            raise ValueError(f"launch_spec.default_dataset = {p.default_dataset!r}: use 'packed' or 'documents'")
        weights = source_weights(ctx.sources)
        export = json.loads((ctx.input("megatron_export").path / "megatron" / "export.json").read_text())
        packed = json.loads((ctx.input("packed_rows").path / "packed" / "packed.json").read_text())
        datasets = {
            "documents": dataset_entry("documents", {f"megatron/{k}": v for k, v in export["prefixes"].items()},
                                       weights),
            "packed": dataset_entry("packed", {f"packed/{k}": v for k, v in packed["prefixes"].items()}, weights),
        }
        model_args, train_args = megatron_flags()
        write_launch_spec(ctx.out / "launch.json", p.name, datasets, export["vocab_size"], packed["seq_length"],
                          "tokenizer", export["eod"], export.get("pad"), weights, p.default_dataset,
                          model_args=model_args, train_args=train_args)
        return {"seq_length": packed["seq_length"], "default_dataset": p.default_dataset,
                "train_prefixes": len(datasets["packed"]["blend_per_split"]["train"])}
