"""Where a stage finds the documents of the stages before it."""

from __future__ import annotations

from cpp_data.pipeline.stage import StageContext


def license_parts(ctx: StageContext, source: str | None = None) -> list:
    """Every kept-document part of the license stage, in (source, part) order; only `source`'s when given."""
    return [p for art in sorted(ctx.inputs["license"], key=lambda a: a.source) if source in (None, art.source)
            for p in sorted(art.path.glob("part-*.parquet"))]
