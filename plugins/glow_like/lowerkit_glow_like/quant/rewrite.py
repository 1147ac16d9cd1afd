"""The quantization rewrite: fp32 graph + profile -> graph with uint8 activations.

Convolutions, fully-connected layers and residual adds get integer kernels; max pooling
and reshapes run directly on uint8 (they commute with a monotone affine map). Every other
op stays fp32: ``glow.dequantize`` is inserted before it and ``glow.quantize`` after, only
where a quantized value meets a float consumer or the other way round.
"""

from __future__ import annotations

import numpy as np

from lowerkit.ir import Graph, Node, TensorType, Value
from lowerkit.passes import const_value, eliminate_dead_code, make_constant

from .profile import Profile

QMIN, QMAX = 0, 255
_CONV = ("conv2d", "glow.conv2d")
_ADD = ("add", "glow.add")
_PASSTHROUGH = ("max_pool2d", "reshape", "flatten")


def activation_qparams(lo: float, hi: float) -> tuple[float, int]:
    """Per-tensor asymmetric uint8 parameters covering [lo, hi] and exactly representing 0."""
    lo, hi = min(float(lo), 0.0), max(float(hi), 0.0)
    scale = (hi - lo) / (QMAX - QMIN) if hi > lo else 1.0
    zp = int(np.clip(round(-lo / scale), QMIN, QMAX))
    return float(scale), zp


def weight_qparams(w: np.ndarray, axis: int) -> tuple[np.ndarray, np.ndarray]:
    """Symmetric int8 per-channel along ``axis``: (int8 weights, float64 scales)."""
    w64 = w.astype(np.float64)
    other = tuple(i for i in range(w.ndim) if i != axis)
    amax = np.abs(w64).max(axis=other) if other else np.abs(w64)
    scale = np.where(amax > 0, amax / 127.0, 1.0)
    shape = [1] * w.ndim
    shape[axis] = -1
    q = np.clip(np.rint(w64 / scale.reshape(shape)), -127, 127).astype(np.int8)
    return q, scale


def _act_bounds(attrs: dict, scale: float, zp: int) -> tuple[int, int]:
    act = attrs.get("act", "none")
    lo, hi = QMIN, QMAX
    if act == "relu":
        lo = max(lo, zp)
    elif act == "clip":
        lo = int(max(lo, min(hi, np.floor(attrs["act_min"] / scale + 0.5) + zp))) if np.isfinite(attrs["act_min"]) else lo
        hi = int(min(hi, max(lo, np.floor(attrs["act_max"] / scale + 0.5) + zp))) if np.isfinite(attrs["act_max"]) else hi
    return lo, hi


