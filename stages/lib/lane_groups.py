"""The documents of a file lane (schemas/lanes.py): whole files grouped with what they include, definitions
first, within a token budget.

Per split, per (repository, license expression) so a group's license is one expression, files are put in
include order: a depth-first walk over the `#include "..."` graph that places every file after the files it
includes (a cycle is cut where the walk meets it), starting from the files nobody includes, in path order.
Consecutive files then fill a group until the next would take it past the budget; a file that alone is over
the budget is a group of its own that the lanes stage cuts into chunks. The plan is read from the whole-file
shards in one streaming pass over a few columns (the text only to find its includes) and holds a few numbers
per document.

Includes are read from the text (`#include "path"`, the quoted form; `<...>` names system and third-party
headers) and resolved inside the repository: the path relative to the including file's folder when that file
exists, else the file whose path ends with the include's path nearest to the including file (the most leading
folders in common). libclang's include graph would name the same files where a compile database exists; this
rule also works where none does, which is most repositories.
"""

from __future__ import annotations

import posixpath
import re
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow.compute as pc
import pyarrow.parquet as pq

from cpp_data.schemas.reader import read_row_group

_INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*"([^"\n]+)"', re.M)
JOIN_SLACK = 2  # tokens allowed per file for the header line's join with the file before it


@dataclass
class PlannedDoc:
    """Where a document is (file index, row group, row in it), what it is and its token count."""
    place: tuple[int, int, int]
    repo: str
    path: str
    license: str
    tokens: int
    includes: list[str] = field(default_factory=list)


def read_plan_docs(files: list[Path]) -> Iterator[PlannedDoc]:
    """Every document of the files in order, with its includes, one row group in memory at a time."""
    for i, f in enumerate(files):
        pf = pq.ParquetFile(f, page_checksum_verification=True)
        for rg in range(pf.num_row_groups):
            t = read_row_group(pf, rg, ["text", "source_repo", "source_path", "license_spdx", "token_ids"])
            tokens = pc.list_value_length(t.column("token_ids")).to_pylist()
            texts = t.column("text").to_pylist()
            for r, (repo, path, lic) in enumerate(zip(t.column("source_repo").to_pylist(),
                                                      t.column("source_path").to_pylist(),
                                                      t.column("license_spdx").to_pylist())):
                yield PlannedDoc((i, rg, r), repo or "", path or "", lic or "", tokens[r] or 0,
                                 _INCLUDE.findall(texts[r]))


class IncludeResolver:
    """Resolves an include's path to a file of one repository (the module docstring's rule)."""

    def __init__(self, paths: list[str]):
        self.paths = set(paths)
        self.by_name: dict[str, list[str]] = defaultdict(list)
        for p in sorted(paths):
            self.by_name[posixpath.basename(p)].append(p)

    def resolve(self, include: str, including: str) -> str | None:
        relative = posixpath.normpath(posixpath.join(posixpath.dirname(including), include))
        if relative in self.paths:
            return relative
        wanted = posixpath.normpath(include)
        candidates = [p for p in self.by_name.get(posixpath.basename(wanted), [])
                      if p == wanted or p.endswith("/" + wanted)]
        if not candidates:
            return None
        here = including.split("/")[:-1]
        return min(candidates, key=lambda p: (-_common_folders(here, p.split("/")[:-1]), len(p), p))


def _common_folders(a: list[str], b: list[str]) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def include_order(docs: list[PlannedDoc]) -> list[PlannedDoc]:
    """The documents of one repository and license in include order (dependencies first); the versions of one
    path stay together in their shard order."""
    by_path: dict[str, list[PlannedDoc]] = defaultdict(list)
    for d in docs:
        by_path[d.path].append(d)
    resolver = IncludeResolver(list(by_path))
    deps = {p: _resolved(resolver, p, ds) for p, ds in by_path.items()}
    included = {q for qs in deps.values() for q in qs}
    roots = sorted(p for p in by_path if p not in included) + sorted(by_path)
    out: list[PlannedDoc] = []
    done: set[str] = set()
    for root in roots:
        for p in _post_order(root, deps, done):
            out += by_path[p]
    return out


def _resolved(resolver: IncludeResolver, path: str, docs: list[PlannedDoc]) -> list[str]:
    seen: dict[str, None] = {}
    for d in docs:
        for inc in d.includes:
            q = resolver.resolve(inc, path)
            if q is not None and q != path:
                seen[q] = None
    return list(seen)


def _post_order(root: str, deps: dict[str, list[str]], done: set[str]) -> Iterator[str]:
    """Depth-first from root, each path after its dependencies, skipping paths already placed (iterative: an
    include chain can be deeper than Python's recursion limit)."""
    if root in done:
        return
    done.add(root)
    stack = [(root, iter(deps[root]))]
    while stack:
        path, it = stack[-1]
        nxt = next((q for q in it if q not in done), None)
        if nxt is None:
            stack.pop()
            yield path
        else:
            done.add(nxt)
            stack.append((nxt, iter(deps[nxt])))


def plan_groups(docs: list[PlannedDoc], budget: int, header_tokens) -> list[dict]:
    """Groups of one split in order: {"kind": "files" | "chunks", "members": [place, ...]}; `header_tokens(path)`
    counts a file's header line. Repositories and licenses in name order, each in include order."""
    by_key: dict[tuple[str, str], list[PlannedDoc]] = defaultdict(list)
    for d in docs:
        by_key[(d.repo, d.license)].append(d)
    groups: list[dict] = []
    for key in sorted(by_key):
        members: list[list[int]] = []
        used = 0
        for d in include_order(by_key[key]):
            cost = d.tokens + header_tokens(d.path) + JOIN_SLACK
            if cost > budget:
                groups.append({"kind": "chunks", "members": [list(d.place)]})
                continue
            if members and used + cost > budget:
                groups.append({"kind": "files", "members": members})
                members, used = [], 0
            members.append(list(d.place))
            used += cost
        if members:
            groups.append({"kind": "files", "members": members})
    return groups
