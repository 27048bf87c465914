"""Where a stage finds the documents of the stages before it."""

from __future__ import annotations

from cpp_data.pipeline.contract.stage import StageContext


def document_parts(ctx: StageContext, source: str | None = None) -> list:
    """Every kept-document part of the last per-document stage (the input DOCUMENTS), in (source, part) order;
    only `source`'s when given."""
    if ctx.documents is None:
        raise ValueError(f"{ctx.label}: reads no DOCUMENTS input")
    return [p for art in sorted(ctx.inputs[ctx.documents], key=lambda a: a.source or "") if source in (None, art.source)
            for p in sorted(art.path.glob("part-*.parquet"))]
