"""Building one traced method's graph, and the state one ``trace`` call shares across methods."""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np

from ..errors import InputError
from ..ir.graph import Graph
from ..ir.module import CallableModule, GraphMethod, Method
from ..ir.node import Node, SourceLocation, Value
from ..ir.types import TensorType, dtype_name
from ..opset import ShapeError, get_schema, has_schema
from .parameter import Parameter
from .source import user_source
from .tensor import TracedTensor
from .traceable import Traceable

_NON_IDENT = re.compile(r"[^A-Za-z0-9_]")


def describe(op: str, scope: str, source: SourceLocation | None) -> str:
    """``conv2d in layer1.0.conv1 at net.py:12``: where a node is being created."""
    text = op
    if scope:
        text += f" in {scope}"
    if source is not None:
        text += f" at {source}"
    return text


def _snake(name: str) -> str:
    return _NON_IDENT.sub("_", name).lower().strip("_") or "module"


class TraceSession:
    """What every method of one :func:`lowerkit.trace` call shares.

    Parameters and nn submodule paths (qualified names), submodules called as ``call`` nodes,
    the methods traced so far and one debug-handle counter, so handles are unique in the
    resulting module.
    """

    def __init__(self, name: str, root: Traceable | None) -> None:
        self.name = name
        self.parameters: dict[str, np.ndarray] = {}
        self.submodules: dict[str, Any] = {}
        self.methods: dict[str, Method] = {}
        self._param_names: dict[int, str] = {}
        self._module_paths: dict[int, str] = {}
        self._used_paths: set[str] = set()
        self._submodule_names: dict[int, str] = {}
        self._keepalive: list[object] = []  # ids above stay valid while the session lives
        self._next_handle = 0
        self._fresh_params = 0
        if root is not None:
            self._register_tree(root, "")

    # -- naming -------------------------------------------------------------------------
    def _register_tree(self, module: Traceable, prefix: str) -> None:
        for path, sub in module.named_modules(prefix=prefix):
            if id(sub) in self._module_paths:
                continue
            self._module_paths[id(sub)] = path
            self._used_paths.add(path)
            self._keepalive.append(sub)
            for attr, value in vars(sub).items():
                if isinstance(value, CallableModule) and id(value) not in self._submodule_names:
                    name = f"{path}.{attr}" if path else attr
                    self._submodule_names[id(value)] = name
                    self._keepalive.append(value)
        for qualified, param in module.named_parameters(prefix=prefix):
            if id(param) not in self._param_names:
                self._param_names[id(param)] = qualified
                self.parameters[qualified] = param.data
                self._keepalive.append(param)

    def module_path(self, module: Traceable, parent_scope: str) -> str:
        """The qualified path of an nn module; modules met for the first time get a fresh one."""
        path = self._module_paths.get(id(module))
        if path is None:
            base = _snake(type(module).__name__)
            base = f"{parent_scope}.{base}" if parent_scope else base
            path, n = base, 1
            while path in self._used_paths or path in self.parameters:
                path, n = f"{base}_{n}", n + 1
            self._register_tree(module, path)
        return path

    def param_name(self, param: Parameter) -> str:
        """The qualified name of a parameter; parameters of no known module get ``param_N``."""
        name = self._param_names.get(id(param))
        if name is None:
            name = "param"
            while name in self.parameters:
                self._fresh_params += 1
                name = f"param_{self._fresh_params}"
            self._param_names[id(param)] = name
            self.parameters[name] = param.data
            self._keepalive.append(param)
        return name

    def submodule_name(self, sub: object) -> str:
        """The name a called ``lowerkit.Module``/``LoweredModule`` gets in ``submodules``."""
        name = self._submodule_names.get(id(sub))
        if name is None:
            base = _snake(str(getattr(sub, "name", "") or type(sub).__name__))
            name, n = base, 1
            taken = set(self._submodule_names.values())
            while name in taken:
                name, n = f"{base}_{n}", n + 1
            self._submodule_names[id(sub)] = name
            self._keepalive.append(sub)
        self.submodules.setdefault(name, sub)
        return name

    def take_handle(self) -> int:
        handle = self._next_handle
        self._next_handle += 1
        return handle


