"""Convolution as im2col + one GEMM per image and group, into the planned output.

The column buffer ``[C/g, KH, KW, OH, OW]`` lives in per-thread scratch. :class:`Im2col`
fills it with the compiled kernel (float32, strided or at least 14 output columns: padding
written as zeros, no padded copy), or copies the image into a zero-bordered padded buffer
(also scratch) and fills all columns with one copy from a strided window view of it. A 1x1,
stride-1, unpadded convolution skips im2col: the input already is the column matrix. Where
``lowerkit.backend.cpu.panels.fits`` (few rows of columns on one thread; more on a team) and
the weight is a constant, the GEMM is the compiled panel GEMM with bias and activation fused.
"""

from __future__ import annotations

from functools import partial

import numpy as np

from lowerkit.backend.cpu import channel_direct, direct, im2col_view, pad_into, panels, split, team_layers
from lowerkit.backend.cpu.calls import on_team, sequence
from lowerkit.backend.cpu.gemm import matmul_into

from . import grouped, winograd
from .elementwise import prepare_add
from ._base import apply_activation, bias_activation, conv_geometry, kernel, scratch_array


def _is_pointwise(w_shape, stride, padding, dilation) -> bool:
    return w_shape[2] == 1 and w_shape[3] == 1 and stride == (1, 1) and not any(padding)


def _is_strided_pointwise(w_shape, stride, padding, dilation) -> bool:
    """A 1x1, unpadded convolution with a stride: a pointwise one on every ``stride``-th pixel."""
    return w_shape[2] == 1 and w_shape[3] == 1 and stride != (1, 1) and not any(padding)


def padded_bytes(c: int, hw, padding, itemsize: int) -> int:
    """Scratch bytes of the padded copy of one image (0 without padding)."""
    pt, pl, pb, pr = padding
    return c * (hw[0] + pt + pb) * (hw[1] + pl + pr) * itemsize if any(padding) else 0


class Im2col:
    """Fills columns ``[C, KH, KW, OH, OW]`` of one image ``[C, H, W]``: compiled for float32
    (``lowerkit.backend.cpu.jit.conv.im2col``), else numpy's copy from a window view of a
    padded copy."""

    def __init__(self, c, hw, khw, out_hw, stride, padding, dilation, dtype, scratch, offset: int = 0):
        (h, w), (pt, pl, pb, pr) = hw, padding
        self.kernels = None
        if np.dtype(dtype) == np.float32:
            from lowerkit.backend.cpu import jit

            self.kernels = jit.load("conv")
        self.pad = None
        if any(padding):
            self.pad = scratch_array(scratch, dtype, (c, h + pt + pb, w + pl + pr), offset)
        self.top_left = (pt, pl)
        self.khw, self.out_hw, self.stride, self.dilation = khw, out_hw, stride, dilation

    def compiled_for(self, image: np.ndarray) -> bool:
        """Whether the compiled kernel fills columns of ``image`` (float32, C order)."""
        return self.kernels is not None and image.dtype == np.float32 and image.flags.c_contiguous

    def source(self, image: np.ndarray) -> np.ndarray:
        """The read-only window view ``[C, KH, KW, OH, OW]`` of ``image`` (padded if needed)."""
        src = image
        if self.pad is not None:
            pad_into(image, self.pad, *self.top_left)  # zeroes the border: the scratch is shared
            src = self.pad
        return im2col_view(src, self.khw, self.out_hw, self.stride, self.dilation)

    def rows(self, image: np.ndarray, col: np.ndarray, first: int, last: int) -> None:
        """Output rows [first, last) of the columns, by the compiled kernel (see :meth:`compiled_for`)."""
        (kh, kw), (oh, ow) = self.khw, self.out_hw
        self.kernels.im2col(image, col.reshape(-1, oh, ow), kh, kw, *self.stride, *self.top_left,
                            *self.dilation, first, last)

    def __call__(self, image: np.ndarray, col: np.ndarray) -> None:
        if col.flags.c_contiguous and self.compiled_for(image):
            self.rows(image, col, 0, self.out_hw[0])
        else:
            np.copyto(col, self.source(image))


PARALLEL_MIN_FLOPS = 30e6  # per image; smaller convolutions run serially
CHANNEL_SPLIT_PIXELS = 400  # parallel convs with fewer output pixels split channels, not rows

# Below this many output pixels per image, a batch runs as one GEMM over all images (the
# per-image GEMM would be too skinny for BLAS); the result is then transposed into NCHW.
BATCHED_PIXELS = 1024


