"""packed_rows: the build's documents as fixed-length training rows, packed best-fit-decreasing, and the same rows
as a Megatron indexed dataset (the format and the packing in stages/lib/packing.py; docs/DESIGN.md section 10)."""

from __future__ import annotations

from cpp_data.pipeline.contract.source import source_weights
from cpp_data.pipeline.contract.stage import Stage, StageContext
from cpp_data.stages.lib.packing import PackedParams, pack_shards


class PackedRows(Stage):
    name = "packed_rows"
    libraries = ('pyarrow', 'numpy', 'tokenizers')
    version = 4
    scope = "corpus"
    inputs = ("token_columns", "tokenizer")
    Params = PackedParams
    resumable_tasks = True

    summary_counts = {"packed_seq_length": "seq_length", "packing": "telemetry"}
    publishes = ("packed",)

    def settings(self, source, sources) -> dict:
        from cpp_data.schemas.launch_spec import weight_groups

        return {"weight_groups": weight_groups(source_weights(sources))}

    def run(self, ctx: StageContext) -> dict:
        files, telemetry = pack_shards(ctx.input("token_columns").path, ctx.input("tokenizer").path / "tokenizer",
                                       ctx.out / "packed", self.params, source_weights(ctx.sources), ctx.executor,
                                       ctx.label)
        return {"seq_length": self.params.seq_length, "files": len(files), "telemetry": telemetry}
