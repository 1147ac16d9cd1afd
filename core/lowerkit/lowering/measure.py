"""``plan="measure"``: choose how to partition by timing candidate plans on this machine.

The priority rule (first backend that supports a node takes it) is cheap and predictable
but blind to speed: it may hand a convolution specialist every convolution and leave the
element-wise glue in between to another backend, paying a region call (and losing fusion)
at every boundary. The measured plan keeps the search small and explicit:

1. **Regions alone.** Lower the priority plan, run it once on the example inputs and keep
   what flows into each region. Then lower every region to each listed backend that
   supports all its nodes and time it alone (best of a few calls). That is at most
   regions x backends small lowerings.
2. **Candidate plans**, each a whole assignment of nodes to backends:
   ``priority``; ``<backend> first`` for each listed backend (the priority list with that
   backend moved to the front: the whole model on it where it can); ``fastest per region``
   (each region on the backend that ran it fastest alone; neighbours on one backend merge
   into one region); and ``fastest per region, small merged`` (a region faster than
   ``SMALL_MS`` alone moves to the backend of the region feeding it, when that backend
   supports it: one call fewer and fusion across the old boundary).
3. **Whole plans, timed.** Every distinct candidate is lowered and timed end to end on the
   example inputs in interleaved rounds (best call per plan; a short pause before each
   candidate's calls, :data:`SETTLE_S`), so a plan never loses to the region estimates'
   blind spots (call overhead, fusion across regions); the fastest wins.
4. **The winner, lowered anew**: the module returned is not the one timed, whose handles
   adapted on the pauses' slow calls (form trials, stall guards).

Every timing lands in the partition report (``report.measurements``, printed under
``MEASURED``, kept in the file). Timings never decide correctness: every candidate computes
the same function, only the backend of each node differs.
"""

from __future__ import annotations

import dataclasses
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from .delegate import lower_to_one, normalize_compile_spec
from .partitioned import PartitionedModule, lower_plan
from ..backend.hookspecs import Unsupported
from ..errors import InputError
from ..ir.graph import Graph
from ..ir.interpreter import Interpreter
from ..ir.module import Module
from ..ir.node import Node
from ..partition.assign import Candidate
from ..partition.plan import plan_partition
from ..partition.report import Measurement

__all__ = ["ROUNDS", "SETTLE_S", "SMALL_MS", "measured_partition"]

SMALL_MS = 0.05
"""A region faster than this alone (ms) is a candidate for merging into its producer's backend."""

ROUNDS = 5
"""Interleaved timing rounds over the whole candidate plans."""

SETTLE_S = 0.12
"""Pause before each candidate's calls in a round (seconds): worker threads a library leaves
spinning after a call (OpenBLAS's for ~0.1 s, OpenMP's) would otherwise take a core from the
next candidate and make it look slower than it runs on its own (measured on a 2-core VM:
glow_like's MobileNetV2 10.6 ms timed right after nnpack's plan, 5.3 ms rested)."""

_PLAN_CALLS = 2  # calls per candidate and round, after the pause

_REGION_CALLS = 5  # best of this many calls per region option
_BUDGET_S = 0.5  # ...or fewer when a call is slow


