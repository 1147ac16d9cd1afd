"""torch.export program -> lowerkit Module: export, decompose, check, convert node by node.

The program is decomposed to PyTorch's core ATen op set (``run_decompositions``), keeping
whole the overloads lowerkit has a direct op for (``linear``, ``hardswish``, ...). Then every
``call_function`` node is imported by the function registered for its ATen overload
(:mod:`._aten_ops`), which calls :mod:`lowerkit.ops` (``torch.nn.functional`` signatures) on
traced tensors; each lowerkit node gets the exported node's module scope and user source line.
Nodes that read only compile-time constants (``arange``, ``full``, lifted constants) are
evaluated by torch at import time. Parameters and buffers become module parameters under
their state-dict names, materialised on first use (an unused buffer such as batch norm's
``num_batches_tracked`` is left out).
"""

from __future__ import annotations

import os
import sysconfig
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import InputError, LowerkitError, UnsupportedOperatorError
from ..ir.module import Module
from ..ir.node import SourceLocation
from ..ir.types import TensorType, dtype_name
from ..ir.verify import verify_module
from ..tracing.builder import MethodBuilder, TraceSession
from ..tracing.state import activate, deactivate
from ..tracing.tensor import TracedTensor
from ._deps import require_torch
from ._registry import IMPORTERS, supported
from ._source import scope_of, source_of


@dataclass(frozen=True, slots=True)
class _Param:
    """A parameter or buffer placeholder, materialised as a ``param`` node on first use."""

    name: str
    array: np.ndarray


class _Const:
    """A tensor known at import time (lifted constant or folded node), as a torch tensor."""

    __slots__ = ("tensor",)

    def __init__(self, tensor: Any) -> None:
        self.tensor = tensor


class _NodeBuilder(MethodBuilder):
    """A method builder whose nodes take the scope and source of the exported node being imported."""

    def __init__(self, session: TraceSession) -> None:
        super().__init__(session, "forward")
        self.node_scope = ""
        self.node_source: SourceLocation | None = None

    @property
    def scope(self) -> str:
        return self.node_scope

    def _add(self, op, inputs, attrs, output_types, hints, source=None):
        return self.graph.add_node(
            op, list(inputs), list(output_types), attrs, output_hints=list(hints),
            debug_handle=self.session.take_handle(), scope=self.node_scope, source=self.node_source,
        )

    def _is_leaf_scope(self) -> bool:
        return True  # name nodes after their module path (conv1, layer1_0_conv1)


class ImportContext:
    """The state of one import, handed to every ATen importer."""

    def __init__(self, builder: _NodeBuilder, library_dirs: tuple[str, ...]) -> None:
        self.builder = builder
        self.library_dirs = library_dirs
        self.node: Any = None

    def begin(self, node: Any) -> None:
        self.node = node
        self.builder.node_scope = scope_of(node.meta)
        self.builder.node_source = source_of(node.meta, self.library_dirs)

    def where(self, node: Any = None) -> str:
        """``aten.convolution.default (node 'convolution' in layer1.0.conv1 at net.py:12)``."""
        node = node if node is not None else self.node
        parts = [f"node {node.name!r}"]
        scope = scope_of(node.meta)
        if scope:
            parts.append(f"in {scope}")
        source = source_of(node.meta, self.library_dirs)
        if source is not None:
            parts.append(f"at {source}")
        return f"{target_name(node.target)} ({' '.join(parts)})"

    def unsupported(self, message: str) -> UnsupportedOperatorError:
        """An error for a node whose configuration lowerkit cannot express."""
        return UnsupportedOperatorError(f"{self.where()}: {message}")

    def constant(self, array: Any) -> TracedTensor:
        return self.builder.wrap(self.builder.constant(np.asarray(array)))


def target_name(target: Any) -> str:
    """The registry key of a call_function target: ``aten.add.Tensor``, ``operator.getitem``."""
    if isinstance(target, str):
        return target
    name = getattr(target, "__name__", None)
    module = getattr(target, "__module__", None)
    if module in ("_operator", "operator") and name:
        return f"operator.{name}"
    return str(target)


def _library_dirs(torch: Any) -> tuple[str, ...]:
    dirs = [os.path.dirname(os.path.abspath(torch.__file__))]
    for key in ("stdlib", "platstdlib"):
        path = sysconfig.get_paths().get(key)
        if path:
            dirs.append(os.path.abspath(path))
    return tuple(d + os.sep for d in dirs)


