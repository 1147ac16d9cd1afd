"""Layers of mobile CNNs and transformers, after ``torch.nn``: activations, ``LayerNorm``,
``GroupNorm``, ``ConvTranspose2d``, ``Upsample``, padding layers and ``ChannelShuffle``."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..tracing import ops
from ..errors import InputError
from .init import current_rng, kaiming_uniform, uniform_bias
from .layers import _pair, _positive
from .module import Module
from ..tracing.parameter import Parameter


class Hardsigmoid(Module):
    def __init__(self, inplace: bool = False) -> None:
        super().__init__()

    def forward(self, x: Any) -> Any:
        return ops.hardsigmoid(x)


class Hardswish(Module):
    def __init__(self, inplace: bool = False) -> None:
        super().__init__()

    def forward(self, x: Any) -> Any:
        return ops.hardswish(x)


class SiLU(Module):
    def __init__(self, inplace: bool = False) -> None:
        super().__init__()

    def forward(self, x: Any) -> Any:
        return ops.silu(x)


class GELU(Module):
    def __init__(self, approximate: str = "none") -> None:
        super().__init__()
        self.approximate = approximate

    def forward(self, x: Any) -> Any:
        return ops.gelu(x, self.approximate)

    def extra_repr(self) -> str:
        return f"approximate={self.approximate!r}"


class LayerNorm(Module):
    """Normalises the trailing ``normalized_shape`` dims; ``weight`` ones, ``bias`` zeros."""

    def __init__(self, normalized_shape: int | tuple[int, ...], eps: float = 1e-5,
                 elementwise_affine: bool = True, bias: bool = True) -> None:
        super().__init__()
        shape = (normalized_shape,) if isinstance(normalized_shape, (int, np.integer)) else tuple(normalized_shape)
        _positive("LayerNorm", **{f"normalized_shape[{i}]": d for i, d in enumerate(shape)})
        self.normalized_shape, self.eps = tuple(int(d) for d in shape), eps
        if elementwise_affine:
            self.weight: Parameter | None = Parameter(np.ones(self.normalized_shape, np.float32))
            if bias:
                self.bias: Parameter | None = Parameter(np.zeros(self.normalized_shape, np.float32))
            else:
                self.register_parameter("bias", None)
        else:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)

    def forward(self, x: Any) -> Any:
        return ops.layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps)

    def extra_repr(self) -> str:
        return f"{self.normalized_shape}, eps={self.eps}"


class GroupNorm(Module):
    """Normalises ``num_groups`` channel groups; per-channel ``weight`` ones, ``bias`` zeros."""

    def __init__(self, num_groups: int, num_channels: int, eps: float = 1e-5, affine: bool = True) -> None:
        super().__init__()
        _positive("GroupNorm", num_groups=num_groups, num_channels=num_channels)
        if num_channels % num_groups:
            raise InputError(f"GroupNorm: num_channels ({num_channels}) must be divisible by num_groups ({num_groups})")
        self.num_groups, self.num_channels, self.eps = num_groups, num_channels, eps
        if affine:
            self.weight: Parameter | None = Parameter(np.ones(num_channels, np.float32))
            self.bias: Parameter | None = Parameter(np.zeros(num_channels, np.float32))
        else:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)

    def forward(self, x: Any) -> Any:
        return ops.group_norm(x, self.num_groups, self.weight, self.bias, self.eps)

    def extra_repr(self) -> str:
        return f"{self.num_groups}, {self.num_channels}, eps={self.eps}"


class ConvTranspose2d(Module):
    """Transposed 2-D convolution; ``weight`` [in, out/groups, kh, kw], ``bias`` [out]; torch-like init."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int | tuple[int, int],
                 stride: int | tuple[int, int] = 1, padding: int | tuple[int, int] = 0,
                 output_padding: int | tuple[int, int] = 0, groups: int = 1, bias: bool = True,
                 dilation: int | tuple[int, int] = 1, *, rng: np.random.Generator | None = None) -> None:
        super().__init__()
        _positive("ConvTranspose2d", in_channels=in_channels, out_channels=out_channels, groups=groups)
        if in_channels % groups or out_channels % groups:
            raise InputError(
                f"ConvTranspose2d: in_channels ({in_channels}) and out_channels ({out_channels}) "
                f"must be divisible by groups ({groups})"
            )
        self.in_channels, self.out_channels = in_channels, out_channels
        self.kernel_size = _pair("ConvTranspose2d kernel_size", kernel_size)
        self.stride, self.padding, self.output_padding = stride, padding, output_padding
        self.groups, self.dilation = groups, dilation
        gen = current_rng(rng)
        shape = (in_channels, out_channels // groups, *self.kernel_size)
        self.weight = Parameter(kaiming_uniform(shape, gen))
        if bias:
            # torch computes the bias bound from the weight's dim 1 (out / groups) * kh * kw.
            fan = (out_channels // groups) * self.kernel_size[0] * self.kernel_size[1]
            self.bias: Parameter | None = Parameter(uniform_bias(out_channels, fan, gen))
        else:
            self.register_parameter("bias", None)

    def forward(self, x: Any) -> Any:
        return ops.conv_transpose2d(x, self.weight, self.bias, self.stride, self.padding, self.output_padding,
                                    self.groups, self.dilation)

    def extra_repr(self) -> str:
        return (f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, "
                f"stride={self.stride}, padding={self.padding}")


class Upsample(Module):
    def __init__(self, size: Any = None, scale_factor: Any = None, mode: str = "nearest",
                 align_corners: bool | None = None, recompute_scale_factor: bool | None = None) -> None:
        super().__init__()
        self.size, self.scale_factor, self.mode = size, scale_factor, mode
        self.align_corners, self.recompute_scale_factor = align_corners, recompute_scale_factor

    def forward(self, x: Any) -> Any:
        return ops.interpolate(x, self.size, self.scale_factor, self.mode, self.align_corners,
                               self.recompute_scale_factor)

    def extra_repr(self) -> str:
        return f"size={self.size}, scale_factor={self.scale_factor}, mode={self.mode!r}"


class _Pad2d(Module):
    _mode = "constant"

    def __init__(self, padding: int | tuple[int, int, int, int], value: float = 0.0) -> None:
        super().__init__()
        self.padding = (padding,) * 4 if isinstance(padding, (int, np.integer)) else tuple(padding)
        if len(self.padding) != 4:
            raise InputError(f"{type(self).__name__}: padding must be an int or (left, right, top, bottom)")
        self.value = value

    def forward(self, x: Any) -> Any:
        return ops.pad(x, self.padding, self._mode, self.value if self._mode == "constant" else None)

    def extra_repr(self) -> str:
        return f"{self.padding}"


class ZeroPad2d(_Pad2d):
    def __init__(self, padding: int | tuple[int, int, int, int]) -> None:
        super().__init__(padding, 0.0)


class ConstantPad2d(_Pad2d):
    pass


class ReflectionPad2d(_Pad2d):
    _mode = "reflect"

    def __init__(self, padding: int | tuple[int, int, int, int]) -> None:
        super().__init__(padding)


class ReplicationPad2d(_Pad2d):
    _mode = "replicate"

    def __init__(self, padding: int | tuple[int, int, int, int]) -> None:
        super().__init__(padding)


class ChannelShuffle(Module):
    def __init__(self, groups: int) -> None:
        super().__init__()
        self.groups = groups

    def forward(self, x: Any) -> Any:
        return ops.channel_shuffle(x, self.groups)

    def extra_repr(self) -> str:
        return f"groups={self.groups}"
