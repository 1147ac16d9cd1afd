"""lowerkit Module -> ONNX model: one method of an un-lowered module, calls inlined.

Each lowerkit op is converted by the exporter registered for it (:mod:`._export_ops`),
which receives an :class:`ExportContext` to name values and append ONNX nodes and
initializers. ``param`` and ``constant`` become initializers; ``call`` is inlined (ONNX
functions are not used, so every runtime can run the result).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..errors import InputError, LowerkitError, UnsupportedOperatorError
from ..ir import Graph, GraphMethod, Module, Node, Value
from ._deps import require_onnx
from ._registry import EXPORTERS
from ._types import DTYPE_TO_ONNX

MIN_EXPORT_OPSET = 13
MAX_EXPORT_OPSET = 21


class ExportContext:
    """The state of one export, handed to every exporter function."""

    def __init__(self, opset: int) -> None:
        self.opset = opset
        self.nodes: list[Any] = []
        self.initializers: list[Any] = []
        self._names: dict[Value, str] = {}  # Value -> ONNX name, within the current graph
        self._used: set[str] = set()
        self._node_names: set[str] = set()
        self._params: dict[tuple[int, str], str] = {}  # (id(module), param) -> initializer
        self.module: Module | None = None
        self.prefix = ""  # qualified name of the submodule being inlined ("" at the top)
        self.node: Node | None = None

    # -- names ------------------------------------------------------------------------------------
    def fresh(self, hint: str) -> str:
        """A new ONNX tensor name based on ``hint``."""
        name, suffix = hint, 1
        while name in self._used:
            name, suffix = f"{hint}_{suffix}", suffix + 1
        self._used.add(name)
        return name

    def name(self, value: Value) -> str:
        """The ONNX name of a lowerkit value (defined earlier in the graph)."""
        return self._names[value]

    def bind(self, value: Value, name: str) -> None:
        self._names[value] = name

    def output(self, i: int = 0) -> str:
        """The ONNX name for output ``i`` of the node being converted."""
        value = self.node.outputs[i]  # type: ignore[union-attr]
        if value not in self._names:
            self.bind(value, self.fresh(self.prefix + value.name))
        return self._names[value]

    # -- emitting ---------------------------------------------------------------------------------
    def add_node(self, op_type: str, inputs: Sequence[str], outputs: Sequence[str], **attrs: Any) -> None:
        onnx = require_onnx()
        node = self.node
        base = f"{node.scope}/{op_type}" if node is not None and node.scope else op_type
        name, suffix = base, 1
        while name in self._node_names:
            name, suffix = f"{base}_{suffix}", suffix + 1
        self._node_names.add(name)
        self.nodes.append(onnx.helper.make_node(op_type, list(inputs), list(outputs), name=name, **attrs))

    def initializer(self, array: np.ndarray, hint: str) -> str:
        """Add ``array`` as an initializer; returns its ONNX name."""
        onnx = require_onnx()
        name = self.fresh(hint)
        self.initializers.append(onnx.numpy_helper.from_array(np.asarray(array, order="C"), name))  # keeps 0-d
        return name

    def parameter(self, qualified: str) -> str:
        """The initializer holding parameter ``qualified`` of the module being exported."""
        module, node = self.module, self.node
        assert module is not None and node is not None  # set by emit_graph
        key = (id(module), qualified)
        if key not in self._params:
            if qualified not in module.parameters:
                raise InputError(f"{node.where()} reads parameter {qualified!r}, which the module lacks")
            self._params[key] = self.initializer(module.parameters[qualified], self.prefix + qualified)
        return self._params[key]

    # -- graphs -----------------------------------------------------------------------------------
    def emit_graph(self, module: Module, graph: Graph, arg_names: Sequence[str], prefix: str) -> list[str]:
        """Emit ``graph`` (of ``module``) with its inputs bound to ``arg_names``; returns outputs."""
        saved = (self.module, self.prefix, self.node, self._names)
        self.module, self.prefix, self._names = module, prefix, {}
        try:
            for value, name in zip(graph.inputs, arg_names):
                self.bind(value, name)
            for node in graph.nodes:
                self.node = node
                EXPORTERS[node.op](self, node)
            return [self.name(v) for v in graph.outputs]
        finally:
            self.module, self.prefix, self.node, self._names = saved


def resolve_call(module: Module, node: Node) -> tuple[Module, Graph, str]:
    """The module and graph a ``call`` node runs, and the submodule's name prefix."""
    sub_name = node.attrs.get("module", "")
    method = node.attrs["method"]
    target = module if not sub_name else module.submodules.get(sub_name)  # type: ignore[arg-type]
    if not isinstance(target, Module):
        kind = "missing" if target is None else f"lowered to {getattr(target, 'backend', '?')!r}"
        raise UnsupportedOperatorError(
            f"{node.where()} calls {method!r} of submodule {sub_name!r}, which is {kind}; "
            "only un-lowered modules can be exported to ONNX"
        )
    m = target.methods.get(method)
    if not isinstance(m, GraphMethod):
        raise UnsupportedOperatorError(f"{node.where()} calls {method!r}, which has no graph to export")
    return target, m.graph, f"{sub_name}." if sub_name else ""


