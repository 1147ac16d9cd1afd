"""Winograd F(m, r) transform matrices built from interpolation points (Toom-Cook).

Correlation y = C_g^T d is the transpose of the linear convolution s = C_g h, whose
Toom-Cook form is s = W [(E_r g) * (E_m h)] with E_k evaluating a degree k-1 polynomial at
the points (and at infinity: its top coefficient) and W the inverse of the full n-point
evaluation. Transposing gives A^T = E_m^T, G = E_r and B^T = W^T. Rows of B^T are scaled
by the point's difference product (and G rows divided by it), which keeps B^T's entries
small integers and halves, and moves the awkward fractions into the kernel transform,
which is computed once in float64.

One tile of output ``Y = A^T [(G g G^T) * (B^T d B)] A`` for a ``n x n`` input tile ``d``
(``n = m + r - 1``) and an ``r x r`` kernel ``g``.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np

# The usual points, in the order they are taken: small magnitudes first, since larger
# points grow the transform's entries and its rounding error (Lavin & Gray; NNPACK).
_POINTS = (0, 1, -1, 2, -2, Fraction(1, 2), Fraction(-1, 2), 3, -3, Fraction(1, 3), Fraction(-1, 3))


def interpolation_points(m: int, r: int) -> tuple:
    """The ``m + r - 2`` finite points F(m, r) is usually built on (infinity is implied).

    F(2, 3): 0, +-1; F(4, 3): 0, +-1, +-2; F(6, 3): 0, +-1, +-2, +-1/2 (NNPACK's).
    """
    count = m + r - 2
    if count < 1 or count > len(_POINTS):
        raise ValueError(f"no standard points for F({m}, {r}): needs {count}, have up to {len(_POINTS)}")
    return _POINTS[:count]


def _evaluation(points: tuple, k: int, n: int) -> np.ndarray:
    """[n, k] matrix evaluating a degree k-1 polynomial at ``points`` and at infinity."""
    rows = [[Fraction(p) ** j for j in range(k)] for p in points]
    rows.append([Fraction(0)] * (k - 1) + [Fraction(1)])
    return np.array(rows, dtype=object)


def _inverse(m: np.ndarray) -> np.ndarray:
    """Exact inverse of a square matrix of Fractions (Gauss-Jordan)."""
    n = m.shape[0]
    a = np.concatenate([m, np.array([[Fraction(int(i == j)) for j in range(n)] for i in range(n)], dtype=object)], axis=1)
    for col in range(n):
        pivot = next(r for r in range(col, n) if a[r, col] != 0)
        a[[col, pivot]] = a[[pivot, col]]
        a[col] = a[col] / a[col, col]
        for r in range(n):
            if r != col and a[r, col] != 0:
                a[r] = a[r] - a[r, col] * a[col]
    return a[:, n:]


def winograd_matrices(m: int, r: int, points: tuple | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(AT [m, n], G [n, r], BT [n, n])`` in float64 for F(m, r) with n = m + r - 1 tiles.

    ``points`` are the ``n - 1`` distinct finite interpolation points; by default
    :func:`interpolation_points` ``(m, r)``.
    """
    n = m + r - 1
    if points is None:
        points = interpolation_points(m, r)
    if len(points) != n - 1:
        raise ValueError(f"F({m}, {r}) needs {n - 1} finite points, got {len(points)}")
    if len({Fraction(p) for p in points}) != len(points):
        raise ValueError(f"interpolation points must be distinct, got {list(points)}")
    e_m = _evaluation(points, m, n)
    e_r = _evaluation(points, r, n)
    w = _inverse(_evaluation(points, n, n))
    bt = w.T.copy()
    g = e_r.copy()
    for i, p in enumerate(points):
        scale = Fraction(1)
        for j, q in enumerate(points):
            if j != i:
                scale *= Fraction(p) - Fraction(q)
        bt[i] = bt[i] * scale
        g[i] = g[i] / scale
    as_float = np.vectorize(float, otypes=[np.float64])
    return as_float(e_m.T), as_float(g), as_float(bt)


OUTPUT_GROUP_TILES = 128
"""Tiles the compiled F(4x4, 3x3) output transform (``jit.winograd.winograd_output``) runs
each pass over: whole tile rows of about this many tiles. One tile row at a time (its former
loop) left short loops on small maps; AMD EPYC Zen 3 VM, one thread, 64 -> 64 channels at
56x56, one image: 0.66 -> 0.18 ms; 128 at 28x28 0.39 -> 0.12; 256 at 14x14 0.39 -> 0.14
(64-512 tiles measured alike)."""


def output_group_tiles(tile_width: int) -> int:
    """The tiles ``n`` of the output transform's scratch ``s`` [6, 4, n] and ``y`` [4, 4, n] for
    tile rows of ``tile_width`` tiles: :data:`OUTPUT_GROUP_TILES`, at least one row."""
    return max(OUTPUT_GROUP_TILES, tile_width)


def input_scratch_floats(tile_rows: int, tile_width: int) -> int:
    """The float32 scratch the compiled F(4x4, 3x3) input transform (``jit.winograd.
    winograd_input``) takes for maps of ``tile_rows`` x ``tile_width`` output tiles: a padded
    row, and 48 planes of the channel's tiles and one more tile row (the rows split by tile
    column phase, then their column transforms). The kernel compiles this very function in
    for its bound check: keep it plain integer arithmetic."""
    return 4 * tile_width + 24 + 48 * (tile_rows + 1) * tile_width
