"""nnpack and glow_like regions of one partitioned module, run from two threads whose BLAS
limits overlap out of order, leave BLAS with the threads it had before."""

from __future__ import annotations

import dataclasses
import threading

import numpy as np
import pytest

import lowerkit as lk
from lowerkit import nn, ops

threadpoolctl = pytest.importorskip("threadpoolctl")
pytest.importorskip("lowerkit_nnpack")
pytest.importorskip("lowerkit_glow_like")

TIMEOUT = 30


def _blas_threads() -> list[int]:
    return [i["num_threads"] for i in threadpoolctl.threadpool_info() if i["user_api"] == "blas"]


class ConvTanh(nn.Module):
    """conv2d goes to nnpack; tanh (which nnpack declines) to glow_like."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)

    def forward(self, x):
        return ops.tanh(self.conv(x))


def test_interleaved_nnpack_and_glow_like_regions_restore_blas_threads(monkeypatch):
    """Thread A holds its nnpack region open until thread B is inside its glow_like region;
    B holds its glow_like region open until A has left nnpack. The limits are thus released
    in an order unlike the one they were taken in, which two limiters with their own
    reference counts on the one process-wide setting got wrong (BLAS stayed at 1 thread)."""
    from lowerkit_glow_like.kernels import KERNELS

    if not _blas_threads():
        pytest.skip("no BLAS visible to threadpoolctl")
    a_in_nnpack, b_in_glow, a_left_nnpack = threading.Event(), threading.Event(), threading.Event()
    thread_a: list[threading.Thread] = []

    def is_a() -> bool:
        return bool(thread_a) and threading.current_thread() is thread_a[0]

    # The nnpack hook runs inside the kernel's BLAS limit: wrap the algorithm's output step.
    from lowerkit_nnpack import conv as nnpack_conv

    # The algorithms' output step: compute_output, or run_chunk (implicit GEMM / direct on
    # the batched path, which a small batch-1 layer takes too).
    steps = ("compute_output", "run_chunk")
    owners = {(c, name) for cls in nnpack_conv.ALGORITHM_CLASSES.values() for c in cls.__mro__
              for name in steps if name in vars(c)}

    def make_nnpack_hook(inner):
        def compute_output(self, *args):
            if is_a():
                a_in_nnpack.set()
                assert b_in_glow.wait(TIMEOUT)
            return inner(self, *args)

        return compute_output

    for cls, name in owners:
        monkeypatch.setattr(cls, name, make_nnpack_hook(vars(cls)[name]))

    spec = KERNELS["tanh"]

    def prepare(*args, **kwargs):
        call = spec.prepare(*args, **kwargs)

        def run():
            if is_a():
                a_left_nnpack.set()  # A runs its glow_like region: it has left nnpack
            elif threading.current_thread() is not threading.main_thread():
                b_in_glow.set()
                assert a_left_nnpack.wait(TIMEOUT)
            call()

        return run

    monkeypatch.setitem(KERNELS, "tanh", dataclasses.replace(spec, prepare=prepare))

    with nn.init_seed(0):
        net = ConvTanh()
    x = np.random.default_rng(0).standard_normal((1, 3, 8, 8)).astype(np.float32)
    module = lk.trace(net, x)
    monkeypatch.setenv("LOWERKIT_NNPACK_REGION_MACS", "0")  # keep nnpack's region of one small layer
    # nnpack on 2 workers limits BLAS to cores // 2 (1 here), glow_like to 1 thread.
    spec_ = {"forward": {"nnpack": {"threads": 2}, "glow_like": {"threads": 1}}}
    lowered = lk.to_backend(module, ["nnpack", "glow_like"], spec_)
    expected = module(x)
    before = _blas_threads()
    results: dict[str, np.ndarray] = {}
    errors: list[BaseException] = []

    def call(name: str, wait: threading.Event | None) -> None:
        try:
            if wait is not None:
                assert wait.wait(TIMEOUT)
            results[name] = lowered(x)
        except BaseException as err:  # surfaced below
            errors.append(err)
            for event in (a_in_nnpack, b_in_glow, a_left_nnpack):
                event.set()

    a = threading.Thread(target=call, args=("a", None), daemon=True)
    b = threading.Thread(target=call, args=("b", a_in_nnpack), daemon=True)
    thread_a.append(a)
    a.start()
    b.start()
    a.join(TIMEOUT)
    b.join(TIMEOUT)
    assert not errors, errors
    assert sorted(results) == ["a", "b"]
    for got in results.values():
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)
    assert _blas_threads() == before
