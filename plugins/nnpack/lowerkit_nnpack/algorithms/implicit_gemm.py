"""implicit_gemm: im2col into a reused column buffer, then BLAS GEMMs — or, for at most 128
rows of columns or maps of at most 784 pixels (``lowerkit.backend.cpu.panels.fits``: 1x1
layers, stems, small maps), image by image the compiled panel GEMM on the weight packed
once, bias and activation fused; the stems direct on the packed weight
(``lowerkit.backend.cpu.direct``: no columns), or (``panels.tile_rows``) in row tiles, each
tile's columns multiplied while in cache; layers of many input channels, where
``lowerkit.backend.cpu.channel_direct.fits``, image by image direct with the output channels
in the vector lanes (no columns either; bias, residual and activation fused).

Columns of one image come from the compiled im2col of ``lowerkit.backend.cpu.jit.conv``
(float32: padding written as zeros),
else from a window view of a padded copy; the batch-folded and channel-split paths keep the
view (their column layouts are not one image's contiguous matrix).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import numpy as np

from lowerkit.backend.cpu import channel_direct, direct, im2col_view, pad_into, panels
from lowerkit.backend.cpu.calls import sequence
from lowerkit.backend.cpu.gemm import matmul_into


from ..activations import NONE, add_activate
from ..bound import with_residual
from ..workspace import Workspace
from .base import _NO_BIAS, ConvAlgorithm


# Below this many output pixels per image, the images of a chunk share one GEMM (batch
# folded into the GEMM's columns) instead of one thin GEMM each; see docs/nnpack.md.
FOLD_BATCH_BELOW_PIXELS = 1024
# Row bands with a residual compute sub-bands of about this many result bytes, add the
# residual, bias and activation and copy them into the output while they are in cache.
SUB_BAND_BYTES = 256 * 1024



class ImplicitGemm(ConvAlgorithm):
    """implicit_gemm: im2col into a reused column buffer, then BLAS GEMMs — or, for at most 128