def _check_exportable(module: Module, graph: Graph) -> None:
    """Raise one UnsupportedOperatorError naming every node no exporter handles."""
    missing: list[str] = []

    def walk(mod: Module, g: Graph, prefix: str) -> None:
        if id(g) in seen_graphs:
            return
        seen_graphs.add(id(g))
        for node in g.nodes:
            if node.op == "call":
                target, callee, sub = resolve_call(mod, node)
                walk(target, callee, prefix + sub)
            elif node.op not in EXPORTERS:
                missing.append(f"{node.op} ({node.where()}{' in ' + prefix.rstrip('.') if prefix else ''})")

    seen_graphs: set[int] = set()
    walk(module, graph, "")
    if missing:
        raise UnsupportedOperatorError(
            f"{len(missing)} node(s) have no ONNX export: " + "; ".join(missing)
            + f". Exportable ops: {', '.join(sorted(EXPORTERS))}"
        )


def _value_info(onnx: Any, name: str, value: Value) -> Any:
    return onnx.helper.make_tensor_value_info(name, DTYPE_TO_ONNX[value.type.dtype], list(value.type.shape))


def export(module: Any, path: Any = None, opset: int = 17, *, method: str = "forward") -> Any:
    """Export ``method`` of an un-lowered ``module`` as an ONNX ``ModelProto``.

    The result passes ``onnx.checker.check_model(full_check=True)``; when ``path`` is given
    it is also written there (atomically). ``opset`` may be 13-21. Calls to other methods
    and submodules are inlined; parameters become initializers named by their qualified
    names. Raises ``InputError`` (lowered module, unknown method, bad opset) and
    ``UnsupportedOperatorError`` naming every node that has no ONNX conversion.
    """
    from . import _export_ops  # noqa: F401  (registers the exporters)

    onnx = require_onnx()
    if not isinstance(module, Module):
        raise InputError(
            f"lowerkit.onnx.export takes an un-lowered lowerkit.Module, got {type(module).__name__}"
            + (" (export the module before lowering it)" if hasattr(module, "backend") else "")
        )
    if not isinstance(opset, int) or not MIN_EXPORT_OPSET <= opset <= MAX_EXPORT_OPSET:
        raise InputError(f"opset must be an int in {MIN_EXPORT_OPSET}-{MAX_EXPORT_OPSET}, got {opset!r}")
    from ..ir import graph_of
    from ..ir.verify import verify_module

    graph = graph_of(module, method)
    verify_module(module)
    _check_exportable(module, graph)
    for value in list(graph.inputs) + list(graph.outputs):
        if value.type.dtype not in DTYPE_TO_ONNX:  # pragma: no cover - every lowerkit dtype maps
            raise InputError(f"value {value.name} has dtype {value.type.dtype} with no ONNX type")

    ctx = ExportContext(opset)
    input_names = [ctx.fresh(v.name) for v in graph.inputs]
    produced = ctx.emit_graph(module, graph, input_names, "")
    # ONNX graph outputs must be distinct names produced by nodes: copy inputs, initializers
    # and repeated values through Identity.
    output_names: list[str] = []
    initializer_names = {t.name for t in ctx.initializers}
    ctx.node = None
    for i, (value, name) in enumerate(zip(graph.outputs, produced)):
        if name in input_names or name in initializer_names or name in output_names:
            copy = ctx.fresh(f"output_{i}")
            ctx.add_node("Identity", [name], [copy])
            name = copy
        output_names.append(name)
    onnx_graph = onnx.helper.make_graph(
        ctx.nodes,
        module.name or "lowerkit",
        [_value_info(onnx, n, v) for n, v in zip(input_names, graph.inputs)],
        [_value_info(onnx, n, v) for n, v in zip(output_names, graph.outputs)],
        ctx.initializers,
    )
    opset_ids = [onnx.helper.make_opsetid("", opset)]
    model = onnx.helper.make_model(onnx_graph, opset_imports=opset_ids, producer_name="lowerkit")
    model.ir_version = onnx.helper.find_min_ir_version_for(opset_ids)
    try:
        onnx.checker.check_model(model, full_check=True)
    except Exception as err:  # a bug in an exporter, not a user mistake
        raise LowerkitError(f"the exported ONNX model fails onnx.checker: {err}") from err
    if path is not None:
        _write_atomically(os.fspath(path), model.SerializeToString())
    return model


def _write_atomically(path: str, data: bytes) -> None:
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".lowerkit-onnx-", dir=directory)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
