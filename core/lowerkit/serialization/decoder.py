"""The decoder: protobuf messages of ``lowerkit.proto`` back to lowerkit objects.

Decoding (``*_from_proto``; the encoder is :mod:`.encoder`) trusts nothing in the message: every check that fails raises
:class:`~lowerkit.errors.FormatError` naming where in the file it was, and allocations are
bounded by the size of the message itself (tensor data must match the declared shape
before any array is made).

Lowered modules go through :class:`lowerkit.lowering.lowered.DelegateRecord`: ``lowered.record``
when encoding, ``LoweredModule.from_record(record, fallback=...)`` when decoding (or any
other ``rebuild(record)`` the caller passes, e.g. one that does not compile).
"""

from __future__ import annotations

import hashlib
import json
import math
import warnings
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import BackendUnavailableWarning, FormatError, LowerkitError, VerificationError
from ..ir.graph import Graph
from ..ir.module import GraphMethod, Method, Module, Signature
from ..ir.node import AttrValue, Node, SourceLocation, Value
from ..ir.types import DTYPES, SYMBOL_RE, TensorType
from ..ir.verify import verify_module
from . import lowerkit_pb2 as pb
from .encoder import canonical_json

if TYPE_CHECKING:  # pragma: no cover
    from ..lowering.lowered import DelegateRecord, LoweredModule
    from ..lowering.partitioned import PartitionedModule

__all__ = [
    "MAX_ELEMENTS",
    "MAX_RANK",
    "Rebuild",
    "default_rebuild",
    "file_from_proto",
    "module_from_proto",
    "partitioned_from_proto",
    "record_from_proto",
]

# Makes a lowered module (or a stand-in with the same ``signature(method)``) from a record.
Rebuild = Callable[["DelegateRecord"], Any]

# Bounds on what a type may declare; far above any real model, far below overflow.
MAX_RANK = 32
MAX_ELEMENTS = 2**40


# ----------------------------------------------------------------------------------------
# decoding


def default_rebuild(fallback: str | None = None) -> Rebuild:
    """Rebuild lowered modules with ``LoweredModule.from_record`` (compiles them here)."""
    from ..lowering.lowered import LoweredModule

    from_record = LoweredModule.from_record
    return lambda record: from_record(record, fallback=fallback)


def file_from_proto(msg: pb.File, *, rebuild: Rebuild | None = None) -> Module | LoweredModule:
    """Rebuild the object a ``File`` message holds, verified.

    ``rebuild(record)`` makes each lowered module (default: :func:`default_rebuild`); what it
    raises as a ``LowerkitError`` propagates, anything else becomes ``FormatError``.
    """
    rebuild = rebuild or default_rebuild()
    kind = msg.WhichOneof("content")
    if kind == "module":
        return module_from_proto(msg.module, "module", rebuild=rebuild)
    if kind == "lowered":
        return _lowered_from_proto(msg.lowered, "lowered module", rebuild)
    if kind == "partitioned":
        return partitioned_from_proto(msg.partitioned, "partitioned module", rebuild)
    raise FormatError("the file holds no module (empty or written by a newer lowerkit)")


