"""dependency_documents: the v5 documents (docs/DESIGN.md section 7), one per function, from libclang's graph.

For every function definition the semantics stage indexed in a kept file (licensed, not a duplicate): the
preamble of its file (includes, using-declarations, typedefs, forward declarations, in line order), then the
functions it reaches through call and reference edges up to `max_depth` (5), ordered by dependency level
(leaves first, so definitions precede their use), then the function itself. Over `budget_bytes` the
dependencies of the highest level are dropped first. `build_info` is the compile command of the TU the function
was indexed from; `constituents` give every piece's source_repo, source_commit, source_path, byte range in the file and
license.
Only dependencies on the root's side of the train/valid split are used. Work and memory go one repository at a
time (its functions, edges, preamble and kept files' licenses): libclang's edges never leave a repository.
"""

from __future__ import annotations

import hashlib
import json
from collections import defaultdict
from dataclasses import dataclass
from typing import Any, ClassVar

import pyarrow as pa
import pyarrow.parquet as pq

from cpp_data.pipeline.contract.stage import DOCUMENTS, Stage, StageContext
from cpp_data.pipeline.foundation.fsutil import atomic_write_json
from cpp_data.schemas.generations import write_schema
from cpp_data.schemas.provenance import IDENTITY, LICENSE, LICENSE_FAMILY, SIZE_BYTES, TEXT_SHA256, names
from cpp_data.schemas.shard_writer import SPLITS, ShardParams, ShardWriter
from cpp_data.stages.lib import keys
from cpp_data.stages.lib.inputs import document_parts

_LICENSE_COLUMNS = names(*LICENSE, LICENSE_FAMILY)
DOC_COLUMNS = ["text", "doc_id", *names(*IDENTITY), *_LICENSE_COLUMNS, *names(TEXT_SHA256, SIZE_BYTES), "target_name",
               "max_dep_level", "build_info", "constituents"]


@dataclass(frozen=True)
class DependencyDocumentsParams:
    bounds: ClassVar[dict] = {"max_depth": (0, None), "budget_bytes": (1, None), "valid_fraction": (0, 0.5),
                              "docs_per_shard": (1, None), "row_group_size": (1, None)}
    generation: str = "v5"
    max_depth: int = 5
    budget_bytes: int = 16_384  # ~4,096 tokens of C++
    valid_fraction: float = 0.01
    docs_per_shard: int = 50_000
    row_group_size: int = 1024


def kept_licenses(ctx: StageContext, repo: str, removed) -> dict[tuple[str, str], dict]:
    """{(repo, path): license columns} of `repo`'s files that the per-document stages kept and dedup did not remove:
    one repository at a time, since a document's pieces never leave their repository."""
    out = {}
    for part in document_parts(ctx, repo):
        t = pq.read_table(part, columns=[*names(*IDENTITY), *_LICENSE_COLUMNS])
        keep = ~keys.contains(removed, keys.table_keys(t))
        for row, k in zip(t.to_pylist(), keep):
            if k:
                out[(row["source_repo"], row["source_path"])] = row
    return out


def _rows(path) -> list[dict]:
    return pq.read_table(path).to_pylist()


def _file_to_move_to_valid(ctx: StageContext, arts: list, removed, valid_fraction: float) -> tuple[str, str] | None:
    """The (repo, file) whose roots go to the validation split when the hash split gives it none: the file
    nearest the split line, as the shards stage moves one over (docs/DESIGN.md section 9), decided before any
    document is made so that no training document takes a dependency from it. None when some file is on the
    validation side already, or fewer than two files have roots (moving the only one would empty training).
    One repository at a time, keeping only the nearest file and whether a second exists; the documents pass reads
    each repository's kept licenses again rather than holding every repository's at once."""
    nearest, files = None, 0
    for art in arts:
        path = art.path / "functions.parquet"
        if "file" not in pq.read_schema(path).names:  # a source without functions writes an empty table
            continue
        kept = kept_licenses(ctx, art.source, removed)
        for f in set(pq.read_table(path, columns=["file"]).column("file").to_pylist()):
            if (art.source, f) not in kept:
                continue
            if keys.is_valid_split(art.source, f, valid_fraction):
                return None
            files += 1
            candidate = (keys.split_hash(art.source, f), (art.source, f))
            nearest = candidate if nearest is None else min(nearest, candidate)
    return nearest[1] if nearest is not None and files >= 2 else None


def reachable(root: str, callees: dict, max_depth: int) -> set[str]:
    seen, frontier = {root}, [root]
    for _ in range(max_depth):
        frontier = [d for f in frontier for d in callees.get(f, ()) if d not in seen]
        seen.update(frontier)
    return seen - {root}


def build_document(root: dict, deps: list[dict], preamble: list[dict], meta: dict, budget: int) -> dict:
    deps = sorted(deps, key=lambda f: (f["level"], f["name"], f["usr"]))
    head = "".join(p["text"] + "\n" for p in preamble)

    def size(ds):
        return len(head.encode()) + sum(len(d["text"].encode()) + 2 for d in ds) + len(root["text"].encode())
    while deps and size(deps) > budget:  # trim from the highest level first (the largest of it first)
        top = max(d["level"] for d in deps)
        victim = max((d for d in deps if d["level"] == top), key=lambda d: (len(d["text"]), d["usr"]))
        deps.remove(victim)
    text = head + ("\n" if head else "") + "".join(d["text"] + "\n\n" for d in deps) + root["text"] + "\n"
    constituents = [{"source_repo": meta["repo_of"][f["usr"]], "source_commit": meta["commit_of"][f["usr"]],
                     "source_path": f["file"],
                     "start": f["start_offset"], "end": f["end_offset"],
                     "license_spdx": meta["license_of"][(meta["repo_of"][f["usr"]], f["file"])]["license_spdx"]}
                    for f in [*deps, root]]
    licenses = sorted({c["license_spdx"] for c in constituents if c["license_spdx"]})
    lic = meta["license_of"][(meta["repo_of"][root["usr"]], root["file"])]
    return {"text": text, "target_name": root["name"], "constituents": constituents,
            "max_dep_level": max((d["level"] for d in deps), default=-1),
            **{name: lic[name] for name in _LICENSE_COLUMNS},
            "license_spdx": licenses[0] if len(licenses) == 1 else " AND ".join(f"({x})" for x in licenses)}


