"""Deterministic initialisation: where layers draw their random numbers from.

Every layer with parameters takes ``rng=`` (a ``numpy.random.Generator``). Without it, the
layer draws from the stream of the innermost ``with init_seed(n):`` block, and outside any
block from a process-wide stream seeded with 0 when lowerkit is imported (like torch's
default generator: the first model of a fresh process is reproducible, later ones differ).
The model builders (:mod:`lowerkit.models`) take ``seed=`` and use ``init_seed`` inside.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

import numpy as np

_DEFAULT = np.random.default_rng(0)
_CURRENT: ContextVar[np.random.Generator | None] = ContextVar("lowerkit_init_rng", default=None)


@contextmanager
def init_seed(seed: int) -> Iterator[np.random.Generator]:
    """Layers built inside the block draw from one generator seeded with ``seed``."""
    rng = np.random.default_rng(seed)
    token = _CURRENT.set(rng)
    try:
        yield rng
    finally:
        _CURRENT.reset(token)


def current_rng(rng: np.random.Generator | None = None) -> np.random.Generator:
    """``rng`` if given, else the innermost ``init_seed`` stream, else the process default."""
    if rng is not None:
        return rng
    active = _CURRENT.get()
    return active if active is not None else _DEFAULT


def fan_in(shape: tuple[int, ...]) -> int:
    """Inputs feeding one output: ``in * kh * kw`` for conv weights, ``in`` for linear."""
    return int(np.prod(shape[1:])) if len(shape) > 1 else int(shape[0])


def kaiming_uniform(shape: tuple[int, ...], rng: np.random.Generator, a: float = math.sqrt(5)) -> np.ndarray:
    """torch's default layer init: U(-b, b) with b = gain * sqrt(3 / fan_in), gain = sqrt(2 / (1 + a^2))."""
    gain = math.sqrt(2.0 / (1.0 + a * a))
    bound = gain * math.sqrt(3.0 / max(fan_in(shape), 1))
    return rng.uniform(-bound, bound, size=shape).astype(np.float32)


def kaiming_normal_fan_out(shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    """N(0, 2 / fan_out) with fan_out = out * kh * kw: torchvision's ResNet conv init."""
    fan_out = shape[0] * int(np.prod(shape[2:]))
    return (rng.standard_normal(size=shape) * math.sqrt(2.0 / fan_out)).astype(np.float32)


def uniform_bias(size: int, weight_fan_in: int, rng: np.random.Generator) -> np.ndarray:
    """torch's default bias init: U(-1/sqrt(fan_in), 1/sqrt(fan_in))."""
    bound = 1.0 / math.sqrt(weight_fan_in) if weight_fan_in > 0 else 0.0
    return rng.uniform(-bound, bound, size=(size,)).astype(np.float32)
