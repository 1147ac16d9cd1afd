"""ft8x8, ft16x16: overlap-save FFT convolution on TxT tiles."""

from __future__ import annotations

import numpy as np

from lowerkit.backend.cpu import pad_into, tile_view

from ..tiles import scatter_tiles, tile_counts
from ..workspace import Workspace
from .base import ConvAlgorithm


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
        self, state: np.ndarray, kernel: np.ndarray, bias: np.ndarray | None, block: slice, out: np.ndarray,
        residual: np.ndarray | None = None,
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
        self._epilogue(out_block, bias, block, residual)


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