# On one thread, an im2col layer on maps of at most this many pixels (7x7) goes image by image
# to the panel GEMM rather than into one sgemm over the batch: ResNet-50 at batch 4 on one
# thread, the same program bound both ways (in both orders), per layer, panel / batched:
# 3x3 512 at 7x7 0.87-0.94, its 1x1/2 downsample to 7x7 0.88-0.92; on 14x14 maps 0.96-1.05
# and the 1x1/2 downsample to 14x14 1.08-1.17; 28x28 mixed (3x3/2 0.86-0.94, 1x1/2 0.90-1.03).
PANEL_BEFORE_BATCH_PIXELS = 128


def _batched(n: int, oh: int, ow: int, groups: int) -> bool:
    return n > 1 and groups == 1 and oh * ow < BATCHED_PIXELS


def conv_scratch_bytes(in_types, out_types, attrs, itemsize: int = 4) -> int:
    """Bytes of the column buffer (one image and group, or the whole batch) and GEMM result."""
    x, w = in_types[0], in_types[1]
    stride, padding, dilation, groups = conv_geometry(attrs)
    n = x.shape[0]
    oc, cg, kh, kw = w.shape
    _, _, oh, ow = out_types[0].shape
    pad = padded_bytes(cg, x.shape[2:], padding, itemsize)
    if _batched(n, oh, ow, groups):
        return (cg * kh * kw + oc) * n * oh * ow * itemsize + pad
    if _is_pointwise(w.shape, stride, padding, dilation):
        return 0
    one_image = cg * kh * kw * oh * ow * itemsize + pad
    if _is_strided_pointwise(w.shape, stride, padding, dilation) and groups == 1:
        return max(one_image, n * cg * oh * ow * itemsize)  # every image's sampled pixels (_prepare_sampled)
    return one_image


def prepare_conv(inputs, outputs, attrs, scratch, *, parallel=None, team=None, col_dtype=np.float32):
    """Bind a float convolution (optionally biased, with a fused activation) to its arrays.
    With ``residual=True`` it is ``glow.conv2d(x, w, bias, residual)``, a fused residual add
    (``passes/residual.py``): ``out = act(conv(x) + bias + residual)``. On a team, the panel
    GEMM's forms add the residual to each tile before its activation and Winograd's output
    transform to each output; the other forms, and every form on one thread (see
    ``_FUSE_SERIAL``), run the convolution, then the sum and the activation in one compiled pass
    (``jit.conv.add_activation``, as the add instruction did)."""
    if not attrs.get("residual"):
        return _prepare_conv(inputs, outputs, attrs, scratch, parallel, team, col_dtype)
    *conv_inputs, residual = inputs
    fused = None
    if residual.dtype == np.float32 and residual.flags.c_contiguous and (team is not None or _FUSE_SERIAL):
        fused = _prepare_conv(conv_inputs, outputs, attrs, scratch, parallel, team, col_dtype, residual)
    if fused is not None:
        return fused
    plain = _prepare_conv(conv_inputs, outputs, _without_activation(attrs), scratch, parallel, team, col_dtype)
    return _then_residual(plain, outputs, residual, attrs, scratch)


def _then_residual(plain, outputs, residual, attrs, scratch):
    """``plain`` (a convolution bound without its activation), then the residual added and
    the activation applied in place by ``glow.add``'s kernel."""
    return sequence(plain, prepare_add([outputs[0], residual], outputs, attrs, scratch))


# On one thread (batch slices), the panel GEMM's forms still run the sum as a pass after the
# convolution: the tiles' residual rows, six strided streams, cost more there than the pass
# (ResNet-50 at batch 8, three handles in one process, best / median against unfused: team
# forms only 0.997 / 1.003, everywhere 1.010 / 1.027; ResNet-18 0.994 / 0.999 and 1.004 / 1.004).
# On the team the pass would run on one core while the convolution runs on two.
_FUSE_SERIAL = False


def _without_activation(attrs: dict) -> dict:
    return {k: v for k, v in attrs.items() if not k.startswith("act") and k != "residual"}


