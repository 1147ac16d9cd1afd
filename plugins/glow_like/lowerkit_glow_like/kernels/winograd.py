"""Winograd F(2x2, 3x3) convolution for 3x3, stride-1, undilated, ungrouped convolutions.

Each 2x2 output tile comes from a 4x4 input tile d: Y = A^T [(G g G^T) * (B^T d B)] A, so
the 9 multiplies per output pixel and channel pair become 4 (16 per 2x2 tile): 16
independent GEMMs U[k] @ V[k] with U = G g G^T ([16, OC, C], derived once per handle) and
V = B^T d B ([16, C, tiles]). Tiles of several images share the GEMMs (up to ~2048 tiles)
so late layers with few tiles still give BLAS wide matrices. The input and output
transforms are a few dozen element-wise numpy ops on scratch buffers.
"""

from __future__ import annotations

import numpy as np

from ._base import apply_activation, scratch_array

_G = np.array([[1.0, 0.0, 0.0], [0.5, 0.5, 0.5], [0.5, -0.5, 0.5], [0.0, 0.0, 1.0]])
_TILES = 2048  # target tiles per GEMM batch


def applicable(w_shape, attrs) -> bool:
    """3x3, stride 1, dilation 1, groups 1."""
    return (
        tuple(w_shape[2:]) == (3, 3)
        and tuple(attrs.get("stride", (1, 1))) == (1, 1)
        and tuple(attrs.get("dilation", (1, 1))) == (1, 1)
        and int(attrs.get("groups", 1)) == 1
    )


def winograd_weights(w: np.ndarray, attrs: dict) -> np.ndarray:
    """U = G g G^T for every (oc, c): [16, OC, C] float32 (raw weights pass through if not used)."""
    if attrs.get("algo") != "winograd" or w.ndim != 4:
        return w
    u = np.einsum("ai,ocij,bj->aboc", _G, w.astype(np.float64), _G)
    return np.ascontiguousarray(u.reshape(16, w.shape[0], w.shape[1]), dtype=np.float32)


