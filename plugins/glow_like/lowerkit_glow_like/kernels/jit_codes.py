"""Opcodes of the ``glow.chain`` register program (plain Python; the compiled kernel in
``kernels/jit/chain.py`` uses the same numbers)."""

from __future__ import annotations

MAX_INPUTS = 4  # the kernel is compiled for 1..MAX_INPUTS inputs
BINARY = {"load": 0, "add": 1, "sub": 2, "mul": 3, "div": 4, "maximum": 5, "minimum": 6}
ACT = 10  # + an activation code of lowerkit.backend.cpu.jit.activation (relu 1, clip 2, ...)
UNARY = {"neg": 20, "exp": 21, "log": 22, "sqrt": 23, "tanh": 24, "erf": 25, "leaky_relu": 26}
