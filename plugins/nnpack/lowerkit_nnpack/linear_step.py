"""A plan's fully-connected layer on a constant weight, with the activation after it fused,
written into a buffer the plan gives it — so the step can bind (see :mod:`.bound`), as the
convolutions do.

A model's classifier at batch 1 is ``pool -> flatten -> linear -> activation -> linear``:
without this each of those was a step of its own on the plan's general path, the flatten a
fresh view every call (so nothing after it could bind) and the activation a pass of its
own. The layer reads its input as ``[rows, K]`` whatever its shape — a flatten's input
too, whose elements are in the same order (the plan folds a flatten read only by a linear
layer into it) — and its row count picks the path:

- one row on a team: each thread streams its share of the weight packed in bands
  (``PackedBands.run_team``), bias and activation in the same pass;
- two rows or more on a team: six-row groups, read in place, against the bands (``run_rows_team``, 7 rows or
  more) or sgemm bands (``fc_bias_activation``);
- off the team: the layer's own product (bands for 2-6 rows), then bias and activation.
"""

from __future__ import annotations

from functools import partial

import numpy as np

from lowerkit.backend.cpu import Team, panels, team_layers
from lowerkit.backend.cpu.calls import Call, on_team

from .activations import NONE, Activation, activate_inplace
from .layers import Linear

_FLOAT32 = np.dtype(np.float32)


class LinearStep:
    """``out = act(x @ W.T + bias)`` for a :class:`~.layers.Linear` with a constant weight:
    ``output_shape``, ``run_into`` and ``bind`` as ``plan._bound_step`` calls a layer's
    (``tail``: the output's shape after the batch dimension), or called on ``x`` alone."""

    def __init__(self, layer: Linear, activation: Activation, tail: tuple[int, ...] | None,
                 team: Team | None) -> None:
        if layer.weight_t is None:
            raise ValueError("LinearStep needs the layer's constant weight")
        self.layer, self.activation, self.tail, self.team = layer, activation, tail, team
        self.k, self.n = layer.weight_t.shape
        self.bias = layer.bias if layer.bias is not None else np.empty(0, np.float32)
        if team is not None and layer.weight_t.size >= team_layers.MIN_LINEAR_WEIGHTS:
            layer.bands()  # packed now, not in the first call

    def output_shape(self, batch: int) -> tuple[int, ...]:
        if self.tail is None:
            raise ValueError("this LinearStep was made without its output's shape")
        return (batch, *self.tail)

    def __call__(self, x: np.ndarray) -> np.ndarray:
        """The layer of ``x`` [..., K] into a new array [..., N] (a shape the plan could not
        pin down ahead)."""
        if x.shape[-1] != self.k:
            return self.layer(x)  # its error names the features it expected
        out = np.empty((*x.shape[:-1], self.n), np.float32)
        return self.run_into(x, out)

    def run_into(self, x: np.ndarray, out: np.ndarray, residual: np.ndarray | None = None) -> np.ndarray:
        """``out`` (a C-contiguous float32 buffer of :meth:`output_shape`) = the layer of ``x``."""
        self._call(np.ascontiguousarray(x, dtype=np.float32), out)()
        return out

    def bind(self, x: np.ndarray, out: np.ndarray, residual: np.ndarray | None = None) -> Call | None:
        """:meth:`run_into` on these very arrays as a zero-argument call (None for an ``x``
        that is not C-contiguous float32: :meth:`run_into` copies it every call)."""
        if not (x.dtype is _FLOAT32 and x.flags.c_contiguous):
            return None
        return self._call(x, out)

    def _call(self, x: np.ndarray, out: np.ndarray) -> Call:
        """The path for ``x``'s row count as one call: the team form while the team can run
        (decided per call), else the serial one."""
        x2, out2 = x.reshape(-1, self.k), out.reshape(-1, self.n)
        serial = partial(self._serial, x2, out2)
        team = self.team
        if team is None:
            return serial
        rows, weights, act, ways = x2.shape[0], self.layer.weight_t.size, self.activation, team.ways
        if team_layers.row_on_team(rows, weights):
            regions = partial(self.layer.bands().run_team, x2, out2, act, ways)
        elif team_layers.linear_on_team(rows, weights) and panels.rows_fit(rows):
            regions = partial(self.layer.row_bands().run_rows_team, x2, out2, act, ways)
        elif team_layers.linear_on_team(rows, weights):
            regions = partial(team.kernels().fc_bias_activation, x2, self.layer.weight_t, self.bias, out2, *act,
                              ways, team.sgemm)
        else:
            return serial
        return on_team(team, regions, serial)

    def _serial(self, x2: np.ndarray, out2: np.ndarray) -> None:
        """The layer on this thread (and its pool's workers, for many rows), then the activation."""
        if panels.bands_fit(x2.shape[0], self.layer.weight_t):
            self.layer.bands().run(x2, out2, self.activation)  # bias and activation in the pass
            return
        self.layer.run_into(x2, out2)
        if self.activation != NONE:
            activate_inplace(out2, self.activation)
