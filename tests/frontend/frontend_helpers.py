"""Helpers shared by the front-end tests."""

from __future__ import annotations

import lowerkit as lk


def ops_of(module: lk.Module, method: str = "forward") -> list[str]:
    """The op names of a method's nodes, in order."""
    return [n.op for n in lk.graph_of(module, method).nodes]


def nodes_of(module: lk.Module, op: str, method: str = "forward") -> list:
    """The nodes of ``op`` in a method, in order."""
    return [n for n in lk.graph_of(module, method).nodes if n.op == op]
