"""Validation of one decoded instruction: geometry, shapes, arity and every attribute.

Ops of the core registry (and glow's fused forms of them) are checked with
:func:`lowerkit.opset.check_op_types`, which re-runs type inference on the instruction's
buffer types (so a stride, dilation, padding, group count or kernel size that does not
match the stored output shape is refused, and so is an absurd one such as a stride of 1e9).
glow's own attributes (fused activation, algorithm, quantization parameters) are checked
here. The attributes returned replace the stored ones: kernels bind exactly what was
checked. Every failure raises ``ShapeError``; the codec turns it into ``FormatError``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from lowerkit.ir import TensorType
from lowerkit.opset import ShapeError, check_op_types

__all__ = ["check_instruction"]

# glow op -> (core op whose inference checks it, number of leading inputs that op takes,
# shapes only: True for quantized forms whose dtypes differ from the float op's)
_FORMS: dict[str, tuple[str, int, bool]] = {
    "glow.conv2d": ("conv2d", 3, False),
    "glow.gated_conv2d": ("conv2d", 3, False),
    "glow.add": ("add", 2, False),
    "glow.fc": ("matmul", 2, False),
    "glow.qconv2d": ("conv2d", 3, True),
    "glow.qfc": ("matmul", 2, True),
    "glow.qadd": ("add", 2, True),
}
_SAME_SHAPE = ("glow.copy", "glow.quantize", "glow.dequantize")
_ACT = ("act", "act_min", "act_max", "act_alpha", "act_beta")
_FLOAT_EXTRAS = {"act_min", "act_max", "act_alpha", "act_beta", "x_scale", "out_scale", "a_scale", "b_scale", "scale"}
_INT_EXTRAS = {"x_zp", "out_zp", "a_zp", "b_zp", "zp", "qmin", "qmax"}
# Attributes beyond the core op's each instruction kind may carry.
_EXTRAS: dict[str, tuple[str, ...]] = {
    "conv2d": _ACT + ("algo",),
    "glow.conv2d": _ACT + ("algo", "residual"),
    "glow.gated_conv2d": _ACT + ("residual",),
    "glow.depthwise_mean": _ACT,
    "glow.fc": _ACT + ("residual",),
    "glow.add": _ACT,
    "glow.qconv2d": ("x_zp", "out_zp", "qmin", "qmax", "x_scale", "out_scale"),
    "glow.qfc": ("x_zp", "out_zp", "qmin", "qmax", "x_scale", "out_scale"),
    "glow.qadd": ("a_scale", "a_zp", "b_scale", "b_zp", "out_scale", "out_zp", "qmin", "qmax"),
    "glow.quantize": ("scale", "zp"),
    "glow.dequantize": ("scale", "zp"),
}
_QUANT_INPUTS = {"glow.qconv2d": 4, "glow.qfc": 4}


def check_instruction(
    op: str, inputs: Sequence[TensorType], attrs: Mapping[str, object], outputs: Sequence[TensorType]
) -> dict:
    """The instruction's attributes, normalized, or ``ShapeError`` naming what is wrong."""
    if op == "glow.chain":
        from .validate_chain import check_chain

        return check_chain(inputs, attrs, outputs)
    if op == "glow.packed_attention":
        return _check_packed_attention(inputs, attrs, outputs)
    if op == "glow.gather_rows":
        return _check_gather_rows(inputs, attrs, outputs)
    extras = _check_extras(op, attrs)
    if op == "glow.depthwise_mean":
        return {**_check_depthwise_mean(inputs, attrs, outputs), **extras}
    if op in _SAME_SHAPE:
        if len(inputs) != 1 or len(outputs) != 1:
            raise ShapeError(f"{op}: takes 1 input and 1 output, got {len(inputs)} and {len(outputs)}")
        if math.prod(inputs[0].shape) != math.prod(outputs[0].shape):
            raise ShapeError(f"{op}: output {outputs[0]} does not hold input {inputs[0]}")
        return extras
    # Quantized programs run some float ops (pooling, reshapes) on uint8 data: shapes only.
    quantized = any(t.dtype in ("u8", "i8") for t in inputs)
    core, leading, shapes_only = _FORMS.get(op, (op, len(inputs), quantized))
    expected = _QUANT_INPUTS.get(op)
    if expected is not None and len(inputs) != expected:
        raise ShapeError(f"{op}: takes {expected} inputs, got {len(inputs)}")
    checked = check_op_types(core, inputs[:leading], attrs, outputs, shapes_only=shapes_only)
    fc_residual = op == "glow.fc" and (extras.get("residual") or len(inputs) > 3)
    if op in ("glow.fc", "glow.qfc", "glow.qconv2d"):
        _check_channel_vectors(op, inputs[:3] if fc_residual else inputs, outputs)
    if fc_residual:
        _check_residual(op, ("x", "w", "bias"), inputs, extras, outputs)
    elif op == "glow.fc" and len(inputs) not in (2, 3):
        raise ShapeError(f"{op}: takes 2 or 3 inputs, got {len(inputs)}")
    if op == "glow.gated_conv2d":
        if extras.get("residual") or len(inputs) > 4:
            _check_residual(op, ("x", "w", "bias", "gate"), inputs, extras, outputs)
        _check_gated(inputs[:4], checked)
    if op == "glow.conv2d" and (extras.get("residual") or len(inputs) > 3):
        _check_residual(op, ("x", "w", "bias"), inputs, extras, outputs)
    if extras.get("algo") == "winograd":
        from ..kernels.winograd import applicable

        if not applicable(inputs[1].shape, checked):
            raise ShapeError(f"{op}: algo 'winograd' needs a 3x3, stride-1, undilated, dense convolution")
    return {**checked, **extras}


