"""Kernels by op family; importing this package registers every kernel in :data:`KERNELS`."""

from __future__ import annotations

from . import chain, conv, elementwise, grad, linalg, norm, pool, quant, shape  # noqa: F401  (register)
from . import activation, attention, conv_transpose, indexing, layernorm, reduce, resize  # noqa: F401
from . import backward, training  # noqa: F401  (backward and training ops of lowerkit.autograd)
from ._base import KERNELS, KernelSpec, scratch_array

__all__ = ["KERNELS", "KernelSpec", "scratch_array"]
