"""Translate an optimized graph into a :class:`Program`: buffers, views, in-place reuse.

Reshape-like instructions on arena buffers become views (no instruction). An element-wise
instruction whose kernel allows it writes over an input of the same type when that input's
storage is read by nothing later.
"""

from __future__ import annotations

import numpy as np

from lowerkit.errors import UnsupportedOperatorError
from lowerkit.ir import Graph, Value

from ..kernels import KERNELS
from .program import Buffer, Instruction, Program

_VIEW_OPS = ("reshape", "flatten")


def _last_uses(graph: Graph) -> dict[Value, int]:
    last: dict[Value, int] = {}
    for i, node in enumerate(graph.nodes):
        for v in node.inputs:
            last[v] = i
    for v in graph.outputs:
        last[v] = len(graph.nodes)
    return last


def build_program(graph: Graph, method: str, options: dict, inplace: bool = True) -> Program:
    """Lower ``graph`` to buffers and instructions (memory not yet planned)."""
    buffers: list[Buffer] = []
    constants: list[np.ndarray] = []
    constant_index: dict[int, int] = {}
    of_value: dict[Value, int] = {}
    aliases: dict[int, list[Value]] = {}  # root buffer id -> values stored there
    last = _last_uses(graph)

    def new_buffer(v: Value, kind: str, root: int | None = None, const: int = -1) -> int:
        bid = len(buffers)
        r = bid if root is None else root
        buffers.append(Buffer(bid, v.name, v.type.dtype, v.type.shape, kind, r, constant=const))
        of_value[v] = bid
        aliases.setdefault(r, []).append(v)
        return bid

    inputs = [new_buffer(v, "input") for v in graph.inputs]
    instructions: list[Instruction] = []
    for i, node in enumerate(graph.nodes):
        if node.op == "constant":
            array = node.attrs["value"]
            key = id(array)
            if key not in constant_index:
                constant_index[key] = len(constants)
                constants.append(np.asarray(array, order="C"))
            new_buffer(node.output, "constant", const=constant_index[key])
            continue
        spec = KERNELS.get(node.op)
        if spec is None:
            raise UnsupportedOperatorError(f"glow_like has no kernel for {node.where()}")
        ins = [of_value[v] for v in node.inputs]
        if node.op in _VIEW_OPS and len(node.outputs) == 1:
            src = buffers[ins[0]]
            if src.kind == "constant":
                new_buffer(node.output, "constant", const=src.constant)
            else:
                new_buffer(node.output, "activation", root=src.root)
            continue
        outs = []
        for v in node.outputs:
            target = _inplace_target(node, v, ins, buffers, aliases, last, i) if inplace and spec.inplace else None
            outs.append(new_buffer(v, "activation", root=target))
        instructions.append(
            Instruction(node.op, ins, outs, _plain_attrs(node.attrs), node.scope, node.debug_handle)
        )
    outputs = [of_value[v] for v in graph.outputs]
    return Program(method, buffers, instructions, inputs, outputs, constants, options=dict(options))


def _inplace_target(node, out: Value, ins, buffers, aliases, last, i) -> int | None:
    """The root of an input the output may overwrite, or None."""
    for v, bid in zip(node.inputs, ins):
        buf = buffers[bid]
        if not buf.in_arena or v.type != out.type:
            continue
        if all(last.get(a, -1) <= i for a in aliases[buf.root]):
            return buf.root
    return None


def _plain_attrs(attrs: dict) -> dict:
    return {k: v for k, v in attrs.items() if k != "param"}
