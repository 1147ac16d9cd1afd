"""Encoding: lowerkit objects to the protobuf messages of ``lowerkit.proto``.

Every ``*_to_proto`` raises :class:`~lowerkit.errors.InputError` for objects the format
cannot hold; a module is verified before it is encoded, so a file that would not load is
never written. Decoding is :mod:`lowerkit.serialization.decoder`.
"""

from __future__ import annotations

import hashlib
import json
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import InputError, LowerkitError
from ..ir.graph import Graph
from ..ir.module import GraphMethod, Module, trace_hint
from ..ir.node import AttrValue
from ..ir.types import TensorType, dtype_name
from ..ir.verify import verify_module
from . import lowerkit_pb2 as pb

if TYPE_CHECKING:  # pragma: no cover
    from ..lowering.lowered import DelegateRecord
    from ..lowering.partitioned import PartitionedModule

__all__ = ["canonical_json", "file_to_proto", "module_to_proto", "partitioned_to_proto", "record_to_proto"]


def file_to_proto(obj: object) -> pb.File:
    """The ``File`` message holding a :class:`Module` or a ``LoweredModule``.

    A module is verified first (``VerificationError``): a file that would not load is
    never written.
    """
    from ..lowering.lowered import LoweredModule

    from ..lowering.partitioned import PartitionedModule

    msg = pb.File()
    if isinstance(obj, Module):
        _verify_before_saving(obj)
        _encoding(module_to_proto, obj, msg.module)
    elif isinstance(obj, PartitionedModule):
        _encoding(partitioned_to_proto, obj, msg.partitioned)
    elif isinstance(obj, LoweredModule):
        _encoding(record_to_proto, obj.record, msg.lowered)
    else:
        raise InputError(
            "can only save a lowerkit.Module or lowerkit.LoweredModule, "
            f"got {type(obj).__name__}{trace_hint(obj)}"
        )
    return msg


def _encoding(encode: Any, obj: Any, msg: Any) -> None:
    # protobuf's setters refuse what the schema cannot hold (an int above 2**63, a str
    # with lone surrogates) with bare ValueError/TypeError: name the object instead.
    try:
        encode(obj, msg)
    except LowerkitError:
        raise
    except (ValueError, TypeError, OverflowError) as err:
        raise InputError(f"{getattr(obj, 'name', obj)!s} cannot be saved: {err}") from err


def module_to_proto(module: Module, msg: pb.Module) -> pb.Module:
    from ..lowering.lowered import LoweredModule
    from ..lowering.partitioned import PartitionedModule

    msg.name = module.name
    for name, array in module.parameters.items():
        entry = msg.parameters.add(name=name)
        _tensor_to_proto(array, entry.tensor, f"{module.name}, parameter {name!r}")
    for name, method in module.methods.items():
        if not isinstance(method, GraphMethod):
            raise InputError(
                f"{module.name}, method {name!r}: only graph methods can be saved in a Module, "
                f"got {type(method).__name__}"
            )
        m = msg.methods.add(name=name, returns_tuple=method.returns_tuple)
        m.output_names.extend(method.signature.output_names)
        _graph_to_proto(method.graph, m.graph, f"{module.name}.{name}")
    for name, sub in module.submodules.items():
        entry = msg.submodules.add(name=name)
        if isinstance(sub, Module):
            module_to_proto(sub, entry.module)
        elif isinstance(sub, PartitionedModule):
            partitioned_to_proto(sub, entry.partitioned)
        elif isinstance(sub, LoweredModule):
            record_to_proto(sub.record, entry.lowered)
        else:
            raise InputError(
                f"{module.name}, submodule {name!r}: expected a Module or LoweredModule, "
                f"got {type(sub).__name__}"
            )
    return msg


