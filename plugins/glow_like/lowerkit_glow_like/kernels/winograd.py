"""Winograd F(4x4, 3x3) for 3x3, stride-1, undilated, ungrouped convolutions.

Each 4x4 output tile comes from a 6x6 input tile d (tiles overlap by 2):
Y = A^T [(G g G^T) * (B^T d B)] A, so a tile needs 36 multiplies per channel pair instead
of 144. The transforms are GEMMs with the 6x6 and 4x6 matrices over all tiles at once;
the channel products are 36 GEMMs ``U[k] @ V[k]`` with U = G g G^T ([36, OC, C], derived
once per handle) and V = B^T d B ([36, C, tiles]).

The work runs in two parallel phases: input-channel bands (pad, gather tiles, transform
into their rows of V), then output-channel bands (channel GEMMs, output transform, bias,
activation). Each band works in its own contiguous slice of the scratch.
"""

from __future__ import annotations

import numpy as np

from lowerkit.backend.cpu import merge_last, pad_into, split, tile_view, winograd_matrices

from ._base import apply_activation, scratch_array

TILE, OUT = 6, 4

# Points 0, +-1, +-2 and infinity: Lavin & Gray's F(4x4, 3x3) matrices (nnpack's wt6x6 too).
AT, G, BT = winograd_matrices(OUT, 3)
_BT32, _AT32 = BT.astype(np.float32), AT.astype(np.float32)
_TILES = 2048  # target tiles per batch chunk
# Scratch floats per channel and tile of each band: gathered tiles + first input-transform
# GEMM (input bands); channel-GEMM result + two output-transform GEMMs + staged output
# tiles (output bands).
_IN_BAND = 2 * TILE * TILE
_OUT_BAND = TILE * TILE + OUT * TILE + OUT * OUT + OUT * OUT


def applicable(w_shape, attrs) -> bool:
    """3x3, stride 1, dilation 1, groups 1."""
    return (
        tuple(w_shape[2:]) == (3, 3)
        and tuple(attrs.get("stride", (1, 1))) == (1, 1)
        and tuple(attrs.get("dilation", (1, 1))) == (1, 1)
        and int(attrs.get("groups", 1)) == 1
    )


def winograd_weights(w: np.ndarray, attrs: dict) -> np.ndarray:
    """U = G g G^T for every (oc, c), in float64 then rounded: [36, OC, C] float32.

    The derive hook of the convolution kernels: weights of convolutions not marked
    ``algo="winograd"`` pass through unchanged.
    """
    if attrs.get("algo") != "winograd" or w.ndim != 4:
        return w
    u = np.einsum("ai,ocij,bj->aboc", G, w.astype(np.float64), G)
    return np.ascontiguousarray(u.reshape(TILE * TILE, w.shape[0], w.shape[1]), dtype=np.float32)


