"""Tensor types: a dtype and a static shape."""

from __future__ import annotations

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


@dataclass(frozen=True, slots=True)
class TensorType:
    """The type of a value: ``dtype`` (short name such as ``"f32"``) and a static ``shape``."""

    dtype: str
    shape: tuple[int, ...]

    def __post_init__(self) -> None:
        if self.dtype not in DTYPES:
            raise ValueError(f"unknown dtype {self.dtype!r}; expected one of {sorted(DTYPES)}")
        object.__setattr__(self, "shape", tuple(int(d) for d in self.shape))

    @property
    def numpy_dtype(self) -> np.dtype:
        return DTYPES[self.dtype]

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def numel(self) -> int:
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