def record_to_proto(record: DelegateRecord, msg: pb.LoweredModule) -> pb.LoweredModule:
    msg.name = record.name
    msg.backend = record.backend
    msg.distribution = record.distribution
    msg.version = record.version
    msg.payload_version = record.payload_version
    try:
        msg.compile_spec_json = canonical_json(record.compile_spec)
    except (TypeError, ValueError) as err:
        raise InputError(
            f"lowered module {record.name} ({record.backend}): compile_spec must be JSON data "
            f"(dicts with string keys, lists, strings, finite numbers, booleans, None): {err}"
        ) from None
    payload = bytes(record.payload)
    msg.payload = payload
    msg.payload_sha256 = hashlib.sha256(payload).digest()
    for name, sig in record.signatures.items():
        m = msg.methods.add(name=name, returns_tuple=sig.returns_tuple)
        m.output_names.extend(sig.output_names)
        for input_name, t in sig.inputs:
            _type_to_proto(t, m.signature.inputs.add(name=input_name).type)
        for t in sig.outputs:
            _type_to_proto(t, m.signature.outputs.add())
        m.signature.SetInParent()  # a method without inputs and outputs still has a signature
    if record.original is not None:
        module_to_proto(record.original, msg.original)
    for key, value in record.extra.items():
        msg.extra[key] = value
    return msg


def partitioned_to_proto(partitioned: PartitionedModule, msg: pb.Partitioned) -> pb.Partitioned:
    module_to_proto(partitioned.outer, msg.outer)
    msg.backends.extend(partitioned.backend)
    msg.compile_spec_json = canonical_json(partitioned.compile_spec)
    msg.report_json = partitioned.partition_report().dumps()
    return msg


def canonical_json(data: Any) -> str:
    """Sorted keys, no whitespace, UTF-8 text, no NaN or infinity."""
    return json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def _type_to_proto(t: TensorType, msg: pb.TensorType) -> None:
    msg.dtype = t.dtype
    if t.is_static:
        msg.shape.extend(t.shape)  # type: ignore[arg-type]
    else:
        msg.shape.extend(-1 if isinstance(d, str) else d for d in t.shape)
        msg.symbols.extend(d if isinstance(d, str) else "" for d in t.shape)


def _tensor_to_proto(array: np.ndarray, msg: pb.Tensor, where: str) -> None:
    array = np.asarray(array)
    try:
        short = dtype_name(array.dtype)
    except ValueError as err:
        raise InputError(f"{where}: {err}") from None
    msg.dtype = short
    msg.shape.extend(array.shape)
    msg.data = np.ascontiguousarray(array, dtype=array.dtype.newbyteorder("<")).tobytes()


def _graph_to_proto(graph: Graph, msg: pb.Graph, where: str) -> None:
    for v in graph.inputs:
        _type_to_proto(v.type, msg.inputs.add(name=v.name).type)
    for node in graph.nodes:
        n = msg.nodes.add(op=node.op, debug_handle=node.debug_handle, scope=node.scope)
        n.inputs.extend(v.name for v in node.inputs)
        for v in node.outputs:
            _type_to_proto(v.type, n.outputs.add(name=v.name).type)
        for key, value in node.attrs.items():
            _attr_to_proto(value, n.attrs.add(name=key).value, f"{where}, {node.where()}, attribute {key!r}")
        if node.source is not None:
            n.source.file = node.source.file
            n.source.line = node.source.line
    msg.outputs.extend(v.name for v in graph.outputs)


def _attr_to_proto(value: AttrValue | None, msg: pb.Attr, where: str) -> None:
    msg.SetInParent()
    if value is None:
        return
    if isinstance(value, (bool, np.bool_)):
        msg.b = bool(value)
    elif isinstance(value, (int, np.integer)):
        msg.i = int(value)
    elif isinstance(value, (float, np.floating)):
        msg.f = float(value)
    elif isinstance(value, str):
        msg.s = value
    elif isinstance(value, np.ndarray):
        _tensor_to_proto(value, msg.tensor, where)
    elif isinstance(value, (tuple, list)):
        if all(isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_)) for v in value):
            msg.ints.SetInParent()
            msg.ints.values.extend(int(v) for v in value)
        elif all(isinstance(v, (float, np.floating)) for v in value):
            msg.floats.SetInParent()
            msg.floats.values.extend(float(v) for v in value)
        else:
            raise InputError(f"{where}: a list attribute must hold only ints or only floats, got {value!r}")
    else:
        raise InputError(
            f"{where}: expected int, float, bool, str, ints, floats or tensor, got {type(value).__name__}"
        )


def _verify_before_saving(module: Module) -> None:
    # A module that does not verify would make a file that does not load: refuse it now.
    verify_module(module)
