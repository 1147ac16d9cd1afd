"""Graphviz drawings of any module: plain, lowered to one backend, or partitioned.

Every drawing shows each method's inputs and outputs (ellipses) and its nodes (boxes);
nodes that run on a backend are filled with that backend's colour and grouped in one
cluster per region (the whole graph, for a single-backend module). A lowered module that
did not keep its original nodes is drawn as one box for the backend call.
"""

from __future__ import annotations

import shutil
import subprocess
from typing import Any

from ..errors import InputError
from ..ir.graph import Graph
from ..ir.module import GraphMethod, Module
from ..ir.node import Value
from ..lowering.lowered import LoweredModule
from ..lowering.partitioned import PartitionedModule

__all__ = ["module_dot", "render_svg"]

_PALETTE = ("#8dd3c7", "#ffffb3", "#bebada", "#fb8072", "#80b1d3", "#fdb462", "#b3de69", "#fccde5")
_IO_STYLE = 'shape=ellipse, style=filled, fillcolor="#eeeeee"'


def _q(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"')


class _Drawing:
    def __init__(self, title: str) -> None:
        self.lines = [
            f'digraph "{_q(title)}" {{',
            "  rankdir=TB; compound=true;",
            '  node [shape=box, style=filled, fillcolor="#ffffff", fontname="Helvetica"];',
        ]
        self.colours: dict[str, str] = {}

    def colour(self, backend: str) -> str:
        if backend not in self.colours:
            self.colours[backend] = _PALETTE[len(self.colours) % len(_PALETTE)]
        return self.colours[backend]

    def add(self, line: str) -> None:
        self.lines.append(line)

    def finish(self) -> str:
        if self.colours:
            legend = " ".join(
                f'"legend:{_q(b)}" [label="{_q(b)}", fillcolor="{c}"];' for b, c in self.colours.items()
            )
            self.lines.append(f"  subgraph cluster_legend {{ label=backends; {legend} }}")
        self.lines.append("}")
        return "\n".join(self.lines) + "\n"


def _io_nodes(d: _Drawing, method: str, graph_inputs: list[tuple[str, str]], outputs: list[tuple[str, str]]) -> None:
    for name, typ in graph_inputs:
        d.add(f'  "{_q(method)}:in:{_q(name)}" [label="{_q(name)}\\n{_q(typ)}", {_IO_STYLE}];')
    for name, typ in outputs:
        d.add(f'  "{_q(method)}:out:{_q(name)}" [label="{_q(name)}\\n{_q(typ)}", {_IO_STYLE}];')


def _draw_graph(d: _Drawing, method: str, graph: Graph, output_names: tuple[str, ...],
                backend: str | None = None, cluster: str | None = None) -> None:
    """One method's graph; with ``backend`` all its nodes sit in one coloured cluster."""
    _io_nodes(d, method, [(v.name, str(v.type)) for v in graph.inputs],
              [(n, str(v.type)) for n, v in zip(output_names, graph.outputs)])
    source: dict[Value, str] = {v: f"{method}:in:{v.name}" for v in graph.inputs}
    indent = "  "
    if backend is not None:
        d.add(f'  subgraph "cluster_{_q(method)}:{_q(cluster or backend)}" {{')
        d.add(f'    label="{_q(cluster or backend)} ({_q(backend)})"; style=rounded;')
        indent = "    "
    fill = d.colour(backend) if backend is not None else "#ffffff"
    for i, node in enumerate(graph.nodes):
        node_id = f"{method}#{i}"
        label = f"{node.op}\\n{_q(node.scope)}" if node.scope else node.op
        d.add(f'{indent}"{_q(node_id)}" [label="{label}", fillcolor="{fill}"];')
        for out in node.outputs:
            source[out] = node_id
    if backend is not None:
        d.add("  }")
    for i, node in enumerate(graph.nodes):
        for v in node.inputs:
            if v in source:
                d.add(f'  "{_q(source[v])}" -> "{_q(f"{method}#{i}")}";')
    for name, v in zip(output_names, graph.outputs):
        if v in source:
            d.add(f'  "{_q(source[v])}" -> "{_q(method)}:out:{_q(name)}";')


def _draw_lowered(d: _Drawing, obj: LoweredModule) -> None:
    original = obj.original
    for method in obj.methods:
        sig = obj.signature(method)
        if original is not None and isinstance(original.methods.get(method), GraphMethod):
            _draw_graph(d, method, original.methods[method].graph, sig.names_out, obj.backend)
            continue
        _io_nodes(d, method, [(n, str(t)) for n, t in sig.inputs],
                  [(n, str(t)) for n, t in zip(sig.names_out, sig.outputs)])
        box = f"{method}:{obj.backend}"
        payload = len(obj.record.payload)
        d.add(f'  "{_q(box)}" [label="{_q(obj.backend)}\\n{_q(method)} ({payload} bytes)", '
              f'fillcolor="{d.colour(obj.backend)}"];')
        for n, _ in sig.inputs:
            d.add(f'  "{_q(method)}:in:{_q(n)}" -> "{_q(box)}";')
        for n in sig.names_out:
            d.add(f'  "{_q(box)}" -> "{_q(method)}:out:{_q(n)}";')


def _draw_partitioned(d: _Drawing, obj: PartitionedModule) -> None:
    report = obj.partition_report()
    by_region: dict[str, list[Any]] = {}
    loose: dict[tuple[str, int], Any] = {}
    for n in report.nodes:
        if n.region is not None:
            by_region.setdefault(n.region, []).append(n)
        else:
            loose[(n.method, n.debug_handle)] = n
    backend_of = {r.name: r.backend for r in report.regions}
    outer = obj.outer
    for method, m in outer.methods.items():
        graph = m.graph  # type: ignore[attr-defined]
        sig = obj.signature(method)
        _io_nodes(d, method, [(v.name, str(v.type)) for v in graph.inputs],
                  [(n, str(v.type)) for n, v in zip(sig.names_out, graph.outputs)])
        # Each value's drawn producer: (node id, cluster it leaves from or None).
        source: dict[Value, tuple[str, str | None]] = {v: (f"{method}:in:{v.name}", None) for v in graph.inputs}
        entries: list[tuple[Any, str, str | None]] = []  # (glue node, first drawn id, cluster)
        for i, node in enumerate(graph.nodes):
            region = node.attrs.get("module") if node.op == "call" else None
            if region in by_region:
                members = by_region[region]
                cluster = f"cluster_{method}:{region}"
                backend = backend_of.get(region, members[0].backend or "")
                d.add(f'  subgraph "{_q(cluster)}" {{')
                d.add(f'    label="{_q(region)} ({_q(backend)})"; style=rounded;')
                for n in members:
                    label = f"{n.op}\\n{_q(n.scope)}" if n.scope else n.op
                    d.add(f'    "{_q(method)}#{n.debug_handle}" [label="{label}", '
                          f'fillcolor="{d.colour(backend)}"];')
                d.add("  }")
                handles = {n.debug_handle for n in members}
                for n in members:
                    for src in n.inputs_from:
                        if src in handles:
                            d.add(f'  "{_q(method)}#{src}" -> "{_q(method)}#{n.debug_handle}";')
                first = f"{method}#{members[0].debug_handle}"
                last = f"{method}#{members[-1].debug_handle}"
                entries.append((node, first, cluster))
                for out in node.outputs:
                    source[out] = (last, cluster)
            else:
                node_id = f"{method}#{node.debug_handle}" if (method, node.debug_handle) in loose else f"{method}#g{i}"
                label = f"{node.op}\\n{_q(node.scope)}" if node.scope else node.op
                d.add(f'  "{_q(node_id)}" [label="{label}"];')
                entries.append((node, node_id, None))
                for out in node.outputs:
                    source[out] = (node_id, None)
        for node, target, cluster in entries:
            for v in node.inputs:
                if v in source:
                    src, tail = source[v]
                    d.add(f'  "{_q(src)}" -> "{_q(target)}"{_attrs(tail, cluster)};')
        for name, v in zip(sig.names_out, graph.outputs):
            if v in source:
                src, tail = source[v]
                d.add(f'  "{_q(src)}" -> "{_q(method)}:out:{_q(name)}"{_attrs(tail, None)};')


def _attrs(tail: str | None, head: str | None) -> str:
    parts = ([f'ltail="{_q(tail)}"'] if tail else []) + ([f'lhead="{_q(head)}"'] if head else [])
    return f" [{', '.join(parts)}]" if parts else ""


def module_dot(obj: Any) -> str:
    """The Graphviz (dot) text drawing ``obj``: a Module, LoweredModule or PartitionedModule."""
    d = _Drawing(getattr(obj, "name", "module"))
    if isinstance(obj, PartitionedModule):
        _draw_partitioned(d, obj)
    elif isinstance(obj, LoweredModule):
        _draw_lowered(d, obj)
    elif isinstance(obj, Module):
        for method, m in obj.methods.items():
            if isinstance(m, GraphMethod):
                _draw_graph(d, method, m.graph, obj.signature(method).names_out)
    else:
        raise InputError(f"cannot draw a {type(obj).__name__}: expected a lowerkit module")
    return d.finish()


def render_svg(dot_text: str, path: str) -> None:
    """Write ``dot_text`` as SVG to ``path`` with Graphviz's ``dot`` (``InputError`` if absent)."""
    exe = shutil.which("dot")
    if exe is None:
        raise InputError(
            "--svg needs Graphviz's `dot` on the PATH (e.g. `apt-get install graphviz`); "
            "without it, use --dot and render the text elsewhere"
        )
    try:
        done = subprocess.run([exe, "-Tsvg", "-o", path], input=dot_text, text=True,
                              capture_output=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired) as err:
        raise InputError(f"--svg {path}: running {exe} failed: {err}") from None
    if done.returncode != 0:
        raise InputError(f"--svg {path}: {exe} failed: {' '.join(done.stderr.split())[:300]}")