def _prepare_conv(inputs, outputs, attrs, scratch, parallel, team, col_dtype, residual=None):
    """:func:`prepare_conv` of a convolution ``(x, w[, bias])``; with a ``residual``, the form
    that adds it in its GEMM's epilogue, or None where the chosen form has none."""
    if attrs.get("algo") == "winograd":
        usable = team is not None and all(a.dtype == np.float32 for a in (*inputs, *outputs))
        return winograd.prepare_winograd(inputs, outputs, attrs, scratch, parallel, team=team if usable else None,
                                         residual=residual)
    algorithm = _grouped(inputs[0].shape, inputs[1].shape, outputs[0].shape, attrs)
    if algorithm is not None:
        if residual is not None:
            return None
        return grouped.prepare_grouped(inputs, outputs, attrs, scratch, parallel, algorithm, team=team)
    if team is not None and _team_fits(inputs, outputs, attrs, col_dtype):
        serial = _prepare_conv(inputs, outputs, attrs, scratch, None, None, col_dtype, residual)
        if serial is None:
            return None
        return _prepare_team(inputs, outputs, attrs, scratch, team, serial, residual)
    x, w = inputs[0], inputs[1]
    bias = inputs[2] if len(inputs) > 2 else None
    (out,) = outputs
    stride, padding, dilation, groups = conv_geometry(attrs)
    n, c, h, wd = x.shape
    oc, cg, kh, kw = w.shape
    _, _, oh, ow = out.shape
    ocg = oc // groups
    k = cg * kh * kw
    w2 = w.reshape(groups, ocg, k)
    pointwise = _is_pointwise(w.shape, stride, padding, dilation)
    # On this thread (batch slices, a one-thread handle): image by image, before the batched
    # GEMM too. With the pool, the batched and split forms below keep its workers busy.
    if groups == 1 and parallel is None and _is_strided_pointwise(w.shape, stride, padding, dilation):
        sampled_run = _prepare_sampled(x, w, bias, out, attrs, stride, scratch, residual)
        if sampled_run is not None:
            return sampled_run
    if pointwise and groups == 1 and parallel is None:
        panel_run = _prepare_panel(x, w, bias, out, attrs, None, residual)
        if panel_run is not None:
            return panel_run
    if groups == 1 and parallel is None and not pointwise:
        direct_run = _prepare_direct(x, w, bias, out, attrs, scratch) if residual is None else None
        if direct_run is None:
            direct_run = _prepare_channel_direct(x, w, bias, out, attrs, scratch, residual)
        if direct_run is not None:
            return direct_run
        tiles_run = _prepare_panel_tiles(x, w, bias, out, attrs, scratch, residual)
        if tiles_run is not None:
            return tiles_run
    if _batched(n, oh, ow, groups) and not (
            parallel is None and oh * ow <= PANEL_BEFORE_BATCH_PIXELS and panels.fits(k, oh * ow, team=False)
            and _packed(x, w, bias, out) is not None):  # small maps on one thread: the panel path below
        if residual is not None:
            return None
        return _prepare_batched(x, w, bias, out, attrs, (stride, padding, dilation), scratch, col_dtype, parallel)
    # Parallel only where the work pays for the hand-off (~100 us per call).
    if parallel is not None and groups == 1 and 2 * oc * k * oh * ow >= PARALLEL_MIN_FLOPS:
        if residual is not None:
            return None
        return _prepare_split(x, w, bias, out, attrs, (stride, padding, dilation), scratch, col_dtype, parallel)
    col = None if pointwise else scratch_array(scratch, col_dtype, (cg, kh, kw, oh, ow))
    col2 = None if col is None else col.reshape(k, oh * ow)
    im2col = None if pointwise else Im2col(cg, (h, wd), (kh, kw), (oh, ow), stride, padding, dilation,
                                           col_dtype, scratch, offset=col.nbytes)
    if groups == 1 and not (pointwise and parallel is None):  # (that case was decided above)

        def columns(image):
            im2col(image, col)
            return col2

        panel_run = _prepare_panel(x, w, bias, out, attrs, None if pointwise else columns, residual)
        if panel_run is not None:
            return panel_run
    if residual is not None:
        return None
    epilogue = _epilogue(attrs, bias, out.dtype)

    def run():
        for i in range(n):
            for g in range(groups):
                image = x[i, g * cg : (g + 1) * cg]
                dst = out[i, g * ocg : (g + 1) * ocg].reshape(ocg, oh * ow)
                if pointwise:
                    matmul_into(w2[g], image.reshape(cg, h * wd), dst)
                else:
                    im2col(image, col)
                    matmul_into(w2[g], col2, dst)
            if epilogue is not None:
                epilogue(out[i].reshape(oc, oh * ow))

    return run