# -- from a model to a decomposed ExportedProgram ------------------------------------------------
def _as_tuple(example_inputs: Any) -> tuple[Any, ...]:
    if example_inputs is None:
        return ()
    if isinstance(example_inputs, (tuple, list)):
        return tuple(example_inputs)
    return (example_inputs,)


def _to_torch(torch: Any, examples: Sequence[Any]) -> tuple[Any, ...]:
    result = []
    for i, x in enumerate(examples):
        if isinstance(x, torch.Tensor):
            result.append(x)
        elif isinstance(x, (np.ndarray, np.generic)):
            result.append(torch.from_numpy(np.ascontiguousarray(x)))
        else:
            raise InputError(
                f"lowerkit.torch.load: example input {i} must be a torch.Tensor or a numpy array, "
                f"got {type(x).__name__}"
            )
    return tuple(result)


def export_program(torch: Any, model: Any, examples: tuple[Any, ...]) -> Any:
    """``torch.export.export`` of ``model`` in eval mode (its training flags are restored)."""
    modes = [(m, m.training) for m in model.modules()]
    model.eval()
    try:
        return torch.export.export(model, examples)
    except Exception as err:  # torch raises many kinds (UserError, Unsupported, TypeError...)
        raise InputError(
            f"torch.export.export could not export {type(model).__name__} on inputs "
            f"{[tuple(x.shape) for x in examples]}: {type(err).__name__}: {err}"
        ) from err
    finally:
        for m, training in modes:
            m.training = training


def decompose(torch: Any, program: Any) -> Any:
    """Decompose to the core ATen op set, keeping the overloads lowerkit imports whole."""
    from . import _aten_ops, _aten_shape  # noqa: F401  (register the importers)

    table = torch.export.default_decompositions()
    for name, entry in IMPORTERS.items():
        if entry.preserve and entry.available():
            overload = _overload(torch, name)
            if overload is not None:
                table.pop(overload, None)
    return program.run_decompositions(table)


def _overload(torch: Any, name: str) -> Any:
    parts = name.split(".")
    if len(parts) != 3 or parts[0] != "aten":
        return None
    packet = getattr(torch.ops.aten, parts[1], None)
    return getattr(packet, parts[2], None) if packet is not None else None


# -- symbolic dims -------------------------------------------------------------------------------
def pin_symbolic_dims(torch: Any, placeholders: Sequence[Any], examples: Sequence[Any]) -> dict[Any, int]:
    """Symbol -> size, from the example inputs, for every symbolic dim of the user inputs.

    Hook for symbolic batch: today every symbolic dim (a dynamic batch) is pinned to the
    example's size, so the imported graph is static. A symbolic-shape import would return
    the symbols unpinned here and give the graph inputs symbolic dims instead.
    """
    bindings: dict[Any, int] = {}
    for node, example in zip(placeholders, examples):
        val = node.meta.get("val")
        if val is None:
            continue
        for dim, size in zip(val.shape, example.shape):
            if isinstance(dim, torch.SymInt):
                expr = dim.node.expr
                if getattr(expr, "is_Symbol", False):
                    bindings[expr] = int(size)
    return bindings


def _static(torch: Any, value: Any, bindings: Mapping[Any, int]) -> Any:
    """A SymInt made concrete through the pinned bindings; other values unchanged."""
    if isinstance(value, torch.SymInt):
        return int(value.node.expr.xreplace(bindings))
    return value


