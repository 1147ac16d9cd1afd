"""Matrix products: numpy ``matmul`` and the fused fully-connected ``glow.fc``.

``glow.fc(x[..., K], w[K, N], bias[N]?)`` flattens the leading dims of x (a view) so the
whole batch is one GEMM, then adds the bias and applies the fused activation in place; 2-6
rows on a constant weight (a batch slice's classifier) run on the weight packed in bands
(``lowerkit.backend.cpu.panels.PackedBands``: bias and activation in the same pass), which
streams it once where ``sgemm`` would copy it first; so does one row on a team (a classifier
at batch 1), each thread streaming its share of the bands, and more rows on a team
(``PackedBands.run_rows_team``: six-row groups against the bands, where ``sgemm`` packs the
weight again every call).
"""

from __future__ import annotations

from functools import partial

import numpy as np

from lowerkit.backend.cpu import panels, team_layers

from ._base import apply_activation, kernel


@kernel("matmul")
def _matmul(inputs, outputs, attrs, scratch):
    (a, b), (out,) = inputs, outputs
    return lambda: np.matmul(a, b, out=out)


@kernel("glow.fc", team=True)
def _fc(inputs, outputs, attrs, scratch, team=None):
    if attrs.get("residual"):
        return _fc_residual(inputs, outputs, attrs, scratch, team)
    x, w = inputs[0], inputs[1]
    bias = inputs[2] if len(inputs) > 2 else None
    (out,) = outputs
    x2 = x.reshape(-1, w.shape[0])
    out2 = out.reshape(-1, w.shape[1])
    if (team is not None and team_layers.linear_on_team(x2.shape[0], w.size) and x2.flags.c_contiguous
            and w.flags.c_contiguous
            and all(a.dtype == np.float32 for a in (*inputs, out))):
        packed = (panels.PackedBands.shared(w, bias, many_rows=True)
                  if panels.rows_fit(x2.shape[0]) and out.flags.c_contiguous else None)
        if packed is not None:  # a constant weight: ConvNeXt's pointwise layers, say
            return _fc_bands_team(x2, w, bias, out2, attrs, team, packed.run_rows_team)
        return _fc_team(x2, w, bias, out2, attrs, team)
    if (team is not None and team_layers.row_on_team(x2.shape[0], w.size) and x.flags.c_contiguous
            and out.flags.c_contiguous and all(a.dtype == np.float32 for a in (*inputs, out))):
        packed = panels.PackedBands.shared(w, bias)
        if packed is not None:  # a constant weight: a model's classifier at batch 1
            return _fc_bands_team(x2, w, bias, out2, attrs, team, packed.run_team)
    if (panels.bands_fit(x2.shape[0], w) and x.flags.c_contiguous and out.flags.c_contiguous
            and all(a.dtype == np.float32 for a in (*inputs, out))):
        packed = panels.PackedBands.shared(w, bias)
        if packed is not None:  # a constant weight (a batch slice's classifier, say)
            from lowerkit.backend.cpu import jit

            return partial(packed.run, x2, out2, jit.activation_code(attrs))
    return partial(_fc_numpy, x2, w, bias, out2, attrs)


def _fc_residual(inputs, outputs, attrs, scratch, team):
    """``glow.fc(x, w, bias, residual)`` with ``residual=True`` (``passes/residual.py``): the
    product plus ``residual`` (shaped like the output), then the activation. On a team, where
    the rows run on the bands (``PackedBands.run_rows_team``), each tile adds its part of the
    residual while in registers; elsewhere — and while the team is off — the product as
    ``glow.fc`` runs it without the activation, then ``glow.add``'s kernel (the sum and the
    activation in one pass), as the two instructions ran before the fusion."""
    from .conv import _then_residual, _without_activation

    *operands, residual = inputs
    (out,) = outputs
    x, w = operands[0], operands[1]
    bias = operands[2] if len(operands) > 2 else None
    plain = _then_residual(_fc(operands, outputs, _without_activation(attrs), scratch, team), outputs, residual,
                           attrs, scratch)
    x2 = x.reshape(-1, w.shape[0])
    if not (team is not None and team_layers.linear_on_team(x2.shape[0], w.size) and panels.rows_fit(x2.shape[0])
            and all(a.flags.c_contiguous and a.dtype == np.float32 for a in (*inputs, out))):
        return plain
    packed = panels.PackedBands.shared(w, bias, many_rows=True)
    if packed is None:
        return plain
    from lowerkit.backend.cpu import jit

    out2, added, act = out.reshape(-1, w.shape[1]), residual.reshape(-1, w.shape[1]), jit.activation_code(attrs)

    def run():
        if team.usable():
            packed.run_rows_team(x2, out2, act, team.ways, added)
        else:
            plain()

    return run


def _fc_numpy(x2, w, bias, out2, attrs) -> None:
    """``glow.fc`` on numpy: one GEMM (a gemv for one row), then the bias and the activation."""
    np.matmul(x2, w, out=out2)
    if bias is not None:
        np.add(out2, bias.reshape(-1), out=out2)
    if attrs.get("act", "none") != "none":
        apply_activation(out2, attrs)


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


def _fc_bands_team(x2, w, bias, out2, attrs, team, region):
    """``glow.fc`` as one team region on the weight packed in bands, bias and activation in
    the same pass — ``region`` is ``PackedBands.run_team`` (one row: each thread streams its
    share of the bands) or ``run_rows_team`` (many rows: shares of the rows, or of the
    bands) —; numpy's product while the team is off."""
    from lowerkit.backend.cpu import jit

    act = jit.activation_code(attrs)

    def run():
        if team.usable():
            region(x2, out2, act, team.ways)
        else:
            _fc_numpy(x2, w, bias, out2, attrs)

    return run


def _fc_team(x2, w, bias, out2, attrs, team):
    """``glow.fc`` as one team region: bands of output columns (each thread reads its
    columns of the weight), bias and activation on the band."""
    from lowerkit.backend.cpu import jit

    kernels = team.kernels()
    b = np.empty(0, np.float32) if bias is None else np.ascontiguousarray(bias.reshape(-1), dtype=np.float32)
    act = jit.activation_code(attrs)

    def run():
        if team.usable():
            kernels.fc_bias_activation(x2, w, b, out2, *act, team.ways, team.sgemm)
        else:
            _fc_numpy(x2, w, bias, out2, attrs)

    return run