def _prepare_panel(x, w, bias, out, attrs, columns, residual=None):
    """A convolution image by image on the compiled panel GEMM, with its bias and activation
    (``lowerkit.backend.cpu.panels``), where that beats sgemm and the epilogue on one thread
    (``panels.fits``: at most 128 rows of columns, or any on maps of at most 784 pixels) and
    the weight is a constant; None elsewhere. ``columns(image)`` gives an image's column
    matrix (its im2col), None for a 1x1 layer, which reads the image in place — also where a
    batch would be one GEMM over all images (small maps): batch slices of 4 images, same
    process, calls alternating, batched / panel GEMM for the layers of at most 128 rows, best
    of 40: MobileNetV2 at batch 8 58.0 / 52.9 ms, EfficientNet-B0 88.5 / 84.0, ResNet-50
    407.9 / 412.3; then for every layer on maps of at most 784 pixels, two handles, best of
    30: 0.82-0.93, 0.96-0.97 and 0.94-0.99 of the time before (``panels``' docstring)."""
    from lowerkit.backend.cpu import jit

    n, c = x.shape[0], x.shape[1]
    oc, pixels = w.shape[0], out.shape[2] * out.shape[3]
    packed = _packed(x, w, bias, out) if panels.fits(w[0].size, pixels, team=False) else None
    if packed is None:
        return None
    act = jit.activation_code(attrs)
    outs = out.reshape(n, oc, pixels)
    added = None if residual is None else residual.reshape(n, oc, pixels)
    if columns is None:
        images = x.reshape(n, c, pixels)
        return packed.bind_images(images, outs, act, added)  # the kernel's call itself

    def run_columns():
        for i in range(n):
            packed.run(columns(x[i]), outs[i], act, None if added is None else added[i])

    return run_columns


def _prepare_sampled(x, w, bias, out, attrs, stride, scratch, residual=None):
    """A strided 1x1 convolution on one thread (ResNet's 1x1/2 downsamples): every image's
    sampled pixels copied into scratch in one strided copy, then the panel GEMM over them as
    over a 1x1 layer's images (``bind_images``: each image's whole GEMM at once) — not im2col
    per image or per tile of rows, whose GEMMs are narrower. Four images (a batch slice), one
    thread, best of 30, ms, before (row tiles on the panel GEMM; one sgemm over the batch to
    14x14) / sampled: ResNet-50's 256x56x56 -> 512 9.97 / 8.85, 512x28x28 -> 1024 9.15 / 8.45,
    1024x14x14 -> 2048 8.67 / 8.13 (AMD EPYC Zen 4 VM, 2026-12-06). A team keeps its own form
    (im2col in bands, then the GEMM's): sampling first measured no faster there. None where
    the panel GEMM does not take the layer."""
    from lowerkit.backend.cpu import jit

    n, c = x.shape[0], x.shape[1]
    oc, (oh, ow) = w.shape[0], out.shape[2:]
    packed = _packed(x, w, bias, out) if panels.fits(c, oh * ow, team=False) else None
    if packed is None:
        return None
    sampled = scratch_array(scratch, np.float32, (n, c, oh, ow))
    window = x[:, :, ::stride[0], ::stride[1]][:, :, :oh, :ow]
    added = None if residual is None else residual.reshape(n, oc, oh * ow)
    gemm = packed.bind_images(sampled.reshape(n, c, oh * ow), out.reshape(n, oc, oh * ow), jit.activation_code(attrs),
                              added)

    def run_sampled():
        np.copyto(sampled, window)
        gemm()

    return run_sampled


def _packed(x, w, bias, out) -> panels.PackedWeight | None:
    """The weight packed for the panel GEMM (once for every thread that binds it) where the
    layer's arrays are float32 and its input and output C-contiguous; None for a weight given
    at call time, or other arrays."""
    if not (all(a.dtype == np.float32 for a in (x, w, out)) and x.flags.c_contiguous and out.flags.c_contiguous):
        return None
    return panels.PackedWeight.shared(w, bias)


def _prepare_direct(x, w, bias, out, attrs, scratch):
    """A stem (few input channels, ``lowerkit.backend.cpu.direct.fits``) image by image as a
    direct convolution on the packed weight, bias and activation fused: no column matrix at
    all. None where that does not apply."""
    from lowerkit.backend.cpu import jit

    stride, padding, dilation, _ = conv_geometry(attrs)
    c, (_, _, kh, kw), out_hw = x.shape[1], w.shape, out.shape[2:]
    if not direct.fits(c, (kh, kw), stride, dilation, out_hw):
        return None
    packed = _packed(x, w, bias, out)
    if packed is None:
        return None
    form = direct.DirectConv.of(c, (kh, kw), stride, padding, out_hw)
    phases = scratch_array(scratch, np.float32, form.phases_shape)
    act = jit.activation_code(attrs)
    return partial(form.run, packed, x, out, act, phases)


