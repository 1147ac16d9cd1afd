"""Executing a program: compile binds, execute runs the flat instruction list.

Binding makes read-only constant arrays once (shared by all threads). Each thread that
executes gets, on its first call, its own arena and scratch and its own bound kernel
calls, so concurrent calls never share writable memory. A call copies the inputs into
their planned buffers, runs every instruction, and copies the outputs out.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from lowerkit.backend.cpu import Parallel, blas_limit, cpu_count
from lowerkit.errors import InputError
from lowerkit.ir import DTYPES

from .kernels import KERNELS
from .lir import ALIGNMENT, Program


def _aligned_bytes(nbytes: int) -> np.ndarray:
    raw = np.empty(nbytes + ALIGNMENT, dtype=np.uint8)
    start = (-raw.ctypes.data) % ALIGNMENT
    return raw[start : start + nbytes]


# Kernel modules whose kernels call no BLAS routine (numpy ufuncs, copies, compiled chains).
_BLAS_FREE_KERNELS = frozenset({"elementwise", "shape", "activation", "chain"})


@dataclass
class _ThreadState:
    inputs: list[np.ndarray]
    outputs: list[np.ndarray]
    calls: list


class Executable:
    """A bound program: call :meth:`run` from any thread."""

    def __init__(self, program: Program) -> None:
        self.program = program
        self.constants = [np.asarray(c, order="C") for c in program.constants]  # keeps 0-d arrays 0-d
        for c in self.constants:
            c.flags.writeable = False
        # Derived constants (widened or transformed weights), computed once, shared by threads.
        self.derived: dict[tuple, np.ndarray] = {}
        for ins in program.instructions:
            for pos, fn in KERNELS[ins.op].derive:
                buf = program.buffers[ins.inputs[pos]]
                key = self._derived_key(buf, fn, ins)
                if key is not None and key not in self.derived:
                    array = fn(self.constants[buf.constant].reshape(buf.shape), ins.attrs)
                    if array.flags.writeable and array.base is None:
                        array.flags.writeable = False
                    self.derived[key] = array
        self.threads = program.options.get("threads")
        # Decided here, on the machine that runs: intra-op workers (the process-wide pool of
        # lowerkit.backend.cpu) with single-threaded BLAS (robust when the machine is shared:
        # OpenBLAS's spinning threads collapse under contention), unless "blas" asks for
        # BLAS's own threading.
        if self.threads == "blas":
            self.ways, self.parallel, self.blas_threads = 1, None, None
        else:
            self.ways = int(self.threads) if self.threads else max(1, min(cpu_count(), 8))
            self.blas_threads = self._gemm_threads(program)
            self.parallel: Parallel | None = Parallel(self.ways, self.blas_threads) if self.ways > 1 else None
        self._local = threading.local()
        # Programs of element-wise and data-movement kernels only never reach BLAS: they skip
        # the BLAS thread limit (two library calls a run, most of a tiny program's cost).
        self.uses_blas = any(
            KERNELS[ins.op].prepare.__module__.rsplit(".", 1)[-1] not in _BLAS_FREE_KERNELS
            for ins in program.instructions
        )

    def _gemm_threads(self, program: Program) -> int:
        """BLAS threads during a run: ``ways`` (GEMMs on BLAS's own threads, one call from the
        calling thread; the pool runs the compiled kernels and copies, the two take turns),
        or 1 (GEMMs cut into bands on the pool) for programs with Winograd convolutions or
        without dense convolutions.

        One GEMM on BLAS's threads beats bands on the pool for every single convolution
        GEMM of the zoo (a pool hand-off costs ~100 us, BLAS's spinning threads far less),
        but Winograd's 36 small channel GEMMs per layer are each too small for BLAS to
        thread, while pool bands split all 36 at once. Measured whole-model (batch 1, same
        run): MobileNetV2 9.2 vs 12.2 ms, EfficientNet-B0 16.5 vs 20.0 with BLAS's threads;
        ResNet-18 24.1 vs 22.8 and at batch 8 164 vs 129 with the pool.
        """
        if self.ways == 1 or os.environ.get("LOWERKIT_GLOW_GEMM_ON_POOL"):
            return 1
        convolutions = [ins for ins in program.instructions
                        if ins.op in ("conv2d", "glow.conv2d") and int(ins.attrs.get("groups", 1)) == 1]
        if not convolutions or any(ins.attrs.get("algo") == "winograd" for ins in convolutions):
            # (Without convolutions there is nothing large enough to gain, while OpenBLAS's
            # threads would spin for ~0.1 s after the call, taking a core from what runs next.)
            return 1
        return self.ways

    @staticmethod
    def _derived_key(buf, fn, ins) -> tuple | None:
        if buf.kind != "constant":
            return None
        return (buf.constant, buf.shape, fn.__module__, fn.__qualname__, ins.attrs.get("algo", ""))

    def dry_run(self) -> None:
        """Bind this thread now and run once on zeros (compile-time validation and warm-up)."""
        self.run([np.zeros(self.program.buffers[b].shape, DTYPES[self.program.buffers[b].dtype])
                  for b in self.program.inputs])

    def _state(self) -> _ThreadState:
        state = getattr(self._local, "state", None)
        if state is None:
            state = self._local.state = self._bind()
        return state

    def _bind(self) -> _ThreadState:
        program = self.program
        arena = _aligned_bytes(max(program.plan.peak_bytes, ALIGNMENT))
        scratch = _aligned_bytes(max(program.plan.scratch_bytes, ALIGNMENT))
        views: list[np.ndarray] = []
        for buf in program.buffers:
            dtype = DTYPES[buf.dtype]
            if buf.kind == "constant":
                views.append(self.constants[buf.constant].reshape(buf.shape))
            else:
                raw = arena[buf.offset : buf.offset + buf.nbytes]
                views.append(raw.view(dtype).reshape(buf.shape))
        calls = []
        for ins in program.instructions:
            spec = KERNELS[ins.op]
            inputs = [views[b] for b in ins.inputs]
            for pos, fn in spec.derive:
                key = self._derived_key(program.buffers[ins.inputs[pos]], fn, ins)
                if key is not None:
                    inputs[pos] = self.derived[key]
            outputs = [views[b] for b in ins.outputs]
            if spec.parallel and self.parallel is not None:
                calls.append(spec.prepare(inputs, outputs, ins.attrs, scratch, parallel=self.parallel))
            else:
                calls.append(spec.prepare(inputs, outputs, ins.attrs, scratch))
        return _ThreadState([views[b] for b in program.inputs], [views[b] for b in program.outputs], calls)

    def run(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        """Run on ``inputs``; returns fresh output arrays."""
        state = self._state()
        if len(inputs) != len(state.inputs):
            raise InputError(
                f"glow_like method {self.program.method!r} takes {len(state.inputs)} inputs, got {len(inputs)}"
            )
        for dst, src in zip(state.inputs, inputs):
            if type(src) is not np.ndarray:
                src = np.asarray(src)
            if src.shape != dst.shape:
                raise InputError(
                    f"glow_like method {self.program.method!r}: expected input shape {list(dst.shape)}, "
                    f"got {list(src.shape)}"
                )
            if src.dtype == dst.dtype:
                dst[...] = src  # a quarter of np.copyto's cost on tiny inputs
            else:
                np.copyto(dst, src, casting="same_kind")
        if self.blas_threads is not None and self.uses_blas:
            with blas_limit(self.blas_threads):
                for call in state.calls:
                    call()
        else:
            for call in state.calls:
                call()
        return [out.copy() for out in state.outputs]

    def close(self) -> None:
        """Release the handle (nothing to stop: the worker threads are not the handle's but
        the process-wide pool's of ``lowerkit.backend.cpu``, shared by every handle and backend)."""
