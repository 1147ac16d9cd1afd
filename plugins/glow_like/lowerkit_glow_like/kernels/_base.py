"""What a kernel is: a ``prepare`` that binds arrays once and returns a call that runs it.

``prepare(inputs, outputs, attrs, scratch)`` receives the instruction's input and output
arrays (views into the arena, constants or, for constant folding, fresh arrays), its
attributes, and a per-thread scratch byte buffer (``None`` when folding: the kernel then
allocates its own). It returns a no-argument callable that writes into ``outputs`` only.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from lowerkit.backend.cpu import jit
from lowerkit.ir import TensorType

Run = Callable[[], None]
Prepare = Callable[[list[np.ndarray], list[np.ndarray], dict, "np.ndarray | None"], Run]
Derive = Callable[[np.ndarray, dict], np.ndarray]
ScratchSize = Callable[[Sequence[TensorType], Sequence[TensorType], dict], int]


def _no_scratch(in_types: Sequence[TensorType], out_types: Sequence[TensorType], attrs: dict) -> int:
    return 0


@dataclass(frozen=True, slots=True)
class KernelSpec:
    """One instruction kind: how to bind it, how much scratch it needs, if it may run in place."""

    op: str
    prepare: Prepare
    scratch_bytes: ScratchSize = _no_scratch
    # True when out may alias the first input of equal shape (element-wise, read-before-write).
    inplace: bool = False
    # (input position, derive(array, attrs) -> array): when that input is a constant,
    # compile computes the derived array once per handle and every thread's kernel gets it
    # instead (int8 weights widened to float64, Winograd-transformed weights). Kernels also
    # accept the raw array (constant folding and tests call prepare directly).
    derive: tuple[tuple[int, Derive], ...] = ()
    # True when prepare accepts ``parallel=``: a callable running ``task(j)`` for
    # j in range(parallel.ways) across the handle's worker threads.
    parallel: bool = False
    # True when prepare accepts ``team=`` (a ``lowerkit.backend.cpu.Team``): one compiled parallel region
    # per call instead of the pool (see runtime.Executable._team_mode).
    team: bool = False


KERNELS: dict[str, KernelSpec] = {}


def kernel(
    op: str,
    *,
    scratch_bytes: ScratchSize = _no_scratch,
    inplace: bool = False,
    derive: tuple[tuple[int, Derive], ...] = (),
    parallel: bool = False,
    team: bool = False,
):
    """Register the decorated ``prepare`` function as the kernel of ``op``."""

    def decorate(prepare: Prepare) -> Prepare:
        if op in KERNELS:
            raise ValueError(f"kernel {op!r} registered twice")
        KERNELS[op] = KernelSpec(op, prepare, scratch_bytes, inplace, derive, parallel, team)
        return prepare

    return decorate


def conv_geometry(attrs: dict) -> tuple[tuple, tuple, tuple, int]:
    """A convolution instruction's ``(stride, padding, dilation, groups)``, with the schema's
    defaults for what its attributes leave out."""
    return (tuple(attrs.get("stride", (1, 1))), tuple(attrs.get("padding", (0, 0, 0, 0))),
            tuple(attrs.get("dilation", (1, 1))), int(attrs.get("groups", 1)))


def scratch_array(scratch: np.ndarray | None, dtype, shape: Sequence[int], offset: int = 0) -> np.ndarray:
    """A typed view of ``shape`` into the scratch bytes at ``offset`` (or a new array if none)."""
    if scratch is None:
        return np.empty(tuple(shape), dtype=dtype)
    dtype = np.dtype(dtype)
    count = int(np.prod(shape, dtype=np.int64))
    nbytes = count * dtype.itemsize
    return scratch[offset : offset + nbytes].view(dtype).reshape(tuple(shape))


def bias_activation(attrs: dict, bias: np.ndarray | None):
    """The epilogue of a GEMM convolution: ``epilogue(a)`` adds ``bias`` (one value per row of
    ``a`` [rows, pixels], repeating every ``len(bias)`` rows) and applies the fused activation,
    in one compiled pass; None when there is nothing to do."""
    code, p0, p1 = jit.activation_code(attrs)
    b = np.empty(0, np.float32) if bias is None else np.ascontiguousarray(bias.reshape(-1), dtype=np.float32)
    if b.size == 0 and code == jit.activation.NONE:
        return None
    kernel = jit.load("conv").bias_activation
    return lambda a: kernel(a, b, code, p0, p1)


def apply_activation(out: np.ndarray, attrs: dict) -> None:
    """Fused activation in place: ``act`` is none, relu, clip (``act_min``/``act_max``) or one
    of the compiled kernels' activations (hardswish, hardsigmoid, silu, gelu, gelu_tanh),
    run by the compiled ``activate`` on contiguous arrays, in numpy otherwise."""
    act = attrs.get("act", "none")
    if act == "relu":
        jit.relu_inplace(out)
    elif act == "clip":
        np.clip(out, attrs["act_min"], attrs["act_max"], out=out)
    elif act != "none":
        code, p0, p1 = jit.activation_code(attrs)
        if out.flags.c_contiguous and out.dtype == np.float32:
            jit.load("conv").activate(out.reshape(-1), code, p0, p1)
        else:
            from .chain import numpy_activation

            np.copyto(out, numpy_activation(out, code, p0, p1))
