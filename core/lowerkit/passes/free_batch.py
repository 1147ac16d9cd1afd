"""Free the batch dimension of a module traced or imported at one concrete batch size.

Front ends build graphs at a concrete batch ``B``; :func:`free_batch` turns the leading dim
of the chosen inputs into a symbolic dim (``"N"``) and infers every type again, so the
module accepts any batch size. A ``reshape`` that kept the batch as its leading entry
(``x.reshape(B, -1)``, ONNX ``Reshape(x, [0, -1])`` or a folded ``Shape``) is rewritten to
``(-1, *rest)``. Every new type must give back the old one with ``N = B``; an op that mixes
the batch with other dims (a concat along it, a flatten across it, a constant made for
``B``) cannot keep it free and is an ``InputError`` naming the node.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ..errors import InputError
from ..ir import Graph, GraphMethod, Module, TensorType
from ..ir.types import SYMBOL_RE
from ..opset import get_schema
from ..opset.registry import ShapeError

__all__ = ["free_batch"]


def free_batch(
    module: Module, batch: int, inputs: Mapping[str, Sequence[str]] | None = None, *, symbol: str = "N"
) -> Module:
    """A copy of ``module`` whose methods take any batch size.

    ``batch`` is the size the module was built with; ``inputs`` maps each method to the
    input names whose leading dim becomes ``symbol`` (default: every input of every method
    whose leading dim equals ``batch``). Raises ``InputError`` when a node cannot keep the
    batch free.
    """
    if not SYMBOL_RE.match(symbol):
        raise InputError(f"symbol must be an identifier like 'N', got {symbol!r}")
    methods: dict[str, GraphMethod] = {}
    signatures: dict[str, tuple[TensorType, ...]] = {}
    for name, method in module.methods.items():
        if not isinstance(method, GraphMethod):
            methods[name] = method  # type: ignore[assignment]
            continue
        graph = method.graph.copy()
        chosen = None if inputs is None else set(inputs.get(name, ()))
        for v in graph.inputs:
            t = v.type
            if (chosen is None and t.rank and t.shape[0] == batch) or (chosen is not None and v.name in chosen):
                if not t.rank or t.shape[0] != batch:
                    raise InputError(
                        f"method {name!r}, input {v.name!r}: its leading dim should be the batch "
                        f"size {batch}, got {t}"
                    )
                v.type = TensorType(t.dtype, (symbol,) + t.shape[1:])
        _reinfer(module, name, graph, batch, symbol, signatures)
        methods[name] = GraphMethod(graph, method.returns_tuple, method.output_names)
        signatures[name] = tuple(v.type for v in graph.outputs)
    return Module(module.parameters, methods, module.submodules, name=module.name)


def _reinfer(
    module: Module, method: str, graph: Graph, batch: int, symbol: str,
    signatures: Mapping[str, tuple[TensorType, ...]],
) -> None:
    for node in graph.nodes:
        old = [v.type for v in node.outputs]
        if node.op in ("param", "constant"):
            continue
        in_types = [v.type for v in node.inputs]
        if all(t.is_static for t in in_types):
            continue
        where = f"method {method!r}, {node.where()}"
        if node.op == "call":
            if node.attrs.get("module"):
                sub = module.submodules.get(str(node.attrs["module"]))
                new = list(sub.signature(str(node.attrs["method"])).outputs) if sub is not None else old
            else:
                new = list(signatures.get(str(node.attrs["method"]), old))
        else:
            attrs = dict(node.attrs)
            if node.op == "reshape" and not in_types[0].is_static and in_types[0].shape[0] == symbol:
                if old[0].rank and old[0].shape[0] == batch:
                    attrs["shape"] = (-1,) + tuple(old[0].shape[1:])
            try:
                new = get_schema(node.op).infer(in_types, attrs)
            except ShapeError as err:
                raise InputError(f"{where}: the batch dim cannot stay free: {err}") from None
            node.attrs = attrs
        sizes = {symbol: batch}
        if [t.bind(sizes) for t in new] != old:
            shown = ", ".join(str(t) for t in new)
            raise InputError(
                f"{where}: the batch dim cannot stay free: with {symbol} = {batch} it would compute "
                f"{shown} instead of {', '.join(str(t) for t in old)} (e.g. a shape or constant "
                f"fixed for batch {batch})"
            )
        for v, t in zip(node.outputs, new):
            v.type = t
