"""The result of lowering to several backends: one module that calls its regions.

A :class:`PartitionedModule` holds an outer module whose methods are the original graphs
with each region replaced by a ``call`` of that region's single-backend
:class:`~lowerkit.LoweredModule`. It runs, saves and loads as one file; availability is
decided per region, when each region compiles.
"""

from __future__ import annotations

import copy
import dataclasses
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from .lowered import Lowered, LoweredModule
from .delegate import lower_to_one, normalize_compile_spec
from ..backend.registry import get_backend
from ..errors import BackendExecutionError, InputError, NodeExecutionError
from ..backend.hookspecs import Unsupported
from ..ir.graph import Graph
from ..ir.interpreter import Interpreter
from ..ir.module import Module, Signature, format_outputs
from ..ir.node import Node
from ..opset import STRUCTURAL_OPS
from ..partition.assign import Candidate
from ..partition.plan import build_outer_module, make_report, plan_partition
from ..partition.report import PartitionReport


class PartitionedModule(Lowered):
    """A module lowered to several backends (or partly lowered): regions plus glue.

    ``backend`` is the list of backends asked for, ``regions`` maps region names to their
    lowered modules, and :meth:`partition_report` says who took each node and why.
    """

    def __init__(  # noqa: D107 - built by lower_partitioned or from a file
        self,
        outer: Module,
        backends: Sequence[str],
        compile_spec: Mapping[str, Mapping[str, Any]],
        report: PartitionReport,
    ) -> None:
        self._outer = outer
        self._backends = tuple(backends)
        self._spec = {m: dict(o) for m, o in compile_spec.items()}
        self._report = report
        self.methods = dict(outer.methods)
        # Glue made only of calls, parameters and constants runs without any backend.
        glue_ops = {n.op for m in outer.methods.values() for n in m.graph.nodes}
        self._interpreter: Interpreter | None = (
            _RegionCaller(outer, self) if glue_ops <= STRUCTURAL_OPS else None
        )
        # A method that is one region called on the method's inputs, returning its outputs (a
        # model one backend takes whole): called straight, not through the interpreter (~3 us).
        self._whole = {name: _whole_region(m.graph, outer.submodules) for name, m in outer.methods.items()}
        # The glue graphs never change: their signatures are made once, not at every call (a
        # graph method builds its signature from its graph each time it is asked).
        self._signatures = {name: outer.signature(name) for name in outer.methods}

    # -- what it is -----------------------------------------------------------------------
    @property
    def backend(self) -> list[str]:  # type: ignore[override]
        """The backends asked for, in priority order."""
        return list(self._backends)

    @property
    def name(self) -> str:
        return self._outer.name

    @property
    def compile_spec(self) -> dict[str, dict[str, Any]]:
        return copy.deepcopy(self._spec)

    @property
    def original(self) -> Module | None:
        """Always None: with ``keep_source=True`` each region keeps its own original nodes."""
        return None

    @property
    def outer(self) -> Module:
        """The glue module: the original graphs with regions replaced by calls."""
        return self._outer

    @property
    def regions(self) -> dict[str, LoweredModule]:
        return {
            name: sub
            for name, sub in self._outer.submodules.items()
            if any(r.name == name for r in self._report.regions)
        }

    @property
    def submodules(self) -> dict[str, Any]:
        return {}

    @property
    def is_compiled(self) -> bool:
        return all(r.is_compiled for r in self.regions.values())

    @property
    def is_fallback(self) -> bool:
        return any(r.is_fallback for r in self.regions.values())

    def signature(self, method: str) -> Signature:
        sig = self._signatures.get(method)
        return sig if sig is not None else self._outer.signature(method)  # (no such method: its error)

    def partition_report(self) -> PartitionReport:
        """Per node: the backend that took it and those that declined, with reasons."""
        return self._report

    # -- calling --------------------------------------------------------------------------
    def _execute(self, method: str, sig: Signature, arrays: list[np.ndarray]) -> Any:
        if self._interpreter is None:  # selective lowering: un-lowered nodes run on reference
            return self._outer.run(method, *arrays)
        whole = self._whole.get(method)
        if whole is not None:
            region, inner = whole
            result = self._call_region(region, inner, arrays)
            return format_outputs(method, sig, list(result) if isinstance(result, tuple) else [result])
        return format_outputs(method, sig, self._interpreter.run(method, arrays))

    def _call_region(self, region: str, method: str, args: list[np.ndarray]) -> Any:
        """``method`` of region ``region`` (a method that is that call alone); a failure is
        reported with the node it names, as :class:`_RegionCaller` reports it."""
        try:
            return self._outer.submodules[region].run(method, *args)
        except BackendExecutionError as err:
            _raise_described(self, region, err)
            raise

    def __copy__(self) -> PartitionedModule:
        # Regions are copied (each compiles its own handles); glue graphs and report are shared.
        outer = self._outer
        submodules = {
            name: copy.copy(sub) if isinstance(sub, LoweredModule) else sub
            for name, sub in outer.submodules.items()
        }
        twin = Module(outer.parameters, outer.methods, submodules, name=outer.name)
        return type(self)(twin, self._backends, self._spec, self._report)

    def __deepcopy__(self, memo: dict[int, Any]) -> PartitionedModule:
        return self.__copy__()

    def __repr__(self) -> str:
        return (
            f"<lowerkit.PartitionedModule {self.name} backends={list(self._backends)} "
            f"regions={len(self._report.regions)}>"
        )

    def __str__(self) -> str:
        return f"{self!r}\n{self._report}"


