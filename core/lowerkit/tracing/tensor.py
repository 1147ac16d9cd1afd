"""The proxy tensor user code runs on while being traced."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NoReturn

import numpy as np

from ..errors import InputError
from ..ir.node import Value
from ..ir.types import TensorType

if TYPE_CHECKING:  # pragma: no cover
    from .builder import MethodBuilder


class TracedTensor:
    """A value of the graph being traced. Operations on it record nodes.

    Supports ``+ - * / @`` (also with numpy arrays, parameters and Python numbers on either
    side), unary ``-``, ``.shape``, ``.dtype``, the ``torch.Tensor`` methods that map to
    :mod:`lowerkit.ops` (``.sum``, ``.mean``, ``.amax``, ``.softmax``, ``.reshape``/``.view``,
    ``.flatten``, ``.transpose``, ``.permute``, ``.unsqueeze``, activations, ...; see
    :mod:`lowerkit.tracing.tensor_methods`) and the numpy ufuncs that map to ops
    (``np.tanh(x)``, ``np.add(a, x)``). Any other method is an ``InputError`` naming what to
    use instead. Its data is unknown while tracing: converting it to numpy, ``bool`` or a
    number raises :class:`~lowerkit.errors.InputError`.
    """

    __slots__ = ("_value", "_builder")

    def __array_ufunc__(self, ufunc: Any, method: str, *inputs: Any, **kwargs: Any) -> Any:
        from .tensor_methods import ufunc_call

        return ufunc_call(self, ufunc, method, inputs, kwargs)

    def __getattr__(self, name: str) -> Any:
        # Only reached for names the class lacks: dunder probes stay plain AttributeErrors.
        if name.startswith("__") or name in ("_value", "_builder"):
            raise AttributeError(name)
        from .tensor_methods import unknown_attribute

        raise unknown_attribute(self, name)

    def __init__(self, value: Value, builder: MethodBuilder) -> None:
        self._value = value
        self._builder = builder

    # -- inspection ---------------------------------------------------------------------
    @property
    def value(self) -> Value:
        """The IR value this tensor stands for."""
        return self._value

    @property
    def type(self) -> TensorType:
        return self._value.type

    @property
    def shape(self) -> tuple[int, ...]:
        return self._value.type.shape

    @property
    def dtype(self) -> np.dtype:
        return self._value.type.numpy_dtype

    @property
    def ndim(self) -> int:
        return self._value.type.rank

    def size(self, dim: int | None = None) -> tuple[int, ...] | int:
        """The shape, or one dimension of it (as ``torch.Tensor.size``)."""
        return self.shape if dim is None else self.shape[dim]

    def dim(self) -> int:
        return self.ndim

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a 0-d traced tensor")
        return self.shape[0]

    def __repr__(self) -> str:
        return f"TracedTensor(%{self._value.name}: {self._value.type})"

    # -- arithmetic ---------------------------------------------------------------------
    def _binary(self, op: str, other: Any, reflected: bool = False) -> TracedTensor:
        operands = (other, self) if reflected else (self, other)
        return self._builder.apply(op, operands)

    def __add__(self, other: Any) -> TracedTensor:
        return self._binary("add", other)

    def __radd__(self, other: Any) -> TracedTensor:
        return self._binary("add", other, reflected=True)

    def __sub__(self, other: Any) -> TracedTensor:
        return self._binary("sub", other)

    def __rsub__(self, other: Any) -> TracedTensor:
        return self._binary("sub", other, reflected=True)

    def __mul__(self, other: Any) -> TracedTensor:
        return self._binary("mul", other)

    def __rmul__(self, other: Any) -> TracedTensor:
        return self._binary("mul", other, reflected=True)

    def __truediv__(self, other: Any) -> TracedTensor:
        return self._binary("div", other)

    def __rtruediv__(self, other: Any) -> TracedTensor:
        return self._binary("div", other, reflected=True)

    def __matmul__(self, other: Any) -> TracedTensor:
        return self._binary("matmul", other)

    def __rmatmul__(self, other: Any) -> TracedTensor:
        return self._binary("matmul", other, reflected=True)

    def __neg__(self) -> TracedTensor:
        return self._builder.apply("neg", (self,))

    def __pos__(self) -> TracedTensor:
        return self

    # -- shape and activation methods (as on torch.Tensor) ------------------------------
    def reshape(self, *shape: int | tuple[int, ...]) -> TracedTensor:
        from . import ops

        if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
            shape = tuple(shape[0])
        return ops.reshape(self, shape)  # type: ignore[arg-type]

    view = reshape

    def flatten(self, start_dim: int = 0, end_dim: int = -1) -> TracedTensor:
        """As ``torch.Tensor.flatten``: ``start_dim`` defaults to 0 here (1 in ``ops.flatten``)."""
        from . import ops

        return ops.flatten(self, start_dim, end_dim)

    def transpose(self, dim0: int, dim1: int) -> TracedTensor:
        from . import ops

        return ops.transpose(self, dim0, dim1)

    def permute(self, *dims: int | tuple[int, ...]) -> TracedTensor:
        from . import ops

        if len(dims) == 1 and isinstance(dims[0], (tuple, list)):
            dims = tuple(dims[0])
        return ops.permute(self, dims)  # type: ignore[arg-type]

    def relu(self) -> TracedTensor:
        return self._builder.apply("relu", (self,))

    def sigmoid(self) -> TracedTensor:
        return self._builder.apply("sigmoid", (self,))

    def tanh(self) -> TracedTensor:
        return self._builder.apply("tanh", (self,))

    def exp(self) -> TracedTensor:
        return self._builder.apply("exp", (self,))

    def log(self) -> TracedTensor:
        return self._builder.apply("log", (self,))

    def sqrt(self) -> TracedTensor:
        return self._builder.apply("sqrt", (self,))

    # -- what tracing cannot do ---------------------------------------------------------
    def _data_unknown(self, what: str) -> NoReturn:
        raise InputError(
            f"{what} of traced value %{self._value.name} ({self._value.type}) in method "
            f"{self._builder.method!r}: its data is unknown while tracing. Control flow and "
            "numpy calls may depend only on shapes; use lowerkit.ops for computations"
        )

    def __bool__(self) -> bool:
        self._data_unknown("bool()")

    def __array__(self, dtype: Any = None, copy: Any = None) -> NoReturn:
        self._data_unknown("numpy conversion")

    def __float__(self) -> float:
        self._data_unknown("float()")

    def __int__(self) -> int:
        self._data_unknown("int()")

    def __index__(self) -> int:
        self._data_unknown("use as an index")

    def __getitem__(self, key: Any) -> NoReturn:
        raise InputError(
            f"indexing traced value %{self._value.name} ({self._value.type}) in method "
            f"{self._builder.method!r} with [{key!r}]: lowerkit's op set has no indexing or "
            "slicing op; use reshape, flatten, transpose or permute"
        )

    __hash__ = object.__hash__


def _install_methods() -> None:
    from .tensor_methods import install

    install(TracedTensor)


_install_methods()