class MethodBuilder:
    """Builds the graph of one method while its Python code runs on :class:`TracedTensor` s."""

    def __init__(self, session: TraceSession, method: str) -> None:
        self.session = session
        self.method = method
        self.graph = Graph()
        self._params: dict[str, Value] = {}
        self._arrays: dict[int, tuple[np.ndarray, Value]] = {}
        self._scopes: list[str] = [""]

    @property
    def scope(self) -> str:
        return self._scopes[-1]

    @contextmanager
    def module_scope(self, module: Traceable) -> Iterator[str]:
        """Run the body with ``module``'s qualified path as the scope of new nodes."""
        path = self.session.module_path(module, self.scope)
        self._scopes.append(path)
        try:
            yield path
        finally:
            self._scopes.pop()

    # -- values -------------------------------------------------------------------------
    def add_input(self, name: str, array: np.ndarray) -> TracedTensor:
        value = self.graph.add_input(name, TensorType.of(array))
        return TracedTensor(value, self)

    def wrap(self, value: Value) -> TracedTensor:
        return TracedTensor(value, self)

    def value_of(self, x: object, like: TensorType | None = None, what: str = "operand") -> Value:
        """The graph value for ``x``: a traced tensor, a parameter, a numpy array (constant)
        or a Python number (a 0-d constant of ``like``'s dtype)."""
        if isinstance(x, TracedTensor):
            if x._builder is not self:
                raise InputError(
                    f"a traced tensor of method {x._builder.method!r} was used while tracing "
                    f"method {self.method!r}; pass values between methods as inputs and outputs"
                )
            return x._value
        if isinstance(x, Parameter):
            return self.param(self.session.param_name(x))
        if isinstance(x, (np.ndarray, np.generic)):
            return self.constant(np.asarray(x), keep_identity=isinstance(x, np.ndarray))
        if isinstance(x, (bool, int, float)) and not isinstance(x, np.generic):
            if like is None:
                raise InputError(
                    f"{what}: a Python number ({x!r}) needs a tensor operand to take its dtype from; "
                    "wrap it with numpy (np.float32(...)) or lowerkit.ops.constant"
                )
            array = np.asarray(x, dtype=like.numpy_dtype)
            if array.item() != x:
                raise InputError(
                    f"{what}: the Python number {x!r} does not fit the tensor dtype {like.dtype}"
                )
            return self.constant(array, keep_identity=False)
        raise InputError(
            f"{what}: expected a traced tensor, an nn.Parameter, a numpy array or a Python number, "
            f"got {type(x).__name__}"
        )

    def param(self, name: str) -> Value:
        """The value of parameter ``name`` in this graph: one ``param`` node per graph."""
        value = self._params.get(name)
        if value is None:
            array = self.session.parameters[name]
            node = self._add("param", [], {"name": name}, [TensorType.of(array)], [name])
            value = self._params[name] = node.outputs[0]
        return value

    def constant(self, array: np.ndarray, keep_identity: bool = True) -> Value:
        """A ``constant`` node holding a copy of ``array`` (one per array object per graph)."""
        if keep_identity and id(array) in self._arrays:
            return self._arrays[id(array)][1]
        try:
            ttype = TensorType.of(array)
        except ValueError as err:
            raise InputError(f"constant of shape {list(array.shape)}: {err}") from None
        copy = np.array(array, copy=True)
        copy.flags.writeable = False
        node = self._add("constant", [], {"value": copy}, [ttype], ["const"])
        if keep_identity:
            self._arrays[id(array)] = (array, node.outputs[0])
        return node.outputs[0]

    # -- nodes --------------------------------------------------------------------------
    def apply(self, op: str, operands: Sequence[object], attrs: dict[str, object] | None = None) -> TracedTensor:
        """Record ``op(*operands, **attrs)`` and return its single output as a traced tensor."""
        like = next((_type_hint(x) for x in operands if _type_hint(x) is not None), None)
        values = [self.value_of(x, like, what=f"{op} input {i}") for i, x in enumerate(operands)]
        node = self.emit(op, values, attrs or {})
        return self.wrap(node.outputs[0])

    def emit(
        self,
        op: str,
        inputs: Sequence[Value],
        attrs: dict[str, object],
        output_types: Sequence[TensorType] | None = None,
        hints: Sequence[str] | None = None,
    ) -> Node:
        """Record a node; output types come from the op schema unless given (``call``)."""
        source = user_source()
        where = describe(op, self.scope, source)
        if not has_schema(op):
            raise InputError(f"{where}: op {op!r} is not in the op registry")
        schema = get_schema(op)
        try:
            normalized = schema.normalize_attrs(dict(attrs))
        except TypeError as err:
            raise InputError(f"{where}: {err}") from None
        if output_types is None:
            if len(inputs) < schema.min_inputs or (
                schema.max_inputs is not None and len(inputs) > schema.max_inputs
            ):
                raise InputError(f"{where}: expects inputs {list(schema.inputs)}, got {len(inputs)}")
            try:
                output_types = schema.infer([v.type for v in inputs], normalized)
            except ShapeError as err:
                given = ", ".join(str(v.type) for v in inputs)
                message = str(err).removeprefix(f"{op}: ")
                raise InputError(f"{where}: {message} (inputs: {given})") from None
        if hints is None:
            hints = [self._hint(op)] * len(output_types)
        return self._add(op, inputs, normalized, output_types, hints, source)

    def _add(self, op, inputs, attrs, output_types, hints, source=None) -> Node:
        if source is None:
            source = user_source()
        return self.graph.add_node(
            op,
            list(inputs),
            list(output_types),
            attrs,
            output_hints=list(hints),
            debug_handle=self.session.take_handle(),
            scope=self.scope,
            source=source,
        )

    def _hint(self, op: str) -> str:
        # Nodes of a leaf layer are named after it (layer1_0_conv1); others after scope + op.
        scope = self.scope
        if not scope:
            return op
        return scope if self._is_leaf_scope() else f"{scope}_{op}"

    def _is_leaf_scope(self) -> bool:
        scope = self.scope
        return not any(p.startswith(scope + ".") for p in self.session._used_paths)

    def outputs_of(self, result: object) -> tuple[list[Value], bool]:
        """The graph outputs for what the traced Python code returned."""
        if isinstance(result, dict):
            result = tuple(result.values())
        if isinstance(result, (tuple, list)):
            items, returns_tuple = list(result), True
            if not items:
                raise InputError(f"method {self.method!r} returned an empty {type(result).__name__}")
        else:
            items, returns_tuple = [result], False
        outputs = []
        for i, item in enumerate(items):
            if not isinstance(item, (TracedTensor, Parameter, np.ndarray)):
                where = f"output {i}" if returns_tuple else "its result"
                raise InputError(
                    f"method {self.method!r} cannot be traced: {where} is a {type(item).__name__}; "
                    "expected a traced tensor (or numpy array), or a tuple of them"
                )
            outputs.append(self.value_of(item))
        return outputs, returns_tuple

    def finish(self, result: object) -> GraphMethod:
        """The traced method; a returned dict names its outputs (else output0, output1, ...)."""
        names: tuple[str, ...] = ()
        if isinstance(result, dict):
            names = tuple(result)
            if not all(isinstance(k, str) and k for k in names):
                raise InputError(
                    f"method {self.method!r} returned a dict: its keys name the outputs and must "
                    f"be non-empty strings, got {list(names)}"
                )
        outputs, returns_tuple = self.outputs_of(result)
        self.graph.set_outputs(outputs)
        return GraphMethod(self.graph, returns_tuple, names)


def _type_hint(x: object) -> TensorType | None:
    if isinstance(x, TracedTensor):
        return x._value.type
    if isinstance(x, (Parameter, np.ndarray)):
        try:
            return TensorType(dtype_name(x.dtype), x.shape)
        except ValueError:
            return None
    return None

