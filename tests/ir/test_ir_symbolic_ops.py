"""Every op's inference with a symbolic leading dim: the batch passes through, or a clear ShapeError."""

from __future__ import annotations

import pytest

from lowerkit.ir import TensorType
from lowerkit.opset import ShapeError, get_schema
from lowerkit.testing.cases import OP_CASES


@pytest.mark.parametrize("case", [c for c in OP_CASES if c.operands], ids=lambda c: c.name)
def test_a_symbolic_batch_passes_through_or_fails_clearly(case) -> None:
    schema = get_schema(case.op)
    attrs = schema.normalize_attrs(case.attrs)
    static = [TensorType.of(a) for a in case.arrays()]
    expected = schema.infer(static, attrs)
    first = static[0]
    if not first.rank:
        pytest.skip("a scalar first operand has no batch dim")
    batch = first.shape[0]
    # Free the leading dim of every operand that shares the first operand's batch and rank.
    free = [
        TensorType(t.dtype, ("N",) + t.shape[1:]) if t.rank == first.rank and t.rank and t.shape[0] == batch else t
        for t in static
    ]
    try:
        got = schema.infer(free, attrs)
    except ShapeError as err:
        assert str(err).startswith(case.op) or case.op in str(err), err
        assert "1000003" not in str(err) and "1000033" not in str(err), err  # speaks of N, not probes
        return
    assert [t.bind({"N": batch}) for t in got] == expected
