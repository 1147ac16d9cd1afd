"""Matrix products: numpy ``matmul`` and the fused fully-connected ``glow.fc``.

``glow.fc(x[..., K], w[K, N], bias[N]?)`` flattens the leading dims of x (a view) so the
whole batch is one GEMM, then adds the bias and applies the fused activation in place.
"""

from __future__ import annotations

import numpy as np

from ._base import apply_activation, kernel


@kernel("matmul")
def _matmul(inputs, outputs, attrs, scratch):
    (a, b), (out,) = inputs, outputs
    return lambda: np.matmul(a, b, out=out)


@kernel("glow.fc")
def _fc(inputs, outputs, attrs, scratch):
    x, w = inputs[0], inputs[1]
    bias = inputs[2] if len(inputs) > 2 else None
    (out,) = outputs
    x2 = x.reshape(-1, w.shape[0])
    out2 = out.reshape(-1, w.shape[1])
    act = attrs.get("act", "none")

    def run():
        np.matmul(x2, w, out=out2)
        if bias is not None:
            np.add(out2, bias, out=out2)
        if act != "none":
            apply_activation(out2, attrs)

    return run


@kernel("linear")
def _linear(inputs, outputs, attrs, scratch):
    x, w = inputs[0], inputs[1]
    bias = inputs[2] if len(inputs) > 2 else None
    (out,) = outputs
    x2 = x.reshape(-1, w.shape[1])
    out2 = out.reshape(-1, w.shape[0])
    wt = w.T  # a strided view: BLAS takes the transpose flag, no copy

    def run():
        np.matmul(x2, wt, out=out2)
        if bias is not None:
            np.add(out2, bias, out=out2)

    return run