def _prepare_channel_direct(x, w, bias, out, attrs, scratch, residual=None):
    """A layer of many input channels (``lowerkit.backend.cpu.channel_direct.fits``) image by
    image as a direct convolution with its output channels in the vector lanes, bias,
    residual and activation fused: no column matrix (its padded image in the scratch). None
    where that does not apply."""
    from lowerkit.backend.cpu import jit

    stride, padding, dilation, _ = conv_geometry(attrs)
    (_, c, kh, kw), (h, wd) = w.shape, x.shape[2:]
    if not (channel_direct.fits(c, (kh, kw), stride=stride) and all(a.dtype == np.float32 for a in (x, w, out))
            and x.flags.c_contiguous and out.flags.c_contiguous):
        return None
    weight = channel_direct.StripWeight.shared(w, bias)
    if weight is None:
        return None
    form = channel_direct.ChannelDirectConv.of((c, h, wd), (kh, kw), stride, padding, dilation, out.shape[2:])
    padded = scratch_array(scratch, np.float32, form.padded_shape) if form.pads else None
    return partial(form.run, weight, x, out, jit.activation_code(attrs), padded, residual)


def _prepare_panel_tiles(x, w, bias, out, attrs, scratch, residual=None):
    """A stem (few rows of columns over a large map, ``panels.tile_rows``) image by image in
    row tiles on the compiled panel GEMM: each tile's columns, then its GEMM with bias and
    activation while they are in cache, not the whole image's column matrix (7.4 MB for
    ResNet's 7x7 stem) written and read back. None where that does not apply."""
    from lowerkit.backend.cpu import jit

    n = x.shape[0]
    oc, _, kh, kw = w.shape
    oh, ow = out.shape[2], out.shape[3]
    k = w[0].size
    rows = panels.tile_rows(k, (oh, ow))
    packed = _packed(x, w, bias, out) if rows else None
    if packed is None:
        return None
    stride, padding, dilation, _ = conv_geometry(attrs)
    geometry = (kh, kw, *stride, padding[0], padding[1], *dilation)
    cols = scratch_array(scratch, np.float32, (k * rows * ow,))
    act = jit.activation_code(attrs)

    def run_tiles():
        for i in range(n):
            packed.run_tiles(x[i], out[i], act, geometry, rows, cols, None if residual is None else residual[i])

    return run_tiles


def _team_fits(inputs, outputs, attrs, col_dtype) -> bool:
    """Whether the convolution has a team form: float32, C order, no groups, and at least
    ``team_layers.MIN_FLOPS`` an image — or one output pixel an image over a weight that
    ``team_layers.row_on_team`` streams on both cores (a squeeze-excitation layer's 1x1
    convolutions on the pooled map: matrix-vector products, as long as their weight is
    large, whatever their FLOPs). MobileNetV3-Large at batch 1, its 960x240 and 672x168 ones
    on the team / on the calling thread, paired in one process: 0.956-0.966; MobileNetV3-Small
    0.966-0.976 (AMD EPYC Zen 3 VM, session 32, my script)."""
    x, w, out = inputs[0], inputs[1], outputs[0]
    one_pixel = out.shape[2] * out.shape[3] == 1 and team_layers.row_on_team(1, w.size)
    return (int(attrs.get("groups", 1)) == 1 and col_dtype == np.float32
            and all(a.dtype == np.float32 for a in (*inputs, out))
            and x.flags.c_contiguous and out.flags.c_contiguous
            and (2 * out[0].size * w[0].size >= team_layers.MIN_FLOPS or one_pixel))


