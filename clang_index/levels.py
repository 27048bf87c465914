"""Dependency levels of a call graph (docs/DESIGN.md section 6): leaves 0, else 1 + the highest level among the
callees; a cycle (strongly connected component) takes, as a group, 1 + the highest level of its callees outside
it (0 if none). Iterative Tarjan, so a long chain never meets Python's recursion limit."""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from typing import Any


def dependency_levels(edges: Iterable[tuple[Any, Any] | dict]) -> dict[Any, int]:
    """Level per node (a USR, or any hashable name such as (path, qualname)): 0 without callees, else 1 + max level of
    its callees. A strongly connected component (cycle)
    takes, as a group, 1 + the max level of the callees outside it (0 if none). Iterative Tarjan."""
    graph: dict[Hashable, list[Hashable]] = {}
    for e in edges:
        s, d = (e["src"], e["dst"]) if isinstance(e, dict) else e
        graph.setdefault(s, []).append(d)
        graph.setdefault(d, [])
    index: dict[Hashable, int] = {}
    low: dict[Hashable, int] = {}
    on_stack: set[Hashable] = set()
    scc_stack: list[Hashable] = []
    levels: dict[Hashable, int] = {}
    for start in graph:
        if start in index:
            continue
        work = [(start, 0)]
        while work:
            v, pos = work.pop()
            if pos == 0:
                index[v] = low[v] = len(index)
                scc_stack.append(v)
                on_stack.add(v)
            succ = graph[v]
            while pos < len(succ) and succ[pos] in index:
                if succ[pos] in on_stack:
                    low[v] = min(low[v], index[succ[pos]])
                pos += 1
            if pos < len(succ):
                work += [(v, pos + 1), (succ[pos], 0)]
                continue
            if low[v] == index[v]:  # v roots an SCC; its callees outside it already have levels (reverse topo)
                comp = []
                while True:
                    x = scc_stack.pop()
                    on_stack.discard(x)
                    comp.append(x)
                    if x == v:
                        break
                members = set(comp)
                ext = [levels[d] for x in comp for d in graph[x] if d not in members]
                for x in comp:
                    levels[x] = 1 + max(ext) if ext else 0
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[v])
    return levels

