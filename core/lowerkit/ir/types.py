"""Tensor types: a dtype and a shape whose entries are sizes or named symbolic dims.

A shape entry is an ``int`` (a static size) or a ``str`` naming a **symbolic dimension**
(``"N"``): a size fixed only when the method is called, the same for every value that
names the same symbol. lowerkit uses them for a free batch dimension.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

# Short names used by the text form, and the numpy dtype each stands for.
DTYPES: dict[str, np.dtype] = {
    "f32": np.dtype(np.float32),
    "f64": np.dtype(np.float64),
    "f16": np.dtype(np.float16),
    "i64": np.dtype(np.int64),
    "i32": np.dtype(np.int32),
    "i8": np.dtype(np.int8),
    "u8": np.dtype(np.uint8),
    "bool": np.dtype(np.bool_),
}
_SHORT_NAMES = {dtype: short for short, dtype in DTYPES.items()}

SYMBOL_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")

Dim = int | str


def is_symbol(dim: object) -> bool:
    """True for a symbolic dim (a name such as ``"N"``)."""
    return isinstance(dim, str)


def _canonical_dim(d: object) -> Dim:
    if isinstance(d, str):
        if not SYMBOL_RE.match(d):
            raise ValueError(f"symbolic dim must be an identifier like 'N', got {d!r}")
        return d
    return int(d)  # type: ignore[call-overload]


@dataclass(frozen=True, slots=True)
class TensorType:
    """The type of a value: ``dtype`` (short name such as ``"f32"``) and a ``shape`` whose
    entries are ints or symbolic dim names (``("N", 3, 8, 8)``)."""

    dtype: str
    shape: tuple[Dim, ...]

    def __post_init__(self) -> None:
        if self.dtype not in DTYPES:
            raise ValueError(f"unknown dtype {self.dtype!r}; expected one of {sorted(DTYPES)}")
        object.__setattr__(self, "shape", tuple(_canonical_dim(d) for d in self.shape))

    @property
    def is_static(self) -> bool:
        """True when every dim is a number."""
        return not any(isinstance(d, str) for d in self.shape)

    @property
    def symbols(self) -> tuple[str, ...]:
        """The symbolic dim names, in order of first appearance."""
        return tuple(dict.fromkeys(d for d in self.shape if isinstance(d, str)))

    def bind(self, sizes: Mapping[str, int]) -> TensorType:
        """This type with each symbolic dim named in ``sizes`` replaced by its size."""
        if self.is_static:
            return self
        return TensorType(self.dtype, tuple(sizes.get(d, d) if isinstance(d, str) else d for d in self.shape))

    def matches(self, dtype: str, shape: tuple[int, ...], sizes: dict[str, int]) -> bool:
        """Whether an array of ``dtype``/``shape`` fits this type; binds symbols in ``sizes``
        (a symbol already bound must have the same size)."""
        if dtype != self.dtype or len(shape) != len(self.shape):
            return False
        new: dict[str, int] = {}
        for want, got in zip(self.shape, shape):
            if isinstance(want, str):
                bound = sizes.get(want, new.get(want))
                if bound is None:
                    new[want] = got
                elif bound != got:
                    return False
            elif want != got:
                return False
        sizes.update(new)
        return True

    @property
    def numpy_dtype(self) -> np.dtype:
        return DTYPES[self.dtype]

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def numel(self) -> int:
        if not self.is_static:
            raise ValueError(f"{self} has symbolic dims: its size is known only when called")
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def nbytes(self) -> int:
        return self.numel * self.numpy_dtype.itemsize

    @classmethod
    def of(cls, array: np.ndarray) -> TensorType:
        """The type of a numpy array (raises ``ValueError`` for unsupported dtypes)."""
        return cls(dtype_name(array.dtype), tuple(array.shape))

    def __str__(self) -> str:
        return f"{self.dtype}[{', '.join(str(d) for d in self.shape)}]"


def dtype_name(dtype: np.dtype | type) -> str:
    """The short dtype name (``"f32"``) of a numpy dtype."""
    dt = np.dtype(dtype)
    try:
        return _SHORT_NAMES[dt]
    except KeyError:
        raise ValueError(f"unsupported dtype {dt}; expected one of {sorted(DTYPES)}") from None
