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

from lowerkit.errors import InputError
from lowerkit.ir import DTYPES

from .kernels import KERNELS
from .lir import ALIGNMENT, Program

class _BlasLimit:
    """Process-wide BLAS thread limit shared by concurrent calls.

    The BLAS thread count is global, so nested per-thread save/restore would race (a call
    could restore another call's limit and leave BLAS reduced for good). Instead the first
    call to enter sets the limit, later ones join it, and the last to leave restores the
    original setting.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._users = 0
        self._saved: list[tuple[object, int]] = []
        self._libraries = None  # found on first use: threadpoolctl inspects loaded libraries

    def enter(self, threads: int) -> None:
        with self._lock:
            if self._users == 0:
                if self._libraries is None:
                    from threadpoolctl import ThreadpoolController

                    self._libraries = ThreadpoolController().select(user_api="blas").lib_controllers
                self._saved = [(lib, lib.get_num_threads()) for lib in self._libraries]
                for lib, _ in self._saved:
                    self._set(lib, threads)
            self._users += 1

    def exit(self) -> None:
        with self._lock:
            self._users -= 1
            if self._users == 0:
                for lib, n in self._saved:
                    self._set(lib, n)
                self._saved = []

    @staticmethod
    def _set(lib, threads: int) -> None:
        # threadpoolctl (3.6+) lets only one "controlling" Python thread change a
        # process-wide OpenBLAS pool and silently ignores the others; our lock already
        # serialises the changes, so use its unguarded setter when it has one.
        setter = getattr(lib, "_real_set_num_threads", None) or lib.set_num_threads
        setter(threads)


BLAS_LIMIT = _BlasLimit()


def _aligned_bytes(nbytes: int) -> np.ndarray:
    raw = np.empty(nbytes + ALIGNMENT, dtype=np.uint8)
    start = (-raw.ctypes.data) % ALIGNMENT
    return raw[start : start + nbytes]


class Parallel:
    """Runs ``task(j)`` for ``j in range(ways)``: task 0 on the calling thread, the others on
    the handle's worker threads. Tasks never wait for each other, so calls from many
    threads sharing the workers cannot deadlock."""

    def __init__(self, ways: int) -> None:
        from concurrent.futures import ThreadPoolExecutor

        self.ways = ways
        self._pool = ThreadPoolExecutor(max_workers=ways - 1, thread_name_prefix="glow_like")

    def __call__(self, task) -> None:
        futures = [self._pool.submit(task, j) for j in range(1, self.ways)]
        try:
            task(0)
        finally:
            for f in futures:
                f.result()

    def shutdown(self) -> None:
        self._pool.shutdown(wait=False)


@dataclass
class _ThreadState:
    inputs: list[np.ndarray]
    outputs: list[np.ndarray]
    calls: list


class Executable:
    """A bound program: call :meth:`run` from any thread."""

    def __init__(self, program: Program) -> None:
        self.program = program
        self.constants = [np.ascontiguousarray(c) for c in program.constants]
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
        # Decided here, on the machine that runs: intra-op workers with single-threaded BLAS
        # (robust when the machine is shared: OpenBLAS's spinning threads collapse under
        # contention), unless "blas" asks for BLAS's own threading.
        if self.threads == "blas":
            self.ways, self.parallel = 1, None
        else:
            self.ways = int(self.threads) if self.threads else max(1, min(os.cpu_count() or 1, 8))
            self.parallel = Parallel(self.ways) if self.ways > 1 else None
        self._local = threading.local()

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
            src = np.asarray(src)
            if src.shape != dst.shape:
                raise InputError(
                    f"glow_like method {self.program.method!r}: expected input shape {list(dst.shape)}, "
                    f"got {list(src.shape)}"
                )
            np.copyto(dst, src, casting="same_kind")
        if self.threads != "blas":
            BLAS_LIMIT.enter(1)
            try:
                for call in state.calls:
                    call()
            finally:
                BLAS_LIMIT.exit()
        else:
            for call in state.calls:
                call()
        return [out.copy() for out in state.outputs]

    def close(self) -> None:
        """Stop the worker threads; the handle must not run afterwards."""
        if self.parallel is not None:
            self.parallel.shutdown()
