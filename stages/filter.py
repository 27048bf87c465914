"""filter: apply the quality rules of docs/DESIGN.md section 3 and scrub secrets and PII.

It reads the documents the license stage kept (decoded and normalized there, stages/lib/decode.py): a file the
license policy refuses is never scanned (docs/DESIGN.md section 2). datatrove steps, one task per part:
QualityFilter -> Scrub -> documents writer. Each step is a datatrove BaseFilter whose exclusion writer records
every rejected file with its rule, so nothing is dropped silently.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import ClassVar

from datatrove.data import Document
from datatrove.pipeline.filters.base_filter import BaseFilter

from cpp_data.pipeline.contract.executor import SourceTasks
from cpp_data.pipeline.contract.stage import Stage, StageContext
from cpp_data.stages.lib import dt_io
from cpp_data.stages.lib.generated import generated_marker
from cpp_data.stages.lib.quality import is_vendored, signals
from cpp_data.stages.lib.scrub import scrub


@dataclass(frozen=True)
class FilterParams:
    bounds: ClassVar[dict] = {"min_bytes": (0, None), "max_bytes": (1, None), "max_line_length": (1, None),
                              "min_unique_line_ratio": (0, 1), "max_comment_share": (0, 1), "max_byte_entropy": (0, 8),
                              "max_data_share": (0, 1), "secret_entropy_limit": (0, 8)}
    min_bytes: int = 100
    max_bytes: int = 1_000_000
    max_line_length: int = 1000
    min_unique_line_ratio: float = 0.30
    max_comment_share: float = 0.80
    # Not the reference design's 4.5 bits: nearly all real C++ (googletest and POCO headers, say) lies above 4.5,
    # so 4.5 would refuse nearly all code. 6.0 still refuses compressed or binary payloads.
    max_byte_entropy: float = 6.0
    max_data_share: float = 0.5  # numeric-array lines and long base64 runs (embedded resources)
    drop_generated: bool = True
    scrub_secrets: bool = True
    secret_entropy_limit: float = 4.5  # detect-secrets' Base64HighEntropyString limit

    def check(self) -> str | None:
        if self.min_bytes > self.max_bytes:
            return f"min_bytes ({self.min_bytes}) is above max_bytes ({self.max_bytes}): every file would be refused"
        return None


class QualityFilter(BaseFilter):
    name = "quality"

    def __init__(self, params: FilterParams, source_vendored: bool = False, exclusion_writer=None):
        super().__init__(exclusion_writer)
        self.p = params
        self.source_vendored = source_vendored

    def filter(self, doc: Document) -> bool | tuple[bool, str]:
        p, meta = self.p, doc.metadata
        s = signals(doc.text)
        meta.update(size_bytes=s.size_bytes, n_lines=s.n_lines, max_line_length=s.max_line_length,
                    unique_line_ratio=round(s.unique_line_ratio, 4), comment_share=round(s.comment_share, 4),
                    byte_entropy=round(s.byte_entropy, 4),
                    is_vendored=self.source_vendored or is_vendored(meta["source_path"]))
        if s.size_bytes < p.min_bytes:
            return False, "too_small"
        if s.size_bytes > p.max_bytes:
            return False, "too_large"
        if s.max_line_length > p.max_line_length:
            return False, "max_line_length"
        if s.unique_line_ratio <= p.min_unique_line_ratio:
            return False, "low_unique_lines"
        if s.comment_share >= p.max_comment_share:
            return False, "mostly_comments"
        if s.byte_entropy > p.max_byte_entropy:
            return False, "high_entropy"
        if s.data_share > p.max_data_share:
            return False, "data_blob"
        if p.drop_generated and (marker := generated_marker(meta["source_path"], doc.text)):
            return False, marker
        return True


class Scrub(BaseFilter):
    """Secrets and PII -> stable placeholders; files with private keys are refused. Sets the dedup key."""

    name = "scrub"

    def __init__(self, params: FilterParams, exclusion_writer=None):
        super().__init__(exclusion_writer)
        self.p = params

    def filter(self, doc: Document) -> bool | tuple[bool, str]:
        redactions = 0
        if self.p.scrub_secrets:
            result = scrub(doc.text, self.p.secret_entropy_limit)
            if result.refused:
                return False, result.refused
            doc.text, redactions = result.text, result.redactions
            if redactions:
                self.stat_update("redactions", value=redactions)
        doc.metadata["redactions"] = redactions
        doc.metadata["size_bytes"] = len(doc.text.encode("utf-8"))
        doc.metadata["text_sha256"] = hashlib.sha256(doc.text.encode("utf-8")).hexdigest()
        return True


class Filter(Stage):
    name = "filter"
    libraries = ('pyarrow', 'datatrove', 'detect-secrets', 'regex')
    version = 5
    scope = "source"
    inputs = ("license",)
    Params = FilterParams
    per_document = True
    resumable_tasks = True
    summary_counts = {"documents_after_filters": "per_source:documents_out"}  # a source left with none is warned of

    def run(self, ctx: StageContext) -> dict:
        return self.source_tasks(ctx).run(ctx.executor, ctx.label)

    def source_tasks(self, ctx: StageContext) -> SourceTasks:
        docs = ctx.input("license").path
        tasks = dt_io.count_parts(docs, "part-*.parquet")
        pipeline = [
            dt_io.reader(docs, "part-*.parquet"),
            QualityFilter(self.params, ctx.pin.vendored,
                          exclusion_writer=dt_io.rejections_writer(ctx.out, "quality")),
            Scrub(self.params, exclusion_writer=dt_io.rejections_writer(ctx.out, "scrub")),
            dt_io.documents_writer(ctx.out),
        ]
        return SourceTasks(pipeline, tasks, ctx.out / "_datatrove",
                           lambda stats: dt_io.output_counts(ctx.out, tasks, stats,
                                                             sorted(docs.glob("part-*.parquet"))))