def _prepare_team(inputs, outputs, attrs, scratch, team, serial, residual=None):
    """Team form (one image on ``team.ways`` cores; the choices are
    ``lowerkit.backend.cpu.team_layers.DenseTeamForm``'s): large outputs as implicit GEMM in
    tiles; otherwise im2col in bands of output rows, then the GEMM in bands of output
    channels (or of pixels), each band's bias and activation on the thread that multiplied it.
    Narrow stride-1 planes keep numpy's window copy for their columns (see :class:`Im2col`).
    With a ``residual``, None unless the form adds it (``DenseTeamForm.fuses_residual``)."""
    from lowerkit.backend.cpu import jit

    x, w = inputs[0], inputs[1]
    (out,) = outputs
    stride, padding, dilation, _ = conv_geometry(attrs)
    n, c, h, wd = x.shape
    oc, _, kh, kw = w.shape
    _, _, oh, ow = out.shape
    w2 = np.ascontiguousarray(w.reshape(oc, -1))
    bias = _team_bias(inputs)
    act = jit.activation_code(attrs)
    # Packed once per constant weight (not per thread binding). A weight given at call time
    # keeps sgemm: the form is then chosen without the image size, so never the channel-direct
    # one, whose strips would be packed on every call.
    given_bias = inputs[2] if len(inputs) > 2 else None
    form = team_layers.DenseTeamForm.of(oc, w2.shape[1], (kh, kw), stride, padding, dilation, (oh, ow), team.ways,
                                        in_hw=(h, wd))
    packed = form.shared(w, given_bias)
    if packed is None and form.channel is not None:
        form = team_layers.DenseTeamForm.of(oc, w2.shape[1], (kh, kw), stride, padding, dilation, (oh, ow), team.ways)
        packed = form.shared(w, given_bias)
    if residual is not None and (packed is None or not form.fuses_residual):
        return None
    cols = fill = None
    if form.direct is not None or form.channel is not None:
        cols = None if form.cols_shape is None else scratch_array(scratch, np.float32, form.cols_shape)
    elif form.tiled:
        cols = np.empty(form.cols_shape, np.float32)
    elif not form.pointwise:
        cols = scratch_array(scratch, np.float32, form.cols_shape)
        im2col = Im2col(c, (h, wd), (kh, kw), (oh, ow), stride, padding, dilation, np.float32, scratch,
                        offset=cols.nbytes)
        if not im2col.compiled_for(x[0]):
            fill = lambda image, columns: im2col(image, columns.reshape(c, kh, kw, oh, ow))  # noqa: E731

    if fill is None:
        # The layer's compiled call(s) with their arguments gathered now (a 1x1 layer: the panel
        # GEMM's kernel itself): no Python layers between the program's loop and the kernel,
        # whose cost inside a model is several µs a layer (MobileNetV2: 3.5% of a call).
        return on_team(team, form.bind(team, x, w2, bias, out, act, cols, packed, residual), serial)

    def run_filled():
        if not team.usable():
            return serial()
        for i in range(n):
            form.run(team, x[i], w2, bias, out[i], act, cols, fill, packed, None if residual is None else residual[i])

    return run_filled


def _team_bias(inputs) -> np.ndarray:
    """The bias as the team kernels take it: float32 [OC], or empty for none."""
    if len(inputs) < 3:
        return np.empty(0, np.float32)
    return np.ascontiguousarray(inputs[2].reshape(-1), dtype=np.float32)


def _prepare_split(x, w, bias, out, attrs, geometry, scratch, col_dtype, parallel):
    """Intra-op parallel form: each of ``parallel.ways`` tasks fills and multiplies a band of
    output rows (its columns of the column buffer), then adds bias and activation there."""
    stride, padding, dilation = geometry
    n, c, h, wd = x.shape
    oc, _, kh, kw = w.shape
    _, _, oh, ow = out.shape
    w2 = w.reshape(oc, -1)
    pointwise = _is_pointwise(w.shape, stride, padding, dilation)
    col = None if pointwise else scratch_array(scratch, col_dtype, (c, kh, kw, oh, ow))
    col2 = None if col is None else col.reshape(-1, oh * ow)
    im2col = None if pointwise else Im2col(c, (h, wd), (kh, kw), (oh, ow), stride, padding, dilation,
                                           col_dtype, scratch, offset=col.nbytes)
    out3 = out.reshape(n, oc, oh * ow)
    current: list = [None, 0]  # this thread's window view and image index (kernels are per thread)
    if oh * ow < CHANNEL_SPLIT_PIXELS:
        # Few pixels: split the output channels instead (rows of W), after a serial im2col.
        # (With more pixels, each thread would pack the whole shared column matrix.)
        channel_bands = split(oc, parallel.ways, keep_empty=True)
        band_epilogues = [_epilogue(attrs, None if bias is None else bias.reshape(-1)[band], out.dtype)
                          for band in channel_bands]

        def channel_task(j: int) -> None:
            band = channel_bands[j]
            a, b = band.start, band.stop
            i = current[1]
            src = x[i].reshape(c, h * wd) if pointwise else col2
            dst = out3[i][a:b]
            matmul_into(w2[a:b], src, dst)
            if band_epilogues[j] is not None:
                band_epilogues[j](dst)

        def run_channels():
            for i in range(n):
                if not pointwise:
                    im2col(x[i], col)
                current[1] = i
                parallel(channel_task)

        return run_channels
    row_bands = split(oh, parallel.ways, keep_empty=True)
    epilogue = _epilogue(attrs, bias, out.dtype)

    def task(j: int) -> None:
        a, b = row_bands[j].start, row_bands[j].stop
        if a == b:
            return
        window, i = current
        cols = slice(a * ow, b * ow)
        if pointwise:
            src = x[i].reshape(c, h * wd)[:, cols]
        else:
            if window is None:
                im2col.rows(x[i], col, a, b)
            else:
                np.copyto(col[:, :, :, a:b], window[:, :, :, a:b])
            src = col2[:, cols]
        dst = out3[i][:, cols]
        matmul_into(w2, src, dst)
        if epilogue is not None:
            epilogue(dst)

    def run():
        for i in range(n):
            current[0] = None if pointwise or im2col.compiled_for(x[i]) else im2col.source(x[i])
            current[1] = i
            parallel(task)

    return run


