"""Layers without parameters: activations, pooling, reshaping, dropout."""

from __future__ import annotations

from typing import Any

from ..tracing import ops
from ..errors import InputError
from .module import Module


class ReLU(Module):
    def __init__(self, inplace: bool = False) -> None:
        super().__init__()

    def forward(self, x: Any) -> Any:
        return ops.relu(x)


class ReLU6(Module):
    def __init__(self, inplace: bool = False) -> None:
        super().__init__()

    def forward(self, x: Any) -> Any:
        return ops.relu6(x)


class LeakyReLU(Module):
    def __init__(self, negative_slope: float = 0.01, inplace: bool = False) -> None:
        super().__init__()
        self.negative_slope = negative_slope

    def forward(self, x: Any) -> Any:
        return ops.leaky_relu(x, self.negative_slope)


class Sigmoid(Module):
    def forward(self, x: Any) -> Any:
        return ops.sigmoid(x)


class Tanh(Module):
    def forward(self, x: Any) -> Any:
        return ops.tanh(x)


class Identity(Module):
    def forward(self, x: Any) -> Any:
        return x


class Dropout(Module):
    """Identity: lowerkit modules run inference only."""

    def __init__(self, p: float = 0.5, inplace: bool = False) -> None:
        super().__init__()
        self.p = p

    def forward(self, x: Any) -> Any:
        return x


class MaxPool2d(Module):
    def __init__(self, kernel_size: Any, stride: Any = None, padding: Any = 0, dilation: Any = 1,
                 ceil_mode: bool = False) -> None:
        super().__init__()
        self.kernel_size, self.stride, self.padding = kernel_size, stride, padding
        self.dilation, self.ceil_mode = dilation, ceil_mode

    def forward(self, x: Any) -> Any:
        return ops.max_pool2d(x, self.kernel_size, self.stride, self.padding, self.dilation, self.ceil_mode)

    def extra_repr(self) -> str:
        return f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}"


class AvgPool2d(Module):
    def __init__(self, kernel_size: Any, stride: Any = None, padding: Any = 0, ceil_mode: bool = False,
                 count_include_pad: bool = True) -> None:
        super().__init__()
        self.kernel_size, self.stride, self.padding = kernel_size, stride, padding
        self.ceil_mode, self.count_include_pad = ceil_mode, count_include_pad

    def forward(self, x: Any) -> Any:
        return ops.avg_pool2d(x, self.kernel_size, self.stride, self.padding, self.ceil_mode,
                              self.count_include_pad)

    def extra_repr(self) -> str:
        return f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}"


class AdaptiveAvgPool2d(Module):
    """Only ``output_size`` 1 / ``(1, 1)`` (global average pooling) is supported."""

    def __init__(self, output_size: Any) -> None:
        super().__init__()
        if output_size not in (1, (1, 1), [1, 1]):
            raise InputError(f"AdaptiveAvgPool2d: only output_size 1 is supported, got {output_size!r}")
        self.output_size = output_size

    def forward(self, x: Any) -> Any:
        return ops.global_avg_pool2d(x)

    def extra_repr(self) -> str:
        return f"output_size={self.output_size}"


class Flatten(Module):
    def __init__(self, start_dim: int = 1, end_dim: int = -1) -> None:
        super().__init__()
        self.start_dim, self.end_dim = start_dim, end_dim

    def forward(self, x: Any) -> Any:
        return ops.flatten(x, self.start_dim, self.end_dim)


class Softmax(Module):
    def __init__(self, dim: int = -1) -> None:
        super().__init__()
        self.dim = dim

    def forward(self, x: Any) -> Any:
        return ops.softmax(x, self.dim)


class LogSoftmax(Module):
    def __init__(self, dim: int = -1) -> None:
        super().__init__()
        self.dim = dim

    def forward(self, x: Any) -> Any:
        return ops.log_softmax(x, self.dim)