rows of columns or maps of at most 784 pixels (``lowerkit.backend.cpu.panels.fits``: 1x1
layers, stems, small maps), image by image the compiled panel GEMM on the weight packed
once, bias and activation fused; the stems (``panels.tile_rows``) in row tiles, each tile's
columns multiplied while in cache.

    Large images get one GEMM per image written straight into the output; small ones
    (fewer than :data:`FOLD_BATCH_BELOW_PIXELS` pixels) fold the batch into one wider
    GEMM whose result is then transposed into NCHW.
    """

    name = "implicit_gemm"

    _panel: tuple | None = None  # (the bias object it was packed with, its values then, the packed weight)
    _strips: tuple | None = None  # the same for the channel-direct form's StripWeight

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        # The compiled im2col, loaded here (at build).
        self._im2col = None
        if not self._reads_in_place():
            from lowerkit.backend.cpu import jit

            self._im2col = jit.load("conv").im2col
        g = self.geom
        k = g.in_channels * g.kernel[0] * g.kernel[1]
        self._panel_fits = panels.fits(k, self.out_hw[0] * self.out_hw[1], team=False)
        # A stem: each image direct on the packed weight (lowerkit.backend.cpu.direct), or
        # else in row tiles on the panel GEMM (see panels.tile_rows)
        self._direct = None
        if self._im2col is not None and direct.fits(g.in_channels, g.kernel, g.stride, (1, 1), self.out_hw):
            self._direct = direct.DirectConv.of(g.in_channels, g.kernel, g.stride, g.padding, self.out_hw)
        self._tile_rows = 0 if self._im2col is None else panels.tile_rows(k, self.out_hw)
        # Many input channels: direct with the output channels in the vector lanes
        # (lowerkit.backend.cpu.channel_direct), bias, residual and activation fused
        self._channel = None
        if (self._im2col is not None and self._direct is None
                and channel_direct.fits(g.in_channels, g.kernel, stride=g.stride)):
            self._channel = channel_direct.ChannelDirectConv.of((g.in_channels, *g.in_hw), g.kernel, g.stride,
                                                                g.padding, (1, 1), self.out_hw)
        self._tile_geometry = (*g.kernel, *g.stride, g.padding[0], g.padding[1], 1, 1)

    def _transform_kernel(self, ws: Workspace | None, weight: np.ndarray) -> np.ndarray:
        return weight.reshape(self.geom.out_channels, -1)

    def _fold(self, n: int) -> bool:
        oh, ow = self.out_hw
        return n > 1 and oh * ow < FOLD_BATCH_BELOW_PIXELS

    splits_channels = True

    def new_state(self, n: int) -> np.ndarray:
        """Columns [N, C, KH, KW, OH, OW], or [C, KH, KW, N, OH, OW] when the batch is folded."""
        g = self.geom
        (kh, kw), (oh, ow) = g.kernel, self.out_hw
        if self._fold(n):
            return self.ws.get("cols_folded", (g.in_channels, kh, kw, n, oh, ow))
        return self.ws.get("cols", (n, g.in_channels, kh, kw, oh, ow))

    def transform_channels(self, x: np.ndarray, channels: slice, state: np.ndarray) -> None:
        g = self.geom
        xs = x[:, channels]
        n, c = xs.shape[0], xs.shape[1]
        t, l, b, r = g.padding
        if any(g.padding):
            src = self.ws.get("pad", (n, c, g.in_hw[0] + t + b, g.in_hw[1] + l + r))
            pad_into(xs, src, t, l)
        else:
            src = xs
        view = im2col_view(src, g.kernel, self.out_hw, g.stride)  # [N, C, KH, KW, OH, OW]
        if self._fold(n):
            np.copyto(state[channels], view.transpose(1, 2, 3, 0, 4, 5))
        else:
            np.copyto(state[:, channels], view)

    def finish_state(self, state: np.ndarray, n: int) -> np.ndarray:
        """[C*KH*KW, N*OH*OW] when the batch is folded, else [N, C*KH*KW, OH*OW]."""
        ckk = self.geom.in_channels * self.geom.kernel[0] * self.geom.kernel[1]
        return state.reshape(ckk, -1) if self._fold(n) else state.reshape(n, ckk, -1)

    def compute_output(
        self, state: np.ndarray, kernel: np.ndarray, bias: np.ndarray | None, block: slice, out: np.ndarray,
        residual: np.ndarray | None = None,
    ) -> None:
        w = kernel[block]
        out_block = out[:, block]
        n, ocb = out.shape[0], w.shape[0]
        if state.ndim == 2:  # batch folded into the columns
            res = self.ws.get("gemm", (ocb, state.shape[1]))
            matmul_into(w, state, res)
            np.copyto(out_block, res.reshape(ocb, n, *out.shape[2:]).transpose(1, 0, 2, 3))
        else:
            for i in range(n):
                dst = out_block[i]
                if dst.flags.c_contiguous:
                    matmul_into(w, state[i], dst.reshape(ocb, -1))
                else:  # pragma: no cover - callers pass contiguous outputs
                    res = self.ws.get("gemm", (ocb, state.shape[2]))
                    matmul_into(w, state[i], res)
                    np.copyto(dst, res.reshape(dst.shape))
        self._epilogue(out_block, bias, block, residual)

    # -- the batched path: a worker's chunk of images, one image at a time ---------------
    def run_chunk(
        self, x: np.ndarray, kernel: np.ndarray, bias: np.ndarray | None, out: np.ndarray,
        residual: np.ndarray | None = None,
    ) -> None:
        """All output channels of the images ``x`` into ``out``. Where :meth:`_packed` has the
        weight, each image's columns on the compiled panel GEMM with bias and activation
        (with a residual: bias only, then the residual and the activation while the output
        is in cache), small images too: instead of the batch folded into one sgemm,
        MobileNetV2 at batch 8 on ``[nnpack, glow_like]``, same process, alternating calls,
        best 69.2 -> 62.4 ms (glow_like decides the same way). Otherwise the batch folded
        into one GEMM on small images, or per image its columns, its GEMM, then bias,
        residual and activation while the image's output is in cache (not columns for the
        whole chunk first: for ResNet's first layer at batch 8 those are 29 MB)."""
        n = x.shape[0]
        oc = self.geom.out_channels
        if self._channel_direct(x, kernel, bias, out, residual):
            return
        packed = self._packed(kernel, bias)
        if packed is not None:
            act = self.activation if residual is None else NONE  # with a residual the activation follows it
            if n > 1 and self._reads_in_place() and x.flags.c_contiguous and out.flags.c_contiguous:
                # A 1x1 layer over a batch chunk: every image in one call into compiled code
                # (as glow_like's; one crossing per layer, not one per image), then the
                # residual and the activation in one pass.
                packed.run_images(x.reshape(n, x.shape[1], -1), out.reshape(n, oc, -1), act)
                if residual is not None:
                    add_activate(out, residual, self.activation)
                return
            if self._samples() and x.dtype == np.float32 and out.flags.c_contiguous:
                # A 1x1/2 layer: every image's sampled pixels in one strided copy, then as a
                # 1x1 layer (glow_like's _prepare_sampled: its GEMMs image-wide, not per tile).
                sampled, window = self._sampled(x)
                np.copyto(sampled, window)
                packed.run_images(sampled.reshape(n, x.shape[1], -1), out.reshape(n, oc, -1), act)
                if residual is not None:
                    add_activate(out, residual, self.activation)
                return
            form = self._direct
            if (form is not None and residual is None and x.dtype == np.float32 and x.flags.c_contiguous
                    and out.flags.c_contiguous):
                form.run(packed, x, out, act, self.ws.get("phases", form.phases_shape))
                return
            rows = self._tile_rows
            if rows and residual is None and self.compiled_im2col(x[0]) and out.flags.c_contiguous:
                cols = self.ws.get("cols_tile", (x.shape[1] * self.geom.kernel[0] * self.geom.kernel[1]
                                                 * rows * self.out_hw[1],))
                for i in range(n):
                    packed.run_tiles(x[i], out[i], act, self._tile_geometry, rows, cols)
                return
            for i in range(n):
                packed.run(self._image_columns(x[i]), out[i].reshape(oc, -1), act)
                if residual is not None:
                    self._epilogue(out[i : i + 1], None, slice(None), residual[i : i + 1])
            return
        if self._fold(n):
            self.compute_output(self.transform_input(x), kernel, bias, slice(None), out, residual)
            return
        for i in range(n):
            dst = out[i].reshape(oc, -1)
            matmul_into(kernel, self._image_columns(x[i]), dst)
            self._epilogue(out[i : i + 1], bias, slice(None), None if residual is None else residual[i : i + 1])

    def bind_chunk(self, x: np.ndarray, kernel: np.ndarray, bias: np.ndarray | None, out: np.ndarray,
                   residual: np.ndarray | None = None) -> Callable[[], object] | None:
        """:meth:`run_chunk` on these very arrays as a zero-argument call, for a 1x1 layer on
        the panel GEMM (every image in one compiled call, then the residual; a strided one
        copies its sampled pixels first); else None."""
        packed = self._packed(kernel, bias)
        samples = self._samples() and x.dtype == np.float32
        if (packed is None or not (self._reads_in_place() or samples)
                or not (x.flags.c_contiguous and out.flags.c_contiguous)):
            return None
        n = x.shape[0]
        act = self.activation if residual is None else NONE
        out3 = out.reshape(n, self.geom.out_channels, -1)
        if not samples:
            return with_residual(packed.bind_images(x.reshape(n, x.shape[1], -1), out3, act), out, residual,
                                 self.activation)
        sampled, window = self._sampled(x)
        gemm = sequence(partial(np.copyto, sampled, window),
                        packed.bind_images(sampled.reshape(n, x.shape[1], -1), out3, act))
        return with_residual(gemm, out, residual, self.activation)

    def _channel_direct(self, x: np.ndarray, kernel: np.ndarray, bias: np.ndarray | None, out: np.ndarray,
                        residual: np.ndarray | None) -> bool:
        """:meth:`run_chunk` by the channel-direct form where the layer has one and the call
        its compiled weight and contiguous float32 arrays; False where it does not run."""
        form = self._channel
        if form is None or kernel is not self._kernel or not (
                x.dtype == np.float32 and x.flags.c_contiguous and out.flags.c_contiguous
                and (residual is None or (residual.dtype == np.float32 and residual.flags.c_contiguous))):
            return False
        weight = self._cached("_strips", bias, lambda: channel_direct.StripWeight.of(kernel, bias))
        padded = self.ws.get("channel_padded", form.padded_shape) if form.pads else None
        form.run(weight, x, out, self.activation, padded, residual)
        return True

    def _cached(self, attr: str, bias: np.ndarray | None, pack: Callable[[], object]):
        """The packing kept in ``attr`` as (the bias object, its values then, the packing),
        made by ``pack`` on first use and again for another bias, or a writable one whose
        values changed."""
        cached = getattr(self, attr)
        if cached is None or cached[0] is not bias or (bias is not None and bias.flags.writeable
                                                       and not np.array_equal(cached[1], bias)):
            cached = (bias, None if bias is None else bias.copy(), pack())
            setattr(self, attr, cached)
        return cached[2]

    def _packed(self, kernel: np.ndarray, bias: np.ndarray | None) -> panels.PackedWeight | None:
        """The compiled weight ``[OC, C*KH*KW]`` and this call's bias packed into panels (once,
        on first use; again for another bias, or a writable one whose values changed), when the
        call uses the compiled weight and :func:`panels.fits` the layer on one thread, or it runs
        direct (``lowerkit.backend.cpu.direct``) or in tiles (:func:`panels.tile_rows`); else
        None."""
        if not (self._panel_fits or self._tile_rows or self._direct) or kernel is not self._kernel:
            return None
        return self._cached("_panel", bias, lambda: panels.PackedWeight.of(kernel, bias))

    def panel_weight(self, bias: np.ndarray | None) -> panels.PackedWeight | None:
        """The compiled weight packed for the panel GEMM with ``bias`` where the layer runs
        there on one thread (as :meth:`run_chunk` does), else None."""
        return self._packed(self._kernel, bias) if self._kernel is not None else None

    def _image_columns(self, image: np.ndarray) -> np.ndarray:
        """The column matrix ``[C*KH*KW, OH*OW]`` of one image (in this thread's workspace)."""
        if self._reads_in_place():
            return image.reshape(image.shape[0], -1)
        g = self.geom
        cols = self.ws.get("cols_image", (g.in_channels, *g.kernel, *self.out_hw))
        if self.compiled_im2col(image):
            self.fill_rows(image, cols, 0, self.out_hw[0])
        else:
            np.copyto(cols, self.row_window(image))
        return cols.reshape(-1, self.out_hw[0] * self.out_hw[1])

    def compiled_im2col(self, image: np.ndarray) -> bool:
        """Whether :meth:`fill_rows` serves ``image`` (see the module docstring)."""
        return self._im2col is not None and image.dtype == np.float32 and image.flags.c_contiguous

    def fill_rows(self, image: np.ndarray, cols: np.ndarray, first: int, last: int) -> None:
        """Columns of output rows [first, last) of ``image`` into ``cols`` [C, KH, KW, OH, OW],
        by the compiled im2col (padding as zeros)."""
        g = self.geom
        (kh, kw), (sh, sw), (oh, ow) = g.kernel, g.stride, self.out_hw
        self._im2col(image, cols.reshape(-1, oh, ow), kh, kw, sh, sw, g.padding[0], g.padding[1], 1, 1, first, last)

    # -- the per-image path split by bands of output rows (one phase, no channel split) --
    splits_rows = True

    def row_window(self, image: np.ndarray) -> np.ndarray | None:
        """The window view ``[C, KH, KW, OH, OW]`` of one image ``[C, H, W]`` (padded into this
        thread's workspace first if needed); workers copy their bands out of it. ``None``
        when the compiled im2col fills the bands from the image itself."""
        if self.compiled_im2col(image):
            return None
        g = self.geom
        if any(g.padding):
            t, l, b, r = g.padding
            src = self.ws.get("pad_rows", (1, g.in_channels, g.in_hw[0] + t + b, g.in_hw[1] + l + r))
            pad_into(image[None], src, t, l)
            image = src[0]
        return im2col_view(image[None], g.kernel, self.out_hw, g.stride)[0]

    def new_row_columns(self) -> np.ndarray | None:
        """The shared column buffer the bands fill (``None``: the input is the column matrix)."""
        g = self.geom
        if self._reads_in_place():
            return None
        return self.ws.get("cols_rows", (g.in_channels, *g.kernel, *self.out_hw))

    def _reads_in_place(self) -> bool:
        g = self.geom
        return g.kernel == (1, 1) and g.stride == (1, 1) and not any(g.padding)

    def _samples(self) -> bool:
        """A 1x1 layer with a stride and no padding (ResNet's 1x1/2 downsamples): a 1x1 layer
        on every stride-th pixel, which :meth:`_sampled` copies out first."""
        g = self.geom
        return g.kernel == (1, 1) and g.stride != (1, 1) and not any(g.padding)

    def _sampled(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """This thread's buffer for the sampled pixels of ``x`` [N, C, OH, OW], and the strided
        view of ``x`` to copy into it."""
        (sh, sw), (oh, ow) = self.geom.stride, self.out_hw
        return (self.ws.get("sampled", (x.shape[0], x.shape[1], oh, ow)),
                x[:, :, ::sh, ::sw][:, :, :oh, :ow])

    def compute_rows(
        self, image: np.ndarray, window: np.ndarray, cols: np.ndarray | None, kernel: np.ndarray,
        bias: np.ndarray | None, rows: slice, out_image: np.ndarray, residual_image: np.ndarray | None = None,
    ) -> None:
        """Output rows ``rows`` of one image: fill their columns, one GEMM into the output
        (a strided band of it: BLAS writes with the image's row stride), bias and activation."""
        a, b = rows.start, rows.stop
        if a >= b:
            return
        g = self.geom
        oc, ow = g.out_channels, self.out_hw[1]
        band = slice(a * ow, b * ow)
        if cols is None:
            src = image.reshape(g.in_channels, -1)[:, band]
        else:
            if window is None:
                self.fill_rows(image, cols, a, b)
            else:
                np.copyto(cols[..., a:b, :], window[..., a:b, :])
            src = cols.reshape(-1, cols.shape[-2] * ow)[:, band]
        dst = out_image.reshape(oc, -1)[:, band]
        code, p0, p1 = self.activation
        if residual_image is None:
            # Straight into the strided output band; bias and activation in one compiled
            # pass over it (the kernel takes strided rows; numpy ufuncs would allocate).
            matmul_into(kernel, src, dst)
            if bias is not None or code:
                self.load_epilogue()
                self._bias_act(dst, _NO_BIAS if bias is None else bias, code, p0, p1)
            return
        rsd = residual_image.reshape(oc, -1)[:, band]
        # With a residual: each sub-band's result goes to a contiguous per-thread buffer
        # small enough to stay in cache while the residual is added (numpy's add on the
        # strided band itself would allocate iteration buffers on every call), then bias
        # and activation, then the copy into the output band.
        step = max(1, SUB_BAND_BYTES // (4 * oc * ow))
        for r0 in range(a, b, step):
            r1 = min(b, r0 + step)
            sub = slice((r0 - a) * ow, (r1 - a) * ow)
            res = self.ws.get("rows_res", (oc, (r1 - r0) * ow))
            matmul_into(kernel, src[:, sub], res)
            np.add(res, rsd[:, sub], out=res)
            self.load_epilogue()
            self._bias_act(res, _NO_BIAS if bias is None else bias, code, p0, p1)
            np.copyto(dst[:, sub], res)
