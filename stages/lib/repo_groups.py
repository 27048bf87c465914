"""Routing rows to groups of whole repositories, so that work which needs a repository at once (the name-level
call graph, the v4 context documents) runs as one task per group with memory bounded by its group, not by the
corpus (docs/DESIGN.md section 13).

Repositories are taken in name order and cut into groups of about `limit` (rows or bytes, as the caller
weighs them); a repository is never split, so one larger than `limit` is a group of its own and bounds the
memory of its task. Routing is one streaming pass over the tasks' files with one open writer per group.

Hand-written because datatrove's executors run tasks over files, and its readers know no grouping by a key.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

REPO = "source_repo"


def repository_sizes(paths: Iterable[Path], weight: str | None = None) -> dict[str, int]:
    """{repository: rows} over the files (or the sum of column `weight` where one is given), reading only the
    columns it needs."""
    sizes: dict[str, int] = defaultdict(int)
    for path in paths:
        t = pq.read_table(path, columns=[REPO] + ([weight] if weight else []))
        if not t.num_rows:
            continue
        if weight is None:
            counts = pc.value_counts(t.column(REPO).combine_chunks())
            pairs = zip(counts.field("values").to_pylist(), counts.field("counts").to_pylist())
        else:
            summed = t.group_by(REPO).aggregate([(weight, "sum")])
            pairs = zip(summed.column(REPO).to_pylist(), summed.column(f"{weight}_sum").to_pylist())
        for repo, n in pairs:
            sizes[repo] += int(n)
    return dict(sizes)


def repository_groups(sizes: dict[str, int], limit: int) -> dict[str, int]:
    """{repository: group}: repositories in name order, a new group whenever the next one would take the
    current group past `limit` (a repository is never split)."""
    group_of, g, filled = {}, 0, 0
    for repo in sorted(sizes):
        if filled and filled + sizes[repo] > limit:
            g, filled = g + 1, 0
        group_of[repo] = g
        filled += sizes[repo]
    return group_of


def route(paths: Iterable[Path], schema: pa.Schema, group_of: dict[str, int], out: Path, stem: str) -> int:
    """Write the rows of every file in `paths` (in order) to out/<stem>-<group>.parquet by their repository's
    group, keeping their order within a group; every group gets a file, empty or not. Returns the number of
    groups."""
    groups = max(group_of.values()) + 1 if group_of else 0
    out.mkdir(parents=True, exist_ok=True)
    names = pa.array(sorted(group_of), pa.string())
    group_by_name = np.array([group_of[x] for x in names.to_pylist()], dtype=np.int64)
    writers = [pq.ParquetWriter(out / f"{stem}-{k:05d}.parquet", schema, compression="zstd") for k in range(groups)]
    try:
        for path in paths:
            t = pq.read_table(path, schema=schema)
            if not t.num_rows:
                continue
            g_col = group_by_name[pc.index_in(t.column(REPO), names).to_numpy(zero_copy_only=False)]
            for k in np.unique(g_col):
                writers[k].write_table(t.filter(pa.array(g_col == k)))
    finally:
        for w in writers:
            w.close()
    return groups


def read_by_repository(path: Path, dictionary: list[str] | None = None) -> dict[str, pa.Table]:
    """{repository: its rows of a routed group file, in file order}, read one row group at a time, so the group
    is in memory once, as the repositories' tables. Filtering the whole table by each repository in turn would
    hold the group and a copy of its largest repository together. A repository's row groups stay the chunks of
    its table: combining them would copy the largest repository once more, for the same output bytes."""
    parts: dict[str, list[pa.Table]] = defaultdict(list)
    source = pq.ParquetFile(path, read_dictionary=dictionary)
    for i in range(source.num_row_groups):
        t = source.read_row_group(i)
        repos = t.column(REPO)
        present = pc.unique(repos).to_pylist()
        for repo in present:
            parts[repo].append(t if len(present) == 1 else t.filter(pc.equal(repos, repo)))
    return {repo: pa.concat_tables(parts.pop(repo)) for repo in sorted(parts)}