class DependencyDocuments(Stage):
    name = "dependency_documents"
    libraries = ('pyarrow', 'numpy', 'libclang')
    version = 1
    scope = "corpus"
    inputs = ("semantics", DOCUMENTS, "near_dedup")
    Params = DependencyDocumentsParams

    summary_counts = {"documents": "documents", "train_documents": "train_documents",
                      "valid_documents": "valid_documents", "shards": "shards", "shard_bytes": "shard_bytes",
                      "text_bytes": "text_bytes", "moved_to_valid": "moved_to_valid"}
    publishes = ("shards",)

    def run(self, ctx: StageContext) -> dict:
        p: DependencyDocumentsParams = self.params
        removed = keys.read_removed(ctx.input("near_dedup").path / "removed_keys.parquet")
        schema = write_schema(p.generation, DOC_COLUMNS)
        out = ctx.out / "shards"
        out.mkdir()
        sp = ShardParams(generation=p.generation, docs_per_shard=p.docs_per_shard, row_group_size=p.row_group_size)
        writers = {s: ShardWriter(out, s, schema, sp) for s in SPLITS}
        pending: dict[str, list[dict]] = {s: [] for s in SPLITS}
        counts: dict[str, Any] = {"roots": 0, "documents": 0, "trimmed": 0, "text_bytes": 0, "moved_to_valid": None}
        arts = sorted(ctx.inputs["semantics"], key=lambda a: a.source or "")
        moved = _file_to_move_to_valid(ctx, arts, removed, p.valid_fraction)
        if moved is not None:
            counts["moved_to_valid"] = f"{moved[0]}:{moved[1]}"

        def is_valid(repo: str, file: str) -> bool:
            return keys.is_valid_split(repo, file, p.valid_fraction) or (repo, file) == moved

        for art in arts:
            repo = art.source or ""
            commit = next(s.commit for s in ctx.sources if s.name == repo)
            license_of = kept_licenses(ctx, repo, removed)
            functions = [f for f in _rows(art.path / "functions.parquet") if (repo, f["file"]) in license_of]
            by_usr = {f["usr"]: f for f in functions}
            callees = defaultdict(list)
            for e in _rows(art.path / "edges.parquet"):
                if e["src"] in by_usr and e["dst"] in by_usr:
                    callees[e["src"]].append(e["dst"])
            preamble = defaultdict(list)
            for row in sorted(_rows(art.path / "preamble.parquet"), key=lambda r: (r["file"], r["start_line"])):
                preamble[row["file"]].append(row)
            tus = {s["file"]: s for s in _rows(art.path / "tu_status.parquet")}
            meta = {"repo_of": {u: repo for u in by_usr}, "commit_of": {u: commit for u in by_usr},
                    "license_of": license_of}
            for f in functions:
                counts["roots"] += 1
                split = "valid" if is_valid(repo, f["file"]) else "train"
                deps = [by_usr[u] for u in sorted(reachable(f["usr"], callees, p.max_depth))
                        if is_valid(repo, by_usr[u]["file"]) == (split == "valid")]
                doc = build_document(f, deps, preamble.get(f["file"], []), meta, p.budget_bytes)
                counts["trimmed"] += len(doc["constituents"]) - 1 < len(deps)
                tu_row = tus.get(f.get("tu", ""), {})
                doc.update(doc_id=hashlib.blake2b(f"{repo}\0{f['usr']}".encode(), digest_size=8).hexdigest(),
                           source_repo=repo, source_commit=commit, source_path=f["file"],
                           text_sha256=hashlib.sha256(doc["text"].encode()).hexdigest(),
                           size_bytes=len(doc["text"].encode()),
                           build_info=json.dumps({"tu": f.get("tu"), "directory": tu_row.get("directory", ""),
                                                  "command": tu_row.get("arguments", ""),
                                                  "status": tu_row.get("status", ""),
                                                  "database": tu_row.get("database", "")}, sort_keys=True))
                counts["text_bytes"] += doc["size_bytes"]
                pending[split].append(doc)
                if len(pending[split]) == p.row_group_size:
                    writers[split].write(pa.Table.from_pylist(pending[split], schema=schema))
                    pending[split] = []
        files = []
        for s in SPLITS:
            if pending[s]:
                writers[s].write(pa.Table.from_pylist(pending[s], schema=schema))
            written = writers[s].close()
            counts[f"{s}_documents"] = sum(e["rows"] for e in written)
            files += written
        atomic_write_json(ctx.out / "shards.json", {"generation": p.generation, "files": files})
        counts["documents"] = counts["train_documents"] + counts["valid_documents"]
        counts["shards"], counts["shard_bytes"] = len(files), sum(e["bytes"] for e in files)
        return counts
