"""Step 3 of partitioning: cut regions out as modules of their own, and build the outer
graph that calls them in place of their nodes."""

from __future__ import annotations

import heapq
from dataclasses import dataclass

from ..ir.graph import Graph
from ..ir.module import GraphMethod, Module
from ..ir.node import Node, Value
from .assign import FREE_OPS
from .regions import Region


@dataclass(frozen=True, slots=True)
class RegionInterface:
    """The values flowing into a region and the values it produces for others."""

    inputs: tuple[Value, ...]
    outputs: tuple[Value, ...]


def region_interface(graph: Graph, region: Region) -> RegionInterface:
    inside = {n for n in region.nodes}
    produced_inside = {v for n in region.nodes for v in n.outputs}
    producer = graph.producers()
    inputs: list[Value] = []
    seen: set[Value] = set()
    for node in region.nodes:
        for value in node.inputs:
            prod = producer.get(value)
            if value in produced_inside or value in seen:
                continue
            if prod is not None and prod.op in FREE_OPS:
                continue  # parameters and constants are copied into the region
            seen.add(value)
            inputs.append(value)
    used_outside = {v for v in graph.outputs}
    for node in graph.nodes:
        if node not in inside:
            used_outside.update(v for v in node.inputs)
    outputs = [v for n in region.nodes for v in n.outputs if v in used_outside]
    return RegionInterface(tuple(inputs), tuple(outputs))


def region_module(module: Module, graph: Graph, region: Region, name: str) -> Module:
    """A one-method module (``forward``, returning a tuple) computing the region's outputs."""
    interface = region_interface(graph, region)
    producer = graph.producers()
    sub = Graph()
    mapping: dict[Value, Value] = {}
    for value in interface.inputs:
        mapping[value] = sub.add_input(value.name, value.type)
    parameters = {}
    for node in region.nodes:
        for value in node.inputs:
            prod = producer.get(value)
            if value not in mapping and prod is not None and prod.op in FREE_OPS:
                _copy_node(sub, prod, mapping)
                if prod.op == "param":
                    key = prod.attrs["name"]
                    parameters[key] = module.parameters[key]
        _copy_node(sub, node, mapping)
    sub.set_outputs(mapping[v] for v in interface.outputs)
    return Module(parameters, {"forward": GraphMethod(sub, returns_tuple=True)}, name=name)


def outer_graph(
    graph: Graph, regions: list[Region], region_names: list[str], first_handle: int
) -> Graph:
    """The method's graph with each region replaced by one ``call`` of its lowered module.

    Un-lowered nodes keep their place and metadata; a region's call is scheduled as soon
    as everything it reads is available (a topological order over nodes and regions).
    """
    region_of = {n: r.index for r in regions for n in r.nodes}
    interfaces = [region_interface(graph, r) for r in regions]
    producer = graph.producers()
    position = {n: i for i, n in enumerate(graph.nodes)}

    # Units: un-lowered nodes (keyed by node) and regions; edges from producers to users.
    unit_of = {n: ("r", region_of[n]) if n in region_of else ("n", n) for n in graph.nodes}
    deps: dict[tuple, set[tuple]] = {u: set() for u in unit_of.values()}
    for node in graph.nodes:
        for value in node.inputs:
            prod = producer.get(value)
            if prod is not None and unit_of[prod] != unit_of[node]:
                deps[unit_of[node]].add(unit_of[prod])
    users: dict[tuple, list[tuple]] = {u: [] for u in deps}
    for unit, before in deps.items():
        for b in before:
            users[b].append(unit)

    def first_position(unit: tuple) -> int:
        if unit[0] == "n":
            return position[unit[1]]
        return position[regions[unit[1]].nodes[0]]

    waiting = {u: len(d) for u, d in deps.items()}
    ready = [(first_position(u), u) for u, n in waiting.items() if n == 0]
    heapq.heapify(ready)
    out = Graph()
    mapping: dict[Value, Value] = {}
    for value in graph.inputs:
        mapping[value] = out.add_input(value.name, value.type)
    handle = first_handle
    while ready:
        _, unit = heapq.heappop(ready)
        if unit[0] == "n":
            node = unit[1]
            if node.op not in FREE_OPS:
                for value in node.inputs:  # parameters and constants the outer graph reads
                    prod = producer.get(value)
                    if value not in mapping and prod is not None and prod.op in FREE_OPS:
                        _copy_node(out, prod, mapping)
                _copy_node(out, node, mapping)
        else:
            index = unit[1]
            interface = interfaces[index]
            call = out.add_node(
                "call",
                [mapping[v] for v in interface.inputs],
                [v.type for v in interface.outputs],
                {"method": "forward", "module": region_names[index]},
                output_hints=[v.name for v in interface.outputs],
                debug_handle=handle,
                scope=region_names[index],
            )
            handle += 1
            for old, new in zip(interface.outputs, call.outputs):
                mapping[old] = new
        for user in users[unit]:
            waiting[user] -= 1
            if waiting[user] == 0:
                heapq.heappush(ready, (first_position(user), user))
    assert all(n == 0 for n in waiting.values()), "regions form a cycle"
    for value in graph.outputs:  # a graph output read straight from a parameter
        prod = producer.get(value)
        if value not in mapping and prod is not None:
            _copy_node(out, prod, mapping)
    out.set_outputs(mapping[v] for v in graph.outputs)
    return out


def _copy_node(graph: Graph, node: Node, mapping: dict[Value, Value]) -> Node:
    copy = graph.add_node(
        node.op,
        [mapping[v] for v in node.inputs],
        [v.type for v in node.outputs],
        dict(node.attrs),
        output_hints=[v.name for v in node.outputs],
        debug_handle=node.debug_handle,
        scope=node.scope,
        source=node.source,
    )
    for old, new in zip(node.outputs, copy.outputs):
        mapping[old] = new
    return copy
