"""Winograd F(4x4, 3x3) for 3x3, stride-1, undilated, ungrouped convolutions.

Each 4x4 output tile comes from a 6x6 input tile d (tiles overlap by 2):
Y = A^T [(G g G^T) * (B^T d B)] A, so a tile needs 36 multiplies per channel pair instead
of 144. The transforms are GEMMs with the 6x6 and 4x6 matrices over all tiles at once;
the channel products are 36 GEMMs ``U[k] @ V[k]`` with U = G g G^T ([36, OC, C], derived
once per handle) and V = B^T d B ([36, C, tiles]).

The work runs in two parallel phases: input-channel bands (the compiled input transform
of ``lowerkit.backend.cpu.jit.winograd``: pad, split and B^T d B in one pass, into
their rows of V), then output-channel bands (the band's 36 channel GEMMs on BLAS — or, where
``lowerkit.backend.cpu.panels.tuples_fit``, on the panel GEMM over U packed once, in bands of
whole 6-channel panels —, then the compiled output transform with bias and activation fused,
written straight into the output). Each band works in its own slice of the scratch.
"""

from __future__ import annotations

import numpy as np

from lowerkit.backend.cpu import input_scratch_floats, output_group_tiles, split, team_layers, winograd_matrices
from lowerkit.backend.cpu.panels import PackedTuples

from ._base import scratch_array

TILE, OUT = 6, 4

# Points 0, +-1, +-2 and infinity: Lavin & Gray's F(4x4, 3x3) matrices (nnpack's wt6x6 too).
AT, G, BT = winograd_matrices(OUT, 3)
_TILES = 2048  # target tiles per batch chunk


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
    # V, then the output bands' GEMM results; the transforms' own scratch is each band's
    # arrays, made when the layer binds (input_scratch_floats, output_group_tiles).
    return 4 * TILE * TILE * (c + oc) * t


def prepare_winograd(inputs, outputs, attrs, scratch, parallel=None, team=None, residual=None):
    """Bind an F(4x4, 3x3) convolution (weights raw or already transformed), with a fused
    residual add where ``residual`` (shaped like the output, float32, C order) is given: the
    output transform adds it before the activation."""
    from lowerkit.backend.cpu import jit

    kernels = jit.load("winograd")
    x, w = inputs[0], inputs[1]
    bias = inputs[2].reshape(-1) if len(inputs) > 2 else np.empty(0, np.float32)
    (out,) = outputs
    u = w if w.ndim == 3 else winograd_weights(w, {**attrs, "algo": "winograd"})
    n, c, h, wd, oc, oh, ow, th, tw, chunk = _plan(x.shape, out.shape)
    pt, pl = attrs.get("padding", (0, 0, 0, 0))[:2]
    code, p0, p1 = jit.activation_code(attrs)
    t = chunk * th * tw
    added = team_layers.NO_RESIDUAL if residual is None else residual
    if team is not None and x.flags.c_contiguous and out.flags.c_contiguous:
        serial = prepare_winograd(inputs, outputs, attrs, scratch, residual=residual)
        return _team_form(x, u, bias, out, (pt, pl), (code, p0, p1), scratch, team, serial, residual)
    ways = parallel.ways if parallel is not None else 1
    in_bands = [(b.start, b.stop) for b in split(c, ways)]
    packed = team_layers.winograd_weights(np.ascontiguousarray(u, dtype=np.float32), t)
    if isinstance(packed, PackedTuples):
        out_bands = packed.bands(ways)  # whole panels of the packed weight
    else:
        out_bands = [(b.start, b.stop) for b in split(oc, ways)]
    v = scratch_array(scratch, np.float32, (TILE * TILE, c, t))  # shared by both phases
    in_buffers = [np.empty(input_scratch_floats(th, tw), np.float32) for _ in in_bands]
    out_buffers, offset = [], v.nbytes
    group = output_group_tiles(tw)  # the output transform's passes run over this many tiles
    for o0, o1 in out_bands:
        m = scratch_array(scratch, np.float32, (TILE * TILE, o1 - o0, t), offset)
        out_buffers.append((m, np.empty((TILE, OUT, group), np.float32), np.empty((OUT, OUT, group), np.float32)))
        offset += m.nbytes
    current = [0, 0]  # first image and image count of the chunk being computed

    def transform_in(j: int) -> None:
        if j < len(in_bands):
            kernels.winograd_input(x, v, pt, pl, th, tw, current[0], current[1], *in_bands[j], in_buffers[j])

    def transform_out(j: int) -> None:
        if j >= len(out_bands):
            return
        o0, o1 = out_bands[j]
        m, s, y = out_buffers[j]
        # The chunk's images' columns only: in a partial last chunk the others hold whatever
        # the scratch held (their products were work thrown away, and could be NaN).
        cols = current[1] * th * tw
        if isinstance(packed, PackedTuples):
            packed.run(v, m, cols, o0, o1)
        else:
            np.matmul(u[:, o0:o1], v[:, :, :cols], out=m[:, :, :cols])
        kernels.winograd_output(m, bias, out, o0, o1, current[0], current[1], th, tw, code, p0, p1, s, y, added)

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


def _team_form(x, u, bias, out, padding, act, scratch, team, serial, residual=None):
    """Two team regions per chunk of images (``lowerkit.backend.cpu.team_layers.run_winograd``):
    the input transform in bands of input channels, then per band of output channels its 36
    channel GEMMs (jit.cblas.sgemm — MKL's or numpy's, BLAS at one thread — or the panel GEMM
    on the packed weight, ``team_layers.winograd_weights``) and its output transform."""
    n, c, h, wd, oc, oh, ow, th, tw, chunk = _plan(x.shape, out.shape)
    weights = team_layers.winograd_weights(np.ascontiguousarray(u, dtype=np.float32), chunk * th * tw)
    bias = np.ascontiguousarray(bias, dtype=np.float32)
    shapes = team_layers.winograd_shapes(c, oc, chunk * th * tw, (th, tw), team.ways)
    buffers = {name: np.empty(shape, np.float32) for name, shape in shapes.items() if name != "v"}
    buffers["v"] = scratch_array(scratch, np.float32, shapes["v"])  # shared with the serial form

    def run() -> None:
        if not team.usable():
            return serial()
        for i0 in range(0, n, chunk):
            team_layers.run_winograd(team, x, weights, bias, out, padding, (th, tw), act, buffers, i0,
                                     min(chunk, n - i0), residual)

    return run