def _check_depthwise_mean(inputs: Sequence[TensorType], attrs: Mapping[str, object],
                          outputs: Sequence[TensorType]) -> dict:
    """``glow.depthwise_mean(x, w[, bias])``: a float depthwise convolution (one input channel
    per group, as many outputs as inputs) and, second, its planes' means [N, C, 1, 1]."""
    if len(outputs) != 2:
        raise ShapeError(f"glow.depthwise_mean: has 2 outputs (the map and its means), got {len(outputs)}")
    checked = check_op_types("conv2d", inputs, attrs, outputs[:1])
    x, w, out = inputs[0], inputs[1], outputs[0]
    if x.dtype != "f32" or w.shape[1] != 1 or int(checked.get("groups", 1)) != x.shape[1] or w.shape[0] != x.shape[1]:
        raise ShapeError(f"glow.depthwise_mean: must be a float depthwise convolution, got x {x}, w {w}, "
                         f"groups {checked.get('groups', 1)}")
    expected = TensorType("f32", (out.shape[0], out.shape[1], 1, 1))
    if outputs[1] != expected:
        raise ShapeError(f"glow.depthwise_mean: the means must be {expected}, got {outputs[1]}")
    return checked


def _check_packed_attention(inputs: Sequence[TensorType], attrs: Mapping[str, object],
                            outputs: Sequence[TensorType]) -> dict:
    """``glow.packed_attention(qkv[, mask])``: ``qkv`` f32 [B, L, 3, H, E] -> f32 [B, L, H, E],
    a mask (f32 or bool) broadcasting to the scores [B, H, L, L], and a positive finite
    ``scale`` (nothing else)."""
    op = "glow.packed_attention"
    if len(inputs) not in (1, 2) or len(outputs) != 1:
        raise ShapeError(f"{op}: takes 1 or 2 inputs (qkv, mask) and 1 output, got {len(inputs)} and {len(outputs)}")
    qkv, out = inputs[0], outputs[0]
    if qkv.dtype != "f32" or len(qkv.shape) != 5 or qkv.shape[2] != 3:
        raise ShapeError(f"{op}: qkv must be f32 [B, L, 3, H, E], got {qkv}")
    b, length, _, heads, depth = qkv.shape
    if out != TensorType("f32", (b, length, heads, depth)):
        raise ShapeError(f"{op}: output must be f32 [{b}, {length}, {heads}, {depth}], got {out}")
    if len(inputs) == 2:
        mask, scores = inputs[1], (b, heads, length, length)
        if mask.dtype not in ("f32", "bool") or len(mask.shape) > 4 or any(
                m not in (1, s) for m, s in zip(mask.shape[::-1], scores[::-1])):
            raise ShapeError(f"{op}: mask must be f32 or bool and broadcast to the scores {list(scores)}, got {mask}")
    if set(attrs) != {"scale"}:
        raise ShapeError(f"{op}: takes the attribute 'scale' only, got {sorted(attrs)}")
    scale = attrs["scale"]
    if isinstance(scale, bool) or not isinstance(scale, (int, float)) or not 0 < scale < math.inf:
        raise ShapeError(f"{op}: scale must be positive and finite, got {scale!r}")
    return {"scale": float(scale)}


def _check_gather_rows(inputs: Sequence[TensorType], attrs: Mapping[str, object],
                       outputs: Sequence[TensorType]) -> dict:
    """``glow.gather_rows(x, rows)``: ``rows`` i32 [R] (their values are checked when the
    kernel binds them), the output R rows of ``x``'s last dimension, of its dtype; no
    attributes."""
    op = "glow.gather_rows"
    if len(inputs) != 2 or len(outputs) != 1:
        raise ShapeError(f"{op}: takes 2 inputs (x, rows) and 1 output, got {len(inputs)} and {len(outputs)}")
    (x, rows), out = inputs, outputs[0]
    if rows.dtype != "i32" or len(rows.shape) != 1:
        raise ShapeError(f"{op}: rows must be i32 [R], got {rows}")
    if not x.shape or not out.shape or out.dtype != x.dtype or out.shape[-1] != x.shape[-1] \
            or math.prod(out.shape[:-1]) != rows.shape[0]:
        raise ShapeError(f"{op}: output must be {rows.shape[0]} rows of {x}'s last dimension, got {out}")
    if attrs:
        raise ShapeError(f"{op}: takes no attributes, got {sorted(attrs)}")
    return {}


