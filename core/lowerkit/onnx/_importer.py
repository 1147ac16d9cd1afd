"""ONNX model -> lowerkit Module: read, check, fix input shapes, convert node by node.

Each ONNX node is converted by the importer registered for its op type
(:mod:`._import_ops`), which receives an :class:`ImportContext` to read its inputs and
attributes and to emit lowerkit nodes. Initializers and ``Constant`` outputs stay known
tensors until a node needs them as values: then an initializer becomes a ``param`` node (a
module parameter) and a constant a ``constant`` node. Importers that need a compile-time
tensor (``Reshape``'s shape, ``Clip``'s bounds) read it with
:meth:`ImportContext.constant_input` instead.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import FormatError, InputError, UnsupportedOperatorError, VerificationError
from ..ir import Graph, GraphMethod, Module, Node, TensorType, Value
from ..ir.types import SYMBOL_RE, dtype_name
from ..ir.verify import verify_module
from ..opset import ShapeError, get_schema
from ._deps import require_onnx
from ._registry import IMPORTERS
from ._types import ONNX_TO_DTYPE, onnx_type_name

# Default-domain opsets accepted. 11-21 is the documented range; 22-25 changed only the
# dtypes the imported ops accept, so their models import the same way; older opsets import
# on a best-effort basis (Clip's attribute bounds are handled).
MIN_OPSET = 7
MAX_OPSET = 25
DEFAULT_DOMAINS = ("", "ai.onnx")
_PARAM_INVALID = re.compile(r"[^A-Za-z0-9_.]")


@dataclass(frozen=True, slots=True)
class OnnxImport:
    """An imported model and how its ONNX names map onto the lowerkit module."""

    module: Module
    opset: int
    #: ONNX graph input names, in the order ``forward`` takes them.
    input_names: tuple[str, ...]
    #: ONNX graph output names, in the order ``forward`` returns them.
    output_names: tuple[str, ...]
    #: ONNX initializer name -> lowerkit parameter name (only initializers used as tensors).
    parameter_names: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class _Known:
    """A tensor known at import time: an initializer or a ``Constant`` output."""

    name: str
    array: np.ndarray
    initializer: bool


class ImportContext:
    """The state of one import, handed to every importer function."""

    def __init__(self, opset: int) -> None:
        self.opset = opset
        self.graph = Graph()
        self.parameters: dict[str, np.ndarray] = {}
        self.parameter_names: dict[str, str] = {}
        self._values: dict[str, Value] = {}
        self._known: dict[str, _Known] = {}
        self._materialized: dict[int, Value] = {}  # id(_Known) -> its param/constant value
        self._next_handle = 0
        self.node: Any = None  # the onnx.NodeProto being converted
        self.index = -1
        self.scope = ""

    # -- where we are -------------------------------------------------------------------
    def begin(self, node: Any, index: int) -> None:
        self.node, self.index = node, index
        self.scope = node.name or f"{node.op_type}_{index}"

    def where(self) -> str:
        if self.node is None:
            return "the ONNX graph outputs"
        name = f" {self.node.name!r}" if self.node.name else ""
        return f"ONNX node #{self.index} {self.node.op_type}{name}"

    def unsupported(self, message: str) -> UnsupportedOperatorError:
        """An error for a node whose configuration lowerkit cannot express."""
        return UnsupportedOperatorError(f"{self.where()}: {message}")

    # -- tensors by ONNX name ---------------------------------------------------------------
    def add_known(self, name: str, array: np.ndarray, *, initializer: bool) -> None:
        self._known[name] = _Known(name, array, initializer)

    def bind(self, name: str, value: Value) -> None:
        self._values[name] = value

    def alias(self, name: str, source: str) -> None:
        """Make ONNX name ``name`` denote whatever ``source`` denotes (Identity, Dropout)."""
        if source in self._known:
            self._known[name] = self._known[source]
        if source in self._values:
            self._values[name] = self._values[source]

    def is_known(self, name: str) -> bool:
        return name in self._known

    def is_weight(self, name: str) -> bool:
        """Whether ``name`` is a floating-point initializer (to be kept as a parameter)."""
        known = self._known.get(name)
        return known is not None and known.initializer and known.array.dtype.kind == "f"

    def known_names(self) -> list[str]:
        return list(self._known)

    def known_array(self, name: str) -> np.ndarray:
        """The value of a tensor known at import time (initializer, constant, folded)."""
        return self._known[name].array

    def shape_of(self, name: str) -> tuple[int, ...]:
        """The static shape of ONNX tensor ``name``, without emitting anything."""
        if name in self._known:
            return tuple(self._known[name].array.shape)
        return self.value(name).type.shape

    def value(self, name: str) -> Value:
        """The lowerkit value for ONNX name ``name``, emitting ``param``/``constant`` on first use."""
        if name in self._values:
            return self._values[name]
        known = self._known.get(name)
        if known is None:
            raise FormatError(f"{self.where()} reads {name!r}, which nothing defines before it")
        value = self._materialized.get(id(known))
        if value is None:
            if known.initializer:
                value = self._param(known.name, known.array)
            else:
                value = self.emit("constant", [], {"value": known.array}, hint="const")
            self._materialized[id(known)] = value
        self._values[name] = value
        return value

    def _param(self, onnx_name: str, array: np.ndarray) -> Value:
        base = _PARAM_INVALID.sub("_", onnx_name).strip(".") or "param"
        base = re.sub(r"\.{2,}", ".", base)
        if base[0].isdigit():
            base = "p" + base
        qualified, suffix = base, 1
        while qualified in self.parameters:
            qualified, suffix = f"{base}_{suffix}", suffix + 1
        self.parameters[qualified] = array
        self.parameter_names[onnx_name] = qualified
        hint = qualified.rsplit(".", 1)[-1]
        return self.emit("param", [], {"name": qualified}, hint=hint,
                         output_types=[_tensor_type(array, f"initializer {onnx_name!r}")])

    # -- the current node's inputs and attributes -----------------------------------------
    def has_input(self, i: int) -> bool:
        return i < len(self.node.input) and self.node.input[i] != ""

    def input(self, i: int) -> Value:
        if not self.has_input(i):
            raise FormatError(f"{self.where()} is missing its input {i}")
        return self.value(self.node.input[i])

    def optional_input(self, i: int) -> Value | None:
        return self.input(i) if self.has_input(i) else None

    def inputs(self) -> list[Value]:
        return [self.value(name) for name in self.node.input if name]

    def constant_input(self, i: int, what: str) -> np.ndarray | None:
        """Input ``i`` as a compile-time tensor (``None`` if absent); an error if computed."""
        if not self.has_input(i):
            return None
        name = self.node.input[i]
        known = self._known.get(name)
        if known is None:
            raise self.unsupported(
                f"{what} (input {i}, {name!r}) must be a constant (an initializer or a "
                "Constant output); lowerkit traces one concrete shape and cannot compute it at run time"
            )
        return known.array

    def output_requested(self, i: int) -> bool:
        return i < len(self.node.output) and self.node.output[i] != ""

    def attrs(self) -> dict[str, Any]:
        """The node's attributes as Python values (lists, str, numpy arrays)."""
        onnx = require_onnx()
        result: dict[str, Any] = {}
        for attr in self.node.attribute:
            if attr.ref_attr_name:
                raise self.unsupported(f"attribute {attr.name!r} refers to a function attribute")
            value = onnx.helper.get_attribute_value(attr)
            if isinstance(value, bytes):
                value = value.decode("utf-8")
            elif isinstance(value, onnx.TensorProto):
                value = onnx.numpy_helper.to_array(value)
            elif isinstance(value, list):
                value = [v.decode("utf-8") if isinstance(v, bytes) else v for v in value]
            result[attr.name] = value
        return result

    # -- emitting lowerkit nodes ------------------------------------------------------------
    def emit(
        self,
        op: str,
        inputs: Sequence[Value],
        attrs: Mapping[str, Any] | None = None,
        *,
        hint: str | None = None,
        output_types: Sequence[TensorType] | None = None,
    ) -> Value:
        """Append ``op(inputs, **attrs)``, with output types from the op's schema; its output."""
        return self.emit_node(op, inputs, attrs, hint=hint, output_types=output_types).output

    def emit_node(
        self,
        op: str,
        inputs: Sequence[Value],
        attrs: Mapping[str, Any] | None = None,
        *,
        hint: str | None = None,
        output_types: Sequence[TensorType] | None = None,
    ) -> Node:
        """As :meth:`emit`, returning the node (for ops with several outputs, such as split)."""
        schema = get_schema(op)
        try:
            normalized = schema.normalize_attrs(dict(attrs or {}))
        except TypeError as err:
            raise self.unsupported(f"cannot express it as lowerkit {op}: {err}") from None
        if output_types is None:
            try:
                output_types = schema.infer([v.type for v in inputs], normalized)
            except ShapeError as err:
                raise self.unsupported(f"lowerkit {op} does not accept it: {err}") from None
        node = self.graph.add_node(
            op, inputs, output_types, normalized, output_hints=[hint or op] * len(output_types),
            debug_handle=self._next_handle, scope=self.scope,
        )
        self._next_handle += 1
        return node

    def emit_constant(self, array: np.ndarray, hint: str = "const") -> Value:
        return self.emit("constant", [], {"value": np.asarray(array, order="C")}, hint=hint)  # keeps 0-d


