"""megatron_export: each length lane as Megatron bin/idx, one document per sequence with EOD appended, one
training prefix per weight group of the sources: `megatron/<lane>/cpp_{train,valid}.{bin,idx}` (the writing in
stages/lib/export_megatron.py; docs/DESIGN.md section 10); the launch_spec stage describes them for a training
launch."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from cpp_data.pipeline.contract.source import source_weights
from cpp_data.pipeline.contract.stage import Stage, StageContext
from cpp_data.schemas.lanes import lane_dir, lanes_of
from cpp_data.stages.lib.export_megatron import export_shards


@dataclass(frozen=True)
class MegatronExportParams:
    bounds: ClassVar[dict] = {"encode_batch": (1, None), "rows_per_task": (1, None)}
    name: str = "cpp"
    encode_batch: int = 256  # documents per encode_batch call when the shards carry no token ids
    rows_per_task: int = 1024  # documents per task (the output bytes do not depend on it)


class MegatronExport(Stage):
    name = "megatron_export"
    libraries = ('pyarrow', 'numpy', 'tokenizers')
    version = 3
    scope = "corpus"
    inputs = ("lanes", "tokenizer")
    Params = MegatronExportParams
    resumable_tasks = True

    publishes = ("megatron",)

    def settings(self, source, sources) -> dict:
        from cpp_data.schemas.launch_spec import weight_groups

        return {"weight_groups": weight_groups(source_weights(sources))}

    def run(self, ctx: StageContext) -> dict:
        p: MegatronExportParams = self.params
        lanes = ctx.input("lanes").path
        counts: dict[str, dict] = {}
        for lane in lanes_of(lanes):
            prefixes = export_shards(lanes / lane_dir(lane), ctx.input("tokenizer").path / "tokenizer",
                                     ctx.out / "megatron" / lane, p.name, source_weights(ctx.sources), ctx.executor,
                                     p.encode_batch, p.rows_per_task, f"{ctx.label} {lane}")
            mine: dict[str, object] = {}
            for split in ("train", "valid"):
                own = [v for v in prefixes.values() if v["split"] == split]
                mine |= {f"{split}_documents": sum(v["documents"] for v in own),
                         f"{split}_tokens": sum(v["tokens"] for v in own)}
            counts[lane] = mine | {"prefixes": len(prefixes),
                                   "max_token_id": max(v["max_token_id"] for v in prefixes.values())}
        return {"lanes": counts}
