"""Checking one op application against its schema, for backends that decode their own payloads.

A backend that stores its own form of a graph (instructions over buffers, say) must not
trust the geometry, shapes or attributes it reads back: :func:`check_op_types` re-runs the
op's type inference on the stored input types and attributes and compares the result with
the stored output types. The attributes it returns are the normalized ones (defaults
filled, types coerced), so a kernel bound with them sees exactly what was checked.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ..ir.node import AttrValue
from ..ir.types import TensorType
from .registry import ShapeError, get_schema, has_schema

__all__ = ["check_op_types"]


def check_op_types(
    op: str,
    inputs: Sequence[TensorType],
    attrs: Mapping[str, object],
    outputs: Sequence[TensorType],
    *,
    shapes_only: bool = False,
) -> dict[str, AttrValue]:
    """Raise :class:`ShapeError` unless ``op`` with ``attrs`` maps ``inputs`` to ``outputs``.

    Only the schema's own attributes are read (the caller checks any others); unknown ops,
    wrong arity, attribute types, out-of-range geometry (see ``MAX_WINDOW``) and output types
    that differ from the inferred ones are all refused. ``shapes_only`` infers on float32
    stand-ins of the inputs and compares shapes only (for quantized forms of float ops).
    Returns the normalized schema attributes.
    """
    if not has_schema(op):
        raise ShapeError(f"{op}: unknown op")
    schema = get_schema(op)
    count = len(inputs)
    most = schema.max_inputs
    if count < schema.min_inputs or (most is not None and count > most):
        expected = f"{schema.min_inputs}" + ("+" if most is None else f"..{most}")
        raise ShapeError(f"{op}: takes {expected} inputs, got {count}")
    if schema.num_outputs is not None and len(outputs) != schema.num_outputs:
        raise ShapeError(f"{op}: has {schema.num_outputs} output(s), got {len(outputs)}")
    known = {a.name for a in schema.attrs}
    try:
        normalized = schema.normalize_attrs({k: v for k, v in attrs.items() if k in known})
    except TypeError as err:
        raise ShapeError(f"{op}: {err}") from None
    types = [TensorType("f32", t.shape) for t in inputs] if shapes_only else list(inputs)
    try:
        inferred = list(schema.infer(types, dict(normalized)))
    except ShapeError:
        raise
    except Exception as err:  # inference meeting values it did not expect
        raise ShapeError(f"{op}: type inference failed: {type(err).__name__}: {err}") from None
    if len(inferred) != len(outputs):
        raise ShapeError(f"{op}: infers {len(inferred)} output(s), {len(outputs)} given")
    for i, (want, got) in enumerate(zip(inferred, outputs)):
        same = want.shape == got.shape if shapes_only else want == got
        if not same:
            raise ShapeError(f"{op}: output {i} is {got}, but the inputs and attributes give {want}")
    return normalized
