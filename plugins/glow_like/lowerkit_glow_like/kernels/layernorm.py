"""Layer and group normalisation: per-sample statistics, then the optional affine."""

from __future__ import annotations

import numpy as np

from lowerkit.backend.cpu.calls import on_team

from ._base import kernel


def _normalize_into(x: np.ndarray, out: np.ndarray, axes: tuple[int, ...], eps: float) -> None:
    mean = x.mean(axis=axes, keepdims=True)
    np.subtract(x, mean, out=out)
    var = np.mean(np.square(out), axis=axes, keepdims=True)
    np.divide(out, np.sqrt(var + eps), out=out)


# A layer norm of at least this many floats runs as a team region in team mode (bands of rows).
TEAM_MIN_FLOATS = 65_536


@kernel("layer_norm", team=True)
def _layer_norm(inputs, outputs, attrs, scratch, team=None):
    x, affine = inputs[0], inputs[1:]
    (out,) = outputs
    axis = attrs.get("axis", -1) % x.ndim
    axes = tuple(range(axis, x.ndim))
    eps = attrs.get("eps", 1e-5)
    if x.dtype == np.float32 and x.size and all(a.dtype == np.float32 for a in affine):
        # One compiled pass per row (lowerkit.backend.cpu.jit.norm): statistics, normalise, affine.
        from lowerkit.backend.cpu import jit

        kernels = jit.load("norm")
        d = int(np.prod(x.shape[axis:]))
        rows = x.size // d
        x2, out2 = x.reshape(rows, d), out.reshape(rows, d)
        empty = np.empty(0, np.float32)
        w = affine[0].reshape(d) if affine else empty
        b = affine[1].reshape(d) if len(affine) > 1 else empty
        epsilon = float(eps)

        def serial():
            kernels.layer_norm_rows(x2, w, b, out2, epsilon, 0, rows)

        if team is None or x.size < TEAM_MIN_FLOATS or rows < team.ways:
            return serial
        team_kernels, ways = team.kernels(), team.ways
        return on_team(team, lambda: team_kernels.layer_norm(x2, w, b, out2, epsilon, ways), serial)

    def run():
        _normalize_into(x, out, axes, eps)
        if affine:
            np.multiply(out, affine[0], out=out)
        if len(affine) > 1:
            np.add(out, affine[1], out=out)

    return run


@kernel("group_norm")
def _group_norm(inputs, outputs, attrs, scratch):
    x, affine = inputs[0], inputs[1:]
    (out,) = outputs
    n, c = x.shape[:2]
    groups = attrs["num_groups"]
    eps = attrs.get("eps", 1e-5)
    per_channel = (1, c) + (1,) * (x.ndim - 2)
    grouped_x, grouped_out = x.reshape(n, groups, -1), out.reshape(n, groups, -1)

    def run():
        _normalize_into(grouped_x, grouped_out, (2,), eps)
        if affine:
            np.multiply(out, affine[0].reshape(per_channel), out=out)
        if len(affine) > 1:
            np.add(out, affine[1].reshape(per_channel), out=out)

    return run