# -- the import ----------------------------------------------------------------------------------
def import_program(
    torch: Any, program: Any, examples: tuple[Any, ...], name: str
) -> Module:
    """Import a decomposed ExportedProgram whose user inputs are ``examples``."""
    from . import _aten_ops, _aten_shape  # noqa: F401  (register the importers)

    graph = program.graph_module.graph
    signature = program.graph_signature
    specs = {spec.arg.name: spec for spec in signature.input_specs}
    placeholders = [n for n in graph.nodes if n.op == "placeholder"]
    user = [n for n in placeholders if specs[n.name].kind.name == "USER_INPUT"]
    if len(user) != len(examples):
        raise InputError(
            f"lowerkit.torch.load: the program takes {len(user)} tensor input(s) "
            f"({', '.join(n.name for n in user)}), {len(examples)} example input(s) were given"
        )
    library = _library_dirs(torch)
    session = TraceSession(name, None)
    builder = _NodeBuilder(session)
    ctx = ImportContext(builder, library)
    _check_supported(ctx, graph, specs)
    bindings = pin_symbolic_dims(torch, user, examples)

    state = program.state_dict
    constants = getattr(program, "constants", {}) or {}
    env: dict[Any, Any] = {}
    for node, example in zip(user, examples):
        array = example.detach().cpu().numpy()
        try:
            ttype = TensorType(dtype_name(array.dtype), tuple(array.shape))
        except ValueError:
            raise InputError(f"input {node.name!r} has dtype {example.dtype}, which lowerkit lacks") from None
        _check_example(torch, node, example)
        env[node] = builder.wrap(builder.graph.add_input(node.name, ttype))
    for node in placeholders:
        spec = specs[node.name]
        kind = spec.kind.name
        if kind in ("PARAMETER", "BUFFER"):
            tensor = state[spec.target] if spec.target in state else constants[spec.target]
            if tensor.is_floating_point():
                env[node] = _Param(spec.target, tensor.detach().cpu().numpy())
            else:  # an index table or a counter: an import-time constant, not a weight
                env[node] = _Const(tensor)
        elif kind == "CONSTANT_TENSOR":
            env[node] = _Const(constants[spec.target])
        elif kind != "USER_INPUT":
            raise UnsupportedOperatorError(f"program input {node.name!r} of kind {kind} is not supported")

    token = activate(builder)
    try:
        outputs = None
        for node in graph.nodes:
            if node.op == "call_function":
                ctx.begin(node)
                env[node] = _import_node(torch, ctx, node, env, bindings)
            elif node.op == "output":
                ctx.node = node
                builder.node_scope, builder.node_source = "", None
                outputs = [_tensor_arg(ctx, env, o) for o in node.args[0]]
            elif node.op != "placeholder":
                raise UnsupportedOperatorError(f"graph node {node.name!r} of kind {node.op!r} is not supported")
    finally:
        deactivate(token)
    if not outputs:
        raise UnsupportedOperatorError("the exported program returns no tensors")
    graph_method = builder.finish(tuple(outputs) if len(outputs) > 1 else outputs[0])
    session.methods["forward"] = graph_method
    module = Module(session.parameters, {"forward": graph_method}, {}, name)
    verify_module(module)  # an importer bug must not reach a backend
    return module


def _check_example(torch: Any, node: Any, example: Any) -> None:
    val = node.meta.get("val")
    if val is None:
        return
    static = [d if not isinstance(d, torch.SymInt) else None for d in val.shape]
    if len(static) != example.dim() or any(d is not None and d != s for d, s in zip(static, example.shape)):
        shown = ["?" if d is None else d for d in static]
        raise InputError(
            f"example input {node.name!r} has shape {list(example.shape)}, the program expects {shown}"
        )


def _check_supported(ctx: ImportContext, graph: Any, specs: Mapping[str, Any]) -> None:
    """Raise one error listing every node that can be neither imported nor folded."""
    constant: set[Any] = set()
    for node in graph.nodes:
        if node.op == "placeholder" and _is_constant_input(node, specs[node.name]):
            constant.add(node)
    missing = []
    for node in graph.nodes:
        if node.op != "call_function":
            continue
        # a sym_size is a static int once dims are pinned; what reads only constants folds
        if target_name(node.target) == "aten.sym_size.int" or all(n in constant for n in node.all_input_nodes):
            constant.add(node)
        elif not supported(target_name(node.target)):
            missing.append(ctx.where(node))
    if missing:
        raise UnsupportedOperatorError(
            f"the exported program has {len(missing)} node(s) lowerkit cannot import: "
            + "; ".join(missing)
            + ". See docs/torch.md for the ATen ops lowerkit imports"
        )


def _is_constant_input(node: Any, spec: Any) -> bool:
    kind = spec.kind.name
    if kind == "CONSTANT_TENSOR":
        return True
    val = node.meta.get("val")
    return kind in ("PARAMETER", "BUFFER") and val is not None and not val.is_floating_point()


def _import_node(torch: Any, ctx: ImportContext, node: Any, env: dict[Any, Any], bindings: Mapping[Any, int]) -> Any:
    inputs = node.all_input_nodes
    if all(isinstance(env[n], (_Const, int, float, bool)) for n in inputs):
        return _fold(torch, ctx, node, env, bindings)
    entry = IMPORTERS[target_name(node.target)]
    args = [_resolve(torch, ctx, env, a, bindings) for a in node.args]
    kwargs = {k: _resolve(torch, ctx, env, v, bindings) for k, v in node.kwargs.items()}
    try:
        return entry.fn(ctx, *args, **kwargs)
    except UnsupportedOperatorError:
        raise
    except LowerkitError as err:
        raise UnsupportedOperatorError(f"{ctx.where()}: lowerkit cannot import it: {err}") from err
    except TypeError as err:  # an overload called with arguments the importer does not take
        raise UnsupportedOperatorError(f"{ctx.where()}: unexpected arguments: {err}") from err


