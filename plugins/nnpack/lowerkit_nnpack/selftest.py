"""The availability self-test: a tiny Winograd convolution checked against a direct computation."""

from __future__ import annotations

import threading

import numpy as np

_lock = threading.Lock()
_result: tuple[bool, str] | None = None


def _direct(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1)))
    n, _, h, wd = x.shape
    out = np.zeros((n, w.shape[0], h, wd))
    for i in range(3):
        for j in range(3):
            out += np.einsum("nchw,oc->nohw", xp[:, :, i : i + h, j : j + wd], w[:, :, i, j])
    return out


def run_self_test() -> tuple[bool, str]:
    """``(ok, reason)``: run once per process, then cached."""
    global _result
    with _lock:
        if _result is None:
            _result = _self_test()
        return _result


def _self_test() -> tuple[bool, str]:
    try:
        from .conv import Conv2d, RunOptions
        from .geometry import ConvGeometry

        # Fixed, irregular values rather than numpy.random (~12 ms to import on every listing).
        x = np.sin(np.arange(2 * 3 * 9 * 10) * 0.7).reshape(2, 3, 9, 10).astype(np.float32)
        w = np.cos(np.arange(4 * 3 * 3 * 3) * 1.3).reshape(4, 3, 3, 3).astype(np.float32)
        geom = ConvGeometry(3, 4, (9, 10), (3, 3), (1, 1), (1, 1, 1, 1))
        got = Conv2d(geom, w, algorithm="wt8x8", options=RunOptions(threads=1))(x)
        want = _direct(x, w)
        err = float(np.max(np.abs(got - want)) / max(np.max(np.abs(want)), 1e-30))
        if not np.isfinite(err) or err > 1e-3:
            return False, f"self-test failed: Winograd 3x3 convolution differs from direct by {err:.3g} (limit 1e-3)"
        return True, ""
    except Exception as err:  # anything at all means "not usable here"
        return False, f"self-test raised {type(err).__name__}: {err}"
