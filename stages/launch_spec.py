"""launch_spec: the build's launch.json, describing every lane's Megatron datasets and the curriculum over them
for a training launch (format and flags in schemas/launch_spec.py, the layout choice in docs/DESIGN.md section
10).

It reads what megatron_export (one sequence per document) and packed_rows (rows of exactly the lane's sequence
length) recorded about each lane's prefixes and writes one launch.json whose paths are relative to the build
root, where the build publishes it: `megatron/<lane>/cpp_train`, `packed/<lane>/cpp_packed_train_e0`,
`tokenizer`. The sources' weights become each lane's training blend; the phases run the lanes shortest first.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from cpp_data.harness.presets import megatron_flags
from cpp_data.pipeline.contract.source import source_weights
from cpp_data.pipeline.contract.stage import Stage, StageContext
from cpp_data.schemas.lanes import lane_dir, lanes_of
from cpp_data.schemas.launch_spec import dataset_entry, new_spec, weight_groups, write_launch_spec


@dataclass(frozen=True)
class LaunchSpecParams:
    name: str = "cpp"
    default_dataset: str = "packed"  # what `cpp-data train` and `megatron_args` use: "packed" or "documents"

    def check(self) -> str | None:
        if self.default_dataset not in ("packed", "documents"):
            return f"default_dataset = {self.default_dataset!r}: use 'packed' or 'documents'"
        return None


def lane_entry(lanes: Path, megatron: Path, packed: Path, lane: str, weights: dict[str, float]) -> dict:
    """A lane of the spec from its stages' records; paths relative to the build root."""
    record = json.loads((lanes / lane_dir(lane) / "shards.json").read_text())
    export = json.loads((megatron / lane / "export.json").read_text())
    rows = json.loads((packed / lane / "packed.json").read_text())
    parquet = {s: [f["path"] for f in rows["files"] if f["kind"] == "packed" and f["split"] == s]
               for s in ("train", "valid")}
    return {"kind": record["kind"], "seq_length": record["seq_length"], "budget": record["budget"], "datasets": {
        "documents": dataset_entry("documents", {f"megatron/{lane}/{k}": v for k, v in export["prefixes"].items()},
                                   weights),
        "packed": dataset_entry("packed", {f"packed/{lane}/{k}": v for k, v in rows["prefixes"].items()}, weights,
                                rows=parquet, fim={**rows["fim"], "epochs": rows["fim_epochs"]}),
    }}


class LaunchSpecStage(Stage):
    name = "launch_spec"
    libraries = ()
    version = 2
    scope = "corpus"
    inputs = ("lanes", "megatron_export", "packed_rows", "tokenizer")
    Params = LaunchSpecParams

    summary_counts = {"seq_length": "seq_length", "phases": "phases"}
    publishes = (".",)

    def settings(self, source, sources) -> dict:
        weights = source_weights(sources)
        return {"weight_groups": weight_groups(weights), "weights": weights}

    def run(self, ctx: StageContext) -> dict:
        p: LaunchSpecParams = self.params
        weights = source_weights(ctx.sources)
        lanes = ctx.input("lanes").path
        megatron, packed = ctx.input("megatron_export").path / "megatron", ctx.input("packed_rows").path / "packed"
        entries = {lane: lane_entry(lanes, megatron, packed, lane, weights) for lane in lanes_of(lanes)}
        any_export = json.loads((megatron / next(iter(entries)) / "export.json").read_text())
        model_args, train_args = megatron_flags()
        tokenizer = {"model": "tokenizer", "sha256": ctx.input("tokenizer").counts["sha256"]}
        spec = new_spec(p.name, entries, any_export["vocab_size"], tokenizer, any_export["eod"],
                        any_export.get("pad"), weights, [{"build": ".", "path": ".", "weight": 1.0}],
                        p.default_dataset, model_args=model_args, train_args=train_args)
        write_launch_spec(ctx.out / "launch.json", spec)
        return {"seq_length": spec["seq_length"], "default_dataset": p.default_dataset,
                "phases": [{k: ph[k] for k in ("lane", "seq_length", "tokens")} for ph in spec["phases"]]}
