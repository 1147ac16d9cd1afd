"""``glow.chain``: a run of element-wise ops fused by the optimizer into one compiled pass.

Attributes: ``code`` — the register program as a flat tuple of (op, dst, a, b) quads (op
codes in ``kernels/jit/chain.py``; LOAD's ``a`` is an input position); ``params`` — two
floats per instruction (clip bounds, hardsigmoid slope and offset, leaky slope); ``ops`` —
the fused op names, for listings. The output is the last instruction's register. Inputs
broadcast to the output shape.

Binding compresses the iteration space (adjacent dimensions contiguous for every operand
merge, so a fully contiguous chain indexes linearly) to at most four dimensions; a chain
whose space does not compress that far, and constant folding, run the same program in
numpy instead.
"""

from __future__ import annotations

import math

import numpy as np

from ._base import kernel, scratch_array
from .jit_codes import MAX_INPUTS

BLOCK = 256  # must match kernels/jit/chain.py
MAX_BANDS = 8  # register blocks reserved in scratch: at most this many workers per chain
PARALLEL_MIN_ELEMENTS = 200_000
_DUMMY = np.zeros(1, np.float32)


def _program(attrs) -> tuple[np.ndarray, np.ndarray]:
    code = np.asarray(attrs["code"], dtype=np.int64).reshape(-1, 4)
    params = np.asarray(attrs["params"], dtype=np.float64).reshape(-1, 2)
    return code, params


def _registers(code: np.ndarray) -> int:
    return int(code[:, 1].max()) + 1


def chain_scratch_bytes(in_types, out_types, attrs) -> int:
    code, _ = _program(attrs)
    return 4 * MAX_BANDS * _registers(code) * BLOCK


def broadcast_strides(shape, out_shape) -> list[int]:
    """Element strides of a contiguous array of ``shape`` over ``out_shape`` (0 where it broadcasts)."""
    shape = (1,) * (len(out_shape) - len(shape)) + tuple(shape)
    strides, step = [0] * len(shape), 1
    for i in range(len(shape) - 1, -1, -1):
        strides[i] = step if shape[i] != 1 else 0
        step *= shape[i]
    return strides


def compress(out_shape, operand_strides: list[list[int]]) -> tuple[list[int], list[list[int]]]:
    """Merge adjacent dimensions contiguous for every operand; drop size-1 dimensions."""
    dims = [i for i, d in enumerate(out_shape) if d != 1]
    shape = [out_shape[i] for i in dims]
    strides = [[s[i] for i in dims] for s in operand_strides]
    i = len(shape) - 2
    while i >= 0:
        if all(s[i] == s[i + 1] * shape[i + 1] for s in strides):
            shape[i] *= shape[i + 1]
            for s in strides:
                s[i] = s[i + 1]
                del s[i + 1]
            del shape[i + 1]
        i -= 1
    return shape, strides


def prepare_chain(inputs, outputs, attrs, scratch, parallel=None):
    """Bind a fused chain: compiled when its space compresses to four dimensions, else numpy."""
    (out,) = outputs
    code, params = _program(attrs)
    operand = [broadcast_strides(x.shape, out.shape) for x in inputs] + [broadcast_strides(out.shape, out.shape)]
    shape, strides = compress(out.shape, operand)
    if len(shape) > 4 or out.dtype != np.float32 or scratch is None:
        return _prepare_numpy(inputs, out, code, params)
    from lowerkit.backend.cpu import jit

    kernels = jit.load("chain", package="lowerkit_glow_like.kernels.jit")
    pad = 4 - len(shape)
    shape4 = np.array([1] * pad + shape, dtype=np.int64)
    strides4 = np.array([[0] * pad + s for s in strides[:-1]], dtype=np.int64).reshape(len(inputs), 4)
    flat_in = [np.ascontiguousarray(x).reshape(-1) for x in inputs]
    flat_in = tuple(flat_in + [_DUMMY] * (MAX_INPUTS - len(flat_in)))  # the kernel takes MAX_INPUTS
    flat_out = out.reshape(-1)
    rows = int(shape4[:3].prod())
    ways = 1
    if parallel is not None and out.size >= PARALLEL_MIN_ELEMENTS:
        ways = min(parallel.ways, MAX_BANDS, rows)
    regs = _registers(code)
    blocks = [scratch_array(scratch, np.float32, (regs, BLOCK), 4 * regs * BLOCK * j) for j in range(ways)]
    cut = [rows * j // ways for j in range(ways + 1)]

    def band(j: int) -> None:
        if j < ways:
            kernels.chain(flat_in, strides4, shape4, flat_out, code, params, blocks[j], cut[j], cut[j + 1])

    return (lambda: band(0)) if ways == 1 else (lambda: parallel(band))


def _numpy_unary(op: int, a: np.ndarray, p0: float, p1: float) -> np.ndarray:
    if op >= 20:
        if op == 26:
            return np.where(a >= 0, a, a * np.float32(p0))
        if op == 25:
            return np.vectorize(math.erf, otypes=[np.float32])(a)
        return {20: np.negative, 21: np.exp, 22: np.log, 23: np.sqrt, 24: np.tanh}[op](a)
    return numpy_activation(a, op - 10, p0, p1)


def numpy_activation(a: np.ndarray, code: int, p0: float, p1: float) -> np.ndarray:
    """The activation ``code`` (``lowerkit.backend.cpu.jit.activation``) in numpy, into a new array."""
    from lowerkit.backend.cpu.jit import activation as A

    f = np.float32
    if code == A.NONE:
        return a.copy()
    if code == A.RELU:
        return np.maximum(a, f(0))
    if code == A.CLIP:
        return np.clip(a, p0, p1).astype(a.dtype)
    if code == A.HARDSWISH:
        return a * np.clip(a + f(3), f(0), f(6)) / f(6)
    if code == A.HARDSIGMOID:
        return np.clip(f(p0) * a + f(p1), f(0), f(1))
    if code == A.SILU:
        return a / (f(1) + np.exp(-a))
    if code == A.GELU:
        return f(0.5) * a * (f(1) + np.vectorize(math.erf, otypes=[np.float32])(a / f(math.sqrt(2))))
    if code == A.GELU_TANH:
        return f(0.5) * a * (f(1) + np.tanh(f(math.sqrt(2 / math.pi)) * (a + f(0.044715) * a ** 3)))
    return f(1) / (f(1) + np.exp(-a))


def _prepare_numpy(inputs, out, code, params):
    binary = {1: np.add, 2: np.subtract, 3: np.multiply, 4: np.divide, 5: np.maximum, 6: np.minimum}

    def run() -> None:
        regs: dict[int, np.ndarray] = {}
        with np.errstate(all="ignore"):
            for (op, dst, a, b), (p0, p1) in zip(code.tolist(), params.tolist()):
                if op == 0:
                    regs[dst] = inputs[a]
                elif op in binary:
                    regs[dst] = binary[op](regs[a], regs[b]).astype(np.float32, copy=False)
                else:
                    regs[dst] = _numpy_unary(op, regs[a], p0, p1)
        np.copyto(out, np.broadcast_to(regs[int(code[-1, 1])], out.shape), casting="same_kind")

    return run


kernel("glow.chain", scratch_bytes=chain_scratch_bytes, inplace=True, parallel=True)(prepare_chain)
