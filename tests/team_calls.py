"""Helpers for the team-region tests of both plugins (imported as tests.team_calls)."""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest

TEAM_KERNELS = ("gemm_bias_activation", "fc_bias_activation", "conv_tiles", "im2col", "depthwise3x3_same",
                "depthwise3x3_s2", "depthwise_blocked", "depthwise_rows", "depthwise_channels_last", "conv2d_grouped",
                "winograd_input", "winograd_products_output", "winograd_panels_output", "max_pool3x3", "attention",
                "packed_attention",
                "layer_norm", "mbconv_rows")


def skip_without_team() -> None:
    """Skip the calling test where team kernels cannot run (no OpenMP layer, no cblas_sgemm)."""
    from lowerkit.backend.cpu import make_team

    if make_team(2) is None:
        pytest.skip("team kernels cannot run here (numba's OpenMP layer or numpy's cblas_sgemm missing)")


def team_on_small_layers(monkeypatch, tiled_pixels: int | None = None) -> None:
    """Skip where team kernels cannot run; else give the tests' small layers team forms
    (``lowerkit.backend.cpu.team_layers``' size thresholds at zero)."""
    skip_without_team()
    from lowerkit.backend.cpu import team_layers

    for name in ("MIN_FLOPS", "MIN_DEPTHWISE_MACS", "MIN_LINEAR_WEIGHTS", "MIN_POOL_OUTPUTS"):
        monkeypatch.setattr(team_layers, name, 0)
    if tiled_pixels is not None:
        monkeypatch.setattr(team_layers, "TILED_PIXELS", tiled_pixels)


def rows_kernel(monkeypatch, on: bool, strided: bool = False) -> set[str]:
    """Whether depthwise layers at stride 1 (and 3x3 ones at stride 2) take ``depthwise_rows``
    (``jit.select.rows_wanted``, the CPU's choice, set either way: a test then covers both
    kernels on every machine); returns the kernels such layers run: ``{"depthwise_rows"}``, or
    the flat and the blocked ones (and, ``strided``, the polyphase one)."""
    from lowerkit.backend.cpu.jit import select

    monkeypatch.setattr(select, "rows_wanted", lambda: on)
    if on:
        return {"depthwise_rows"}
    return {"depthwise3x3_same", "depthwise_blocked"} | ({"depthwise3x3_s2"} if strided else set())


def record_team_calls(monkeypatch) -> list[str]:
    """Wrap every team kernel (and the panel GEMM's ``team_gemm``, ``team_gated_gemm`` and
    ``team_fc``,
    the direct stems' ``team_phases`` and ``team_rows``, the channel-direct layers' ``team_pad``
    and ``team_conv``) so that each call appends
    its name to the returned list. Which kernels ran is what the callers assert, so the stall
    guards keep the team on: on a loaded machine (the suite runs on two workers) a guard could
    switch a handle to its serial forms for a while (``lowerkit.backend.cpu.team.StallGuard``)."""
    from lowerkit.backend.cpu import jit
    from lowerkit.backend.cpu.team import StallGuard

    monkeypatch.setattr(StallGuard, "end", lambda self, start: None)

    kernels = jit.load("team")
    ran: list[str] = []
    for module, name in ([(kernels, name) for name in TEAM_KERNELS]
                         + [(jit.load("panel"), "team_gemm"), (jit.load("panel"), "team_gated_gemm"), (jit.load("panel"), "team_fc"),
                            (jit.load("direct"), "team_phases"), (jit.load("direct"), "team_rows"),
                            (jit.load("channel_direct"), "team_pad"), (jit.load("channel_direct"), "team_conv")]):
        original = getattr(module, name)
        monkeypatch.setattr(module, name, lambda *a, _f=original, _n=name: (ran.append(_n), _f(*a))[1])
    return ran


def check_from_threads(run: Callable, reference: Callable, x, calls: int = 2, threads: int = 8,
                       tol: float = 1e-4) -> None:
    """``run(x_i)`` ``calls`` times on each of ``threads`` threads released together, each on its
    own input (``x + 0.1 i``): every result within ``tol`` of ``reference(x_i)``."""
    import numpy as np

    inputs = [x + np.float32(0.1 * i) for i in range(threads)]
    expected = [np.asarray(reference(xi)) for xi in inputs]
    results = from_threads(lambda i: [np.asarray(run(inputs[i])) for _ in range(calls)], threads)
    for i in range(threads):
        for got in results[i]:
            np.testing.assert_allclose(got, expected[i], rtol=tol, atol=tol)


def from_threads(call: Callable[[int], list], threads: int = 8) -> dict[int, list]:
    """``call(i)`` on ``threads`` threads released together; each one's result by ``i``."""
    results: dict[int, list] = {}
    barrier = threading.Barrier(threads)

    def worker(i: int) -> None:
        barrier.wait()
        results[i] = call(i)

    workers = [threading.Thread(target=worker, args=(i,)) for i in range(threads)]
    for t in workers:
        t.start()
    for t in workers:
        t.join()
    return results