class _Rewriter:
    def __init__(self, graph: Graph, profile: Profile) -> None:
        self.graph = graph
        self.profile = profile
        self.producers = graph.producers()
        self.qparams: dict[Value, tuple[float, int]] = {}  # uint8 value -> (scale, zp)
        self.quantized: dict[Value, Value] = {}  # float value -> its uint8 twin
        self.float_missing: set[Value] = set()  # float values only their uint8 twin holds
        self.out: list[Node] = []

    # -- conversions ----------------------------------------------------------------------
    def _emit(self, op, inputs, out_type, attrs, hint, like: Node, value: Value | None = None) -> Value:
        if value is None:
            value = Value(self.graph.namespace.create(hint), out_type)
        self.out.append(Node(op, list(inputs), [value], attrs, like.debug_handle, like.scope, like.source))
        return value

    def as_uint8(self, v: Value, like: Node) -> Value:
        if v in self.quantized:
            return self.quantized[v]
        scale, zp = activation_qparams(*self.profile.range_of(v.name))
        q = self._emit("glow.quantize", [v], TensorType("u8", v.type.shape), {"scale": scale, "zp": zp},
                       f"{v.name}_q", like)
        self.qparams[q] = (scale, zp)
        self.quantized[v] = q
        return q

    def ensure_float(self, v: Value, like: Node) -> None:
        if v in self.float_missing:
            q = self.quantized[v]
            scale, zp = self.qparams[q]
            self._emit("glow.dequantize", [q], v.type, {"scale": scale, "zp": zp}, v.name, like, value=v)
            self.float_missing.discard(v)

    def _new_output(self, node: Node, scale: float, zp: int) -> Value:
        v = node.output
        q = Value(self.graph.namespace.create(f"{v.name}_q"), TensorType("u8", v.type.shape))
        self.qparams[q] = (scale, zp)
        self.quantized[v] = q
        self.float_missing.add(v)
        return q

    def _const(self, array: np.ndarray, hint: str, like: Node) -> Value:
        before = len(self.graph.nodes)
        v = make_constant(self.graph, array, hint, before, like)
        self.out.append(self.graph.nodes.pop())
        return v

    # -- per op ---------------------------------------------------------------------------
    def rewrite(self, node: Node) -> bool:
        if node.attrs.get("act", "none") not in ("none", "relu", "clip"):
            return False  # a fused hardswish/silu/gelu has no integer form here: stays fp32
        if node.op in _CONV or node.op == "glow.fc":
            return self._matmul_like(node)
        if node.op in _ADD and all(v.type == node.output.type for v in node.inputs):
            return self._add(node)
        if node.op in _PASSTHROUGH and node.inputs[0] in self.quantized:
            q_in = self.quantized[node.inputs[0]]
            scale, zp = self.qparams[q_in]
            q = self._new_output(node, scale, zp)
            self.out.append(Node(node.op, [q_in], [q], dict(node.attrs), node.debug_handle, node.scope, node.source))
            return True
        return False

    def _matmul_like(self, node: Node) -> bool:
        weight = const_value(self.producers.get(node.inputs[1]))
        bias = const_value(self.producers.get(node.inputs[2])) if len(node.inputs) > 2 else None
        if weight is None or (len(node.inputs) > 2 and bias is None) or weight.dtype != np.float32:
            return False
        is_conv = node.op in _CONV
        wq, w_scale = weight_qparams(weight, axis=0 if is_conv else 1)
        x = node.inputs[0]
        q_x = self.as_uint8(x, node)
        x_scale, x_zp = self.qparams[q_x]
        out_scale, out_zp = activation_qparams(*self.profile.range_of(node.output.name))
        b = np.zeros(w_scale.shape) if bias is None else bias.astype(np.float64)
        bq = np.clip(np.rint(b / (x_scale * w_scale)), -(2**31), 2**31 - 1).astype(np.int32)
        mult = x_scale * w_scale / out_scale
        qmin, qmax = _act_bounds(node.attrs, out_scale, out_zp)
        name = node.output.name
        ins = [q_x, self._const(wq, f"{name}_wq", node), self._const(bq, f"{name}_bq", node),
               self._const(mult, f"{name}_mult", node)]
        geometry = {k: node.attrs[k] for k in ("stride", "padding", "dilation", "groups") if k in node.attrs}
        attrs = {**geometry, "x_zp": x_zp, "out_zp": out_zp, "qmin": qmin, "qmax": qmax,
                 "x_scale": x_scale, "out_scale": out_scale}
        q = self._new_output(node, out_scale, out_zp)
        op = "glow.qconv2d" if is_conv else "glow.qfc"
        self.out.append(Node(op, ins, [q], attrs, node.debug_handle, node.scope, node.source))
        return True

    def _add(self, node: Node) -> bool:
        qa, qb = (self.as_uint8(v, node) for v in node.inputs)
        (a_s, a_zp), (b_s, b_zp) = self.qparams[qa], self.qparams[qb]
        out_scale, out_zp = activation_qparams(*self.profile.range_of(node.output.name))
        qmin, qmax = _act_bounds(node.attrs, out_scale, out_zp)
        attrs = {"a_scale": a_s, "a_zp": a_zp, "b_scale": b_s, "b_zp": b_zp, "out_scale": out_scale,
                 "out_zp": out_zp, "qmin": qmin, "qmax": qmax}
        q = self._new_output(node, out_scale, out_zp)
        self.out.append(Node("glow.qadd", [qa, qb], [q], attrs, node.debug_handle, node.scope, node.source))
        return True

    def run(self) -> None:
        for node in list(self.graph.nodes):
            if node.op != "constant" and self.rewrite(node):
                continue
            for v in node.inputs:
                self.ensure_float(v, node)
            self.out.append(node)
        last = self.out[-1] if self.out else None
        for v in self.graph.outputs:
            if last is not None:
                self.ensure_float(v, last)
        self.graph.nodes = self.out


def quantize_graph(graph: Graph, profile: Profile) -> bool:
    """Rewrite ``graph`` in place to run convs, fcs and adds in int8; True if anything changed."""
    before = [n.op for n in graph.nodes]
    _Rewriter(graph, profile).run()
    eliminate_dead_code(graph)
    return [n.op for n in graph.nodes] != before
