"""``fuse_elementwise_chains``: runs of element-wise ops -> one ``glow.chain`` instruction
(also a lone activation that numpy would run in several passes: hardswish, silu, GELU, ...;
not a lone sigmoid: numpy runs it in place without temporaries).

Starting from an element-wise node, the chain grows along single-reader edges while the
next node is element-wise with the same output type (its other operands may broadcast to
it, e.g. a per-channel scale, or be the chain's own inputs again, as ``x * sigmoid(x)``).
Every intermediate then lives only in registers of the compiled kernel: the chain reads
each input once and writes its output once. Runs after conv/fc/add activation fusion, so
what it sees is what those could not absorb (batch-norm scale and shift outside a conv,
squeeze-excitation gates, hardswish, GELU, residual adds with their activation).
"""

from __future__ import annotations

from lowerkit.backend.cpu.jit.activation import NAMES as ACT_CODES
from lowerkit.ir import Graph, Node, TensorType, Value

from ..kernels.jit_codes import ACT, BINARY, MAX_INPUTS, UNARY
from ._util import single_user

MAX_LENGTH = 16  # instructions per chain (register blocks live in per-thread scratch)
# Alone, these take several numpy passes (and temporaries): worth a one-node chain.
SINGLE = ("hardswish", "hardsigmoid", "silu", "gelu", "erf", "leaky_relu")


def _unary_code(node: Node) -> tuple[int, float, float] | None:
    """(opcode, p0, p1) of a unary element-wise node, or None."""
    a = node.attrs
    if node.op in UNARY:
        return UNARY[node.op], float(a.get("negative_slope", 0.01)), 0.0
    if node.op == "relu":
        return ACT + ACT_CODES["relu"], 0.0, 0.0
    if node.op == "relu6":
        return ACT + ACT_CODES["clip"], 0.0, 6.0
    if node.op == "clip":
        return ACT + ACT_CODES["clip"], float(a.get("min", float("-inf"))), float(a.get("max", float("inf")))
    if node.op == "hardsigmoid":
        return ACT + ACT_CODES["hardsigmoid"], float(a.get("alpha", 1 / 6)), float(a.get("beta", 0.5))
    if node.op == "gelu":
        return ACT + ACT_CODES["gelu_tanh" if a.get("approximate", "none") == "tanh" else "gelu"], 0.0, 0.0
    if node.op in ("hardswish", "silu", "sigmoid"):
        return ACT + ACT_CODES[node.op], 0.0, 0.0
    return None


def _fusable(node: Node, out_type: TensorType | None = None) -> bool:
    if node.op not in BINARY and node.op not in ("glow.add",) and _unary_code(node) is None:
        return False
    if len(node.outputs) != 1 or node.output.type.dtype != "f32":
        return False
    if any(v.type.dtype != "f32" or v.type.rank > node.output.type.rank for v in node.inputs):
        return False
    return out_type is None or node.output.type == out_type


class _Program:
    """The register program of one chain being built."""

    def __init__(self) -> None:
        self.code: list[int] = []
        self.params: list[float] = []
        self.inputs: list = []  # external values, in LOAD order
        self.reg_of: dict[Value, int] = {}  # value -> register holding it
        self.regs = 0

    def _emit(self, op: int, a: int, b: int, p0: float = 0.0, p1: float = 0.0) -> int:
        dst = self.regs
        self.regs += 1
        self.code += [op, dst, a, b]
        self.params += [p0, p1]
        return dst

    def operand(self, value) -> int:
        reg = self.reg_of.get(value)
        if reg is None:
            self.inputs.append(value)
            reg = self.reg_of[value] = self._emit(BINARY["load"], len(self.inputs) - 1, 0)
        return reg

    def add(self, node: Node) -> None:
        if node.op in BINARY or node.op == "glow.add":
            a, b = (self.operand(v) for v in node.inputs)
            reg = self._emit(BINARY["add" if node.op == "glow.add" else node.op], a, b)
            act = node.attrs.get("act", "none")
            if act != "none":
                code = ACT + ACT_CODES[act]
                lo, hi = node.attrs.get("act_min", float("-inf")), node.attrs.get("act_max", float("inf"))
                reg = self._emit(code, reg, 0, float(lo), float(hi))
        else:
            op, p0, p1 = _unary_code(node)
            reg = self._emit(op, self.operand(node.inputs[0]), 0, p0, p1)
        self.reg_of[node.output] = reg

    def external(self, node: Node) -> set[Value]:
        """The values ``node`` would add as new inputs."""
        return {v for v in node.inputs if v not in self.reg_of}


def fuse_elementwise_chains(graph: Graph) -> bool:
    """Replace every run of two or more fusable element-wise nodes by one ``glow.chain``."""
    changed = False
    index = 0
    while index < len(graph.nodes):
        node = graph.nodes[index]
        if not _fusable(node):
            index += 1
            continue
        users = graph.users()
        chain, program = [node], _Program()
        program.add(node)
        out_type = node.output.type
        while len(program.code) // 4 < MAX_LENGTH:
            nxt = single_user(graph, chain[-1].output, users)
            if nxt is None or not _fusable(nxt, out_type):
                break
            if len(program.inputs) + len(program.external(nxt)) > MAX_INPUTS:
                break
            program.add(nxt)
            chain.append(nxt)
        if (len(chain) < 2 and node.op not in SINGLE) or len(program.inputs) > MAX_INPUTS:
            index += 1
            continue
        last = chain[-1]
        fused = Node("glow.chain", list(program.inputs), list(last.outputs),
                     {"code": tuple(program.code), "params": tuple(program.params),
                      "ops": ",".join(n.op for n in chain)},
                     last.debug_handle, last.scope, last.source)
        at = graph.nodes.index(last)
        graph.nodes[at] = fused
        for n in chain[:-1]:
            graph.nodes.remove(n)
        changed = True
        index = graph.nodes.index(fused) + 1
    return changed
