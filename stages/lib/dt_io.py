"""datatrove readers and writers for our Parquet artifacts, shared by the per-document stages.

Each datatrove task reads one input part (files are sharded by rank over the sorted file list, and we run as
many tasks as parts) and writes `part-<rank>.parquet` plus `rejected-<step>-<rank>.parquet`, with explicit
schemas from `cpp_data.schemas.artifacts`, so a task's output depends only on its input part.
"""

from __future__ import annotations

from pathlib import Path

from datatrove.data import Document
from datatrove.pipeline.readers import ParquetReader
from datatrove.pipeline.writers import ParquetWriter

from cpp_data.pipeline.foundation.errors import UnexplainedOutput
from cpp_data.schemas.artifacts import DOCUMENT, REJECTION, rejection_row, rule_of


def _row_adapter(self, data: dict, path: str, id_in_file: int | str) -> dict:
    """Input row -> Document. Collected files carry raw bytes in `content`; documents carry `text`."""
    text = data.pop("text", None)
    if text is None:
        text = data.pop("content")  # raw bytes: the decode step turns them into text
    doc_id = f"{data['source_repo']}/{data['source_path']}@{data['source_commit']}"
    return {"text": text, "id": doc_id, "metadata": data}


def reader(folder: Path, pattern: str) -> ParquetReader:
    return ParquetReader(str(folder), glob_pattern=pattern, adapter=_row_adapter, batch_size=256,
                         recursive=False)


def _doc_adapter(self, document: Document) -> dict:
    row = {name: document.metadata.get(name) for name in DOCUMENT.names}
    row["text"] = document.text
    return row


def _reject_adapter(self, document: Document) -> dict:
    meta = document.metadata
    return rejection_row(meta, meta.get("decision", "filtered"), meta.get("filter_reason") or "unspecified")


def count_parts(folder: Path, pattern: str) -> int:
    return len(list(Path(folder).glob(pattern)))


def documents_writer(folder: Path, compression: str = "zstd") -> ParquetWriter:
    return ParquetWriter(str(folder), output_filename="part-${rank}.parquet", adapter=_doc_adapter,
                         schema=DOCUMENT, compression=compression, max_file_size=-1,
                         use_content_defined_chunking=False, write_page_index=False)


def rejections_writer(folder: Path, step: str) -> ParquetWriter:
    return ParquetWriter(str(folder), output_filename=f"rejected-{step}-${{rank}}.parquet",
                         adapter=_reject_adapter, schema=REJECTION, compression="zstd", max_file_size=-1,
                         use_content_defined_chunking=False, write_page_index=False)


def output_counts(folder: Path, tasks: int, stats: dict, inputs: list[Path]) -> dict:
    """Counts of a per-document stage, read from what it wrote (documents kept, rejections by rule), checked
    against its input parts (`inputs`): every input document is either kept or rejected with a rule. A
    stage whose outputs account for fewer documents than it read (a task's output lost while its completion
    marker stayed, another process writing into the same entry) raises UnexplainedOutput instead of sealing
    an output its input cannot explain."""
    from collections import Counter

    import pyarrow.parquet as pq

    kept = sum(pq.read_metadata(p).num_rows for p in Path(folder).glob("part-*.parquet"))
    reasons: Counter = Counter()
    for p in Path(folder).glob("rejected-*.parquet"):
        for reason in pq.read_table(p, columns=["reason"]).column("reason").to_pylist():
            reasons[rule_of(reason)] += 1
    read = sum(pq.read_metadata(p).num_rows for p in inputs)
    accounted = kept + sum(reasons.values())
    if accounted != read:
        raise UnexplainedOutput(f"{folder}: {read:,} documents in, but {kept:,} kept and {accounted - kept:,} "
                                f"rejected; the output was discarded and the stage runs again on the next build",
                                str(folder))
    return {
        "tasks": tasks,
        "documents_in": read,
        "documents_out": kept,
        "rejected": dict(sorted(reasons.items())),
        "redactions": int(sum(v for k, v in stats.items() if k.endswith(".redactions"))),
    }


def paths_reader(listing: Path) -> ParquetReader:
    """A reader over the Parquet files listed (absolute paths, one per line); rank i reads line i."""
    return ParquetReader("/", paths_file=str(listing), adapter=_row_adapter, batch_size=256)
