"""The convolution algorithms, one module each, every one split into steps the scheduler can
spread over threads (see :mod:`.base`).

``kernel_data()`` gives the transformed kernel (precomputed once, or per call);
``transform_input(x)`` turns an NCHW batch chunk into the algorithm's domain (or, where
``splits_channels``, ``new_state`` + ``transform_channels`` per input-channel block +
``finish_state``); ``compute_output(state, kernel, bias, block, out)`` does the channel
GEMM for the output-channel ``block`` and the output transform, adding bias and (fused)
ReLU. Every large temporary lives in a per-thread :class:`Workspace` and is written with
``out=``.
"""

from __future__ import annotations

from .base import ALGORITHMS, WINOGRAD_TILES, ConvAlgorithm, check_algorithm
from .direct import Direct
from .fourier import FourierTiles, FourierTiles8, FourierTiles16
from .implicit_gemm import FOLD_BATCH_BELOW_PIXELS, ImplicitGemm
from .winograd import Winograd, Winograd4, Winograd6

ALGORITHM_CLASSES: dict[str, type[ConvAlgorithm]] = {
    cls.name: cls for cls in (Winograd, Winograd6, Winograd4, FourierTiles8, FourierTiles16, ImplicitGemm, Direct)
}

__all__ = [
    "ALGORITHMS", "ALGORITHM_CLASSES", "FOLD_BATCH_BELOW_PIXELS", "WINOGRAD_TILES", "ConvAlgorithm", "Direct",
    "FourierTiles", "FourierTiles8", "FourierTiles16", "ImplicitGemm", "Winograd", "Winograd4", "Winograd6",
    "check_algorithm",
]
