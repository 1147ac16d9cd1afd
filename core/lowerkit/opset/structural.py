"""Structural ops: reading parameters, literal constants and calls to other methods.

Their output types cannot be inferred from input types alone, so the node's own output
types are trusted here and checked against the module by the verifier.
"""

from __future__ import annotations

from ..ir.types import TensorType, dtype_name
from .registry import AttrSpec, OpSchema, ShapeError, register


def _no_inference(types, attrs):  # the verifier checks these against the module
    raise ShapeError("output types of structural ops come from the module, not inference")


def _constant(types, attrs):
    value = attrs["value"]
    try:
        return [TensorType(dtype_name(value.dtype), value.shape)]
    except ValueError as err:
        raise ShapeError(str(err)) from None


register(
    OpSchema(
        "param",
        (),
        _no_inference,
        attrs=(AttrSpec("name", "str", doc="qualified parameter name, e.g. conv1.weight"),),
        doc="Reads the module parameter `name`.",
    )
)
register(
    OpSchema(
        "constant",
        (),
        _constant,
        attrs=(AttrSpec("value", "tensor", doc="the literal tensor"),),
        doc="A literal tensor stored in the graph.",
    )
)
register(
    OpSchema(
        "call",
        ("args",),
        _no_inference,
        attrs=(
            AttrSpec("method", "str", doc="method to call"),
            AttrSpec("module", "str", "", doc="submodule name; empty for this module"),
        ),
        variadic=True,
        num_outputs=None,
        doc="Calls `method` of this module, or of submodule `module`; as many outputs as it returns.",
    )
)

STRUCTURAL_OPS = frozenset({"param", "constant", "call"})
