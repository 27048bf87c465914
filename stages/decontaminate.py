"""decontaminate: refuse documents that share a long n-gram of C++ tokens with a reference a user names
(benchmark prompts and solutions), rule `contamination` (docs/DESIGN.md section 3).

The reference comes from the sources file's [decontaminate] table (pipeline/runner/exclusions.py): JSONL files (every
string value of every line) and files or directories (their text). A document is refused when one of its
`ngram`-token windows (default 50, BigCode's choice for The Stack) equals one of the reference's; tokens are the
C++ lexemes of near dedup (stages/lib/shingles.py), so whitespace and reformatting do not hide an overlap. Without a
reference the stage passes the filter's documents on unchanged (hard links, no rewrite).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np
from datatrove.data import Document
from datatrove.pipeline.filters.base_filter import BaseFilter

from cpp_data.pipeline.contract.executor import SourceTasks
from cpp_data.pipeline.contract.stage import Stage, StageContext
from cpp_data.stages.lib import dt_io
from cpp_data.stages.lib.contamination import reference_hashes
from cpp_data.stages.lib.shingles import long_ngram_hashes


@dataclass(frozen=True)
class DecontaminateParams:
    pass  # the reference and its n-gram size come from the sources file, with the pins


class ContaminationFilter(BaseFilter):
    name = "decontaminate"

    def __init__(self, reference: np.ndarray, ngram: int, exclusion_writer=None):
        super().__init__(exclusion_writer)
        self.reference, self.ngram = reference, ngram

    def filter(self, doc: Document) -> bool | tuple[bool, str]:
        hashes = long_ngram_hashes(doc.text, self.ngram)
        if len(hashes) and np.isin(hashes, self.reference, assume_unique=True).any():
            return False, "contamination"
        return True


class Decontaminate(Stage):
    name = "decontaminate"
    libraries = ('pyarrow', 'datatrove', 'numpy', 'xxhash')
    version = 1
    scope = "source"
    inputs = ("filter",)
    Params = DecontaminateParams
    per_document = True
    resumable_tasks = True

    def settings(self, source, sources) -> dict | None:
        """The n-gram and the digest of the reference's contents (its paths are provenance): a new reference
        reruns this stage and what follows, not collect and filter."""
        return {"decontaminate": source.decontaminate.settings()} if source.decontaminate else None

    def run(self, ctx: StageContext) -> dict:
        return self.source_tasks(ctx).run(ctx.executor, ctx.label)

    def source_tasks(self, ctx: StageContext) -> SourceTasks:
        docs = ctx.input("filter").path
        reference = ctx.pin.decontaminate
        tasks = dt_io.count_parts(docs, "part-*.parquet")
        if reference is None:
            for f in sorted(docs.glob("part-*.parquet")):
                (ctx.out / f.name).unlink(missing_ok=True)  # a killed run's partial output is kept: resumable
                os.link(f, ctx.out / f.name)
            return SourceTasks([], 0, ctx.out / "_datatrove",
                               lambda _stats: {"tasks": tasks, "reference_ngrams": 0, "rejected": {}})
        hashes = reference_hashes(list(reference.files), reference.ngram)
        pipeline = [
            dt_io.reader(docs, "part-*.parquet"),
            ContaminationFilter(hashes, reference.ngram,
                                exclusion_writer=dt_io.rejections_writer(ctx.out, "decontaminate")),
            dt_io.documents_writer(ctx.out),
        ]
        return SourceTasks(pipeline, tasks, ctx.out / "_datatrove",
                           lambda stats: {**dt_io.output_counts(ctx.out, tasks, stats,
                                                                sorted(docs.glob("part-*.parquet"))),
                                          "reference_files": len(reference.files),
                                          "reference_ngrams": int(len(hashes))})