# -- reading and checking the model --------------------------------------------------------------
def read_model(model: Any) -> Any:
    onnx = require_onnx()
    if isinstance(model, onnx.ModelProto):
        proto = model
    elif isinstance(model, (str, os.PathLike)):
        path = os.fspath(model)
        if not os.path.isfile(path):
            raise InputError(f"ONNX model file {path!r} does not exist")
        try:
            proto = onnx.load(path)
        except Exception as err:  # protobuf raises DecodeError, external data OSError, ...
            raise FormatError(f"{path!r} is not a readable ONNX model: {err}") from err
    elif isinstance(model, (bytes, bytearray)):
        try:
            proto = onnx.load_model_from_string(bytes(model))
        except Exception as err:
            raise FormatError(f"the bytes given are not an ONNX model: {err}") from err
    else:
        raise InputError(
            f"expected an ONNX ModelProto, a path or bytes, got {type(model).__name__}"
        )
    try:
        onnx.checker.check_model(proto)
    except Exception as err:  # onnx.checker.ValidationError and C++ checker errors
        raise FormatError(f"invalid ONNX model (onnx.checker): {err}") from err
    return proto


def _default_opset(proto: Any) -> int:
    versions = [o.version for o in proto.opset_import if o.domain in DEFAULT_DOMAINS]
    if not versions:
        raise FormatError("the ONNX model imports no default-domain (ai.onnx) opset")
    opset = versions[0]
    if not MIN_OPSET <= opset <= MAX_OPSET:
        raise UnsupportedOperatorError(
            f"the ONNX model uses opset {opset}; lowerkit imports opsets {MIN_OPSET}-{MAX_OPSET} "
            "(11-21 documented); convert it with onnx.version_converter"
        )
    return opset


