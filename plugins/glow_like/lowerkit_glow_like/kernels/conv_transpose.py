"""``conv_transpose2d``: conv2d's input-gradient kernel into the output, then the bias."""

from __future__ import annotations

import numpy as np

from ._base import KERNELS, kernel


@kernel("conv_transpose2d")
def _conv_transpose2d(inputs, outputs, attrs, scratch):
    x, weight = inputs[0], inputs[1]
    bias = inputs[2] if len(inputs) > 2 else None
    (out,) = outputs
    # The transposed convolution of x is the gradient of conv2d(y, weight) w.r.t. y, at x.
    scatter = KERNELS["conv2d_input_grad"].prepare([weight, x], [out], attrs, scratch)
    shaped_bias = None if bias is None else bias.reshape(1, -1, 1, 1)

    def run():
        scatter()
        if shaped_bias is not None:
            np.add(out, shaped_bias, out=out)

    return run