def module_from_proto(
    msg: pb.Module, where: str, *, rebuild: Rebuild | None = None, verify: bool = True
) -> Module:
    """Rebuild a :class:`Module`; ``where`` names it in error messages.

    ``verify`` runs the IR verifier, which also covers un-lowered submodules, so nested
    modules are built with ``verify=False``.
    """
    where = f"{where} {msg.name!r}"
    parameters: dict[str, np.ndarray] = {}
    for entry in msg.parameters:
        _check_new(entry.name, parameters, f"{where}: parameter")
        parameters[entry.name] = _tensor_from_proto(entry.tensor, f"{where}, parameter {entry.name!r}")
    methods: dict[str, Method] = {}
    for m in msg.methods:
        _check_new(m.name, methods, f"{where}: method")
        if m.WhichOneof("body") != "graph":
            raise FormatError(f"{where}, method {m.name!r}: a module method must be a graph")
        graph = _graph_from_proto(m.graph, f"{where}, method {m.name!r}")
        names = _output_names(m, len(graph.outputs), f"{where}, method {m.name!r}")
        methods[m.name] = GraphMethod(graph, m.returns_tuple, names)
        if methods[m.name].returns_tuple != m.returns_tuple:
            raise FormatError(
                f"{where}, method {m.name!r}: returns {len(graph.outputs)} outputs "
                "but is not marked as returning a tuple"
            )
    submodules: dict[str, Module | LoweredModule] = {}
    for entry in msg.submodules:
        _check_new(entry.name, submodules, f"{where}: submodule")
        sub_where = f"{where}, submodule"
        kind = entry.WhichOneof("kind")
        if kind == "module":
            submodules[entry.name] = module_from_proto(
                entry.module, sub_where, rebuild=rebuild, verify=False
            )
        elif kind == "lowered":
            submodules[entry.name] = _lowered_from_proto(entry.lowered, sub_where, rebuild)
        elif kind == "partitioned":
            submodules[entry.name] = partitioned_from_proto(entry.partitioned, sub_where, rebuild)
        else:
            raise FormatError(f"{sub_where} {entry.name!r} holds no module")
    module = Module(parameters, methods, submodules, name=msg.name)
    if verify:
        _verify(module, where)
    return module


def record_from_proto(
    msg: pb.LoweredModule, where: str = "lowered module", *, rebuild: Rebuild | None = None
) -> DelegateRecord:
    """The :class:`DelegateRecord` a ``LoweredModule`` message holds (checksum verified).

    ``rebuild`` makes the lowered modules nested in the kept original module, if any.
    """
    from ..lowering.lowered import DelegateRecord

    where = f"{where} {msg.name!r} (backend {msg.backend!r})"
    if not msg.backend:
        raise FormatError(f"{where}: no backend name")
    if hashlib.sha256(msg.payload).digest() != msg.payload_sha256:
        raise FormatError(f"{where}: the payload does not match its sha256")
    try:
        spec = json.loads(msg.compile_spec_json)
    except ValueError as err:
        raise FormatError(f"{where}: compile spec is not valid JSON: {err}") from None
    if not isinstance(spec, dict) or not all(isinstance(v, dict) for v in spec.values()):
        raise FormatError(f"{where}: compile spec must map method names to option objects")
    signatures: dict[str, Signature] = {}
    for m in msg.methods:
        _check_new(m.name, signatures, f"{where}: method")
        if m.WhichOneof("body") != "signature":
            raise FormatError(f"{where}, method {m.name!r}: expected a signature")
        sig_where = f"{where}, method {m.name!r}"
        inputs: dict[str, TensorType] = {}
        for v in m.signature.inputs:
            _check_new(v.name, inputs, f"{sig_where}: input")
            inputs[v.name] = _type_from_proto(v.type, f"{sig_where}, input {v.name!r}")
        outputs = tuple(_type_from_proto(t, f"{sig_where}, output") for t in m.signature.outputs)
        if not m.returns_tuple and len(outputs) != 1:
            raise FormatError(
                f"{sig_where}: returns {len(outputs)} outputs but is not marked as a tuple"
            )
        names = _output_names(m, len(outputs), sig_where)
        signatures[m.name] = Signature(tuple(inputs.items()), outputs, m.returns_tuple, names)
    original = None
    if msg.HasField("original"):
        original = module_from_proto(msg.original, f"{where}, original module", rebuild=rebuild)
    return DelegateRecord(
        backend=msg.backend,
        distribution=msg.distribution,
        version=msg.version,
        compile_spec=spec,
        payload=msg.payload,
        signatures=signatures,
        original=original,
        name=msg.name,
        extra=dict(msg.extra),  # order is irrelevant: the encoder writes map entries sorted
        payload_version=msg.payload_version,
    )


def _lowered_from_proto(msg: pb.LoweredModule, where: str, rebuild: Rebuild | None) -> LoweredModule:
    rebuild = rebuild or default_rebuild()
    record = record_from_proto(msg, where, rebuild=rebuild)
    try:
        return rebuild(record)
    except LowerkitError:
        raise  # BackendNotFoundError, BackendNotAvailableError, FormatError from the backend...
    except Exception as err:
        raise FormatError(
            f"{where} {record.name!r}: backend {record.backend!r} "
            f"({record.distribution} {record.version}) could not load its payload: {err}"
        ) from err