def _tensor_type(array: np.ndarray, what: str) -> TensorType:
    try:
        return TensorType(dtype_name(array.dtype), array.shape)
    except ValueError:
        raise UnsupportedOperatorError(f"{what} has dtype {array.dtype}, which lowerkit lacks") from None


# Inputs whose only symbolic dim is the leading one are imported at this batch size, then
# the batch is made free again (lowerkit.passes.free_batch). Unlikely to equal a real dim.
PROBE_BATCH = 13


def _input_types(
    graph_inputs: Sequence[Any], input_shapes: Mapping[str, Sequence[int]] | None,
    free: dict[str, str] | None = None,
) -> list[TensorType]:
    """Concrete types for the graph inputs. A symbolic leading dim (a dynamic batch) is
    imported at ``PROBE_BATCH`` and recorded in ``free`` (input name -> symbol name); any
    other symbolic dim must come from ``input_shapes``."""
    given = dict(input_shapes or {})
    names = [vi.name for vi in graph_inputs]
    unknown = sorted(set(given) - set(names))
    if unknown:
        raise InputError(f"input_shapes names {unknown}, but the model's inputs are {names}")
    types, symbolic = [], []
    for vi in graph_inputs:
        if not vi.type.HasField("tensor_type"):
            raise UnsupportedOperatorError(f"input {vi.name!r} is not a tensor (sequence/map/optional)")
        tt = vi.type.tensor_type
        if tt.elem_type not in ONNX_TO_DTYPE:
            raise UnsupportedOperatorError(
                f"input {vi.name!r} has element type {onnx_type_name(tt.elem_type)}, which lowerkit lacks"
            )
        dims = list(tt.shape.dim) if tt.HasField("shape") else None
        declared = None if dims is None else [d.dim_value if d.HasField("dim_value") else None for d in dims]
        if vi.name in given:
            shape = [int(d) for d in given[vi.name]]
            if declared is not None and (
                len(shape) != len(declared)
                or any(d is not None and d != s for d, s in zip(declared, shape))
            ):
                shown = ["?" if d is None else d for d in declared]
                raise InputError(f"input_shapes[{vi.name!r}] = {shape} does not fit the declared shape {shown}")
        elif declared is None:
            symbolic.append(f"{vi.name!r}: unknown rank")
            continue
        else:
            if free is not None and declared and declared[0] is None and None not in declared[1:]:
                label = dims[0].dim_param
                free[vi.name] = label if SYMBOL_RE.match(label or "") else "N"
                declared = [PROBE_BATCH] + declared[1:]
            for axis, (d, proto_dim) in enumerate(zip(declared, dims)):
                if d is None:
                    label = proto_dim.dim_param or "?"
                    symbolic.append(f"{vi.name!r} dim {axis} ({label})")
            shape = [0 if d is None else d for d in declared]
        types.append(TensorType(ONNX_TO_DTYPE[tt.elem_type], tuple(shape)))
    if symbolic:
        raise InputError(
            "the ONNX model has symbolic input dims, and lowerkit imports one concrete shape: "
            + "; ".join(symbolic)
            + ". Pass input_shapes={name: [d0, d1, ...]} for these inputs"
        )
    return types