def _plan(x_shape, out_shape):
    n, c, h, w = x_shape
    oc, oh, ow = out_shape[1], out_shape[2], out_shape[3]
    th, tw = (oh + 1) // 2, (ow + 1) // 2
    chunk = max(1, min(n, _TILES // (th * tw)))
    return n, c, h, w, oc, oh, ow, th, tw, chunk


def scratch_bytes(in_types, out_types, attrs) -> int:
    n, c, h, w, oc, oh, ow, th, tw, chunk = _plan(in_types[0].shape, out_types[0].shape)
    t = chunk * th * tw
    staged = oc * t * 4 if (oh % 2 or ow % 2) else 0
    return 4 * (chunk * c * (2 * th + 2) * (2 * tw + 2) + c * t + 16 * c * t + 16 * oc * t + 4 * oc * t + staged)


def prepare_winograd(inputs, outputs, attrs, scratch, parallel=None):
    x, w = inputs[0], inputs[1]
    bias = inputs[2] if len(inputs) > 2 else None
    (out,) = outputs
    u = w if w.ndim == 3 else winograd_weights(w, {**attrs, "algo": "winograd"})
    n, c, h, wd, oc, oh, ow, th, tw, chunk = _plan(x.shape, out.shape)
    pt, pl = attrs.get("padding", (0, 0, 0, 0))[:2]
    hp, wp = 2 * th + 2, 2 * tw + 2
    t = chunk * th * tw
    offset = 0

    def take(shape):
        nonlocal offset
        array = scratch_array(scratch, np.float32, shape, offset)
        offset += array.nbytes
        return array

    pad = take((chunk, c, hp, wp))
    rows = take((1, c, chunk, th, tw))
    v = take((16, c, chunk, th, tw))
    m = take((16, oc, chunk, th, tw))
    s = take((4, oc, chunk, th, tw))
    odd = bool(oh % 2 or ow % 2)
    staged = take((oc, chunk, 2 * th, 2 * tw)) if odd else None
    v2, m2 = v.reshape(16, c, t), m.reshape(16, oc, t)
    b4 = bias.reshape(oc, 1, 1, 1) if bias is not None else None  # broadcasts over [OC, k, OH, OW]
    act = attrs.get("act", "none")
    ways = parallel.ways if parallel is not None else 1
    gemm_bands = [(16 * j // ways, 16 * (j + 1) // ways) for j in range(ways)]
    in_bands = [(c * j // ways, c * (j + 1) // ways) for j in range(ways)]
    out_bands = [(oc * j // ways, oc * (j + 1) // ways) for j in range(ways)]
    current = [0, 0]  # first image and image count of this thread's chunk

    def transform_in(j: int) -> None:
        """Pad and transform input channels c0:c1 of the chunk: V = B^T d B."""
        c0, c1 = in_bands[j]
        i0, k = current
        p = pad[:k, c0:c1]
        # Zero-padded copy (borders rezeroed: the scratch is shared with other instructions).
        p[:, :, :pt] = 0
        p[:, :, pt + h :] = 0
        p[:, :, pt : pt + h, :pl] = 0
        p[:, :, pt : pt + h, pl + wd :] = 0
        p[:, :, pt : pt + h, pl : pl + wd] = x[i0 : i0 + k, c0:c1]
        # d[i][j]: the (i, j) element of every 4x4 tile, as [C, k, TH, TW] views.
        d = [[p[:, :, a : a + 2 * th : 2, b : b + 2 * tw : 2].transpose(1, 0, 2, 3) for b in range(4)] for a in range(4)]
        r = rows[0, c0:c1, :k]
        vv = v[:, c0:c1, :k]
        for col in range(4):  # B^T d: combine tile rows, straight into V[4 * row + col]
            np.subtract(d[0][col], d[2][col], out=vv[col])
            np.add(d[1][col], d[2][col], out=vv[4 + col])
            np.subtract(d[2][col], d[1][col], out=vv[8 + col])
            np.subtract(d[1][col], d[3][col], out=vv[12 + col])
        for row in range(4):  # (B^T d) B: combine tile columns in place (one temporary)
            e0, e1, e2, e3 = vv[4 * row], vv[4 * row + 1], vv[4 * row + 2], vv[4 * row + 3]
            np.subtract(e0, e2, out=e0)
            np.subtract(e1, e3, out=e3)
            np.subtract(e2, e1, out=r)
            np.add(e1, e2, out=e1)
            np.copyto(e2, r)

    def gemm(j: int) -> None:
        a, b = gemm_bands[j]
        np.matmul(u[a:b], v2[a:b], out=m2[a:b])

    def transform_out(j: int) -> None:
        """Output channels o0:o1: Y = A^T M A, then bias and activation."""
        o0, o1 = out_bands[j]
        i0, k = current
        mk = m[:, o0:o1, :k]
        sk = s[:, o0:o1, :k]
        final = out[i0 : i0 + k, o0:o1].transpose(1, 0, 2, 3)
        dst = staged[o0:o1, :k] if odd else final
        for r_ in range(2):  # y[r][c] is output pixel (2*ty + r, 2*tx + c)
            for col in range(4):
                a0, a1, a2, a3 = mk[col], mk[4 + col], mk[8 + col], mk[12 + col]
                if r_ == 0:
                    np.add(a0, a1, out=sk[col])
                    np.add(sk[col], a2, out=sk[col])
                else:
                    np.subtract(a1, a2, out=sk[col])
                    np.subtract(sk[col], a3, out=sk[col])
            y0 = dst[:, :, r_::2, 0::2]
            y1 = dst[:, :, r_::2, 1::2]
            np.add(sk[0], sk[1], out=y0)
            np.add(y0, sk[2], out=y0)
            np.subtract(sk[1], sk[2], out=y1)
            np.subtract(y1, sk[3], out=y1)
        if odd:
            np.copyto(final, staged[o0:o1, :k, :oh, :ow])
        if b4 is not None:
            np.add(final, b4[o0:o1], out=final)
        if act != "none":
            apply_activation(final, attrs)

    def run():
        for i0 in range(0, n, chunk):
            current[0], current[1] = i0, min(chunk, n - i0)
            if parallel is None:
                transform_in(0)
                gemm(0)
                transform_out(0)
            else:
                parallel(transform_in)
                parallel(gemm)
                parallel(transform_out)

    return run
