"""Bound calls: a layer's work on fixed arrays as one zero-argument call.

A plan's steady-state calls hand every layer the same arrays (the spares' arena views; see
:mod:`.spares`), so a layer can choose its path and fetch its scratch once for those very
arrays and keep the result as a call (``functools.partial`` of a compiled kernel where one
kernel does the work): the step then costs what glow_like's bound call costs, not the
several Python layers of ``run_into`` (MobileNetV2 at 32x32, a 144 -> 32 1x1 layer: 7.0 us a
call through them, 3.8 as glow_like's bound call; see docs/nnpack.md, "Execution plan").

A layer's ``bind(x, out, residual)`` returns such a call, or None where its path is chosen
per call; the plan keeps the call per thread with the arrays it was bound to and uses it
only while the same array objects come back (:func:`lowerkit_nnpack.plan._bound_step`).
Team forms check ``Team.usable()`` on every call and run the layer's serial form while the
team is off (the stall guard, batch slices, a forked child).
"""

from __future__ import annotations

from functools import partial

import numpy as np

from lowerkit.backend.cpu import Team, jit
from lowerkit.backend.cpu.calls import Call, sequence

from .activations import Activation, activate_inplace


def add_activate_call(out: np.ndarray, residual: np.ndarray, act: Activation) -> Call:
    """``out = act(out + residual)`` in place, as ``activations.add_activate`` computes it."""
    if out.size and jit.flat_float32(out, residual):
        flat = out.reshape(-1)
        return partial(jit.load("conv").add_activation, flat, residual.reshape(-1), flat, *act)

    def numpy_sum() -> None:
        np.add(out, residual, out=out)
        activate_inplace(out, act)

    return numpy_sum


def with_residual(call: Call, out: np.ndarray, residual: np.ndarray | None, act: Activation) -> Call:
    """``call`` (which wrote ``out`` without the activation), then the residual sum and ``act``;
    ``call`` alone without a residual."""
    return call if residual is None else sequence(call, add_activate_call(out, residual, act))


def on_team(team: Team, regions: Call, serial: Call) -> Call:
    """``regions`` while the team can run, else ``serial`` (decided on every call)."""
    usable = team.usable

    def run() -> None:
        if usable():
            regions()
        else:
            serial()

    return run
