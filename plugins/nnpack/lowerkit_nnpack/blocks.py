"""Inverted-residual blocks as one step: a 1x1 convolution (and its activation), a 3x3
depthwise convolution (and its activation), a 1x1 convolution (and its residual add and
activation), each reading only the one before, run band by band of output rows
(``lowerkit.backend.cpu.mbconv.InvertedResidual``, as glow_like runs them; an extension:
NNPACK has no such step). :func:`find_blocks` finds them in a plan's graph; the plan then
makes one step of each (:class:`BlockLayer`, bound like the other layers).
``LOWERKIT_NNPACK_BLOCKS=0`` (read when a plan is built) keeps every layer a step of its own.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from lowerkit.backend.cpu import mbconv
from lowerkit.backend.cpu.aligned import thread_buffer
from lowerkit.ir.node import Node, Value

from .activations import NONE, activation_of
from .support import attrs_of, is_depthwise

BLOCKS_ENV = "LOWERKIT_NNPACK_BLOCKS"


@dataclass(frozen=True)
class Block:
    """One block of a graph: its nodes in schedule order (the first is the expansion), the
    value it reads, the residual it adds (or None), the value it returns, its three layers'
    activations, and the values only its own nodes read and write (which no step holds)."""

    nodes: tuple[Node, ...]
    source: Value
    residual: Value | None
    output: Value
    acts: tuple
    inner: frozenset


def _geometry(node: Node) -> tuple:
    attrs = attrs_of(node)
    return attrs["stride"], attrs["padding"], attrs["dilation"], attrs.get("groups", 1)


def _pointwise(node: Node, constant: Callable[[Value], bool]) -> bool:
    return (node.op == "conv2d" and mbconv.pointwise(node.inputs[1].type.shape, *_geometry(node))
            and all(constant(v) for v in node.inputs[1:]))


def find_blocks(graph, users: dict, graph_outputs: set, position: dict, constant: Callable[[Value], bool],
                epilogue: Callable[[Node], tuple], excluded: set) -> dict[Node, Block]:
    """The blocks of ``graph``, by their expansion node: ``constant(value)`` says whether a
    value is a constant of the plan, ``epilogue(conv)`` gives ``(add, residual, activation)``
    (the plan's ``_epilogue_of``); nodes in ``excluded`` (gated convolutions) take no part.
    Each block's nodes are consecutive in the schedule but for parameters and constants, and
    its depthwise layer one that ``mbconv.fits``; only its last value may be an output of the
    call."""
    if os.environ.get(BLOCKS_ENV) == "0":
        return {}
    found: dict[Node, Block] = {}
    order = graph.nodes
    for expand in order:
        if expand in excluded or not _pointwise(expand, constant):
            continue
        block = _block_from(expand, users, graph_outputs, position, constant, epilogue, excluded, order)
        if block is not None:
            found[expand] = block
    return found


def _only(value: Value, users: dict, graph_outputs: set) -> Node | None:
    readers = users.get(value, [])
    return readers[0] if len(readers) == 1 and value not in graph_outputs else None


def _block_from(expand: Node, users: dict, graph_outputs: set, position: dict, constant, epilogue, excluded,
                order: list[Node]) -> Block | None:
    add, _, act_e = epilogue(expand)
    if add is not None:
        return None
    depthwise = _only((act_e or expand).output, users, graph_outputs)
    if depthwise is None or depthwise.op != "conv2d" or not all(constant(v) for v in depthwise.inputs[1:]):
        return None
    add, _, act_d = epilogue(depthwise)
    if add is not None or act_d is None:
        return None
    code_d = activation_of(act_d)
    out_shape = depthwise.output.type.shape
    if not mbconv.fits(depthwise.inputs[1].type.shape, out_shape[1], *_geometry(depthwise), out_shape[2], code_d[0]):
        return None
    project = _only(act_d.output, users, graph_outputs)
    if project is None or project in excluded or not _pointwise(project, constant):
        return None
    add, residual, act_p = epilogue(project)
    if residual is not None and position.get(residual, -1) >= position[expand]:
        return None  # (a residual computed inside the block's span: not in the zoo)
    nodes = tuple(n for n in (expand, act_e, depthwise, act_d, project, add, act_p) if n is not None)
    last = nodes[-1]
    between = [n for n in order[position[expand]:position[last] + 1] if n.op not in ("param", "constant")]
    if between != list(nodes):
        return None
    inner = frozenset(n.output for n in nodes[:-1])
    acts = (*(NONE if act_e is None else activation_of(act_e)), *code_d,
            *(NONE if act_p is None else activation_of(act_p)))
    return Block(nodes, expand.inputs[0], residual, last.output, acts, inner)


class BlockLayer:
    """A :class:`Block` as a bound layer of the plan (``plan._bound_step``'s interface):
    ``run_into`` and ``bind`` on one image's or a batch's arrays, each image a team region
    while ``team`` can run (else on the calling thread)."""

    def __init__(self, block: Block, constant: Callable[[Value], np.ndarray], team) -> None:
        """``constant(value)``: the array of a constant value of the plan."""
        expand, project = block.nodes[0], next(n for n in block.nodes[1:] if n.op == "conv2d" and not is_depthwise(n))
        depthwise = next(n for n in block.nodes if is_depthwise(n))

        def bias(node: Node) -> np.ndarray | None:
            return constant(node.inputs[2]) if len(node.inputs) > 2 else None

        self.block = mbconv.InvertedResidual.of(
            constant(expand.inputs[1]), bias(expand), constant(depthwise.inputs[1]), bias(depthwise),
            constant(project.inputs[1]), bias(project), attrs_of(depthwise)["stride"][0], block.acts,
            expand.inputs[0].type.shape[3], depthwise.output.type.shape[3])
        self.team = team
        self._tail = tuple(block.output.type.shape[1:])

    def output_shape(self, batch: int) -> tuple[int, ...]:
        return (batch, *self._tail)

    def run_into(self, x: np.ndarray, out: np.ndarray, residual: np.ndarray | None = None) -> None:
        x = np.ascontiguousarray(x, dtype=np.float32)
        if residual is not None:
            residual = np.ascontiguousarray(residual, dtype=np.float32)
        self._bound(x, out, residual)()

    def bind(self, x: np.ndarray, out: np.ndarray, residual: np.ndarray | None = None) -> Callable[[], None] | None:
        """:meth:`run_into` on these very arrays as a zero-argument call; None where an input
        is not C-contiguous float32 (a call bound to a copy would read a stale one)."""
        if not all(a.dtype == np.float32 and a.flags.c_contiguous for a in (x, residual) if a is not None):
            return None
        return self._bound(x, out, residual)

    def _bound(self, x: np.ndarray, out: np.ndarray, residual: np.ndarray | None) -> Callable[[], None]:
        ways = self.team.ways if self.team is not None else 1
        scratch = thread_buffer("mbconv", ways * self.block.scratch_floats())
        return self.block.bind(x, out, residual, scratch, self.team)