class _RegionCaller(Interpreter):
    """Runs glue graphs; a failing region is reported with the original node it names."""

    def __init__(self, outer: Module, owner: PartitionedModule) -> None:
        super().__init__(outer, {})
        self._owner = owner

    def call(self, node: Node, args: list[np.ndarray]) -> list[np.ndarray]:
        try:
            return super().call(node, args)
        except BackendExecutionError as err:
            _raise_described(self._owner, node.attrs.get("module", ""), err)
            raise


def _whole_region(graph: Any, submodules: Mapping[str, Any]) -> tuple[str, str] | None:
    """``(region, method)`` where ``graph`` is one call of a region's method (one of
    ``submodules``) on the graph's inputs, in order, returning its outputs, in order; else
    None (the interpreter runs the glue, and reports a missing region as it does)."""
    if len(graph.nodes) != 1:
        return None
    (node,) = graph.nodes
    region = node.attrs.get("module", "") if node.op == "call" else ""
    if region not in submodules or list(node.inputs) != list(graph.inputs):
        return None
    if list(node.outputs) != list(graph.outputs):
        return None
    return region, node.attrs["method"]


def _raise_described(owner: PartitionedModule, region: str, err: BackendExecutionError) -> None:
    """Raise ``err`` again, described with the original node it names, where ``region`` is
    one of ``owner``'s regions; else return (the caller re-raises it as it is)."""
    if region in owner.regions:
        raise BackendExecutionError(_describe_failure(owner, region, err)) from err


def _describe_failure(owner: PartitionedModule, region: str, err: BackendExecutionError) -> str:
    report = owner.partition_report()
    summary = next(r for r in report.regions if r.name == region)
    node = _failing_node(report, region, _debug_handle(err))
    where = f"; failing node: {node}" if node else ""
    ops = ", ".join(summary.ops[:6]) + ("..." if len(summary.ops) > 6 else "")
    return (
        f"backend {summary.backend!r} failed in method {summary.method!r}, region {region!r} "
        f"({len(summary.ops)} nodes: {ops}){where}: {err}"
    )


def _failing_node(report: PartitionReport, region: str, handle: int | None) -> str:
    """The original node the error names by debug handle, or the region's only node."""
    nodes = [n for n in report.nodes if n.region == region]
    chosen = [n for n in nodes if n.debug_handle == handle] if handle is not None else []
    if not chosen and len(nodes) == 1:
        chosen = nodes
    if not chosen:
        return ""
    n = chosen[0]
    text = f"node {n.op} #{n.debug_handle}"
    if n.scope:
        text += f" in {n.scope}"
    if n.source:
        text += f" at {n.source}"
    return text


def _debug_handle(err: BaseException | None) -> int | None:
    while err is not None:
        if isinstance(err, NodeExecutionError):
            return err.debug_handle
        err = err.__cause__
    return None


