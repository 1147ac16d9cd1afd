"""Import-time evaluation of the ONNX nodes whose results are already known.

lowerkit imports one concrete input shape, so every ``Shape`` has a known result, and so
does everything computed from known tensors only: PyTorch writes ``x.view(x.size(0), -1)``
as ``Shape -> Gather -> Unsqueeze -> Concat -> Reshape``, and that shape arithmetic is
evaluated here (with onnx's reference evaluator, for any default-domain op) instead of
becoming graph nodes. The one lowerkit node left is the ``reshape`` with a constant shape.

A node lowerkit has an importer for is imported rather than folded when it reads a
floating-point initializer (a weight) as a tensor, so that weights stay module parameters.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from ._importer import DEFAULT_DOMAINS, ImportContext
from ._registry import CONSTANT_INPUTS, IMPORTERS

FOLD, IMPORT = "fold", "import"

_SHAPE_OPS = frozenset({"Shape", "Size"})
# Never evaluated at import time: random, stateful or control-flow ops.
_NEVER_FOLD = frozenset({
    "RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Multinomial",
    "Bernoulli", "Dropout", "If", "Loop", "Scan",
})
_ALIASES = frozenset({"Identity", "Dropout"})  # output 0 is input 0 at inference


def _has_subgraph(node: Any) -> bool:
    return any(a.HasField("g") or len(a.graphs) for a in node.attribute)


def describe(index: int, node: Any) -> str:
    op = node.op_type if node.domain in DEFAULT_DOMAINS else f"{node.domain}::{node.op_type}"
    return f"{op} (node #{index} {node.name!r})" if node.name else f"{op} (node #{index})"


def plan(nodes: Sequence[Any], known: set[str], weights: set[str]) -> tuple[list[str | None], list[str]]:
    """Decide per node: fold it, import it, or neither (returned described, in order).

    ``known`` names the tensors known before the first node; ``weights`` the floating-point
    initializers, which stay parameters where an importer reads them.
    """
    known, initializers = set(known), set(weights)
    actions: list[str | None] = []
    missing: list[str] = []
    for index, node in enumerate(nodes):
        inputs = [n for n in node.input if n]
        outputs = [n for n in node.output if n]
        default = node.domain in DEFAULT_DOMAINS
        importable = default and node.op_type in IMPORTERS
        # An importable node that reads a weight as a tensor (not through a constant slot
        # such as Reshape's shape) is imported, so that the weight stays a parameter.
        constant_slots = CONSTANT_INPUTS.get(node.op_type, ())
        reads_weight = importable and any(
            n in initializers for i, n in enumerate(node.input) if n and i not in constant_slots
        )
        computable = (
            bool(inputs) and all(n in known for n in inputs)
            and node.op_type not in _NEVER_FOLD and not _has_subgraph(node) and not reads_weight
        )
        if default and (node.op_type in _SHAPE_OPS or computable):
            actions.append(FOLD)
            known.update(outputs)
        elif importable:
            actions.append(IMPORT)
            if node.op_type == "Constant" or (node.op_type in _ALIASES and inputs[:1] and inputs[0] in known):
                known.add(node.output[0])
            if node.op_type in _ALIASES and inputs[:1] and inputs[0] in initializers:
                initializers.add(node.output[0])
        else:
            actions.append(None)
            missing.append(describe(index, node))
    return actions, missing


def fold(ctx: ImportContext, node: Any) -> None:
    """Evaluate ``node`` now and record its outputs as known tensors."""
    if node.op_type in _SHAPE_OPS:
        shape = ctx.shape_of(node.input[0])
        if node.op_type == "Size":
            results = [np.array(math.prod(shape), dtype=np.int64)]
        else:
            attrs = ctx.attrs()
            results = [np.array(shape[attrs.get("start", 0) : attrs.get("end", len(shape))], dtype=np.int64)]
    else:
        feeds = {n: ctx.known_array(n) for n in node.input if n}
        try:
            results = _evaluate(node, feeds, ctx.opset)
        except Exception as err:  # the evaluator's errors are not typed
            raise ctx.unsupported(f"its inputs are all known but evaluating it failed: {err}") from err
    for name, array in zip(node.output, results):
        if name:
            ctx.add_known(name, np.asarray(array), initializer=False)


def _evaluate(node: Any, feeds: dict[str, np.ndarray], opset: int) -> list[np.ndarray]:
    """Run one node with onnx's reference evaluator, at the model's opset."""
    from onnx import helper
    from onnx.reference import ReferenceEvaluator

    inputs = [
        helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
        for n, a in feeds.items()
    ]
    outputs = [helper.make_empty_tensor_value_info(n) for n in node.output if n]
    graph = helper.make_graph([node], "fold", inputs, outputs)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    # The outputs come back in node.output order, skipping unnamed optional outputs.
    results = iter(ReferenceEvaluator(model).run(None, feeds))
    return [next(results) if n else None for n in node.output]