def _check_gated(inputs: Sequence[TensorType], attrs: Mapping[str, object]) -> None:
    """``glow.gated_conv2d(x, w, bias, gate)`` (a fused residual add's operand, checked apart,
    comes fifth): a biased 1x1, stride-1, unpadded, ungrouped float convolution whose gate
    holds one value per image and input channel."""
    if len(inputs) != 4:
        raise ShapeError(f"glow.gated_conv2d: takes 4 inputs (x, w, bias, gate), got {len(inputs)}")
    x, w, _, gate = inputs
    if tuple(w.shape[2:]) != (1, 1) or int(attrs.get("groups", 1)) != 1 or any(attrs.get("padding", ())) \
            or tuple(attrs.get("stride", (1, 1))) != (1, 1) or tuple(attrs.get("dilation", (1, 1))) != (1, 1):
        raise ShapeError("glow.gated_conv2d: must be a 1x1, stride-1, unpadded, undilated, ungrouped convolution")
    if x.dtype != "f32" or gate.dtype != "f32" or tuple(gate.shape) != (x.shape[0], x.shape[1], 1, 1):
        raise ShapeError(f"glow.gated_conv2d: gate must be f32 [{x.shape[0]}, {x.shape[1]}, 1, 1], got {gate}")


def _check_residual(op: str, operands: tuple[str, ...], inputs: Sequence[TensorType], attrs: Mapping[str, object],
                    outputs: Sequence[TensorType]) -> None:
    """``op(*operands, residual)`` with ``residual=True``: the fused residual add's operand
    comes last and is shaped and typed like the output."""
    arity = len(operands) + 1
    if attrs.get("residual") is not True or len(inputs) != arity:
        raise ShapeError(f"{op}: a fused residual add takes {arity} inputs ({', '.join(operands)}, residual) and "
                         f"residual=True, got {len(inputs)} inputs and residual={attrs.get('residual')!r}")
    if inputs[-1] != outputs[0]:
        raise ShapeError(f"{op}: residual must be the output's type {outputs[0]}, got {inputs[-1]}")


def _check_channel_vectors(op: str, inputs: Sequence[TensorType], outputs: Sequence[TensorType]) -> None:
    # Bias (and the requantization multiplier) hold one value per output channel.
    channels = outputs[0].shape[1] if op == "glow.qconv2d" else outputs[0].shape[-1]
    for position in range(2, len(inputs)):
        if math.prod(inputs[position].shape) != channels:
            raise ShapeError(
                f"{op}: input {position} must hold one value per output channel ({channels}), "
                f"got {inputs[position]}"
            )


def _check_extras(op: str, attrs: Mapping[str, object]) -> dict:
    allowed = _EXTRAS.get(op, ())
    result: dict = {}
    for name, value in attrs.items():
        if name not in allowed:
            continue
        if name == "act":
            from lowerkit.backend.cpu.jit.activation import NAMES

            if value not in NAMES:
                raise ShapeError(f"{op}: act must be one of {sorted(NAMES)}, got {value!r}")
        elif name == "algo":
            if value not in ("winograd", "im2col"):
                raise ShapeError(f"{op}: algo must be 'winograd' or 'im2col', got {value!r}")
        elif name == "residual":
            if value is not True:
                raise ShapeError(f"{op}: residual must be true, got {value!r}")
        elif name in _FLOAT_EXTRAS:
            if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
                raise ShapeError(f"{op}: {name} must be a number, got {value!r}")
            if name.endswith("scale") and not (0 < value < math.inf):
                raise ShapeError(f"{op}: {name} must be positive and finite, got {value!r}")
            value = float(value)
        elif name in _INT_EXTRAS:
            if isinstance(value, bool) or not isinstance(value, int) or not -(2**31) <= value < 2**31:
                raise ShapeError(f"{op}: {name} must be a 32-bit integer, got {value!r}")
        result[name] = value
    if result.get("act") == "clip" and not {"act_min", "act_max"} <= set(result):
        raise ShapeError(f"{op}: act 'clip' needs act_min and act_max")
    for name in _EXTRAS.get(op, ()):
        if name not in result and name not in _ACT + ("algo", "residual"):
            raise ShapeError(f"{op}: needs attribute {name!r}")
    return result
