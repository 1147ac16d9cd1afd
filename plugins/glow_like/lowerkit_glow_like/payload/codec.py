"""Programs to payload bytes and back, with the version check and structural validation.

Decoding trusts nothing: indices, offsets, sizes, dtypes and ops are checked, and any
inconsistency is a :class:`lowerkit.errors.FormatError`.
"""

from __future__ import annotations

import json

import numpy as np
from google.protobuf.message import DecodeError

from lowerkit.errors import FormatError
from lowerkit.ir import DTYPES, TensorType
from lowerkit.opset import ShapeError

from .._version import PAYLOAD_FORMAT, __version__
from ..kernels import KERNELS
from ..lir import Buffer, Instruction, MemoryPlan, Program, arena_bound, scratch_needed
from . import glow_like_pb2 as pb
from .validate import check_instruction

MAGIC = "lowerkit-glow-like"
_KINDS = ("input", "activation", "constant")
MAX_RANK = 32
MAX_ELEMENTS = 2**40
# Compile allocates each method's planned arena and scratch and runs it once: a payload
# asking for more than this (bytes, per method) is refused instead of exhausting memory.
MAX_ARENA_ENV = "LOWERKIT_GLOW_LIKE_MAX_ARENA"
DEFAULT_MAX_ARENA = 2**32


def max_arena_bytes() -> int:
    """The per-method arena + scratch limit: ``LOWERKIT_GLOW_LIKE_MAX_ARENA`` or 4 GiB."""
    import os

    raw = os.environ.get(MAX_ARENA_ENV, "")
    return int(raw) if raw.strip().isdigit() else DEFAULT_MAX_ARENA


def _tensor_to_pb(array: np.ndarray, msg: pb.Tensor) -> None:
    from lowerkit.ir import dtype_name

    msg.dtype = dtype_name(array.dtype)
    msg.shape.extend(int(d) for d in array.shape)
    msg.data = np.ascontiguousarray(array).astype(array.dtype.newbyteorder("<"), copy=False).tobytes()


def _tensor_from_pb(msg: pb.Tensor, where: str) -> np.ndarray:
    if msg.dtype not in DTYPES:
        raise FormatError(f"glow_like payload: {where} has unknown dtype {msg.dtype!r}")
    shape = tuple(msg.shape)
    _check_shape(shape, where)
    dtype = DTYPES[msg.dtype].newbyteorder("<")
    expected = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    if len(msg.data) != expected:
        raise FormatError(
            f"glow_like payload: {where} should hold {expected} bytes for {msg.dtype}{list(shape)}, "
            f"holds {len(msg.data)}"
        )
    array = np.frombuffer(msg.data, dtype=dtype).reshape(shape).astype(DTYPES[msg.dtype], copy=True)
    array.flags.writeable = False
    return array


def _check_shape(shape: tuple[int, ...], where: str) -> None:
    if len(shape) > MAX_RANK or any(d < 0 for d in shape) or int(np.prod(shape, dtype=object)) > MAX_ELEMENTS:
        raise FormatError(
            f"glow_like payload: {where} has shape {list(shape)[:MAX_RANK + 1]}: negative, rank above "
            f"{MAX_RANK} or more than {MAX_ELEMENTS} elements"
        )


def _attr_to_pb(name: str, value, msg: pb.Attr) -> None:
    msg.name = name
    if isinstance(value, (bool, np.bool_)):
        msg.b = bool(value)
    elif isinstance(value, (int, np.integer)):
        msg.i = int(value)
    elif isinstance(value, (float, np.floating)):
        msg.f = float(value)
    elif isinstance(value, str):
        msg.s = value
    elif isinstance(value, np.ndarray):
        _tensor_to_pb(value, msg.tensor)
    elif isinstance(value, tuple) and all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in value):
        msg.ints.values.extend(int(v) for v in value)
        msg.ints.SetInParent()
    elif isinstance(value, tuple):
        msg.floats.values.extend(float(v) for v in value)
        msg.floats.SetInParent()
    else:
        raise TypeError(f"attribute {name!r}: cannot store {type(value).__name__}")


