"""``conv_transpose2d``: conv2d's input gradient with the layer's output size, plus bias."""

from __future__ import annotations

from lowerkit.opset.conv_transpose import conv_transpose_output_size

from .conv import conv2d_input_grad


def conv_transpose2d(args, attrs):
    x, weight = args[0], args[1]
    n, _, h, w = x.shape
    _, ocg, kh, kw = weight.shape
    stride, padding, dilation = attrs["stride"], attrs["padding"], attrs["dilation"]
    out_pad = attrs["output_padding"]
    oh = conv_transpose_output_size(h, kh, stride[0], padding[0], padding[2], dilation[0], out_pad[0])
    ow = conv_transpose_output_size(w, kw, stride[1], padding[1], padding[3], dilation[1], out_pad[1])
    oc = ocg * attrs["groups"]
    # The transposed convolution of x is the gradient of conv2d(y, weight) w.r.t. y, at x.
    y = conv2d_input_grad([weight, x], {**attrs, "input_size": (n, oc, oh, ow)})
    if len(args) > 2:
        y += args[2].reshape(1, oc, 1, 1)
    return y


KERNELS = {"conv_transpose2d": conv_transpose2d}
