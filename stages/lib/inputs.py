"""Where a stage finds the documents of the stages before it."""

from __future__ import annotations

from cpp_data.pipeline.contract.stage import StageContext


# The per-document stages in the order they run (docs/DESIGN.md section 2); each writes its rejections beside
# the documents it keeps. The last one's parts hold the documents every check before dedup kept, with every
# column those stages filled in.
PER_DOCUMENT = ("license", "filter", "decontaminate")
DOCUMENTS = PER_DOCUMENT[-1]


def document_parts(ctx: StageContext, source: str | None = None) -> list:
    """Every kept-document part of the per-document stages (`DOCUMENTS`), in (source, part) order; only
    `source`'s when given."""
    return [p for art in sorted(ctx.inputs[DOCUMENTS], key=lambda a: a.source) if source in (None, art.source)
            for p in sorted(art.path.glob("part-*.parquet"))]