def _attr_from_pb(msg: pb.Attr, where: str):
    kind = msg.WhichOneof("value")
    if kind is None:
        raise FormatError(f"glow_like payload: {where} attribute {msg.name!r} has no value")
    if kind == "ints":
        return tuple(int(v) for v in msg.ints.values)
    if kind == "floats":
        return tuple(float(v) for v in msg.floats.values)
    if kind == "tensor":
        return _tensor_from_pb(msg.tensor, f"{where} attribute {msg.name!r}")
    return getattr(msg, kind)


def encode(programs: list[Program]) -> bytes:
    """Serialize programs into the payload bytes stored in a lowered module."""
    payload = pb.Payload(magic=MAGIC, format=PAYLOAD_FORMAT, plugin_version=__version__)
    for program in programs:
        msg = payload.programs.add()
        msg.method = program.method
        for buf in program.buffers:
            msg.buffers.add(
                name=buf.name, dtype=buf.dtype, shape=buf.shape, kind=buf.kind, root=buf.root,
                offset=buf.offset, constant=buf.constant,
            )
        for ins in program.instructions:
            im = msg.instructions.add(
                op=ins.op, inputs=ins.inputs, outputs=ins.outputs, scope=ins.scope, debug_handle=ins.debug_handle
            )
            for k, v in ins.attrs.items():
                _attr_to_pb(k, v, im.attrs.add())
        msg.inputs.extend(program.inputs)
        msg.outputs.extend(program.outputs)
        for c in program.constants:
            _tensor_to_pb(c, msg.constants.add())
        p = program.plan
        msg.plan.CopyFrom(pb.MemoryPlan(peak_bytes=p.peak_bytes, sum_bytes=p.sum_bytes,
                                        lower_bound_bytes=p.lower_bound_bytes, scratch_bytes=p.scratch_bytes))
        msg.options_json = json.dumps(program.options, sort_keys=True)
        msg.passes.extend(program.passes)
    return payload.SerializeToString()


def decode(data: bytes) -> list[Program]:
    """Parse and validate payload bytes; :class:`FormatError` on anything wrong."""
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise FormatError(f"glow_like payload must be bytes, got {type(data).__name__}")
    payload = pb.Payload()
    try:
        payload.ParseFromString(bytes(data))
    except (DecodeError, ValueError, RuntimeError) as err:
        raise FormatError(f"glow_like payload is corrupt or not a glow_like payload: {err}") from None
    if payload.magic != MAGIC:
        raise FormatError(f"not a glow_like payload (magic {payload.magic!r}, expected {MAGIC!r})")
    if payload.format != PAYLOAD_FORMAT:
        raise FormatError(
            f"glow_like payload written by lowerkit-glow-like {payload.plugin_version or '?'} "
            f"(payload format {payload.format}) cannot be read by lowerkit-glow-like {__version__} "
            f"(payload format {PAYLOAD_FORMAT}); lower the module again with this version"
        )
    programs = [_program_from_pb(msg) for msg in payload.programs]
    methods = [p.method for p in programs]
    if not all(methods) or len(set(methods)) != len(methods):
        raise FormatError(f"glow_like payload: method names must be non-empty and distinct, got {methods}")
    return programs