def _check_outputs(proto: Any, values: Sequence[Value]) -> None:
    """Compare the declared output types (static dims only) with the ones the import computed."""
    for vi, value in zip(proto.graph.output, values):
        tt = vi.type.tensor_type
        type_ok = not tt.elem_type or ONNX_TO_DTYPE.get(tt.elem_type) == value.type.dtype
        shape_ok = True
        if tt.HasField("shape"):
            dims = [d.dim_value if d.HasField("dim_value") else None for d in tt.shape.dim]
            shape_ok = len(dims) == value.type.rank and all(
                d is None or d == s for d, s in zip(dims, value.type.shape)
            )
        if not (type_ok and shape_ok):
            dims = [d.dim_value if d.HasField("dim_value") else None for d in tt.shape.dim]
            shown = ["?" if d is None else d for d in dims]
            raise VerificationError(
                f"ONNX output {vi.name!r} is declared {onnx_type_name(tt.elem_type)}{shown} but "
                f"the imported graph computes {value.type}"
            )


def import_model(
    model: Any,
    *,
    input_shapes: Mapping[str, Sequence[int]] | None = None,
    constant_inputs: Mapping[str, Any] | None = None,
    name: str | None = None,
) -> OnnxImport:
    """Import an ONNX model; like :func:`lowerkit.onnx.load` but also returns the name maps.

    ``constant_inputs`` fixes the values of some graph inputs: they are no longer inputs of
    ``forward`` but constants of the graph (needed when an input feeds what lowerkit must
    know at import time, such as ``Reshape``'s shape or ``Clip``'s bounds).
    """
    from . import _import_ops  # noqa: F401  (registers the importers)
    from ._folding import FOLD, fold, plan

    onnx = require_onnx()
    proto = read_model(model)
    opset = _default_opset(proto)
    ctx = ImportContext(opset)
    graph = proto.graph
    for init in graph.initializer:
        try:
            array = onnx.numpy_helper.to_array(init)
        except Exception as err:
            raise FormatError(f"initializer {init.name!r} cannot be read: {err}") from err
        _tensor_type(array, f"initializer {init.name!r}")
        ctx.add_known(init.name, array, initializer=True)
    # Inputs that also have an initializer (IR < 4 style) are parameters, not inputs.
    graph_inputs = [vi for vi in graph.input if not ctx.is_known(vi.name)]
    fixed = dict(constant_inputs or {})
    unknown = sorted(set(fixed) - {vi.name for vi in graph_inputs})
    if unknown:
        raise InputError(
            f"constant_inputs names {unknown}, but the model's inputs are {[vi.name for vi in graph_inputs]}"
        )
    for input_name, array in fixed.items():
        array = np.asarray(array)
        _tensor_type(array, f"constant input {input_name!r}")
        ctx.add_known(input_name, array, initializer=False)
    graph_inputs = [vi for vi in graph_inputs if vi.name not in fixed]
    weights = {name for name in ctx.known_names() if ctx.is_weight(name)}
    actions, missing = plan(graph.node, set(ctx.known_names()), weights)
    if missing:
        raise UnsupportedOperatorError(
            f"the ONNX model has {len(missing)} node(s) lowerkit cannot import: "
            + ", ".join(missing)
            + f". Supported ONNX ops: {', '.join(sorted(IMPORTERS))}"
        )
    free: dict[str, str] = {}
    types = _input_types(graph_inputs, input_shapes, free)
    for vi, t in zip(graph_inputs, types):
        ctx.bind(vi.name, ctx.graph.add_input(vi.name, t))
    for index, (node, action) in enumerate(zip(graph.node, actions)):
        ctx.begin(node, index)
        if action == FOLD:
            fold(ctx, node)
            continue
        outputs = IMPORTERS[node.op_type](ctx, node)
        for out_name, value in zip(node.output, outputs):
            if out_name and value is not None:
                ctx.bind(out_name, value)
    ctx.node, ctx.index, ctx.scope = None, len(graph.node), ""
    outputs = [ctx.value(vi.name) for vi in graph.output]
    ctx.graph.set_outputs(outputs)
    _check_outputs(proto, outputs)
    module = Module(
        parameters=ctx.parameters,
        methods={"forward": GraphMethod(
            ctx.graph,
            returns_tuple=len(outputs) != 1,
            output_names=_output_names(graph),
        )},
        name=name or graph.name or "OnnxModel",
    )
    verify_module(module)  # an importer bug must not reach a backend
    if free:
        module = _free_batch(module, free)
    return OnnxImport(
        module=module,
        opset=opset,
        input_names=tuple(vi.name for vi in graph_inputs),
        output_names=tuple(vi.name for vi in graph.output),
        parameter_names=dict(ctx.parameter_names),
    )