def lower_partitioned(
    module: Module,
    backends: Sequence[str],
    compile_spec: Mapping[str, Mapping[str, Any]],
    *,
    submodules: Sequence[str] | None = None,
    keep_source: bool = False,
    plan: str = "priority",
    example_inputs: Mapping[str, Sequence[np.ndarray]] | None = None,
    optimize: bool = True,
) -> PartitionedModule:
    """Partition ``module`` over ``backends`` (priority order) and lower every region.

    With ``optimize`` (and no ``submodules``: selective lowering keeps the graph as it is)
    the core graph passes (:mod:`lowerkit.partition.prepare`: batch-norm and constant
    folding, dead code) run first, on a copy. ``plan="priority"`` gives each
    node to the first backend that supports it; ``plan="measure"`` times candidate plans on
    ``example_inputs`` (method -> checked inputs) and keeps the fastest (see
    :mod:`lowerkit.lowering.measure`). ``compile_spec`` maps each method to
    ``{backend name: options}``. With ``keep_source=True`` every region keeps its original
    nodes, so that loading with ``fallback="reference"`` can run the regions whose backend is
    missing. Raises ``UnsupportedOperatorError`` listing every node no backend claims, and
    ``InputError`` for unknown submodule paths or compile-spec backends.
    """
    from ..partition.prepare import prepare_module

    chosen = [get_backend(name) for name in backends]
    for method, per_backend in compile_spec.items():
        unknown = sorted(set(per_backend) - set(backends))
        if unknown:
            raise InputError(
                f"compile_spec[{method!r}] names {unknown}, which are not among the backends "
                f"{list(backends)}; for several backends give {{method: {{backend: options}}}}"
            )
    candidates = [Candidate(b.name, _support_query(b)) for b in chosen]
    prepared, fired = prepare_module(module) if optimize and submodules is None else (module, [])
    if plan == "measure":
        from .measure import measured_partition

        return measured_partition(
            prepared, backends, candidates, compile_spec, example_inputs or {},
            keep_source=keep_source, passes=fired,
        )
    return lower_plan(
        prepared, backends, candidates, compile_spec,
        submodules=submodules, keep_source=keep_source, passes=fired,
    )


def lower_plan(
    module: Module,
    backends: Sequence[str],
    candidates: Sequence[Candidate],
    compile_spec: Mapping[str, Mapping[str, Any]],
    *,
    submodules: Sequence[str] | None = None,
    keep_source: bool = False,
    passes: Sequence[str] = (),
) -> PartitionedModule:
    """Plan with ``candidates`` (in order, first yes wins) and lower every region."""

    plan = plan_partition(module, candidates, submodules)
    lowered_regions = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for mp, region, name, sub in plan.regions():
            options = dict(compile_spec.get(mp.name, {}).get(region.backend, {}))
            spec = normalize_compile_spec(sub, {"forward": options})
            lowered_regions.append(lower_to_one(sub, region.backend, spec, keep_source=keep_source))
    for warning in _merge_warnings(caught):
        warnings.warn(warning.message, warning.category, stacklevel=4)
    outer = build_outer_module(plan, lowered_regions)
    report = make_report(plan, [len(r.record.payload) for r in lowered_regions])
    report = dataclasses.replace(report, passes=tuple(passes))
    return PartitionedModule(outer, backends, compile_spec, report)


def _support_query(backend):
    if not backend.has_hook("lowerkit_is_supported"):
        return None

    def query(node: Node, graph: Graph | None = None) -> object:
        try:
            supported, reason = backend.supports(node, graph)
        except Exception as err:  # a broken hook declines; it never breaks the others
            return Unsupported(f"lowerkit_is_supported raised: {err}")
        return True if supported else Unsupported(reason or "not supported")

    return query


def _merge_warnings(caught):
    """One warning per distinct message (regions of one unavailable backend warn once)."""
    seen: dict[str, warnings.WarningMessage] = {}
    for w in caught:
        key = f"{w.category.__name__}:{_first_sentence(str(w.message))}"
        seen.setdefault(key, w)
    return list(seen.values())


def _first_sentence(text: str) -> str:
    return text.split(":")[0]
