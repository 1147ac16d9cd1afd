"""Structural equality of graphs, and a readable account of where two graphs differ.

Two graphs are equal when they have the same inputs (types, and names unless
``names=False``), the same nodes in the same order (op, attributes, output types and names,
debug handle, scope, source) wired the same way, and the same outputs. Values are matched by
position (graph input ``i``, output ``k`` of node ``j``), never by identity.

Attribute values compare strictly: same Python kind (``1`` differs from ``1.0`` and from
``True``), floats equal or both NaN (``-0.0`` differs from ``0.0``), tensors equal in dtype,
shape and bytes (so NaN payloads and signed zeros count, as the text form keeps them).
"""

from __future__ import annotations

import math

import numpy as np

from .graph import Graph
from .node import AttrValue, Node, Value

__all__ = ["attrs_equal", "graph_diff", "graphs_equal"]


def _attr_equal(a: AttrValue | None, b: AttrValue | None) -> bool:
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return (
            isinstance(a, np.ndarray)
            and isinstance(b, np.ndarray)
            and a.dtype == b.dtype
            and a.shape == b.shape
            and np.ascontiguousarray(a).tobytes() == np.ascontiguousarray(b).tobytes()
        )
    if type(a) is not type(b):
        return False
    if isinstance(a, tuple):
        return len(a) == len(b) and all(_attr_equal(x, y) for x, y in zip(a, b))  # type: ignore[arg-type]
    if isinstance(a, float):
        if math.isnan(a) or math.isnan(b):  # type: ignore[arg-type]
            return math.isnan(a) and math.isnan(b)  # type: ignore[arg-type]
        return a == b and math.copysign(1.0, a) == math.copysign(1.0, b)  # type: ignore[arg-type]
    return a == b


def attrs_equal(a: dict[str, AttrValue], b: dict[str, AttrValue]) -> bool:
    """Whether two attribute dicts hold the same keys with strictly equal values."""
    return set(a) == set(b) and all(_attr_equal(a[k], b[k]) for k in a)


def _positions(graph: Graph) -> dict[Value, str]:
    where = {v: f"input {i}" for i, v in enumerate(graph.inputs)}
    for j, node in enumerate(graph.nodes):
        for k, v in enumerate(node.outputs):
            where.setdefault(v, f"node {j} output {k}")
    return where


def _ref(value: Value, where: dict[Value, str]) -> str:
    return where.get(value, f"foreign value %{value.name}")


def _describe(node: Node) -> str:
    return f"{node.op} #{node.debug_handle}"


def _diff_values(
    label: str, a: list[Value], b: list[Value], wa: dict[Value, str], wb: dict[Value, str],
    names: bool, wiring: bool,
) -> list[str]:
    out: list[str] = []
    if len(a) != len(b):
        return [f"{label}: {len(a)} vs {len(b)}"]
    for i, (x, y) in enumerate(zip(a, b)):
        if x.type != y.type:
            out.append(f"{label} {i}: type {x.type} vs {y.type}")
        if names and x.name != y.name:
            out.append(f"{label} {i}: name %{x.name} vs %{y.name}")
        if wiring and _ref(x, wa) != _ref(y, wb):
            out.append(f"{label} {i}: reads {_ref(x, wa)} (%{x.name}) vs {_ref(y, wb)} (%{y.name})")
    return out


def _diff_lines(a: Graph, b: Graph, names: bool) -> list[str]:
    wa, wb = _positions(a), _positions(b)
    out = _diff_values("inputs", a.inputs, b.inputs, wa, wb, names, wiring=False)
    if len(a.nodes) != len(b.nodes):
        out.append(f"node count: {len(a.nodes)} vs {len(b.nodes)}")
    for j, (x, y) in enumerate(zip(a.nodes, b.nodes)):
        head = f"node {j} ({_describe(x)} vs {_describe(y)})"
        if x.op != y.op:
            out.append(f"{head}: op {x.op} vs {y.op}")
            continue
        out += [f"{head}: {d}" for d in _diff_values("input", x.inputs, y.inputs, wa, wb, False, True)]
        out += [f"{head}: {d}" for d in _diff_values("output", x.outputs, y.outputs, wa, wb, names, False)]
        for key in sorted(set(x.attrs) | set(y.attrs)):
            if key not in x.attrs or key not in y.attrs:
                out.append(f"{head}: attribute {key!r} only in {'first' if key in x.attrs else 'second'}")
            elif not _attr_equal(x.attrs[key], y.attrs[key]):
                out.append(f"{head}: attribute {key!r} {x.attrs[key]!r} vs {y.attrs[key]!r}")
        if x.debug_handle != y.debug_handle:
            out.append(f"{head}: debug handle {x.debug_handle} vs {y.debug_handle}")
        if x.scope != y.scope:
            out.append(f"{head}: scope {x.scope!r} vs {y.scope!r}")
        if x.source != y.source:
            out.append(f"{head}: source {x.source} vs {y.source}")
    out += _diff_values("graph output", a.outputs, b.outputs, wa, wb, names, wiring=True)
    return out


def graph_diff(a: Graph, b: Graph, *, names: bool = True) -> str:
    """Where ``a`` and ``b`` differ, one line per difference; empty when they are equal."""
    return "\n".join(_diff_lines(a, b, names))


def graphs_equal(a: Graph, b: Graph, *, names: bool = True) -> bool:
    """Whether ``a`` and ``b`` are structurally equal (see the module docstring).

    Value names are compared by default because the text form keeps them; pass
    ``names=False`` to compare graphs that differ only in naming.
    """
    return not _diff_lines(a, b, names)