def measured_partition(
    module: Module,
    backends: Sequence[str],
    candidates: Sequence[Candidate],
    compile_spec: Mapping[str, Mapping[str, Any]],
    example_inputs: Mapping[str, Sequence[np.ndarray]],
    *,
    keep_source: bool = False,
    passes: Sequence[str] = (),
) -> PartitionedModule:
    """Lower ``module`` with the fastest of the candidate plans described in this module."""
    if not example_inputs:
        raise InputError('plan="measure" needs example_inputs to time candidate plans on')
    lower = lambda cands: lower_plan(  # noqa: E731
        module, backends, cands, compile_spec, keep_source=keep_source, passes=passes
    )
    priority = lower(candidates)
    by_name = {c.name: c for c in candidates}
    measurements: list[Measurement] = []

    # 1. every region of the priority plan, alone, on each backend that supports all of it
    region_inputs = _capture_region_inputs(priority, example_inputs)
    replanned = list(plan_partition(module, candidates).regions())  # the same regions, unlowered
    sources = {name: sub for _, _, name, sub in replanned}
    plan_regions = {name: (region.backend, list(region.nodes)) for _, region, name, _ in replanned}
    fastest: dict[str, tuple[str, float]] = {}  # region -> (backend, ms)
    for region, (backend, nodes) in plan_regions.items():
        args = region_inputs.get(region)
        if args is None:  # a method without example inputs: keep its priority backend
            continue
        lowered_region = priority.outer.submodules[region]
        options: list[tuple[str, float]] = []
        for cand in candidates:
            if cand.name != backend and not _supports_all(cand, nodes):
                continue
            ms = _time_region(sources[region], cand.name, compile_spec, lowered_region, args)
            if ms is None:
                continue
            options.append((cand.name, ms))
        if options:
            fastest[region] = min(options, key=lambda o: o[1])
            for name, ms in options:
                measurements.append(Measurement("region", region, name, ms, name == fastest[region][0]))

    # 2. candidate assignments
    plans: dict[str, Callable[[], PartitionedModule]] = {"priority": lambda: priority}
    for cand in candidates:
        if cand is not candidates[0]:
            order = [cand] + [c for c in candidates if c is not cand]
            plans[f"{cand.name} first"] = lambda order=order: lower(order)
    per_region = _assignment(plan_regions, {r: b for r, (b, _) in fastest.items()})
    merged = _merge_small(priority, plan_regions, fastest, by_name)
    for label, assignment in (("fastest per region", per_region), ("fastest per region, small merged", merged)):
        plans[label] = lambda a=assignment: lower(_pinned(candidates, a))

    # 3. lower every distinct candidate and time them end to end, interleaved
    lowered: dict[str, PartitionedModule] = {}
    seen: dict[tuple, str] = {}
    for label, make in plans.items():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            candidate = make()
        key = _signature_of(candidate)
        if key in seen:
            continue
        seen[key] = label
        lowered[label] = candidate
    calls = {label: _caller(m, example_inputs) for label, m in lowered.items()}
    best = {label: float("inf") for label in lowered}
    for call in calls.values():  # warm-up: first calls bind buffers and compile kernels
        call()
    for _ in range(ROUNDS):
        for label, call in calls.items():
            if len(calls) > 1:
                time.sleep(SETTLE_S)
            for _ in range(_PLAN_CALLS):
                start = time.perf_counter()
                call()
                best[label] = min(best[label], time.perf_counter() - start)
    winner = min(best, key=best.__getitem__)
    for label, seconds in best.items():
        summary = _backend_counts(lowered[label])
        measurements.append(Measurement("plan", label, summary, seconds * 1e3, label == winner))
    # The winner lowered anew: a backend's handle adapts on its first calls (its form trial,
    # its stall guard), and the timed one did so on calls broken by the pauses above — the
    # first call after a pause runs slow. On MobileNetV3-Small at batch 8 the timed nnpack
    # handle's trial read 10.2-24.1 ms for batch slices that run 9.5-10.0 steadily, and kept
    # image by image in three runs of four (docs/partitioning.md).
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        chosen = lower(candidates) if winner == "priority" else plans[winner]()
    report = dataclasses.replace(
        chosen.partition_report(), plan="measure", measurements=tuple(measurements)
    )
    return PartitionedModule(chosen.outer, backends, compile_spec, report)


# -- step 1 helpers ----------------------------------------------------------------------
class _Recorder(Interpreter):
    """Runs glue graphs, keeping the arguments of every region call."""

    def __init__(self, outer: Module, seen: dict[str, list[np.ndarray]]) -> None:
        super().__init__(outer, {})
        self._seen = seen

    def call(self, node: Node, args: list[np.ndarray]) -> list[np.ndarray]:
        self._seen.setdefault(str(node.attrs.get("module", "")), [np.array(a) for a in args])
        return super().call(node, args)


def _capture_region_inputs(
    part: PartitionedModule, example_inputs: Mapping[str, Sequence[np.ndarray]]
) -> dict[str, list[np.ndarray]]:
    seen: dict[str, list[np.ndarray]] = {}
    recorder = _Recorder(part.outer, seen)
    for method, inputs in example_inputs.items():
        recorder.run(method, list(inputs))
    return seen


def _supports_all(candidate: Candidate, nodes: list[Node]) -> bool:
    if candidate.is_supported is None:
        return False
    return all(bool(candidate.is_supported(n, None)) for n in nodes)


