"""The derivatives table: one declarative entry per differentiable op.

An entry maps each differentiable input of the op (by its schema name) to a rule that
writes that input's vector-Jacobian product as lowerkit ops, given a :class:`~.vjp.Vjp`
context ``d`` (the node's inputs and outputs by name, the incoming gradient ``d.grad`` and
op helpers). A rule may cover several inputs at once (key ``("x", "weight", "bias")``)
when one backward op produces all their gradients. Inputs listed in ``nondifferentiable``
(integer labels, seeds) get no gradient; every other float input needs a rule.

Entries live in the ``rules_*`` modules of this package, one per op family.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..opset import get_schema

if TYPE_CHECKING:  # pragma: no cover
    from ..ir.node import Value
    from .vjp import Vjp

Rule = Callable[["Vjp"], "Value | tuple[Value, ...]"]


@dataclass(frozen=True, slots=True)
class Derivative:
    """How to differentiate one op: a rule per input (or group of inputs)."""

    op: str
    rules: Mapping[tuple[str, ...], Rule]
    nondifferentiable: tuple[str, ...] = ()
    doc: str = ""
    inputs: tuple[str, ...] = ()  # every input some rule covers, in rule order

    def rule_for(self, name: str) -> tuple[tuple[str, ...], Rule] | None:
        for names, rule in self.rules.items():
            if name in names:
                return names, rule
        return None


DERIVATIVES: dict[str, Derivative] = {}


def derivative(op: str, rules: Mapping[str | tuple[str, ...], Rule] | None = None, *,
               nondifferentiable: tuple[str, ...] = (), doc: str = "", **by_input: Rule) -> Derivative:
    """Register the entry of ``op``: ``derivative("mul", a=..., b=...)`` or with a ``rules`` dict
    for rules covering several inputs. Raises ``ValueError`` for a second entry of one op."""
    if op in DERIVATIVES:
        raise ValueError(f"op {op!r} has two derivative entries")
    table: dict[tuple[str, ...], Rule] = {}
    for key, rule in {**(rules or {}), **by_input}.items():
        table[(key,) if isinstance(key, str) else tuple(key)] = rule
    names = tuple(n for key in table for n in key)
    known = get_schema(op).inputs  # KeyError for an op that is not registered
    unknown = [n for n in names + tuple(nondifferentiable) if n not in known]
    if unknown or len(set(names)) != len(names):
        raise ValueError(f"derivative entry of {op!r} names inputs {list(names)} (unknown: {unknown}); "
                         f"the op's inputs are {list(known)}, each in one rule")
    entry = Derivative(op, table, tuple(nondifferentiable), doc, names)
    DERIVATIVES[op] = entry
    return entry

