"""Convolution geometry and the checks NNPACK makes on it."""

from __future__ import annotations

from dataclasses import dataclass


class GeometryError(ValueError):
    """A convolution parameter is outside what an algorithm supports (message names the limit)."""


@dataclass(frozen=True, slots=True)
class ConvGeometry:
    """A 2-D convolution's shape parameters (batch excluded: kernels serve any batch size)."""

    in_channels: int
    out_channels: int
    in_hw: tuple[int, int]
    kernel: tuple[int, int]
    stride: tuple[int, int] = (1, 1)
    padding: tuple[int, int, int, int] = (0, 0, 0, 0)  # top, left, bottom, right

    @property
    def out_hw(self) -> tuple[int, int]:
        t, l, b, r = self.padding
        oh = (self.in_hw[0] + t + b - self.kernel[0]) // self.stride[0] + 1
        ow = (self.in_hw[1] + l + r - self.kernel[1]) // self.stride[1] + 1
        return oh, ow

    def flops(self, batch: int) -> int:
        """Direct-convolution FLOPs (2 per multiply-add) for ``batch`` images."""
        oh, ow = self.out_hw
        return 2 * batch * self.out_channels * oh * ow * self.in_channels * self.kernel[0] * self.kernel[1]

    def check(self) -> None:
        """Raise ``GeometryError`` with NNPACK-style messages for invalid parameters."""
        if self.in_channels < 1 or self.out_channels < 1:
            raise GeometryError(
                f"channel counts must be >= 1, got input_channels={self.in_channels}, "
                f"output_channels={self.out_channels}"
            )
        if min(self.in_hw) < 1:
            raise GeometryError(f"input size must be >= 1x1, got {self.in_hw[0]}x{self.in_hw[1]}")
        if min(self.kernel) < 1:
            raise GeometryError(f"kernel size must be >= 1x1, got {self.kernel[0]}x{self.kernel[1]}")
        if min(self.stride) < 1:
            raise GeometryError(f"stride must be >= 1, got {self.stride[0]}x{self.stride[1]}")
        t, l, b, r = self.padding
        kh, kw = self.kernel
        for side, pad, k in (("top", t, kh), ("bottom", b, kh), ("left", l, kw), ("right", r, kw)):
            if pad < 0 or pad >= k:
                raise GeometryError(
                    f"{side} padding must be in [0, kernel size - 1] = [0, {k - 1}], got {pad}"
                )
        if self.in_hw[0] + t + b < kh or self.in_hw[1] + l + r < kw:
            raise GeometryError(
                f"padded input {self.in_hw[0] + t + b}x{self.in_hw[1] + l + r} is smaller than "
                f"the kernel {kh}x{kw}"
            )