def _time_region(
    source: Module, backend: str, compile_spec: Mapping[str, Mapping[str, Any]], current: Any,
    args: list[np.ndarray],
) -> float | None:
    """Best ms of one call of ``source`` lowered to ``backend``; None if it cannot run here."""
    if backend == current.backend:
        lowered = current
    else:
        options = dict(compile_spec.get("forward", {}).get(backend, {}))
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                spec = normalize_compile_spec(source, {"forward": options})
                lowered = lower_to_one(source, backend, spec, keep_source=False)
            if not lowered.is_compiled:
                return None
        except Exception:  # a backend that claimed the nodes but cannot lower them together
            return None
    return _best_ms(lambda: lowered.run("forward", *args))


def _best_ms(fn: Callable[[], object]) -> float:
    fn()
    best = float("inf")
    start = time.perf_counter()
    for i in range(_REGION_CALLS):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
        if i >= 1 and time.perf_counter() - start > _BUDGET_S:
            break
    return best * 1e3


# -- step 2 helpers ----------------------------------------------------------------------
def _assignment(regions: dict[str, tuple[str, list[Node]]], backend_of: dict[str, str]) -> dict[Node, str]:
    return {n: backend_of.get(r, b) for r, (b, nodes) in regions.items() for n in nodes}


def _merge_small(
    part: PartitionedModule,
    regions: dict[str, tuple[str, list[Node]]],
    fastest: dict[str, tuple[str, float]],
    by_name: dict[str, Candidate],
) -> dict[Node, str]:
    """Fastest per region, with each small region moved to its producer region's backend."""
    backend_of = {r: fastest.get(r, (b, 0.0))[0] for r, (b, _) in regions.items()}
    producer_region = _producer_regions(part)
    for region, (_, nodes) in regions.items():
        ms = fastest.get(region, ("", float("inf")))[1]
        source = producer_region.get(region)
        if ms >= SMALL_MS or source is None:
            continue
        target = backend_of[source]
        if target != backend_of[region] and _supports_all(by_name[target], nodes):
            backend_of[region] = target
    return _assignment(regions, backend_of)


def _producer_regions(part: PartitionedModule) -> dict[str, str]:
    """region -> the region whose output its first region-produced input is."""
    result: dict[str, str] = {}
    for method in part.outer.methods.values():
        graph = method.graph
        producer = graph.producers()
        for node in graph.nodes:
            if node.op != "call":
                continue
            for value in node.inputs:
                prod = producer.get(value)
                if prod is not None and prod.op == "call":
                    result[str(node.attrs["module"])] = str(prod.attrs["module"])
                    break
    return result


def _pinned(candidates: Sequence[Candidate], assignment: dict[Node, str]) -> list[Candidate]:
    """Candidates that claim exactly the nodes ``assignment`` gives them (others as before)."""

    def pinned(cand: Candidate) -> Candidate:
        query = cand.is_supported
        if query is None:
            return cand

        def ask(node: Node, graph: Graph | None = None, cand: Candidate = cand, query=query) -> object:
            owner = assignment.get(node)
            if owner is not None and owner != cand.name:
                return Unsupported(f"the measured plan gives it to {owner}")
            # A node the measured plan gives this backend is asked about alone: the timings
            # decide, not the backend's preferences about its neighbours.
            return query(node, None if owner == cand.name else graph)

        return Candidate(cand.name, ask)

    return [pinned(c) for c in candidates]


# -- step 3 helpers ----------------------------------------------------------------------
def _signature_of(part: PartitionedModule) -> tuple:
    return tuple((n.method, n.debug_handle, n.backend) for n in part.partition_report().nodes)


def _backend_counts(part: PartitionedModule) -> str:
    counts: dict[str, int] = {}
    for n in part.partition_report().nodes:
        if n.backend is not None:
            counts[n.backend] = counts.get(n.backend, 0) + 1
    regions = len(part.partition_report().regions)
    return f"{regions} regions; " + ", ".join(f"{b} {c}" for b, c in counts.items())


def _caller(part: PartitionedModule, example_inputs: Mapping[str, Sequence[np.ndarray]]) -> Callable[[], None]:
    items = [(m, list(inputs)) for m, inputs in example_inputs.items()]

    def call() -> None:
        for method, inputs in items:
            part.run(method, *inputs)

    return call
