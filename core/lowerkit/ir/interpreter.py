"""A small graph interpreter: runs a method of a module with a table of numpy kernels.

The reference backend runs whole modules with it; the partitioner and other backends reuse
it for subgraphs. It resolves the structural ops itself (``param``, ``constant``, ``call``)
and hands every other node to ``kernels[node.op]``. Each concern is one overridable method
(:meth:`Interpreter.run_node`, :meth:`~Interpreter.param`, :meth:`~Interpreter.constant`,
:meth:`~Interpreter.call`, :meth:`~Interpreter.call_kernel`), as in ``torch.fx.Interpreter``.

Values are dropped right after their last use, so a deep model does not keep every
activation alive while it runs.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Union

import numpy as np

from ..errors import (
    InputError,
    LowerkitError,
    NodeExecutionError,
    UnsupportedOperatorError,
)
from .graph import Graph
from .module import graph_of
from .node import AttrValue, Node, Value

if TYPE_CHECKING:  # pragma: no cover
    from .module import Module

# A kernel takes the node's input arrays and its (normalised) attributes and returns one
# array, or a list of arrays for a multi-output op. It must not modify its inputs in place:
# parameters and constants are passed in directly and are read-only.
Kernel = Callable[[list[np.ndarray], dict[str, AttrValue]], Union[np.ndarray, list[np.ndarray]]]


def last_uses(graph: Graph) -> list[list[Value]]:
    """For each node index, the values that are dead once that node has run.

    A value dies after the last node that reads it; a value nobody reads dies right after
    the node that binds it; graph inputs nobody reads die after the first node. Graph
    outputs never die.
    """
    keep = set(graph.outputs)
    last: dict[Value, int] = {}
    for v in graph.inputs:
        last[v] = 0
    for i, node in enumerate(graph.nodes):
        for v in node.outputs:
            last[v] = i
        for v in node.inputs:
            last[v] = i
    dead: list[list[Value]] = [[] for _ in graph.nodes]
    for value, index in last.items():
        if value not in keep and dead:
            dead[index].append(value)
    return dead


class Interpreter:
    """Runs methods of ``module`` with ``kernels`` (op name -> :data:`Kernel`).

    ``check_outputs`` (default on) compares every kernel result with the node's declared
    output types, so a kernel that returns the wrong dtype or shape is caught at the node.
    ``module`` may be None to evaluate free graphs (no ``param`` or ``call`` nodes), e.g.
    for constant folding.
    """

    def __init__(self, module: Module | None, kernels: Mapping[str, Kernel], *, check_outputs: bool = True) -> None:
        self.module = module
        self.kernels = kernels
        self.check_outputs = check_outputs
        # graph -> last_uses(graph) for the module's method graphs, which never change once
        # the module is built; other graphs given to run_graph are not cached.
        self._free_lists: dict[Graph, list[list[Value]]] = {}

    # -- entry points -----------------------------------------------------------------
    def run(self, method: str, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        """Run ``method`` of the bound module on ``inputs``; returns the list of outputs."""
        graph = graph_of(self._bound(f"run method {method!r}"), method)
        if graph not in self._free_lists:
            self._free_lists[graph] = last_uses(graph)
        return self.run_graph(graph, inputs, method=method)

    def run_graph(self, graph: Graph, inputs: Sequence[np.ndarray], *, method: str = "<graph>") -> list[np.ndarray]:
        """Run ``graph`` (a method of the bound module, or a subgraph of one) on ``inputs``."""
        if len(inputs) != len(graph.inputs):
            raise InputError(
                f"method {method!r} takes {len(graph.inputs)} inputs, got {len(inputs)}"
            )
        env: dict[Value, np.ndarray] = dict(zip(graph.inputs, inputs))
        dead = self._free_lists.get(graph) or last_uses(graph)
        for node, dying in zip(graph.nodes, dead):
            args = [env[v] for v in node.inputs]
            for v in dying:  # drop before running, so the kernel holds the only reference
                env.pop(v, None)
            # No local may keep a result past this statement: it would outlive its last use.
            self._bind(env, node, self.run_node(node, args))
            del args
            for v in dying:  # outputs nobody reads
                env.pop(v, None)
        return [env[v] for v in graph.outputs]

    def _bound(self, what: str) -> Module:
        """The bound module; an :class:`InputError` naming ``what`` needed it when there is none."""
        if self.module is None:
            raise InputError(f"interpreter has no module bound: cannot {what}")
        return self.module

    @staticmethod
    def _bind(env: dict[Value, np.ndarray], node: Node, outputs: list[np.ndarray]) -> None:
        if len(outputs) != len(node.outputs):
            raise NodeExecutionError(
                node.debug_handle,
                f"{node.where()}: produced {len(outputs)} outputs, expected {len(node.outputs)}",
            )
        for v, out in zip(node.outputs, outputs):
            env[v] = out

    # -- one method per concern -------------------------------------------------------
    def run_node(self, node: Node, args: list[np.ndarray]) -> list[np.ndarray]:
        """Evaluate one node on its argument arrays; returns its outputs as a list."""
        if node.op == "param":
            return [self.param(node)]
        if node.op == "constant":
            return [self.constant(node)]
        if node.op == "call":
            return self.call(node, args)
        return self.call_kernel(node, args)

    def param(self, node: Node) -> np.ndarray:
        """``param(name=...)``: the module's parameter ``name``."""
        name = node.attrs["name"]
        module = self._bound(f"read parameter {name!r} ({node.where()})")
        try:
            return module.parameters[name]  # type: ignore[index]
        except KeyError:
            raise InputError(
                f"{node.where()}: module {module.name} has no parameter {name!r}"
            ) from None

    def constant(self, node: Node) -> np.ndarray:
        """``constant(value=...)``: the literal tensor."""
        return node.attrs["value"]  # type: ignore[return-value]

    def call(self, node: Node, args: list[np.ndarray]) -> list[np.ndarray]:
        """``call(method=..., module=...)``: another method of this module or of a submodule."""
        method = node.attrs["method"]
        sub = node.attrs.get("module", "")
        module = self._bound(f"call {method!r} ({node.where()})")
        if not sub:
            return self.run(method, args)  # type: ignore[arg-type]
        try:
            target = module.submodules[sub]  # type: ignore[index]
        except KeyError:
            raise InputError(
                f"{node.where()}: module {module.name} has no submodule {sub!r}; "
                f"its submodules are {sorted(module.submodules)}"
            ) from None
        result = target.run(method, *args)  # type: ignore[arg-type]
        return list(result) if isinstance(result, tuple) else [result]

    def call_kernel(self, node: Node, args: list[np.ndarray]) -> list[np.ndarray]:
        """Run ``kernels[node.op]``; other than lowerkit's, errors become ``NodeExecutionError``."""
        kernel = self.kernels.get(node.op)
        if kernel is None:
            raise UnsupportedOperatorError(f"{node.where()}: no kernel for op {node.op!r}")
        try:
            result = kernel(args, node.attrs)
        except LowerkitError:
            raise
        except Exception as err:
            raise NodeExecutionError(node.debug_handle, f"{node.where()}: kernel {node.op} failed: {err}") from err
        outputs = [np.asarray(r) for r in (result if isinstance(result, (list, tuple)) else [result])]
        if self.check_outputs:
            for v, out in zip(node.outputs, outputs):
                expected = v.type
                if out.dtype != expected.numpy_dtype or tuple(out.shape) != expected.shape:
                    raise NodeExecutionError(
                        node.debug_handle,
                        f"{node.where()}: kernel {node.op} returned {out.dtype}{list(out.shape)} "
                        f"for %{v.name}, expected {expected}"
                    )
        return outputs