def partitioned_from_proto(
    msg: pb.Partitioned, where: str, rebuild: Rebuild | None
) -> PartitionedModule:
    """Rebuild a partitioned module; regions that fall back say so in one warning."""
    from ..lowering.partitioned import PartitionedModule
    from ..partition.report import PartitionReport

    where = f"{where} {msg.outer.name!r}"
    if not msg.backends:
        raise FormatError(f"{where}: no backends listed")
    try:
        spec = json.loads(msg.compile_spec_json)
        report = PartitionReport.from_json(json.loads(msg.report_json))
    except (ValueError, TypeError, KeyError) as err:
        raise FormatError(f"{where}: compile spec or partition report is malformed: {err}") from None
    if not isinstance(spec, dict) or not all(isinstance(v, dict) for v in spec.values()):
        raise FormatError(f"{where}: compile spec must map method names to option objects")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        outer = module_from_proto(msg.outer, where, rebuild=rebuild)
    region_names = {r.name for r in report.regions}
    missing = sorted(region_names - set(outer.submodules))
    if missing:
        raise FormatError(f"{where}: regions {missing} of the report are not in the module")
    partitioned = PartitionedModule(outer, list(msg.backends), spec, report)
    fell_back = sorted(n for n, r in partitioned.regions.items() if getattr(r, "is_fallback", False))
    if fell_back:
        backends = sorted({r.backend for r in report.regions if r.name in fell_back})
        warnings.warn(
            f"backend(s) {backends} missing or unavailable here: region(s) {fell_back} run "
            f"their kept original nodes on the fallback backend instead",
            BackendUnavailableWarning,
            stacklevel=4,
        )
    else:
        for w in caught:  # nothing fell back: pass on what loading said
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    return partitioned


def _check_new(name: str, seen: Iterable[str], what: str) -> None:
    if not name:
        raise FormatError(f"{what} without a name")
    if name in seen:
        raise FormatError(f"{what} {name!r} appears twice")


def _shape_from_proto(dtype: str, shape: Iterable[int], where: str) -> tuple[str, tuple[int, ...]]:
    if dtype not in DTYPES:
        raise FormatError(f"{where}: unknown dtype {dtype!r}; expected one of {sorted(DTYPES)}")
    dims = tuple(shape)
    if len(dims) > MAX_RANK:
        raise FormatError(f"{where}: rank {len(dims)} is above the limit of {MAX_RANK}")
    if any(d < 0 for d in dims):
        raise FormatError(f"{where}: negative dimension in shape {list(dims)}")
    if math.prod(dims) > MAX_ELEMENTS:
        raise FormatError(f"{where}: shape {list(dims)} has more than {MAX_ELEMENTS} elements")
    return dtype, dims


def _type_from_proto(msg: pb.TensorType, where: str) -> TensorType:
    if not msg.symbols:
        return TensorType(*_shape_from_proto(msg.dtype, msg.shape, where))
    symbols, shape = list(msg.symbols), list(msg.shape)
    if len(symbols) != len(shape):
        raise FormatError(f"{where}: {len(symbols)} symbol entries for a shape of rank {len(shape)}")
    static = []
    for name, dim in zip(symbols, shape):
        if name and (dim != -1 or not SYMBOL_RE.match(name)):
            raise FormatError(f"{where}: bad symbolic dim {name!r} (size entry {dim}); expected an identifier with size -1")
        static.append(1 if name else dim)
    dtype, _ = _shape_from_proto(msg.dtype, static, where)
    return TensorType(dtype, tuple(name or dim for name, dim in zip(symbols, shape)))


