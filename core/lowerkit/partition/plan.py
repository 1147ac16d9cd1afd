"""Partitioning a whole module: every method's nodes assigned, grouped and cut out.

:func:`plan_partition` is pure (no backend is called but through the candidates'
``is_supported``); :func:`build_outer_module` turns a plan plus the lowered regions into
the module that calls them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ..errors import InputError, UnsupportedOperatorError
from ..ir.graph import Graph
from ..ir.module import GraphMethod, Module
from ..ir.node import Node
from ..opset.decompose import decompose_unclaimed
from .assign import FREE_OPS, Assignment, Candidate, assign_backends
from .extract import outer_graph, region_interface, region_module
from .regions import Region, form_regions
from .report import NodeDecision, PartitionReport, RegionSummary


@dataclass(slots=True)
class MethodPlan:
    name: str
    graph: Graph
    assignment: Assignment
    regions: list[Region]
    region_names: list[str]
    region_modules: list[Module]


@dataclass(slots=True)
class PartitionPlan:
    module: Module
    backends: tuple[str, ...]
    submodules: tuple[str, ...]
    methods: list[MethodPlan]

    def regions(self):
        """(method plan, region, name, region module) for every region, in order."""
        for mp in self.methods:
            for region, name, sub in zip(mp.regions, mp.region_names, mp.region_modules):
                yield mp, region, name, sub


def scope_paths(module: Module) -> list[str]:
    """Every module path selective lowering accepts: each prefix of every node's scope."""
    paths: set[str] = set()
    for method in module.methods.values():
        if isinstance(method, GraphMethod):
            for node in method.graph.nodes:
                parts = node.scope.split(".") if node.scope else []
                paths.update(".".join(parts[: i + 1]) for i in range(len(parts)))
    return sorted(paths)


def _selector(module: Module, submodules: Sequence[str] | None) -> Callable[[Node], bool]:
    if submodules is None:
        return lambda node: True
    valid = scope_paths(module)
    unknown = [p for p in submodules if p not in valid]
    if unknown:
        raise InputError(
            f"submodules {unknown} name no module path of {module.name}; valid paths are {valid}"
        )
    prefixes = tuple(submodules)
    return lambda node: any(node.scope == p or node.scope.startswith(p + ".") for p in prefixes)


def plan_partition(
    module: Module,
    candidates: Sequence[Candidate],
    submodules: Sequence[str] | None = None,
) -> PartitionPlan:
    """Assign, group and cut out every graph method of ``module``.

    Raises :class:`UnsupportedOperatorError` listing every selected node that no candidate
    claims, in every method, with the reasons each backend gave.
    """
    selected = _selector(module, submodules)
    # Backends see a node's graph (its neighbours) where their answers choose between them:
    # two or more candidates, every node offered.
    choosing = len(candidates) > 1 and submodules is None
    methods: list[MethodPlan] = []
    unclaimed: list[tuple[str, Node, Assignment]] = []
    taken_names = set(module.submodules)
    for name, method in module.methods.items():
        if not isinstance(method, GraphMethod):
            raise InputError(f"method {name!r} of {module.name} is already lowered; partition the original module")
        # Composite ops no candidate claims (attention) are decomposed into ones they may.
        graph = decompose_unclaimed(method.graph, lambda node: _claimed(node, candidates))
        assignment = assign_backends(graph, candidates, selected, with_graph=choosing)
        unclaimed.extend((name, node, assignment) for node in assignment.unclaimed)
        methods.append(MethodPlan(name, graph, assignment, [], [], []))
    if unclaimed:
        raise UnsupportedOperatorError(_unsupported_message(unclaimed, [c.name for c in candidates]))
    for mp in methods:
        mp.regions = form_regions(mp.graph, mp.assignment)
        for region in mp.regions:
            base = f"{mp.name}_region{region.index}"
            name, k = base, 1
            while name in taken_names:
                name, k = f"{base}_{k}", k + 1
            taken_names.add(name)
            mp.region_names.append(name)
            mp.region_modules.append(region_module(module, mp.graph, region, f"{module.name}.{name}"))
    return PartitionPlan(module, tuple(c.name for c in candidates), tuple(submodules or ()), methods)


def _claimed(node: Node, candidates: Sequence[Candidate]) -> bool:
    """Whether a candidate could take ``node`` (asked alone: decomposing a composite op is
    about what the backends can run, not where their regions are)."""
    return any(c.is_supported is not None and bool(c.is_supported(node, None)) for c in candidates)


def _unsupported_message(unclaimed, backends: list[str]) -> str:
    lines = [f"{len(unclaimed)} node(s) are supported by none of the backends {backends}:"]
    for method, node, assignment in unclaimed:
        reasons = "; ".join(f"{d.backend}: {d.reason}" for d in assignment.declines[node])
        lines.append(f"  method {method!r}: {node.where()} — {reasons or 'no backend asked'}")
    lines.append("Add 'reference' to the backend list to run what no other backend supports.")
    return "\n".join(lines)


def build_outer_module(plan: PartitionPlan, lowered_regions: Sequence[object]) -> Module:
    """The module whose methods call the lowered regions in place of their nodes."""
    module = plan.module
    submodules = dict(module.submodules)
    methods = {}
    region_iter = iter(lowered_regions)
    next_handle = 1 + max(
        (n.debug_handle for mp in plan.methods for n in mp.graph.nodes), default=0
    )
    for mp in plan.methods:
        for name in mp.region_names:
            submodules[name] = next(region_iter)
        graph = outer_graph(mp.graph, mp.regions, mp.region_names, next_handle)
        next_handle += len(mp.regions)
        sig = module.methods[mp.name].signature
        methods[mp.name] = GraphMethod(graph, sig.returns_tuple, sig.output_names)
    used = {
        n.attrs["name"] for m in methods.values() for n in m.graph.nodes if n.op == "param"
    }
    parameters = {k: v for k, v in module.parameters.items() if k in used}
    return Module(parameters, methods, submodules, name=module.name)


def make_report(plan: PartitionPlan, payload_sizes: Sequence[int]) -> PartitionReport:
    nodes: list[NodeDecision] = []
    regions: list[RegionSummary] = []
    sizes = iter(payload_sizes)
    for mp in plan.methods:
        region_of = {}
        for region, name in zip(mp.regions, mp.region_names):
            for node in region.nodes:
                region_of[node] = name
            interface = region_interface(mp.graph, region)
            regions.append(
                RegionSummary(
                    name,
                    mp.name,
                    region.backend,
                    tuple(n.op for n in region.nodes),
                    next(sizes),
                    tuple(f"{v.name}: {v.type}" for v in interface.inputs),
                    tuple(f"{v.name}: {v.type}" for v in interface.outputs),
                )
            )
        producer = mp.graph.producers()
        for node in mp.graph.nodes:
            if node.op in FREE_OPS:
                continue
            sources = []
            for v in node.inputs:
                p = producer.get(v)
                if p is not None and p.op not in FREE_OPS:
                    sources.append(p.debug_handle)
            nodes.append(
                NodeDecision(
                    mp.name,
                    node.debug_handle,
                    node.op,
                    node.scope,
                    str(node.source) if node.source else "",
                    mp.assignment.backend_of.get(node),
                    region_of.get(node),
                    tuple(mp.assignment.declines.get(node, ())),
                    tuple(sources),
                )
            )
    return PartitionReport(plan.backends, tuple(nodes), tuple(regions), plan.submodules)
