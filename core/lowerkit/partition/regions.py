"""Step 2 of partitioning: group same-backend nodes into maximal connected regions.

Nodes are visited in topological order. A node joins a region of its own backend that
produces one of its inputs, and regions of one backend that meet at a node are merged,
unless that would create a cycle between regions: a region may not both feed and be fed
by another region through a third one. The check uses each region's set of ancestor
regions, kept up to date as regions grow.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..ir.graph import Graph
from ..ir.node import Node
from .assign import FREE_OPS, Assignment


@dataclass(eq=False, slots=True)
class Region:
    """A connected group of nodes that one backend runs as one delegated subgraph."""

    index: int
    backend: str
    nodes: list[Node] = field(default_factory=list)


def form_regions(graph: Graph, assignment: Assignment) -> list[Region]:
    """Maximal, acyclic regions of lowered nodes, in topological order of their first node.

    Un-lowered nodes (backend None) belong to no region but still order the regions
    around them: a path through an un-lowered node counts like a path through a region.
    """
    producer = graph.producers()
    # Every compute node gets a group: a region id (lowered) or its own singleton (un-lowered).
    group_of: dict[Node, int] = {}
    backend_of_group: dict[int, str | None] = {}
    ancestors: dict[int, set[int]] = {}  # group -> groups it transitively depends on
    members: dict[int, list[Node]] = {}
    next_group = 0

    group_of_alias: dict[int, int] = {}  # merged group -> the group it merged into

    def find(g: int) -> int:
        while g in group_of_alias:
            g = group_of_alias[g]
        return g

    for node in graph.nodes:
        if node.op in FREE_OPS:
            continue
        backend = assignment.backend_of[node]
        input_groups = set()
        for value in node.inputs:
            prod = producer.get(value)
            if prod is not None and prod.op not in FREE_OPS:
                input_groups.add(find(group_of[prod]))
        # Candidates: same-backend producer groups that can absorb this node without a cycle.
        chosen: int | None = None
        if backend is not None:
            for g in sorted(input_groups):
                g = find(g)  # an earlier iteration may have merged it
                if g == chosen or backend_of_group[g] != backend:
                    continue
                others = {find(o) for o in input_groups} - {g}
                # Joining g is safe unless g reaches another input group (g -> o -> node).
                if any(g in ancestors[o] for o in others):
                    continue
                if chosen is None:
                    chosen = g
                elif _can_merge(chosen, g, ancestors):
                    chosen = _merge(chosen, g, ancestors, members, group_of_alias)
        if chosen is None:
            chosen = next_group
            next_group += 1
            backend_of_group[chosen] = backend
            ancestors[chosen] = set()
            members[chosen] = []
        group_of[node] = chosen
        members[chosen].append(node)
        new_ancestors = set()
        for g in input_groups:
            g = find(g)
            if g != chosen:
                new_ancestors |= {g} | ancestors[g]
        _add_ancestors(chosen, new_ancestors, ancestors)

    position = {n: i for i, n in enumerate(graph.nodes)}
    lowered = [g for g in members if members[g] and backend_of_group[g] is not None]
    for g in lowered:
        members[g].sort(key=lambda n: position[n])
    lowered.sort(key=lambda g: position[members[g][0]])
    return [Region(i, backend_of_group[g], members[g]) for i, g in enumerate(lowered)]


def _can_merge(a: int, b: int, ancestors: dict[int, set[int]]) -> bool:
    """Merging a and b is safe when no path joins them through a third group."""
    for x, y in ((a, b), (b, a)):
        # A path x -> ... -> y through another group o: x in anc(o) and o in anc(y).
        if any(o != x and x in ancestors[o] for o in ancestors[y]):
            return False
    return True


def _merge(a, b, ancestors, members, alias) -> int:
    keep, gone = min(a, b), max(a, b)
    alias[gone] = keep
    members[keep].extend(members.pop(gone))
    merged = (ancestors[keep] | ancestors.pop(gone)) - {keep, gone}
    ancestors[keep] = merged
    # Whoever depended on either half now depends on the whole group and on everything it
    # depends on; renaming gone to keep alone would lose the other half's ancestors.
    for other, anc in ancestors.items():
        if other != keep and (gone in anc or keep in anc):
            anc.discard(gone)
            anc |= (merged | {keep}) - {other}
    return keep


def _add_ancestors(group: int, new: set[int], ancestors: dict[int, set[int]]) -> None:
    ancestors[group] |= new
    for other, anc in ancestors.items():
        if group in anc:
            anc |= new - {other}
