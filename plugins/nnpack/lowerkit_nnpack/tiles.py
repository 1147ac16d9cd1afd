"""Tile geometry shared by the Winograd and FFT algorithms: tile counts and scattering output tiles
(padding and gathering tiles are ``lowerkit.backend.cpu.pad_into`` and ``tile_view``).

Layouts: activations are NCHW. Tiled data is "position-major": ``[th_pos, tw_pos, C, N,
tiles_h, tiles_w]`` so that the transforms are GEMMs over the leading axes and the channel
GEMM of each tile position reads one contiguous ``[C, N*tiles]`` matrix.
"""

from __future__ import annotations

import numpy as np


def scatter_tiles(y: np.ndarray, out: np.ndarray) -> None:
    """Write output tiles ``y`` [mh, mw, O, N, th, tw] into ``out`` [N, O, OH, OW], cropping the edge tiles.

    Four copies (full tiles, bottom strip, right strip, corner) instead of one padded buffer,
    so no extra pass over the output is needed.
    """
    mh, mw = y.shape[0], y.shape[1]
    n, o, oh, ow = out.shape
    thf, twf = oh // mh, ow // mw
    rh, rw = oh - thf * mh, ow - twf * mw
    if thf and twf:
        dst = out[:, :, : thf * mh, : twf * mw].reshape(n, o, thf, mh, twf, mw)
        np.copyto(dst, y[:, :, :, :, :thf, :twf].transpose(3, 2, 4, 0, 5, 1))
    if rh and twf:
        dst = out[:, :, thf * mh :, : twf * mw].reshape(n, o, rh, twf, mw)
        np.copyto(dst, y[:rh, :, :, :, thf, :twf].transpose(3, 2, 0, 4, 1))
    if rw and thf:
        dst = out[:, :, : thf * mh, twf * mw :].reshape(n, o, thf, mh, rw)
        np.copyto(dst, y[:, :rw, :, :, :thf, twf].transpose(3, 2, 4, 0, 1))
    if rh and rw:
        np.copyto(out[:, :, thf * mh :, twf * mw :], y[:rh, :rw, :, :, thf, twf].transpose(3, 2, 0, 1))


def tile_counts(out_hw: tuple[int, int], step: tuple[int, int]) -> tuple[int, int]:
    """How many tiles of output size ``step`` cover an output of size ``out_hw``."""
    return -(-out_hw[0] // step[0]), -(-out_hw[1] // step[1])
