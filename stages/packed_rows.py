"""packed_rows: each length lane's documents as fixed-length training rows of the lane's sequence length,
packed best-fit-decreasing, and the same rows as Megatron indexed datasets, one training prefix per FIM epoch:
`packed/<lane>/` (the format and the packing in stages/lib/packing.py; docs/DESIGN.md section 10)."""

from __future__ import annotations

import dataclasses

from cpp_data.pipeline.contract.source import source_weights
from cpp_data.pipeline.contract.stage import Stage, StageContext
from cpp_data.schemas.lanes import lane_dir, lanes_of, seq_length
from cpp_data.stages.lib.packing import PackedParams, PackingParams, pack_shards


class PackedRows(Stage):
    name = "packed_rows"
    libraries = ('pyarrow', 'numpy', 'tokenizers')
    version = 5
    scope = "corpus"
    inputs = ("lanes", "tokenizer")
    Params = PackingParams
    resumable_tasks = True

    summary_counts = {"packing": "telemetry"}
    publishes = ("packed",)

    def settings(self, source, sources) -> dict:
        from cpp_data.schemas.launch_spec import weight_groups

        return {"weight_groups": weight_groups(source_weights(sources))}

    def run(self, ctx: StageContext) -> dict:
        lanes = ctx.input("lanes").path
        telemetry, files = {}, 0
        for lane in lanes_of(lanes):
            p = PackedParams(**dataclasses.asdict(self.params), seq_length=seq_length(lane))
            written, telemetry[lane] = pack_shards(lanes / lane_dir(lane), ctx.input("tokenizer").path / "tokenizer",
                                                   ctx.out / "packed" / lane, p, source_weights(ctx.sources),
                                                   ctx.executor, f"{ctx.label} {lane}", rel=f"packed/{lane}")
            files += len(written)
        return {"files": files, "telemetry": telemetry}