def _fold(torch: Any, ctx: ImportContext, node: Any, env: dict[Any, Any], bindings: Mapping[Any, int]) -> Any:
    """Evaluate a node whose tensor inputs are all import-time constants."""
    def known(n: Any) -> Any:
        value = env[n]
        return value.tensor if isinstance(value, _Const) else value

    unwrap = lambda a: _map(torch, a, known, bindings)  # noqa: E731
    try:
        result = node.target(*unwrap(node.args), **{k: unwrap(v) for k, v in node.kwargs.items()})
    except Exception as err:  # torch's own errors: say which node
        raise ctx.unsupported(f"evaluating it at import time failed: {err}") from err
    if isinstance(result, (tuple, list)):
        return tuple(_Const(r) if isinstance(r, torch.Tensor) else r for r in result)
    return _Const(result) if isinstance(result, torch.Tensor) else result


def _map(torch: Any, arg: Any, fn: Any, bindings: Mapping[Any, int]) -> Any:
    from torch.fx import Node

    if isinstance(arg, Node):
        return fn(arg)
    if isinstance(arg, (list, tuple)):
        return type(arg)(_map(torch, a, fn, bindings) for a in arg)
    return _static(torch, arg, bindings)


def _resolve(torch: Any, ctx: ImportContext, env: dict[Any, Any], arg: Any, bindings: Mapping[Any, int]) -> Any:
    """An argument as importers take it: traced tensors, numpy constants, Python values."""

    def value(node: Any) -> Any:
        v = env[node]
        if isinstance(v, _Param):
            ctx.builder.session.parameters.setdefault(v.name, v.array)
            return ctx.builder.wrap(ctx.builder.param(v.name))
        if isinstance(v, _Const):
            return v.tensor.detach().cpu().numpy()
        if isinstance(v, tuple):
            return tuple(x.tensor.detach().cpu().numpy() if isinstance(x, _Const) else x for x in v)
        return v

    return _map(torch, arg, value, bindings)


def _tensor_arg(ctx: ImportContext, env: dict[Any, Any], node: Any) -> Any:
    v = env[node]
    if isinstance(v, _Param):
        ctx.builder.session.parameters.setdefault(v.name, v.array)
        return ctx.builder.wrap(ctx.builder.param(v.name))
    if isinstance(v, _Const):
        return ctx.constant(v.tensor.detach().cpu().numpy())
    if not isinstance(v, TracedTensor):
        raise UnsupportedOperatorError(f"program output {node.name!r} is not a tensor ({type(v).__name__})")
    return v


def load(
    model: Any,
    example_inputs: Any = None,
    *,
    name: str | None = None,
) -> Module:
    """See :func:`lowerkit.torch.load`."""
    torch = require_torch()
    with warnings.catch_warnings():
        # torch.export warns about its own pytree use (not the user's code) on every export
        warnings.filterwarnings("ignore", message=r".*LeafSpec.*", category=FutureWarning)
        return _load(torch, model, example_inputs, name)


def _load(torch: Any, model: Any, example_inputs: Any, name: str | None) -> Module:
    examples = _to_torch(torch, _as_tuple(example_inputs))
    exported_type = torch.export.ExportedProgram
    if isinstance(model, exported_type):
        program = model
        if not examples:
            stored = getattr(program, "example_inputs", None)
            if stored:
                examples = tuple(stored[0])
        if not examples:
            raise InputError("lowerkit.torch.load: this ExportedProgram stores no example inputs; pass example_inputs")
        default_name = "ExportedProgram"
    elif isinstance(model, torch.nn.Module):
        if not examples:
            raise InputError(
                f"lowerkit.torch.load: exporting {type(model).__name__} needs example_inputs "
                "(a tensor or a tuple of tensors)"
            )
        program = export_program(torch, model, examples)
        default_name = type(model).__name__
    else:
        raise InputError(
            "lowerkit.torch.load expects a torch.nn.Module or a torch.export.ExportedProgram, "
            f"got {type(model).__name__}"
        )
    program = decompose(torch, program)
    return import_program(torch, program, examples, name or default_name)