def _plan(x_shape, out_shape):
    n, c, h, w = x_shape
    oc, oh, ow = out_shape[1], out_shape[2], out_shape[3]
    th, tw = -(-oh // OUT), -(-ow // OUT)
    chunk = max(1, min(n, _TILES // (th * tw)))
    return n, c, h, w, oc, oh, ow, th, tw, chunk


def scratch_bytes(in_types, out_types, attrs) -> int:
    n, c, h, w, oc, oh, ow, th, tw, chunk = _plan(in_types[0].shape, out_types[0].shape)
    t = chunk * th * tw
    pad = chunk * c * (OUT * th + 2) * (OUT * tw + 2)
    # V stays for both phases; the padded copy and input bands, then the output bands,
    # reuse the space after it.
    return 4 * (TILE * TILE * c * t + max(pad + _IN_BAND * c * t, _OUT_BAND * oc * t))


def prepare_winograd(inputs, outputs, attrs, scratch, parallel=None):
    """Bind an F(4x4, 3x3) convolution (weights raw or already transformed)."""
    x, w = inputs[0], inputs[1]
    bias = inputs[2] if len(inputs) > 2 else None
    (out,) = outputs
    u = w if w.ndim == 3 else winograd_weights(w, {**attrs, "algo": "winograd"})
    n, c, h, wd, oc, oh, ow, th, tw, chunk = _plan(x.shape, out.shape)
    pt, pl = attrs.get("padding", (0, 0, 0, 0))[:2]
    hp, wp = OUT * th + 2, OUT * tw + 2
    t = chunk * th * tw
    ways = parallel.ways if parallel is not None else 1
    in_bands, out_bands = split(c, ways, keep_empty=True), split(oc, ways, keep_empty=True)

    v = scratch_array(scratch, np.float32, (TILE, TILE, c, t))  # shared by both phases
    base = v.nbytes
    pad = scratch_array(scratch, np.float32, (chunk, c, hp, wp), base)
    band_base = base + pad.nbytes

    def in_band(c0: int, c1: int):
        """Scratch of one input band: gathered tiles and the first GEMM's result."""
        offset = band_base + 4 * _IN_BAND * c0 * t
        cb = c1 - c0
        tiles = scratch_array(scratch, np.float32, (TILE, TILE, cb, chunk, th, tw), offset)
        rows = scratch_array(scratch, np.float32, (TILE, TILE * cb * t), offset + tiles.nbytes)
        return tiles, rows

    def out_band(o0: int, o1: int):
        """Scratch of one output band: channel GEMM result, output GEMMs, staged tiles."""
        offset = base + 4 * _OUT_BAND * o0 * t
        ob = o1 - o0
        m = scratch_array(scratch, np.float32, (TILE * TILE, ob, t), offset)
        y1 = scratch_array(scratch, np.float32, (OUT, TILE * ob * t), offset + m.nbytes)
        y = scratch_array(scratch, np.float32, (OUT, OUT, ob * t), offset + m.nbytes + y1.nbytes)
        staged = scratch_array(scratch, np.float32, (chunk, ob, OUT * th, OUT * tw),
                               offset + m.nbytes + y1.nbytes + y.nbytes)
        return m, y1, y, staged

    in_buffers = [in_band(b.start, b.stop) for b in in_bands]
    out_buffers = [out_band(b.start, b.stop) for b in out_bands]
    b4 = bias.reshape(1, oc, 1, 1) if bias is not None else None
    act = attrs.get("act", "none")
    current = [0, 0]  # first image and image count of the chunk being computed

    def transform_in(j: int) -> None:
        c0, c1 = in_bands[j].start, in_bands[j].stop
        if c0 == c1:
            return
        i0, k = current
        tiles, rows = in_buffers[j]
        p = pad[:k, c0:c1]
        # With a zero border around the copied image (the scratch holds other instructions' data).
        pad_into(x[i0 : i0 + k, c0:c1], p, pt, pl)
        tk = tiles[:, :, :, :k]
        np.copyto(tk, tile_view(p, (TILE, TILE), (OUT, OUT), (th, tw)))
        # B^T d B: a GEMM over tile rows, then one over tile columns per row, written
        # straight into this band's rows of V (as [6, 6, cb * t] with t's last axis merged).
        cbt = (c1 - c0) * t
        np.matmul(_BT32, tiles.reshape(TILE, TILE * cbt), out=rows)
        np.matmul(_BT32, rows.reshape(TILE, TILE, cbt), out=merge_last(v[:, :, c0:c1]))

    def transform_out(j: int) -> None:
        o0, o1 = out_bands[j].start, out_bands[j].stop
        if o0 == o1:
            return
        i0, k = current
        m, y1, y, staged = out_buffers[j]
        ob = o1 - o0
        # All t columns, also those of images past k in a partial last chunk (their results
        # are dropped): the GEMMs keep one shape and columns never mix.
        np.matmul(u[:, o0:o1], v.reshape(TILE * TILE, c, t), out=m)
        np.matmul(_AT32, m.reshape(TILE, TILE * ob * t), out=y1)
        np.matmul(_AT32, y1.reshape(OUT, TILE, ob * t), out=y)
        # y[r, s, o, image, ty, tx] is output pixel (4 ty + r, 4 tx + s).
        tiles_out = y.reshape(OUT, OUT, ob, chunk, th, tw)[:, :, :, :k].transpose(3, 2, 4, 0, 5, 1)
        final = out[i0 : i0 + k, o0:o1]
        if oh == OUT * th and ow == OUT * tw:
            np.copyto(final.reshape(k, ob, th, OUT, tw, OUT), tiles_out)
        else:
            sk = staged[:k]
            np.copyto(sk.reshape(k, ob, th, OUT, tw, OUT), tiles_out)
            np.copyto(final, sk[:, :, :oh, :ow])
        if b4 is not None:
            np.add(final, b4[:, o0:o1], out=final)
        if act != "none":
            apply_activation(final, attrs)

    def run() -> None:
        for i0 in range(0, n, chunk):
            current[0], current[1] = i0, min(chunk, n - i0)
            if parallel is None:
                transform_in(0)
                transform_out(0)
            else:
                parallel(transform_in)
                parallel(transform_out)

    return run
