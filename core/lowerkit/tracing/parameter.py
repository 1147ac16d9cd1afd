"""``Parameter``: a named holder of one numpy array, read by the tracer as a ``param`` node.

Public as ``lowerkit.nn.Parameter``; it lives with the tracer, which must recognise it."""

from __future__ import annotations

from typing import Any

import numpy as np


class Parameter:
    """A thin holder of a numpy array that an :class:`~lowerkit.nn.Module` registers.

    Inside a traced method a parameter reads as a ``param`` node of the module it belongs
    to; outside, ``.data`` is the array (assign to it, or use ``load_state_dict``).
    """

    __slots__ = ("data",)

    def __init__(self, data: Any, dtype: Any = None) -> None:
        array = np.array(data, dtype=dtype, copy=True)
        if dtype is None and array.dtype == np.float64 and not isinstance(data, np.ndarray):
            array = array.astype(np.float32)  # Python lists become float32, as in torch
        self.data: np.ndarray = array

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.data.shape)

    @property
    def dtype(self) -> np.dtype:
        return self.data.dtype

    @property
    def ndim(self) -> int:
        return self.data.ndim

    def numpy(self) -> np.ndarray:
        """The array itself (not a copy)."""
        return self.data

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        if dtype is not None and np.dtype(dtype) != self.data.dtype:
            return self.data.astype(dtype)
        return self.data.copy() if copy else self.data

    def __repr__(self) -> str:
        return f"Parameter(shape={list(self.data.shape)}, dtype={self.data.dtype})"
