"""Layers with parameters: ``Conv2d``, ``Linear`` and ``BatchNorm2d``."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..tracing import ops
from ..errors import InputError
from .init import current_rng, fan_in, kaiming_uniform, uniform_bias
from .module import Module
from ..tracing.parameter import Parameter


def _pair(name: str, value: Any) -> tuple[int, int]:
    if isinstance(value, int) and not isinstance(value, bool):
        return (value, value)
    if isinstance(value, (tuple, list)) and len(value) == 2:
        return (int(value[0]), int(value[1]))
    raise InputError(f"{name} must be an int or a pair of ints, got {value!r}")


def _positive(layer: str, **sizes: Any) -> None:
    for name, value in sizes.items():
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
            raise InputError(f"{layer}: {name} must be a positive int, got {value!r}")


class Conv2d(Module):
    """2-D convolution; parameters ``weight`` [out, in/groups, kh, kw] and ``bias`` [out].

    Initialised like torch (Kaiming-uniform weight, uniform bias) from ``rng`` or the
    current :func:`~lowerkit.nn.init_seed` stream.
    """

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: int | tuple[int, int],
        stride: int | tuple[int, int] = 1,
        padding: int | tuple[int, ...] | str = 0,
        dilation: int | tuple[int, int] = 1,
        groups: int = 1,
        bias: bool = True,
        *,
        rng: np.random.Generator | None = None,
    ) -> None:
        super().__init__()
        _positive("Conv2d", in_channels=in_channels, out_channels=out_channels, groups=groups)
        if in_channels % groups or out_channels % groups:
            raise InputError(
                f"Conv2d: in_channels ({in_channels}) and out_channels ({out_channels}) "
                f"must be divisible by groups ({groups})"
            )
        self.in_channels, self.out_channels = in_channels, out_channels
        self.kernel_size = _pair("Conv2d kernel_size", kernel_size)
        _positive("Conv2d", kernel_height=self.kernel_size[0], kernel_width=self.kernel_size[1])
        self.stride, self.padding = stride, padding
        self.dilation, self.groups = dilation, groups
        gen = current_rng(rng)
        shape = (out_channels, in_channels // groups, *self.kernel_size)
        self.weight = Parameter(kaiming_uniform(shape, gen))
        if bias:
            self.bias: Parameter | None = Parameter(uniform_bias(out_channels, fan_in(shape), gen))
        else:
            self.register_parameter("bias", None)

    def forward(self, x: Any) -> Any:
        return ops.conv2d(x, self.weight, self.bias, self.stride, self.padding, self.dilation, self.groups)

    def extra_repr(self) -> str:
        return (
            f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, "
            f"stride={self.stride}, padding={self.padding}"
        )


class Linear(Module):
    """``x @ weight.T + bias``; ``weight`` [out, in], ``bias`` [out]; torch-like init."""

    def __init__(
        self, in_features: int, out_features: int, bias: bool = True, *, rng: np.random.Generator | None = None
    ) -> None:
        super().__init__()
        _positive("Linear", in_features=in_features, out_features=out_features)
        self.in_features, self.out_features = in_features, out_features
        gen = current_rng(rng)
        self.weight = Parameter(kaiming_uniform((out_features, in_features), gen))
        if bias:
            self.bias: Parameter | None = Parameter(uniform_bias(out_features, in_features, gen))
        else:
            self.register_parameter("bias", None)

    def forward(self, x: Any) -> Any:
        return ops.linear(x, self.weight, self.bias)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}"


class BatchNorm2d(Module):
    """Inference batch norm over channels of NCHW input.

    Parameters (torch's names): ``weight`` (ones), ``bias`` (zeros), ``running_mean``
    (zeros) and ``running_var`` (ones); the statistics are parameters too, so they appear
    in ``state_dict`` and in the traced module. ``affine=False`` drops weight and bias.
    """

    def __init__(
        self,
        num_features: int,
        eps: float = 1e-5,
        momentum: float = 0.1,
        affine: bool = True,
        track_running_stats: bool = True,
    ) -> None:
        super().__init__()
        if not track_running_stats:
            raise InputError("BatchNorm2d: only inference with running statistics is supported")
        _positive("BatchNorm2d", num_features=num_features)
        self.num_features, self.eps = num_features, eps
        if affine:
            self.weight: Parameter | None = Parameter(np.ones(num_features, np.float32))
            self.bias: Parameter | None = Parameter(np.zeros(num_features, np.float32))
        else:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)
        self.running_mean = Parameter(np.zeros(num_features, np.float32))
        self.running_var = Parameter(np.ones(num_features, np.float32))

    def forward(self, x: Any) -> Any:
        return ops.batch_norm(x, self.running_mean, self.running_var, self.weight, self.bias, eps=self.eps)

    def extra_repr(self) -> str:
        return f"{self.num_features}, eps={self.eps}"
