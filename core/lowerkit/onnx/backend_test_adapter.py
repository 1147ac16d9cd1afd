"""ONNX backend adapter: run ONNX models through lowerkit backends via ``onnx.backend.base``.

``prepare(model, backend="reference")`` imports the model and lowers it with
:func:`lowerkit.to_backend` to the named backend, or to a list of backends (partitioned: each
node goes to the first backend in the list that supports it). The returned rep's
``run(inputs)`` takes a list of arrays in graph-input order, a dict keyed by ONNX input
name, or one array, and returns the outputs as a named tuple keyed by ONNX output name.

Models with symbolic input dims are imported and lowered once per concrete input shape
seen by ``run`` (lowerkit graphs have static shapes). Likewise, graph inputs that feed what
lowerkit must know at import time (``Reshape``'s shape, ``Clip``'s bounds, ``Dropout``'s
training flag) are specialised on: one lowering per value seen. Other models are imported
and lowered once, in ``prepare``, so that import errors surface there.

``LowerkitBackend`` runs on ``reference``; :func:`backend_for` makes the class for another
choice, e.g. ``backend_for(["nnpack", "reference"])``, which is what
``onnx.backend.test.BackendTest`` needs (it takes a class).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import numpy as np

from ..errors import InputError
from ._deps import require_onnx

_onnx = require_onnx()

import onnx.backend.base as _base  # noqa: E402  (after the helpful ImportError above)

from ._importer import MAX_OPSET, import_model, read_model  # noqa: E402

__all__ = [
    "LowerkitBackend",
    "LowerkitBackendRep",
    "backend_for",
    "prepare",
    "run_model",
    "run_node",
    "supports_device",
]

BackendChoice = str | Sequence[str]


def _backend_names(backend: BackendChoice) -> str | list[str]:
    if isinstance(backend, str):
        names = [b.strip() for b in backend.split(",")]
    else:
        names = list(backend)
    if not names or not all(isinstance(n, str) and n for n in names):
        raise InputError(f"backend must be a backend name or a non-empty list of names, got {backend!r}")
    return names[0] if len(names) == 1 else names


def _graph_inputs(proto: Any) -> list[Any]:
    initializers = {i.name for i in proto.graph.initializer}
    return [vi for vi in proto.graph.input if vi.name not in initializers]


def _has_symbolic_dims(vi: Any) -> bool:
    tt = vi.type.tensor_type
    return not tt.HasField("shape") or any(not d.HasField("dim_value") for d in tt.shape.dim)


def _specialised_inputs(proto: Any, names: Sequence[str]) -> tuple[str, ...]:
    """Graph inputs that feed an input lowerkit must know at import time (Reshape's shape)."""
    from . import _import_ops  # noqa: F401  (registers the importers)
    from ._registry import CONSTANT_INPUTS

    wanted = set()
    for node in proto.graph.node:
        for i in CONSTANT_INPUTS.get(node.op_type, ()):
            if i < len(node.input) and node.input[i] in names:
                wanted.add(node.input[i])
    return tuple(n for n in names if n in wanted)


class LowerkitBackendRep(_base.BackendRep):
    """A prepared ONNX model: imported and lowered, ready to run repeatedly."""

    def __init__(
        self,
        model: Any,
        backend: BackendChoice = "reference",
        input_shapes: Mapping[str, Sequence[int]] | None = None,
    ) -> None:
        self._proto = read_model(model)
        self.backend = _backend_names(backend)
        self._input_shapes = dict(input_shapes or {})
        graph_inputs = _graph_inputs(self._proto)
        self.input_names = tuple(vi.name for vi in graph_inputs)
        self.output_names = tuple(vi.name for vi in self._proto.graph.output)
        #: Inputs whose values are baked into the lowered graph (one lowering per value).
        self.specialised_inputs = _specialised_inputs(self._proto, self.input_names)
        self._symbolic = not self._input_shapes and any(_has_symbolic_dims(vi) for vi in graph_inputs)
        self._lowered: dict[Any, Any] = {}
        if not self._symbolic and not self.specialised_inputs:
            self._lowered[None] = self._lower({}, {})

    def _lower(self, input_shapes: Mapping[str, Sequence[int]], constants: Mapping[str, np.ndarray]) -> Any:
        import lowerkit

        imported = import_model(
            self._proto, input_shapes=input_shapes or self._input_shapes or None, constant_inputs=constants
        )
        return lowerkit.to_backend(imported.module, self.backend)

    @property
    def lowered(self) -> Any:
        """The lowered module, when one lowering serves every call (static, unspecialised)."""
        if None not in self._lowered:
            raise InputError(
                "this model is lowered per input shape or per value of "
                f"{list(self.specialised_inputs)} when it runs"
            )
        return self._lowered[None]

    def _arrays(self, inputs: Any) -> list[np.ndarray]:
        if isinstance(inputs, np.ndarray):
            inputs = [inputs]
        if isinstance(inputs, Mapping):
            missing = [n for n in self.input_names if n not in inputs]
            extra = sorted(set(inputs) - set(self.input_names))
            if missing or extra:
                raise InputError(
                    f"inputs by name must be exactly {list(self.input_names)}; missing {missing}, unknown {extra}"
                )
            inputs = [inputs[n] for n in self.input_names]
        arrays = [np.asarray(a) for a in inputs]
        if len(arrays) != len(self.input_names):
            raise InputError(
                f"the model takes {len(self.input_names)} inputs {list(self.input_names)}, got {len(arrays)}"
            )
        return arrays

    def run(self, inputs: Any, **kwargs: Any) -> tuple[Any, ...]:
        """Run the model; returns the outputs as a tuple (also indexable by ONNX output name)."""
        arrays = dict(zip(self.input_names, self._arrays(inputs)))
        constants = {n: arrays.pop(n) for n in self.specialised_inputs}
        key = None
        if self._symbolic or constants:
            key = (
                tuple((n, a.shape) for n, a in arrays.items()) if self._symbolic else (),
                tuple((n, a.dtype.str, a.shape, a.tobytes()) for n, a in constants.items()),
            )
        if key not in self._lowered:
            shapes = {n: list(a.shape) for n, a in arrays.items()} if self._symbolic else {}
            self._lowered[key] = self._lower(shapes, constants)
        result = self._lowered[key].run("forward", *arrays.values())
        outputs = result if isinstance(result, tuple) else (result,)
        return _base.namedtupledict("Outputs", self.output_names)(*outputs)


class LowerkitBackend(_base.Backend):
    """``onnx.backend.base.Backend`` over lowerkit; ``backend`` names the lowerkit backend(s)."""

    backend: ClassVar[BackendChoice] = "reference"

    @classmethod
    def prepare(
        cls,
        model: Any,
        device: str = "CPU",
        *,
        backend: BackendChoice | None = None,
        input_shapes: Mapping[str, Sequence[int]] | None = None,
        **kwargs: Any,
    ) -> LowerkitBackendRep:
        """Import and lower ``model`` (ModelProto, path or bytes); see the module docstring."""
        if not cls.supports_device(device):
            raise InputError(f"lowerkit runs ONNX models on device 'CPU', not {device!r}")
        return LowerkitBackendRep(model, backend if backend is not None else cls.backend, input_shapes)

    @classmethod
    def run_model(cls, model: Any, inputs: Any, device: str = "CPU", **kwargs: Any) -> tuple[Any, ...]:
        return cls.prepare(model, device, **kwargs).run(inputs)

    @classmethod
    def run_node(
        cls,
        node: Any,
        inputs: Any,
        device: str = "CPU",
        outputs_info: Sequence[tuple[np.dtype, tuple[int, ...]]] | None = None,
        **kwargs: Any,
    ) -> tuple[Any, ...]:
        """Run one ONNX node on ``inputs`` (a list in the node's input order, or a dict)."""
        helper = _onnx.helper
        names = [n for n in node.input if n]
        if isinstance(inputs, Mapping):
            arrays = [np.asarray(inputs[n]) for n in names]
        else:
            arrays = [np.asarray(a) for a in inputs]
        if len(arrays) != len(names):
            raise InputError(f"node {node.op_type} takes {len(names)} inputs, got {len(arrays)}")
        graph_inputs = [
            helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
            for n, a in zip(names, arrays)
        ]
        outs = [n for n in node.output if n]
        if outputs_info is not None:
            graph_outputs = [
                helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(np.dtype(dt)), shape)
                for n, (dt, shape) in zip(outs, outputs_info)
            ]
        else:
            graph_outputs = [helper.make_empty_tensor_value_info(n) for n in outs]
        opset = int(kwargs.pop("opset_version", min(MAX_OPSET, _onnx.defs.onnx_opset_version())))
        graph = helper.make_graph([node], f"{node.op_type}_node", graph_inputs, graph_outputs)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
        model.ir_version = helper.find_min_ir_version_for(list(model.opset_import))
        if outputs_info is None:
            model = _onnx.shape_inference.infer_shapes(model)
            inferred = {vi.name: vi for vi in model.graph.value_info}
            del model.graph.output[:]
            for n in outs:
                if n not in inferred:
                    raise InputError(
                        f"cannot infer the type of output {n!r} of node {node.op_type}; pass outputs_info"
                    )
                model.graph.output.append(inferred[n])
        return cls.run_model(model, arrays, device, **kwargs)

    @classmethod
    def supports_device(cls, device: str) -> bool:
        return device.split(":")[0].upper() == "CPU"


def backend_for(backend: BackendChoice) -> type[LowerkitBackend]:
    """A :class:`LowerkitBackend` subclass that lowers to ``backend`` (a name or a list)."""
    choice = _backend_names(backend)
    label = choice if isinstance(choice, str) else "+".join(choice)
    return type(f"LowerkitBackend_{label}", (LowerkitBackend,), {"backend": choice})


prepare = LowerkitBackend.prepare
run_model = LowerkitBackend.run_model
run_node = LowerkitBackend.run_node
supports_device = LowerkitBackend.supports_device
