"""Layers for building traceable models, after ``torch.nn``.

Build a model from these layers, then :func:`lowerkit.trace` it. Initialisation is
deterministic: see :mod:`lowerkit.nn.init` (``init_seed``, ``rng=``).
"""

from __future__ import annotations

from .init import init_seed
from .layers import BatchNorm2d, Conv2d, Linear
from .model_layers import (
    GELU,
    ChannelShuffle,
    ConstantPad2d,
    ConvTranspose2d,
    GroupNorm,
    Hardsigmoid,
    Hardswish,
    LayerNorm,
    ReflectionPad2d,
    ReplicationPad2d,
    SiLU,
    Upsample,
    ZeroPad2d,
)
from .module import Module, Sequential
from ..tracing.parameter import Parameter
from .simple import (
    AdaptiveAvgPool2d,
    AvgPool2d,
    Dropout,
    Flatten,
    Identity,
    LeakyReLU,
    LogSoftmax,
    MaxPool2d,
    ReLU,
    ReLU6,
    Sigmoid,
    Softmax,
    Tanh,
)

__all__ = [
    "AdaptiveAvgPool2d", "AvgPool2d", "BatchNorm2d", "Conv2d", "Dropout", "Flatten", "Identity",
    "LeakyReLU", "Linear", "LogSoftmax", "MaxPool2d", "Module", "Parameter", "ReLU", "ReLU6",
    "Sequential", "Sigmoid", "Softmax", "Tanh", "init_seed",
]
__all__ += [
    "GELU", "ChannelShuffle", "ConstantPad2d", "ConvTranspose2d", "GroupNorm", "Hardsigmoid", "Hardswish",
    "LayerNorm", "ReflectionPad2d", "ReplicationPad2d", "SiLU", "Upsample", "ZeroPad2d",
]
