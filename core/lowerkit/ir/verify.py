"""The IR verifier: checks the invariants every pass and backend may rely on.

:func:`verify_graph` checks one graph: SSA (every value bound once, names unique), order
(no use before definition), known ops, arity, attribute names and kinds (already in
canonical form), output types equal to the schema's inference, graph outputs defined, and
debug handles unique. Given the module, it also checks ``param`` against the module's
parameters, ``call`` against the called method's signature, and that every node has a debug
handle (``-1``, "unset", is allowed only in free graphs). :func:`verify_module` checks every
method and submodule, debug handles unique across all methods, and that calls do not recurse.

Every failure is a :class:`~lowerkit.errors.VerificationError` naming the method and the
node (``node.where()``: op, debug handle, scope and source line).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import InputError, VerificationError
from .graph import Graph
from .node import AttrValue, Node, Value
from .types import TensorType

if TYPE_CHECKING:  # pragma: no cover
    from .module import Module

__all__ = ["verify_graph", "verify_module"]


def _fail(method: str, node: Node | None, message: str) -> VerificationError:
    where = f"method {method!r}" + (f", {node.where()}" if node is not None else "")
    return VerificationError(f"{where}: {message}")


def _types(values: list[Value]) -> str:
    return "(" + ", ".join(str(v.type) for v in values) + ")"


def _canonical(value: object, kind: str) -> bool:
    """Whether ``value`` is already in the Python form ``AttrSpec.normalize`` gives ``kind``."""
    if kind == "int":
        return type(value) is int
    if kind == "float":
        return type(value) is float
    if kind == "bool":
        return type(value) is bool
    if kind == "str":
        return type(value) is str
    if kind in ("ints", "floats"):
        return type(value) is tuple and all(_canonical(v, kind[:-1]) for v in value)  # type: ignore[union-attr]
    if kind == "tensor":
        return isinstance(value, np.ndarray)
    return False


def _check_attrs(method: str, node: Node, schema: Any) -> dict[str, AttrValue]:
    try:
        normalized = schema.normalize_attrs(node.attrs)
    except TypeError as err:
        raise _fail(method, node, str(err)) from None
    for key, value in node.attrs.items():
        spec = schema.attr(key)
        if value is None and spec.default is None:
            continue
        if not _canonical(value, spec.kind):
            raise _fail(
                method, node,
                f"attribute {key!r} should be stored as {spec.kind} (canonical form "
                f"{normalized[key]!r}), got {value!r} of type {type(value).__name__}",
            )
    return normalized


def _check_arity(method: str, node: Node, schema: Any) -> None:
    n = len(node.inputs)
    low, high = schema.min_inputs, schema.max_inputs
    if n < low or (high is not None and n > high):
        wanted = f"at least {low}" if high is None else (
            f"{low}" if low == high else f"{low} to {high}"
        )
        names = ", ".join(schema.inputs) or "none"
        raise _fail(method, node, f"{node.op} takes {wanted} inputs ({names}), got {n}")
    if schema.num_outputs is not None and len(node.outputs) != schema.num_outputs:
        raise _fail(
            method, node, f"{node.op} has {schema.num_outputs} output(s), node binds {len(node.outputs)}"
        )


def _check_inference(method: str, node: Node, attrs: dict[str, AttrValue], schema: Any) -> None:
    from ..opset import ShapeError

    try:
        inferred = list(schema.infer([v.type for v in node.inputs], attrs))
    except ShapeError as err:
        raise _fail(
            method, node, f"invalid inputs {_types(node.inputs)}: {err}"
        ) from None
    except Exception as err:  # a schema that fails otherwise must not escape as a crash (loading files)
        raise _fail(
            method, node,
            f"type inference failed for inputs {_types(node.inputs)} ({type(err).__name__}: {err})",
        ) from err
    if inferred != [v.type for v in node.outputs]:
        shown = "(" + ", ".join(str(t) for t in inferred) + ")"
        raise _fail(
            method, node,
            f"output types {_types(node.outputs)} differ from the inferred {shown} "
            f"for inputs {_types(node.inputs)}",
        )


def _check_param(method: str, node: Node, module: Module) -> None:
    name = node.attrs.get("name")
    if name not in module.parameters:
        known = sorted(module.parameters)
        shown = ", ".join(known[:8]) + (", ..." if len(known) > 8 else "")
        raise _fail(method, node, f"no parameter {name!r} in module {module.name} (has: {shown or 'none'})")
    array = module.parameters[name]  # type: ignore[index]
    try:
        expected = TensorType.of(array)
    except ValueError as err:
        raise _fail(method, node, f"parameter {name!r}: {err}") from None
    if node.outputs[0].type != expected:
        raise _fail(
            method, node, f"param {name!r} is {expected} in the module, node says {node.outputs[0].type}"
        )


def _check_call(method: str, node: Node, module: Module) -> None:
    from .module import Module as ModuleType

    target_name = node.attrs.get("method")
    sub = node.attrs.get("module", "")
    if sub:
        if sub not in module.submodules:
            raise _fail(
                method, node,
                f"no submodule {sub!r} in module {module.name} (has: {sorted(module.submodules)})",
            )
        target = module.submodules[sub]  # type: ignore[index]
        owner = f"submodule {sub!r}"
    else:
        target = module
        owner = f"module {module.name}"
    try:
        sig = target.signature(target_name)  # type: ignore[arg-type, union-attr]
    except (InputError, KeyError, AttributeError):
        if isinstance(target, ModuleType):
            methods = sorted(target.methods)
        else:  # a LoweredModule keeps the signatures of its methods in its record
            methods = sorted(getattr(getattr(target, "record", None), "signatures", {}) or {})
        raise _fail(method, node, f"{owner} has no method {target_name!r} (has: {methods})") from None
    wanted_in = tuple(t for _, t in sig.inputs)
    if tuple(v.type for v in node.inputs) != wanted_in:
        shown = "(" + ", ".join(str(t) for t in wanted_in) + ")"
        raise _fail(
            method, node,
            f"call to {target_name!r} of {owner} passes {_types(node.inputs)}, it takes {shown}",
        )
    if tuple(v.type for v in node.outputs) != tuple(sig.outputs):
        shown = "(" + ", ".join(str(t) for t in sig.outputs) + ")"
        raise _fail(
            method, node,
            f"call to {target_name!r} of {owner} binds {_types(node.outputs)}, it returns {shown}",
        )


def verify_graph(
    graph: Graph,
    module: Module | None = None,
    *,
    method: str = "forward",
    _handles: dict[int, tuple[str, Node]] | None = None,
) -> None:
    """Check ``graph`` (method ``method`` of ``module``, or a free graph when ``module`` is None).

    Raises :class:`~lowerkit.errors.VerificationError` at the first broken invariant.
    """
    from ..opset import get_schema, has_schema
    from ..opset.structural import STRUCTURAL_OPS

    defined: set[Value] = set()
    names: dict[str, str | Node] = {}  # who bound each name; texts made only for errors
    handles = {} if _handles is None else _handles

    def bind(value: Value, node: Node | None, what: str) -> None:
        if not isinstance(value, Value) or not isinstance(value.type, TensorType):
            raise _fail(method, node, f"{what} is not a typed Value: {value!r}")
        if value in defined:
            raise _fail(method, node, f"{what} %{value.name} is bound a second time (SSA)")
        if value.name in names:
            by = names[value.name]
            raise _fail(
                method, node,
                f"{what} is named %{value.name}, a name already bound by "
                f"{by if isinstance(by, str) else by.where()}",
            )
        defined.add(value)
        names[value.name] = what if node is None else node

    for i, value in enumerate(graph.inputs):
        bind(value, None, f"input {i}")
    for node in graph.nodes:
        if not has_schema(node.op):
            raise _fail(method, node, f"unknown op {node.op!r}")
        for i, value in enumerate(node.inputs):
            if not isinstance(value, Value) or value not in defined:  # non-Values may not hash
                all_bound = {v for n in graph.nodes for v in n.outputs}
                why = "before it is defined (nodes must be in topological order)" if isinstance(
                    value, Value
                ) and value in all_bound else "which no input or node of this graph binds"
                raise _fail(method, node, f"input {i} reads %{getattr(value, 'name', value)} {why}")
        for k, value in enumerate(node.outputs):
            bind(value, node, f"output {k}")
        schema = get_schema(node.op)
        _check_arity(method, node, schema)
        attrs = _check_attrs(method, node, schema)
        if type(node.debug_handle) is not int or node.debug_handle < -1:
            raise _fail(method, node, f"debug handle must be an int >= 0 (or -1 unset), got {node.debug_handle!r}")
        if node.debug_handle == -1:
            if module is not None:
                raise _fail(method, node, "has no debug handle (-1); nodes of a module need one")
        elif node.debug_handle in handles:
            other_method, other = handles[node.debug_handle]
            raise _fail(
                method, node,
                f"debug handle {node.debug_handle} is also used by {other.where()} in method {other_method!r}",
            )
        else:
            handles[node.debug_handle] = (method, node)
        if node.op not in STRUCTURAL_OPS or node.op == "constant":
            _check_inference(method, node, attrs, schema)
        elif node.op == "param":
            if module is not None:
                _check_param(method, node, module)
        elif node.op == "call" and module is not None:
            _check_call(method, node, module)
    for k, value in enumerate(graph.outputs):
        if not isinstance(value, Value) or value not in defined:
            raise _fail(
                method, None,
                f"graph output {k} %{getattr(value, 'name', value)} is not bound by any input or node",
            )


def _check_recursion(module: Module) -> None:
    from .module import GraphMethod

    calls: dict[str, list[tuple[str, Node]]] = {}
    for name, m in module.methods.items():
        if isinstance(m, GraphMethod):
            calls[name] = [
                (str(n.attrs.get("method")), n)
                for n in m.graph.nodes
                if n.op == "call" and not n.attrs.get("module")
            ]
    # Iterative depth-first search: a file may hold long call chains.
    state: dict[str, int] = {}  # 1 visiting, 2 done
    for root in calls:
        if root in state:
            continue
        state[root] = 1
        path = [root]
        stack = [iter(calls[root])]
        while stack:
            step = next(stack[-1], None)
            if step is None:
                state[path.pop()] = 2
                stack.pop()
                continue
            callee, node = step
            if state.get(callee) == 1:
                cycle = " -> ".join(path[path.index(callee):] + [callee])
                raise _fail(path[-1], node, f"methods call each other recursively ({cycle})")
            if callee in calls and callee not in state:
                state[callee] = 1
                path.append(callee)
                stack.append(iter(calls[callee]))


def verify_module(module: Module) -> None:
    """Check every method of ``module`` (and, recursively, of its un-lowered submodules).

    Debug handles must be set and unique across all methods of one module; a submodule has
    its own handles.
    """
    from .module import GraphMethod, Module as ModuleType

    handles: dict[int, tuple[str, Node]] = {}
    for name, m in module.methods.items():
        if isinstance(m, GraphMethod):
            verify_graph(m.graph, module, method=name, _handles=handles)
    _check_recursion(module)
    for sub_name, sub in module.submodules.items():
        if isinstance(sub, ModuleType):
            try:
                verify_module(sub)
            except VerificationError as err:
                raise VerificationError(f"submodule {sub_name!r}: {err}") from None