def _tensor_from_proto(msg: pb.Tensor, where: str) -> np.ndarray:
    dtype, shape = _shape_from_proto(msg.dtype, msg.shape, where)
    np_dtype = DTYPES[dtype]
    expected = math.prod(shape) * np_dtype.itemsize
    data = msg.data
    if len(data) != expected:
        raise FormatError(
            f"{where}: {dtype}{list(shape)} needs {expected} bytes of data, the file has {len(data)}"
        )
    if dtype == "bool":
        if data.strip(b"\x00\x01"):
            raise FormatError(f"{where}: bool data holds bytes other than 0 and 1")
        array = np.frombuffer(data, dtype=np.uint8).astype(np.bool_)
    else:
        array = np.frombuffer(data, dtype=np_dtype.newbyteorder("<")).astype(np_dtype)
    return array.reshape(shape)


def _attr_from_proto(msg: pb.Attr, where: str) -> AttrValue | None:
    kind = msg.WhichOneof("kind")
    if kind is None:
        return None
    if kind == "ints":
        return tuple(msg.ints.values)
    if kind == "floats":
        return tuple(msg.floats.values)
    if kind == "tensor":
        return _tensor_from_proto(msg.tensor, where)
    return getattr(msg, kind)


def _graph_from_proto(msg: pb.Graph, where: str) -> Graph:
    # Linear in the message: one dict lookup per value read, types interned (a chain of a
    # million nodes of one type makes one TensorType), error texts built only on failure.
    from ..opset import has_schema

    graph = Graph()
    values: dict[str, Value] = {}
    types: dict[tuple[str, tuple[int, ...], tuple[str, ...]], TensorType] = {}
    reserve = graph.namespace.reserve

    def type_of(t: pb.TensorType, name: str) -> TensorType:
        key = (t.dtype, tuple(t.shape), tuple(t.symbols))
        found = types.get(key)
        if found is None:
            found = types[key] = _type_from_proto(t, f"{where}, value {name!r}")
        return found

    def bind(v: pb.ValueDef, what: Callable[[], str]) -> Value:
        name = v.name
        if not name or name in values:
            _check_new(name, values, f"{where}: {what()} value")
        value = values[name] = Value(name, type_of(v.type, name))
        reserve(name)
        return value

    def node_where(index: int, n: pb.Node) -> str:
        return f"node {index} ({n.op!r}, debug handle {n.debug_handle})"

    graph.inputs = [bind(v, lambda: "input") for v in msg.inputs]
    append = graph.nodes.append
    for index, n in enumerate(msg.nodes):
        op = n.op
        if not has_schema(op):
            raise FormatError(f"{where}, {node_where(index, n)}: unknown op {op!r}")
        inputs = []
        for name in n.inputs:
            value = values.get(name)
            if value is None:
                raise FormatError(
                    f"{where}: {node_where(index, n)} reads %{name}, which no earlier input or node defines"
                )
            inputs.append(value)
        outputs = [bind(v, lambda: node_where(index, n) + " output") for v in n.outputs]
        attrs: dict[str, AttrValue] = {}
        for a in n.attrs:
            if not a.name or a.name in attrs:
                _check_new(a.name, attrs, f"{where}, {node_where(index, n)}: attribute")
            attr_where = f"{where}, {node_where(index, n)}, attribute {a.name!r}"
            attrs[a.name] = _attr_from_proto(a.value, attr_where)  # type: ignore[assignment]
        source = SourceLocation(n.source.file, n.source.line) if n.HasField("source") else None
        append(Node(op, inputs, outputs, attrs, n.debug_handle, n.scope, source))
    outputs = []
    for name in msg.outputs:
        value = values.get(name)
        if value is None:
            raise FormatError(f"{where}: graph output reads %{name}, which no earlier input or node defines")
        outputs.append(value)
    graph.outputs = outputs
    return graph


def _verify(module: Module, where: str) -> None:
    try:
        verify_module(module)
    except VerificationError as err:
        raise FormatError(f"{where} does not verify: {err}") from err


def _output_names(m: pb.Method, count: int, where: str) -> tuple[str, ...]:
    """A method's output names: none (files before the field), or one distinct name each."""
    names = tuple(m.output_names)
    if not names:
        return ()
    if len(names) != count or len(set(names)) != len(names) or not all(names):
        raise FormatError(
            f"{where}: {len(names)} output names {list(names)[:8]} for {count} outputs; "
            "expected one distinct non-empty name per output"
        )
    return names
