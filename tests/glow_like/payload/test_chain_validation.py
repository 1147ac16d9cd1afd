"""A ``glow.chain`` instruction from a file is bounds-checked before its compiled kernel runs."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import lowerkit as lk
from lowerkit import nn, ops
from lowerkit.errors import FormatError

glow = pytest.importorskip("lowerkit_glow_like")
from lowerkit_glow_like.payload.codec import decode, encode  # noqa: E402


class _Chain(nn.Module):
    def forward(self, x):
        return ops.hardswish(x) * x + x


def _chain_payload():
    x = np.linspace(-4, 4, 16, dtype=np.float32).reshape(2, 8)
    lowered = lk.to_backend(lk.trace(_Chain(), x), "glow_like")
    return lowered, x


def _with_code(lowered, code):
    (program,) = decode(lowered.record.payload)
    ins = program.instructions[0]
    assert ins.op == "glow.chain"
    bad = dataclasses.replace(ins, attrs={**ins.attrs, "code": code})
    program = dataclasses.replace(program, instructions=[bad, *program.instructions[1:]])
    return dataclasses.replace(lowered.record, payload=encode([program]))


def test_a_valid_chain_round_trips():
    lowered, x = _chain_payload()
    again = lk.LoweredModule.from_record(lowered.record)
    np.testing.assert_array_equal(again(x), lowered(x))


@pytest.mark.parametrize("mutate, message", [
    (lambda code: code[:-1], "quads"),
    (lambda code: (code[0], code[1], 7, code[3]) + code[4:], "does not exist"),  # LOAD of input 7
    (lambda code: code[:4] + (99, 1, 0, 0) + code[8:], "unknown opcode 99"),
    (lambda code: code[:4] + (code[4], 5) + code[6:], "must write register 1"),
])
def test_a_hostile_chain_program_is_a_format_error(mutate, message):
    lowered, _ = _chain_payload()
    (program,) = decode(lowered.record.payload)
    code = tuple(program.instructions[0].attrs["code"])
    with pytest.raises(FormatError, match=message):
        lk.LoweredModule.from_record(_with_code(lowered, mutate(code)))
