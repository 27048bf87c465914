"""One definition of each provenance column (schemas/provenance.py): every table that carries one carries it under
that name and type, and the rows written from a document's metadata carry its values."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from cpp_data.pipeline.contract.executor import ExecutorConfig
from cpp_data.pipeline.contract.stage import Artifact, StageContext
from cpp_data.pipeline.runner.executors.executor import DatatroveExecutor
from cpp_data.schemas import artifacts, provenance
from cpp_data.schemas.generations import GENERATIONS, full_schema
from cpp_data.stages.exact_dedup import ExactDedup, ExactDedupParams
from cpp_data.stages.near_dedup import NEAR_DUPLICATE

FIELDS = {f.name: f.type for f in vars(provenance).values() if isinstance(f, pa.Field)}


def test_every_table_carries_a_provenance_column_under_its_one_type():
    tables = {name: getattr(artifacts, name) for name in ("COLLECTED_FILE", "LICENSE_FILE", "REJECTION", "DOCUMENT",
                                                          "DUPLICATE", "LEDGER")}
    tables |= {"NEAR_DUPLICATE": NEAR_DUPLICATE} | {f"shards {g}": full_schema(g) for g in GENERATIONS}
    wrong = [(table, f.name, str(f.type)) for table, schema in tables.items() for f in schema
             if f.name in FIELDS and f.type != FIELDS[f.name]]
    assert not wrong, wrong
    assert all(set(provenance.names(*provenance.IDENTITY)) <= set(s.names) for s in tables.values()
               if "source_commit" in s.names)


def test_an_exact_duplicate_keeps_its_license_answer(tmp_path: Path):
    """The ledger's exact_duplicate rows carried a null license_confidence: the row was written under the
    column's name of an earlier schema revision, which the table dropped."""
    doc = {"source_commit": "c" * 40, "text_sha256": "ab" * 32, "raw_sha256": "cd" * 32, "text": "int f();\n",
           "size_bytes": 9, "is_vendored": False, "license_spdx": "MIT", "license_source": "repo_file",
           "license_confidence": 0.75, "license_family": "permissive"}
    rows = [{**doc, "source_repo": "a", "source_path": "x.h"}, {**doc, "source_repo": "b", "source_path": "y.h"}]
    docs = tmp_path / "docs"
    docs.mkdir()
    pq.write_table(pa.Table.from_pylist(rows, schema=artifacts.DOCUMENT), docs / "part-00000.parquet")
    out = tmp_path / "out"
    out.mkdir()
    ctx = StageContext(out=out, source=None, label="exact_dedup",
                       executor=DatatroveExecutor(ExecutorConfig(workers=1, progress=False)),
                       inputs={"collect": [], "filter": [Artifact("filter", "a", "fp", docs)]}, documents="filter")
    assert ExactDedup(ExactDedupParams()).run(ctx)["duplicates_removed"] == 1
    dup = pq.read_table(out / "duplicates.parquet").to_pylist()
    assert [(r["source_repo"], r["license_spdx"], r["license_confidence"]) for r in dup] == [("b", "MIT", 0.75)]
