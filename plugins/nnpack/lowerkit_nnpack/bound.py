"""Bound calls: a layer's work on fixed arrays as one zero-argument call.

A plan's steady-state calls hand every layer the same arrays (the spares' arena views; see
:mod:`.spares`), so a layer can choose its path and fetch its scratch once for those very
arrays and keep the result as a call (``functools.partial`` of a compiled kernel where one
kernel does the work): the step then costs what glow_like's bound call costs, not the
several Python layers of ``run_into`` (MobileNetV2 at 32x32, a 144 -> 32 1x1 layer: 7.0 us a
call through them, 3.8 as glow_like's bound call; see docs/nnpack.md, "Bound calls").

A layer's ``bind(x, out, residual)`` returns such a call, or None where its path is chosen
per call; the plan keeps the call per thread with the arrays it was bound to and uses it
only while the same array objects come back (:func:`lowerkit_nnpack.plan._bound_step`).
Team forms check ``Team.usable()`` on every call and run the layer's serial form while the
team is off (the stall guard, batch slices, a forked child): ``lowerkit.backend.cpu.calls.on_team``.
"""

from __future__ import annotations

import numpy as np

from lowerkit.backend.cpu.calls import Call, sequence

from .activations import Activation, add_activate_call


def with_residual(call: Call, out: np.ndarray, residual: np.ndarray | None, act: Activation) -> Call:
    """``call`` (which wrote ``out`` without the activation), then the residual sum and ``act``;
    ``call`` alone without a residual."""
    return call if residual is None else sequence(call, add_activate_call(out, residual, act))