def load(
    model: Any,
    *,
    input_shapes: Mapping[str, Sequence[int]] | None = None,
    constant_inputs: Mapping[str, Any] | None = None,
) -> Module:
    """Import an ONNX model (a path, bytes or ``onnx.ModelProto``) as a lowerkit Module.

    The module has one method, ``forward``, taking the ONNX graph inputs (those without an
    initializer) in order and returning its outputs in order. Initializers become module
    parameters. lowerkit graphs have static shapes: a model with symbolic dims (such as a
    dynamic batch) needs ``input_shapes={"x": [1, 3, 224, 224]}`` for those inputs.

    Raises ``FormatError`` for unreadable or invalid models (``onnx.checker``),
    ``UnsupportedOperatorError`` listing every node lowerkit cannot import, and
    ``InputError`` for missing or contradictory ``input_shapes``.
    """
    return import_model(model, input_shapes=input_shapes, constant_inputs=constant_inputs).module


def _free_batch(module: Module, free: dict[str, str]) -> Module:
    """Make the leading dim of the ``free`` inputs symbolic again (one symbol for all)."""
    from ..passes import free_batch

    symbol = next(iter(free.values()))
    try:
        freed = free_batch(module, PROBE_BATCH, {"forward": list(free)}, symbol=symbol)
    except InputError as err:
        raise InputError(
            f"the ONNX model's batch dim ({symbol}) cannot stay symbolic in lowerkit: "
            f"{str(err).replace(str(PROBE_BATCH), symbol)}. Pin it with input_shapes="
            f"{{{next(iter(free))!r}: [1, ...]}}"
        ) from None
    verify_module(freed)
    return freed


def _output_names(graph: Any) -> tuple[str, ...]:
    """The ONNX graph's output names, when every output has a distinct one."""
    names = tuple(vi.name for vi in graph.output)
    return names if all(names) and len(set(names)) == len(names) else ()
