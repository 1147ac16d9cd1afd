"""The convolution algorithms, each split into steps the scheduler can spread over threads.

``kernel_data()`` gives the transformed kernel (precomputed once, or per call);
``transform_input(x)`` turns an NCHW batch chunk into the algorithm's domain (or, where
``splits_channels``, ``new_state`` + ``transform_channels`` per input-channel block +
``finish_state``); ``compute_output(state, kernel, bias, block, out)`` does the channel
GEMM for the output-channel ``block`` and the output transform, adding bias and (fused)
ReLU. Every large temporary lives in a per-thread :class:`Workspace` and is written with
``out=``.
"""

from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import as_strided

from .geometry import ConvGeometry, GeometryError
from .tiles import pad_into, scatter_tiles, tile_counts, tile_view
from .winograd_matrices import winograd_matrices
from .workspace import Workspace

# Winograd algorithms and their output tile: wt8x8 is NNPACK's; wt6x6 and wt4x4 are extensions.
WINOGRAD_TILES = {"wt8x8": 6, "wt6x6": 4, "wt4x4": 2}
ALGORITHMS = ("auto", "wt8x8", "wt6x6", "wt4x4", "ft8x8", "ft16x16", "implicit_gemm", "direct")


class ConvAlgorithm:
    """Common parts: geometry, weights, bias, fused ReLU and the kernel-transform strategy."""

    name = ""

    def __init__(
        self,
        geom: ConvGeometry,
        weight: np.ndarray | None,
        relu: bool = False,
        precompute: bool = True,
        workspace: Workspace | None = None,
    ) -> None:
        check_algorithm(self.name, geom)
        self.geom = geom
        self.weight = None if weight is None else np.ascontiguousarray(weight, dtype=np.float32)
        self.relu = relu
        self.ws = workspace if workspace is not None else Workspace()
        self._kernel = None
        if precompute and self.weight is not None:
            self._kernel = self._transform_kernel(None, self.weight)

    def kernel_data(self, weight: np.ndarray | None = None) -> np.ndarray:
        """The transformed kernel: precomputed, or transformed now (per call) in this thread's workspace."""
        if weight is None:
            if self._kernel is not None:
                return self._kernel
            weight = self.weight
        return self._transform_kernel(self.ws, np.ascontiguousarray(weight, dtype=np.float32))

    def _transform_kernel(self, ws: Workspace | None, weight: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def transform_input(self, x: np.ndarray) -> np.ndarray:
        """The transformed input for the whole batch; by default every channel in one go."""
        state = self.new_state(x.shape[0])
        self.transform_channels(x, slice(None), state)
        return self.finish_state(state, x.shape[0])

    # Algorithms whose input transform can be split over input-channel blocks (so the
    # per-image path runs it on every worker) override these three.
    splits_channels = False

    def new_state(self, n: int) -> np.ndarray:
        """The (caller-thread) buffer that :meth:`transform_channels` calls fill."""
        raise NotImplementedError

    def transform_channels(self, x: np.ndarray, channels: slice, state: np.ndarray) -> None:
        """Transform input channels ``channels`` of ``x`` into ``state`` (any thread)."""
        raise NotImplementedError

    def finish_state(self, state: np.ndarray, n: int) -> np.ndarray:
        """``state`` (for ``n`` images) as :meth:`compute_output` reads it."""
        return state

    def compute_output(
        self, state: np.ndarray, kernel: np.ndarray, bias: np.ndarray | None, block: slice, out: np.ndarray
    ) -> None:
        raise NotImplementedError

    def _epilogue(self, out_block: np.ndarray, bias: np.ndarray | None, block: slice) -> None:
        """Bias and fused ReLU, in place on the block just written (still in cache)."""
        if bias is not None:
            out_block += bias[block][:, None, None]
        if self.relu:
            np.maximum(out_block, 0.0, out=out_block)


def check_algorithm(name: str, geom: ConvGeometry) -> None:
    """Raise ``GeometryError`` naming the rule when algorithm ``name`` cannot serve ``geom``."""
    kh, kw = geom.kernel
    strided = geom.stride != (1, 1)
    if name in WINOGRAD_TILES:
        m = WINOGRAD_TILES[name]
        if (kh, kw) != (3, 3):
            raise GeometryError(f"{name} (Winograd F({m}x{m}, 3x3)) needs a 3x3 kernel, got {kh}x{kw}")
        if strided:
            raise GeometryError(f"{name} needs stride 1x1, got {geom.stride[0]}x{geom.stride[1]}")
    elif name in ("ft8x8", "ft16x16"):
        limit = 8 if name == "ft8x8" else 16
        if max(kh, kw) > limit:
            raise GeometryError(f"{name} needs a kernel of at most {limit}x{limit}, got {kh}x{kw}")
        if strided:
            raise GeometryError(f"{name} needs stride 1x1, got {geom.stride[0]}x{geom.stride[1]}")
    elif name == "direct":
        if (kh, kw) != (1, 1):
            raise GeometryError(f"direct needs a 1x1 kernel, got {kh}x{kw}")
    elif name != "implicit_gemm":
        raise GeometryError(f"unknown algorithm {name!r}; expected one of {list(ALGORITHMS)}")


def _merge_last(view: np.ndarray) -> np.ndarray:
    """``view`` [..., a, b] as [..., a*b] without copying (its last two axes must be contiguous)."""
    if view.strides[-2] != view.strides[-1] * view.shape[-1]:
        raise ValueError("last two axes are not contiguous")  # an invariant of the callers
    shape = view.shape[:-2] + (view.shape[-2] * view.shape[-1],)
    return as_strided(view, shape, view.strides[:-2] + (view.strides[-1],))


class Winograd(ConvAlgorithm):
    """wt8x8: Winograd F(6x6, 3x3) on 8x8 input tiles; transforms are GEMMs with 8x8 matrices.

    Subclasses change the tile (``size``, output tile ``out``) and interpolation points.
    """

    name = "wt8x8"
    size, out = 8, 6
    _AT, _G, _BT = winograd_matrices(6, 3)

    def __init__(self, *args, **kwargs) -> None:
        self.at = self._AT.astype(np.float32)
        self.bt = self._BT.astype(np.float32)
        self.g = self._G.astype(np.float32)
        super().__init__(*args, **kwargs)
        self.tiles = tile_counts(self.geom.out_hw, (self.out, self.out))

    def _transform_kernel(self, ws: Workspace | None, weight: np.ndarray) -> np.ndarray:
        oc, ic = self.geom.out_channels, self.geom.in_channels
        t = self.size
        if ws is None:  # precompute in float64: the G matrix has awkward fractions
            u = np.einsum("ar,ocrs,bs->aboc", self._G, weight.astype(np.float64), self._G)
            return np.ascontiguousarray(u, dtype=np.float32).reshape(t * t, oc, ic)
        t1 = ws.get("kt1", (oc, ic, t, 3))
        np.matmul(self.g, weight, out=t1)
        t2 = ws.get("kt2", (oc, ic, t, t))
        np.matmul(t1, self.g.T, out=t2)
        u = ws.get("kernel", (t, t, oc, ic))
        np.copyto(u, t2.transpose(2, 3, 0, 1))
        return u.reshape(t * t, oc, ic)

    splits_channels = True

    def new_state(self, n: int) -> np.ndarray:
        th, tw = self.tiles
        return self.ws.get("v", (self.size, self.size, self.geom.in_channels, n * th * tw))

    def transform_channels(self, x: np.ndarray, channels: slice, state: np.ndarray) -> None:
        n = x.shape[0]
        xs = x[:, channels]
        c = xs.shape[1]
        th, tw = self.tiles
        t, m = self.size, self.out
        top, left = self.geom.padding[0], self.geom.padding[1]
        padded = self.ws.get("pad", (n, c, m * th + t - m, m * tw + t - m))
        pad_into(xs, padded, top, left)
        rest = c * n * th * tw
        tiles = self.ws.get("tiles", (t, t, c, n, th, tw))
        np.copyto(tiles, tile_view(padded, (t, t), (m, m), (th, tw)))
        # B^T d B as two GEMMs: rows (axis 0) first, then columns (axis 1) per row; the
        # second writes straight into this channel block of the shared state.
        v1 = self.ws.get("v1", (t, t * rest))
        np.matmul(self.bt, tiles.reshape(t, t * rest), out=v1)
        np.matmul(self.bt, v1.reshape(t, t, rest), out=_merge_last(state[:, :, channels]))

    def finish_state(self, state: np.ndarray, n: int) -> np.ndarray:
        return state.reshape(self.size * self.size, state.shape[2], state.shape[3])

    def compute_output(
        self, state: np.ndarray, kernel: np.ndarray, bias: np.ndarray | None, block: slice, out: np.ndarray
    ) -> None:
        n = out.shape[0]
        t, mo = self.size, self.out
        ocb = len(range(*block.indices(self.geom.out_channels)))
        r = state.shape[2]
        m = self.ws.get("m", (t * t, ocb, r))
        np.matmul(kernel[:, block], state, out=m)
        y1 = self.ws.get("y1", (mo, t * ocb * r))
        np.matmul(self.at, m.reshape(t, t * ocb * r), out=y1)
        y = self.ws.get("y", (mo, mo, ocb * r))
        np.matmul(self.at, y1.reshape(mo, t, ocb * r), out=y)
        th, tw = self.tiles
        out_block = out[:, block]
        scatter_tiles(y.reshape(mo, mo, ocb, n, th, tw), out_block)
        self._epilogue(out_block, bias, block)


class Winograd6(Winograd):
    """wt6x6 (extension, not in NNPACK): Winograd F(4x4, 3x3) on 6x6 tiles, points 0, +-1, +-2, inf.

    The transformed kernel is 36/9 = 4x the weight (wt8x8: 64/9), so it pays off on
    small images where wt8x8 has too few tiles to amortise its kernel.
    """

    name = "wt6x6"
    size, out = 6, 4
    _AT, _G, _BT = winograd_matrices(4, 3, (0, 1, -1, 2, -2))


class Winograd4(Winograd):
    """wt4x4 (extension, not in NNPACK): Winograd F(2x2, 3x3) on 4x4 tiles, points 0, +-1, inf (16/9 kernel)."""

    name = "wt4x4"
    size, out = 4, 2
    _AT, _G, _BT = winograd_matrices(2, 3, (0, 1, -1))


class FourierTiles(ConvAlgorithm):
    """ft8x8 / ft16x16: overlap-save FFT convolution on TxT tiles, complex per-frequency channel GEMM."""

    size = 8

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        kh, kw = self.geom.kernel
        self.step = (self.size - kh + 1, self.size - kw + 1)
        self.tiles = tile_counts(self.geom.out_hw, self.step)

    def _transform_kernel(self, ws: Workspace | None, weight: np.ndarray) -> np.ndarray:
        t = self.size
        oc, ic = self.geom.out_channels, self.geom.in_channels
        kh, kw = self.geom.kernel
        w = weight.transpose(2, 3, 0, 1)  # [kh, kw, OC, IC]
        if ws is None:
            spectrum = np.fft.rfft2(w.astype(np.float64), s=(t, t), axes=(0, 1))
            return np.ascontiguousarray(np.conj(spectrum), dtype=np.complex64).reshape(-1, oc, ic)
        padded = ws.get("kpad", (t, t, oc, ic))
        padded.fill(0.0)
        np.copyto(padded[:kh, :kw], w)
        spectrum = ws.get("kernel", (t, t // 2 + 1, oc, ic), np.complex64)
        _forward(padded, spectrum)
        spectrum *= np.float32(t)  # undo the "ortho" scaling: the kernel spectrum is unnormalised
        np.conjugate(spectrum, out=spectrum)  # correlation, not convolution
        return spectrum.reshape(-1, oc, ic)

    def transform_input(self, x: np.ndarray) -> np.ndarray:
        t = self.size
        n, c = x.shape[0], self.geom.in_channels
        th, tw = self.tiles
        sh, sw = self.step
        top, left = self.geom.padding[0], self.geom.padding[1]
        padded = self.ws.get("pad", (n, c, sh * (th - 1) + t, sw * (tw - 1) + t))
        pad_into(x, padded, top, left)
        rest = c * n * th * tw
        tiles = self.ws.get("tiles", (t, t, c, n, th, tw))
        np.copyto(tiles, tile_view(padded, (t, t), self.step, (th, tw)))
        spectrum = self.ws.get("v", (t, t // 2 + 1, rest), np.complex64)
        _forward(tiles.reshape(t, t, rest), spectrum)
        return spectrum.reshape(-1, c, n * th * tw)

    def compute_output(
        self, state: np.ndarray, kernel: np.ndarray, bias: np.ndarray | None, block: slice, out: np.ndarray
    ) -> None:
        t = self.size
        n = out.shape[0]
        ocb = len(range(*block.indices(self.geom.out_channels)))
        r = state.shape[2]
        m = self.ws.get("m", (state.shape[0], ocb, r), np.complex64)
        np.matmul(kernel[:, block], state, out=m)
        y = self.ws.get("y", (t, t, ocb * r))
        _inverse(m.reshape(t, t // 2 + 1, ocb * r), y)
        th, tw = self.tiles
        sh, sw = self.step
        out_block = out[:, block]
        scatter_tiles(y.reshape(t, t, ocb, n, th, tw)[:sh, :sw], out_block)
        self._epilogue(out_block, bias, block)


def _forward(real: np.ndarray, spectrum: np.ndarray) -> None:
    """2-D real FFT over axes (0, 1) into ``spectrum``, in single precision.

    Two 1-D passes with ``norm="ortho"``: numpy's multi-axis and "backward"-normalised
    forward transforms pass an integer scale that promotes float32 work to float64
    temporaries (and ``irfft2(out=...)`` gives wrong results in numpy 2.4).
    """
    np.fft.rfft(real, axis=1, norm="ortho", out=spectrum)
    np.fft.fft(spectrum, axis=0, norm="ortho", out=spectrum)


def _inverse(spectrum: np.ndarray, real: np.ndarray) -> None:
    """Inverse of :func:`_forward` (destroys ``spectrum``); with both "ortho" the product is scaled by 1/T^2."""
    np.fft.ifft(spectrum, axis=0, norm="ortho", out=spectrum)
    np.fft.irfft(spectrum, n=real.shape[1], axis=1, norm="ortho", out=real)


class FourierTiles8(FourierTiles):
    name = "ft8x8"
    size = 8


class FourierTiles16(FourierTiles):
    name = "ft16x16"
    size = 16


# Below this many output pixels per image, the images of a chunk share one GEMM (batch
# folded into the GEMM's columns) instead of one thin GEMM each; see docs/nnpack.md.
FOLD_BATCH_BELOW_PIXELS = 1024


class ImplicitGemm(ConvAlgorithm):
    """implicit_gemm: im2col into a reused column buffer, then BLAS GEMMs.

    Large images get one GEMM per image written straight into the output; small ones
    (fewer than :data:`FOLD_BATCH_BELOW_PIXELS` pixels) fold the batch into one wider
    GEMM whose result is then transposed into NCHW.
    """

    name = "implicit_gemm"

    def _transform_kernel(self, ws: Workspace | None, weight: np.ndarray) -> np.ndarray:
        return weight.reshape(self.geom.out_channels, -1)

    def _fold(self, n: int) -> bool:
        oh, ow = self.geom.out_hw
        return n > 1 and oh * ow < FOLD_BATCH_BELOW_PIXELS

    splits_channels = True

    def new_state(self, n: int) -> np.ndarray:
        """Columns [N, C, KH, KW, OH, OW], or [C, KH, KW, N, OH, OW] when the batch is folded."""
        g = self.geom
        (kh, kw), (oh, ow) = g.kernel, g.out_hw
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
        (kh, kw), (oh, ow), (s0, s1) = g.kernel, g.out_hw, g.stride
        sn, sc, sh, sw = src.strides
        if self._fold(n):
            view = as_strided(src, (c, kh, kw, n, oh, ow), (sc, sh, sw, sn, sh * s0, sw * s1), writeable=False)
            np.copyto(state[channels], view)
        else:
            view = as_strided(src, (n, c, kh, kw, oh, ow), (sn, sc, sh, sw, sh * s0, sw * s1), writeable=False)
            np.copyto(state[:, channels], view)

    def finish_state(self, state: np.ndarray, n: int) -> np.ndarray:
        """[C*KH*KW, N*OH*OW] when the batch is folded, else [N, C*KH*KW, OH*OW]."""
        ckk = self.geom.in_channels * self.geom.kernel[0] * self.geom.kernel[1]
        return state.reshape(ckk, -1) if self._fold(n) else state.reshape(n, ckk, -1)

    def compute_output(
        self, state: np.ndarray, kernel: np.ndarray, bias: np.ndarray | None, block: slice, out: np.ndarray
    ) -> None:
        w = kernel[block]
        out_block = out[:, block]
        n, ocb = out.shape[0], w.shape[0]
        if state.ndim == 2:  # batch folded into the columns
            res = self.ws.get("gemm", (ocb, state.shape[1]))
            np.matmul(w, state, out=res)
            np.copyto(out_block, res.reshape(ocb, n, *out.shape[2:]).transpose(1, 0, 2, 3))
        else:
            for i in range(n):
                dst = out_block[i]
                if dst.flags.c_contiguous:
                    np.matmul(w, state[i], out=dst.reshape(ocb, -1))
                else:  # pragma: no cover - callers pass contiguous outputs
                    res = self.ws.get("gemm", (ocb, state.shape[2]))
                    np.matmul(w, state[i], out=res)
                    np.copyto(dst, res.reshape(dst.shape))
        self._epilogue(out_block, bias, block)


class Direct(ImplicitGemm):
    """direct (1x1): a plain GEMM per image (or per folded batch); a stride reads a strided slice."""

    name = "direct"
    splits_channels = False  # stride 1 reads the input in place: nothing to split

    def transform_input(self, x: np.ndarray) -> np.ndarray:
        g = self.geom
        n, c = x.shape[0], g.in_channels
        oh, ow = g.out_hw
        s0, s1 = g.stride
        src = x if g.stride == (1, 1) else x[:, :, : (oh - 1) * s0 + 1 : s0, : (ow - 1) * s1 + 1 : s1]
        if self._fold(n):
            cols = self.ws.get("cols_folded", (c, n, oh, ow))
            np.copyto(cols, src.transpose(1, 0, 2, 3))
            return cols.reshape(c, n * oh * ow)
        if g.stride == (1, 1):
            return x.reshape(n, c, oh * ow)
        sub = self.ws.get("sub", (n, c, oh, ow))
        np.copyto(sub, src)
        return sub.reshape(n, c, oh * ow)


ALGORITHM_CLASSES: dict[str, type[ConvAlgorithm]] = {
    cls.name: cls for cls in (Winograd, Winograd6, Winograd4, FourierTiles8, FourierTiles16, ImplicitGemm, Direct)
}
