"""Which ops the derivatives table covers, and why the others are left out.

:data:`NOT_DIFFERENTIABLE` names every registered op without an entry and the reason;
a test keeps it equal to the registry minus the table, so a new op is noticed.
:func:`derivatives_table` renders the table for ``docs/autograd.md`` and
:func:`grad_column` the short note of the op table in ``docs/ir.md``.
"""

from __future__ import annotations

from ..opset import STRUCTURAL_OPS, all_schemas
from . import reverse  # noqa: F401  (registers every entry)
from .table import DERIVATIVES

_BACKWARD = "a backward op (second-order gradients are not covered)"

NOT_DIFFERENTIABLE: dict[str, str] = {
    **{op: _BACKWARD for op in (
        "avg_pool2d_grad", "batch_norm_train_grad", "clip_grad", "gather_grad", "gelu_grad",
        "group_norm_grad", "hardsigmoid_grad", "hardswish_grad", "layer_norm_grad",
        "interpolate_grad", "leaky_relu_grad", "log_softmax_grad", "max_pool2d_grad", "pad_grad",
        "reduce_extreme_grad", "relu_grad", "slice_grad", "softmax_grad",
    )},
    "one_hot": "its only input is integer labels: nothing to differentiate",
    "scaled_dot_product_attention": "decomposed into matmul, softmax, ... before differentiation",
}

_STRUCTURAL = {
    "param": "a source: gradients with respect to parameters are outputs of grad",
    "constant": "a constant: no gradient",
    "call": "calls of the module's own methods are inlined first",
}


def grad_column(op: str) -> str:
    """The op table's note: ``yes``, or why not."""
    if op in DERIVATIVES:
        return "yes"
    if op in _STRUCTURAL:
        return "inlined" if op == "call" else "-"
    if op == "scaled_dot_product_attention":
        return "decomposed"
    return "no" if op in NOT_DIFFERENTIABLE and NOT_DIFFERENTIABLE[op] != _BACKWARD else "backward op"


def derivatives_table() -> str:
    """Markdown: every registered op, the inputs it has gradients for, and the rest."""
    rows = ["| op | gradients for | no gradient | notes |", "| --- | --- | --- | --- |"]
    for schema in all_schemas():
        entry = DERIVATIVES.get(schema.name)
        if entry is not None:
            grads = ", ".join(f"`{n}`" for n in entry.inputs)
            grouped = [", ".join(names) for names in entry.rules if len(names) > 1]
            notes = "; ".join(([f"one backward op for {g}" for g in grouped]) + ([entry.doc] if entry.doc else []))
            rows.append(f"| `{schema.name}` | {grads} | {', '.join(f'`{n}`' for n in entry.nondifferentiable) or '-'} "
                        f"| {notes or '-'} |")
        elif schema.name in STRUCTURAL_OPS:
            rows.append(f"| `{schema.name}` | - | - | {_STRUCTURAL[schema.name]} |")
        else:
            rows.append(f"| `{schema.name}` | - | all | {NOT_DIFFERENTIABLE.get(schema.name, 'no entry')} |")
    return "\n".join(rows)
