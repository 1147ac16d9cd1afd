"""What partitioning decided, for people: per node, who took it and who declined and why;
per region, its ops, payload size and interface. Printable, JSON-able and drawable (dot)."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

from .assign import Decline

# One colour per backend in dot drawings; un-lowered nodes are white.
_PALETTE = ("#8dd3c7", "#fdb462", "#bebada", "#fb8072", "#80b1d3", "#b3de69", "#fccde5", "#d9d9d9")


@dataclass(frozen=True, slots=True)
class NodeDecision:
    method: str
    debug_handle: int
    op: str
    scope: str
    source: str
    backend: str | None  # None: left un-lowered
    region: str | None
    declines: tuple[Decline, ...] = ()
    inputs_from: tuple[int, ...] = ()  # debug handles of the nodes it reads (for drawing)


@dataclass(frozen=True, slots=True)
class RegionSummary:
    name: str
    method: str
    backend: str
    ops: tuple[str, ...]
    payload_bytes: int
    inputs: tuple[str, ...]  # "name: type"
    outputs: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Measurement:
    """One timing taken by ``plan="measure"``: a region on one backend, or a whole plan.

    ``kind`` is ``"region"`` (``name`` a region of the priority plan, ``backend`` the
    backend it was lowered to alone) or ``"plan"`` (``name`` a candidate plan, ``backend``
    how many nodes each backend took). ``ms`` is the best time of one call, in milliseconds;
    ``chosen`` marks the region option or plan that won.
    """

    kind: str
    name: str
    backend: str
    ms: float
    chosen: bool = False


@dataclass(frozen=True, slots=True)
class PartitionReport:
    """The full story of one partitioning, kept in the saved file."""

    backends: tuple[str, ...]
    nodes: tuple[NodeDecision, ...] = ()
    regions: tuple[RegionSummary, ...] = ()
    submodules: tuple[str, ...] = field(default=())  # selective lowering paths, if any
    passes: tuple[str, ...] = ()  # core passes that changed the graph before partitioning
    plan: str = "priority"  # how nodes were assigned: "priority" or "measure"
    measurements: tuple[Measurement, ...] = ()  # plan="measure": what was timed, and the winner

    # -- text ---------------------------------------------------------------------
    def __str__(self) -> str:
        lines = [f"partition over backends {', '.join(self.backends)}"]
        if self.submodules:
            lines.append(f"selective lowering of: {', '.join(self.submodules)}")
        if self.passes:
            lines.append(f"passes before partitioning: {', '.join(self.passes)}")
        lines.append(f"plan: {self.plan}")
        lines.append("")
        lines.append(f"{'REGION':<22} {'BACKEND':<12} {'NODES':>5} {'PAYLOAD':>10}  OPS")
        for r in self.regions:
            ops = _count(r.ops)
            lines.append(f"{r.name:<22} {r.backend:<12} {len(r.ops):>5} {r.payload_bytes:>10}  {ops}")
        lines.append("")
        lines.append(f"{'NODE':<6} {'OP':<20} {'SCOPE':<24} {'TAKEN BY':<12} DECLINED BY")
        for n in self.nodes:
            taken = n.backend if n.backend is not None else "(un-lowered)"
            declined = "; ".join(f"{d.backend}: {d.reason}" for d in n.declines)
            lines.append(f"#{n.debug_handle:<5} {n.op:<20} {n.scope or '-':<24} {taken:<12} {declined}")
        if self.measurements:
            lines.append("")
            lines.append(f"{'MEASURED':<8} {'NAME':<34} {'BACKEND':<34} {'BEST ms':>9}")
            for m in self.measurements:
                mark = " <- chosen" if m.chosen else ""
                lines.append(f"{m.kind:<8} {m.name:<34} {m.backend:<34} {m.ms:9.3f}{mark}")
        return "\n".join(lines)

    # -- JSON ---------------------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> PartitionReport:
        nodes = tuple(
            NodeDecision(
                **{k: v for k, v in n.items() if k not in ("declines", "inputs_from")},
                declines=tuple(Decline(**d) for d in n["declines"]),
                inputs_from=tuple(n["inputs_from"]),
            )
            for n in data["nodes"]
        )
        regions = tuple(
            RegionSummary(
                **{k: (tuple(v) if isinstance(v, list) else v) for k, v in r.items()}
            )
            for r in data["regions"]
        )
        measurements = tuple(Measurement(**m) for m in data.get("measurements", ()))
        return cls(
            tuple(data["backends"]), nodes, regions, tuple(data.get("submodules", ())),
            tuple(data.get("passes", ())), str(data.get("plan", "priority")), measurements,
        )

    def dumps(self) -> str:
        return json.dumps(self.to_json(), sort_keys=True)

    # -- Graphviz -----------------------------------------------------------------
    def to_dot(self) -> str:
        """A Graphviz drawing: one box per node, one colour and one cluster per region."""
        colour = {b: _PALETTE[i % len(_PALETTE)] for i, b in enumerate(self.backends)}
        lines = ["digraph partition {", "  rankdir=TB;", '  node [shape=box, style=filled, fontname="Helvetica"];']
        by_region: dict[str | None, list[NodeDecision]] = {}
        for n in self.nodes:
            by_region.setdefault(n.region, []).append(n)
        for region, members in by_region.items():
            indent = "  "
            if region is not None:
                backend = members[0].backend
                lines.append(f'  subgraph "cluster_{_quote(region)}" {{')
                lines.append(f'    label="{_quote(region)} ({_quote(backend)})"; style=rounded;')
                indent = "    "
            for n in members:
                fill = colour.get(n.backend, "#ffffff") if n.backend else "#ffffff"
                label = f"{n.op}\\n{_quote(n.scope)}" if n.scope else n.op
                lines.append(f'{indent}"{_quote(n.method)}#{n.debug_handle}" [label="{label}", fillcolor="{fill}"];')
            if region is not None:
                lines.append("  }")
        for n in self.nodes:
            for src in n.inputs_from:
                method = _quote(n.method)
                lines.append(f'  "{method}#{src}" -> "{method}#{n.debug_handle}";')
        legend = " ".join(f'"{_quote(b)}" [fillcolor="{c}"];' for b, c in colour.items())
        lines.append(f"  subgraph cluster_legend {{ label=backends; {legend} }}")
        lines.append("}")
        return "\n".join(lines) + "\n"


def _quote(text: str) -> str:
    """Text safe inside a double-quoted Graphviz string."""
    return text.replace("\\", "\\\\").replace('"', '\\"')


def _count(ops: tuple[str, ...]) -> str:
    counts: dict[str, int] = {}
    for op in ops:
        counts[op] = counts.get(op, 0) + 1
    return ", ".join(f"{op} x{c}" if c > 1 else op for op, c in counts.items())