def _prepare_batched(x, w, bias, out, attrs, geometry, scratch, col_dtype, parallel=None):
    """One GEMM for the whole batch: columns [K, N, OH, OW], result [OC, N, OH*OW]."""
    stride, padding, dilation = geometry
    n, cg, h, wd = x.shape
    oc, _, kh, kw = w.shape
    _, _, oh, ow = out.shape
    w2 = w.reshape(oc, -1)
    col = scratch_array(scratch, col_dtype, (cg, kh, kw, n, oh, ow))
    acc = scratch_array(scratch, col_dtype, (oc, n, oh * ow), offset=col.nbytes)
    im2col = Im2col(cg, (h, wd), (kh, kw), (oh, ow), stride, padding, dilation, col_dtype, scratch,
                    offset=col.nbytes + acc.nbytes)
    col2, acc2 = col.reshape(-1, n * oh * ow), acc.reshape(oc, n * oh * ow)
    epilogue = _epilogue(attrs, bias, out.dtype)
    out3 = out.reshape(n, oc, oh * ow)

    column_bands = split(n * oh * ow, parallel.ways if parallel is not None else 1, keep_empty=True)

    def gemm(j: int) -> None:
        a, b = column_bands[j].start, column_bands[j].stop
        if a < b:
            matmul_into(w2, col2[:, a:b], acc2[:, a:b])

    def run():
        for i in range(n):
            im2col(x[i], col[:, :, :, i])
        if parallel is None:
            gemm(0)
        else:
            parallel(gemm)
        np.copyto(out3, acc.transpose(1, 0, 2))
        if epilogue is not None:
            epilogue(out.reshape(n * oc, oh * ow))

    return run


def _epilogue(attrs, bias, dtype):
    """Bias + fused activation over [channels, pixels] rows: compiled for float32, else numpy."""
    if dtype == np.float32:
        return bias_activation(attrs, bias)
    b2 = None if bias is None else bias.reshape(-1, 1)
    act = attrs.get("act", "none")
    if b2 is None and act == "none":
        return None

    def numpy_epilogue(a: np.ndarray) -> None:
        if b2 is not None:
            np.add(a, b2, out=a)
        if act != "none":
            apply_activation(a, attrs)

    return numpy_epilogue


def _grouped(x_shape, w_shape, out_shape, attrs) -> str | None:
    """The compiled grouped kernel: as chosen ahead of time (``algo``), else by shape."""
    algo = attrs.get("algo")
    if algo in grouped.ALGORITHMS:
        return algo
    if algo is None and len(w_shape) == 4:
        return grouped.grouped_algorithm(x_shape, w_shape, out_shape, attrs)
    return None


def _scratch(in_types, out_types, attrs):
    if attrs.get("algo") == "winograd":
        return winograd.scratch_bytes(in_types, out_types, attrs)
    if _grouped(in_types[0].shape, in_types[1].shape, out_types[0].shape, attrs) is not None:
        return grouped.grouped_scratch_bytes(in_types[0].shape, in_types[1].shape, out_types[0].shape, attrs)
    return conv_scratch_bytes(in_types, out_types, attrs)


def prepare_gated_conv(inputs, outputs, attrs, scratch, team=None):
    """``glow.gated_conv2d(x, w, bias, gate)``: a 1x1 convolution of ``x * gate`` (``gate``
    [N, C, 1, 1], see ``passes/gate.py``) as, per image, the weight scaled by the gate
    (``[OC, C]``, in scratch) times ``x``, then bias and activation. With ``residual=True``
    a fifth input is added before the activation (``passes/residual.py``): in the panel GEMM's
    team region where it runs there, else by ``glow.add``'s kernel after the convolution."""
    if not attrs.get("residual"):
        return _prepare_gated(inputs, outputs, attrs, scratch, team)
    *gated, residual = inputs
    if team is not None and residual.dtype == np.float32 and residual.flags.c_contiguous:
        fused = _prepare_gated(gated, outputs, attrs, scratch, team, residual)
        if fused is not None:
            return fused
    return _then_residual(_prepare_gated(gated, outputs, _without_activation(attrs), scratch, team), outputs,
                          residual, attrs, scratch)