def _program_from_pb(msg: pb.Program) -> Program:
    where = f"method {msg.method!r}"
    constants = [_tensor_from_pb(c, f"{where} constant {i}") for i, c in enumerate(msg.constants)]
    buffers = []
    for i, b in enumerate(msg.buffers):
        if b.dtype not in DTYPES or b.kind not in _KINDS:
            raise FormatError(f"glow_like payload: {where} buffer {i} is malformed ({b.dtype}, {b.kind})")
        _check_shape(tuple(b.shape), f"{where} buffer {i}")
        if not 0 <= b.root < len(msg.buffers):
            raise FormatError(f"glow_like payload: {where} buffer {i} has root {b.root} out of range")
        buffers.append(Buffer(i, b.name, b.dtype, tuple(int(d) for d in b.shape), b.kind, b.root, b.offset, b.constant))
    plan = MemoryPlan(msg.plan.peak_bytes, msg.plan.sum_bytes, msg.plan.lower_bound_bytes, msg.plan.scratch_bytes)
    if plan.peak_bytes < 0 or plan.scratch_bytes < 0 or plan.peak_bytes > 2**40 or plan.scratch_bytes > 2**40:
        raise FormatError(f"glow_like payload: {where} has an implausible memory plan {plan}")
    for buf in buffers:
        if buf.kind == "constant":
            if not 0 <= buf.constant < len(constants) or constants[buf.constant].size != int(np.prod(buf.shape)):
                raise FormatError(f"glow_like payload: {where} buffer {buf.name!r} names a bad constant")
            if constants[buf.constant].dtype != DTYPES[buf.dtype]:
                raise FormatError(f"glow_like payload: {where} buffer {buf.name!r} dtype differs from its constant")
        else:
            root = buffers[buf.root]
            if root.kind == "constant" or buf.offset != root.offset or buf.nbytes > root.nbytes:
                raise FormatError(f"glow_like payload: {where} buffer {buf.name!r} aliases storage it does not fit")
            if buf.offset < 0 or buf.offset + buf.nbytes > plan.peak_bytes:
                raise FormatError(f"glow_like payload: {where} buffer {buf.name!r} lies outside the arena")
    n = len(buffers)
    instructions = []
    for i, im in enumerate(msg.instructions):
        if im.op not in KERNELS:
            raise FormatError(f"glow_like payload: {where} instruction {i} has unknown op {im.op!r}")
        ids = list(im.inputs) + list(im.outputs)
        if any(not 0 <= b < n for b in ids) or any(buffers[b].kind == "constant" for b in im.outputs):
            raise FormatError(f"glow_like payload: {where} instruction {i} ({im.op}) names bad buffers")
        attrs = {a.name: _attr_from_pb(a, f"{where} instruction {i}") for a in im.attrs}
        try:
            attrs = check_instruction(
                im.op,
                [TensorType(buffers[b].dtype, buffers[b].shape) for b in im.inputs],
                attrs,
                [TensorType(buffers[b].dtype, buffers[b].shape) for b in im.outputs],
            )
        except ShapeError as err:
            raise FormatError(f"glow_like payload: {where} instruction {i} ({im.op}): {err}") from None
        instructions.append(Instruction(im.op, list(im.inputs), list(im.outputs), attrs, im.scope, im.debug_handle))
    for b in list(msg.inputs) + list(msg.outputs):
        if not 0 <= b < n:
            raise FormatError(f"glow_like payload: {where} names input/output buffer {b} out of range")
    if any(buffers[b].kind != "input" for b in msg.inputs):
        raise FormatError(f"glow_like payload: {where} lists a non-input buffer as a method input")
    try:
        options = json.loads(msg.options_json or "{}")
    except ValueError:
        raise FormatError(f"glow_like payload: {where} options are not JSON") from None
    if not isinstance(options, dict):
        raise FormatError(f"glow_like payload: {where} options must be a JSON object")
    program = Program(msg.method, buffers, instructions, list(msg.inputs), list(msg.outputs), constants, plan,
                      options, list(msg.passes))
    if plan.peak_bytes > arena_bound(program):
        raise FormatError(
            f"glow_like payload: {where} asks for a {plan.peak_bytes}-byte arena, more than all its "
            f"buffers side by side ({arena_bound(program)} bytes)"
        )
    try:
        needed = scratch_needed(program)
    except (KeyError, ValueError, TypeError, IndexError) as err:
        raise FormatError(f"glow_like payload: {where} has malformed instruction attributes: {err!r}") from None
    limit = max_arena_bytes()
    if plan.peak_bytes + plan.scratch_bytes > limit:
        raise FormatError(
            f"glow_like payload: {where} plans a {plan.peak_bytes}-byte arena and {plan.scratch_bytes} "
            f"scratch bytes, above the {limit}-byte limit ({MAX_ARENA_ENV})"
        )
    if plan.scratch_bytes != needed:
        raise FormatError(
            f"glow_like payload: {where} plans {plan.scratch_bytes} scratch bytes, its kernels need {needed}"
        )
    return program