def _prepare_gated(inputs, outputs, attrs, scratch, team, residual=None):
    """:func:`prepare_gated_conv` of ``(x, w, bias, gate)``; with a ``residual``, the team form
    that adds it in the panel GEMM's region (and, while the team is off, the serial form and
    then ``glow.add``'s kernel), or None where the layer does not take the panel GEMM."""
    x, w, bias, gate = inputs
    (out,) = outputs
    n, c, h, wd = x.shape
    oc = w.shape[0]
    w2 = w.reshape(oc, c)
    scaled = scratch_array(scratch, np.float32, (oc, c))
    gates = gate.reshape(n, 1, c)
    teamed = team is not None and 2 * oc * c * h * wd >= team_layers.MIN_FLOPS and x.flags.c_contiguous
    if residual is not None and not teamed:
        return None
    from lowerkit.backend.cpu import jit

    plain = attrs if residual is None else _without_activation(attrs)  # the residual's add activates
    # On one thread, the panel GEMM where it takes the layer: per image the gate scales a copy
    # of the packed weight, whose tiles then add the bias and apply the activation. Batch
    # slices (two threads each running this form) had spent ~0.1 ms more per layer in
    # OpenBLAS's sgemm than one slice alone did; MobileNetV3-Small at batch 8 took 0.92 of the
    # time this way (see docs/glow_like.md, pass 10). Elsewhere the weight scaled into scratch,
    # sgemm, then the epilogue.
    packed = _packed(x, w, bias, out) if panels.fits(c, h * wd, team=False) else None
    if packed is not None:
        serial = packed.bind_gated_images(gate.reshape(n, c), x.reshape(n, c, h * wd), out.reshape(n, oc, h * wd),
                                          jit.activation_code(plain))
    else:
        epilogue = _epilogue(plain, bias, out.dtype)

        def serial():
            for i in range(n):
                np.multiply(w2, gates[i], out=scaled)
                dst = out[i].reshape(oc, h * wd)
                matmul_into(scaled, x[i].reshape(c, h * wd), dst)
                if epilogue is not None:
                    epilogue(dst)

    if not teamed:
        return serial

    kernels, team_bias = team.kernels(), _team_bias(inputs)
    act = jit.activation_code(attrs)
    # The panel GEMM on a constant weight: each thread scales its own copy of the packed
    # weight (PackedWeight.bind_team_gated); else the weight scaled here, GEMM bands.
    packed = panels.PackedWeight.shared(w, bias) if panels.fits(c, h * wd, team=True) else None
    if residual is not None and packed is None:
        return None
    copies = packed.gated_copies(team.ways) if packed is not None else None
    flat_gates = gate.reshape(n, c)
    off_team = serial if residual is None else _then_residual(serial, outputs, residual, attrs, scratch)

    if packed is not None:  # the kernel's calls with their arguments gathered (see _prepare_team)
        regions = packed.bind_team_gated(flat_gates, copies, x.reshape(n, c, h * wd), out.reshape(n, oc, h * wd), act,
                                         team.ways, None if residual is None else residual.reshape(n, oc, h * wd))
        return on_team(team, regions, off_team)

    def run_team():
        if not team.usable():
            off_team()
            return
        for i in range(n):
            dst = out[i].reshape(oc, h * wd)
            np.multiply(w2, gates[i], out=scaled)
            kernels.gemm_bias_activation(scaled, x[i].reshape(c, h * wd), team_bias, dst, *act, team.ways,
                                         oc <= team_layers.COLUMN_SPLIT_ROWS and c >= 2 * oc, team.sgemm)

    return run_team


def _gated_scratch(in_types, out_types, attrs):
    return 4 * in_types[1].shape[0] * in_types[1].shape[1]


kernel("glow.gated_conv2d", scratch_bytes=_gated_scratch, team=True)(prepare_gated_conv)

_DERIVE = ((1, winograd.winograd_weights),)
kernel("conv2d", scratch_bytes=_scratch, parallel=True, team=True, derive=_DERIVE)(prepare_conv)
kernel("glow.conv2d", scratch_bytes=_scratch, parallel=True, team=True, derive=_DERIVE)(prepare_conv)
