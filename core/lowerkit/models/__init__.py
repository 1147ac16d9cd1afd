"""The zoo: deterministic reference networks built from :mod:`lowerkit.nn`.

Every builder takes ``num_classes`` and ``seed=`` and returns the same weights for the same
seed. Batch-norm statistics and norm affine parameters are random (positive variances) so that
they matter. ``get(name, **kw)`` builds a registered model, ``names()`` lists them,
``info(name)`` tells its input size and its small test configuration, and
``example_input(name, batch, image_size=...)`` makes an input for it.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import InputError
from ._registry import MODELS, ModelInfo, register
from .convnext import convnext_tiny
from .efficientnet import efficientnet_b0
from .mixnet import mixnet_s
from .mobilenet import mobilenet_v2, mobilenet_v3_large, mobilenet_v3_small
from .resnet import BasicBlock, Bottleneck, ResNet, resnet18, resnet50
from .shufflenet import shufflenet_v2
from .small import SmallCNN, small_cnn
from .swin import swin_tiny
from .unet import unet
from .vit import vit_deit_tiny

__all__ = [
    "BasicBlock", "Bottleneck", "MODEL_INPUTS", "ModelInfo", "ResNet", "SmallCNN", "convnext_tiny",
    "efficientnet_b0", "example_input", "get", "info", "input_shape", "mixnet_s", "mobilenet_v2",
    "mobilenet_v3_large", "mobilenet_v3_small", "names", "resnet18", "resnet50", "shufflenet_v2",
    "small_cnn", "swin_tiny", "unet", "vit_deit_tiny",
]

register(ModelInfo("small_cnn", lambda num_classes=10, seed=0: small_cnn(seed), (3, 8, 8), "cnn",
                   small_size=8, description="the quick start's conv-bn-relu-pool-linear net"))
register(ModelInfo("resnet18", resnet18, (3, 224, 224), "resnet", small={"layers": (1, 1, 1, 1), "width": 16},
                   description="ResNet-18 (torchvision's layout and names)"))
register(ModelInfo("resnet50", resnet50, (3, 224, 224), "resnet", small={"layers": (1, 1, 1, 1), "width": 8},
                   description="ResNet-50, bottleneck blocks"))
register(ModelInfo("mobilenet_v2", mobilenet_v2, (3, 224, 224), "mobilenet",
                   small={"width_mult": 0.25, "depth_mult": 0.34}, description="MobileNetV2"))
register(ModelInfo("mobilenet_v3_small", mobilenet_v3_small, (3, 224, 224), "mobilenet",
                   small={"width_mult": 0.25}, description="MobileNetV3-Small (hardswish, squeeze-excite)"))
register(ModelInfo("mobilenet_v3_large", mobilenet_v3_large, (3, 224, 224), "mobilenet",
                   small={"width_mult": 0.25}, description="MobileNetV3-Large"))
register(ModelInfo("efficientnet_b0", efficientnet_b0, (3, 224, 224), "efficientnet",
                   small={"width_mult": 0.25, "depth_mult": 0.34}, description="EfficientNet-B0 (SiLU, squeeze-excite)"))
register(ModelInfo("shufflenet_v2", shufflenet_v2, (3, 224, 224), "shufflenet",
                   small={"channels": (8, 16, 32, 64, 64), "depth_mult": 0.25},
                   description="ShuffleNetV2 x1.0 (channel split and shuffle)"))
register(ModelInfo("mixnet_s", mixnet_s, (3, 224, 224), "mixnet", small={"width_mult": 0.25, "max_blocks": 5},
                   description="MixNet-S-like (mixed-kernel depthwise convs)"))
register(ModelInfo("convnext_tiny", convnext_tiny, (3, 224, 224), "convnext",
                   small={"depths": (1, 1, 1, 1), "dims": (8, 16, 32, 64)},
                   description="ConvNeXt-T (layer norm, GELU, 7x7 depthwise)"))
register(ModelInfo("vit_deit_tiny", vit_deit_tiny, (3, 224, 224), "vit", transformer=True,
                   small={"patch": 8, "dim": 32, "depth": 2, "heads": 2}, size_kwarg="image_size",
                   description="ViT with DeiT-tiny geometry"))
register(ModelInfo("swin_tiny", swin_tiny, (3, 224, 224), "swin", transformer=True,
                   small={"dim": 16, "depths": (2, 2), "heads": (1, 2), "window": 4}, size_kwarg="image_size",
                   description="Swin-T-like windowed attention (shifted windows, relative position bias)"))
register(ModelInfo("unet", unet, (3, 256, 256), "unet", small={"base": 8, "depth": 2},
                   description="UNet (transposed conv and bilinear upsampling, skip concatenation)"))

# model name -> input shape at batch 1 (the architectures' standard sizes)
MODEL_INPUTS: dict[str, tuple[int, ...]] = {name: (1, *m.input_chw) for name, m in MODELS.items()}


def names() -> list[str]:
    """The registered model names, in registration order."""
    return list(MODELS)


def info(name: str) -> ModelInfo:
    """The registry entry of ``name`` (input size, family, small configuration)."""
    try:
        return MODELS[name]
    except KeyError:
        raise InputError(f"unknown model {name!r}; expected one of the zoo models {names()}") from None


def get(name: str, *, small: bool = False, image_size: int | None = None, **kwargs: Any) -> Any:
    """Build zoo model ``name`` (a :class:`lowerkit.nn.Module`), e.g. ``get("mobilenet_v2", seed=1)``.

    ``small=True`` uses the entry's small configuration (for tests and smoke runs); other
    keyword arguments go to the builder and override it. ``image_size`` matters only to the
    transformers (positional embeddings and windows depend on it); convolutional models take
    any size their strides allow.
    """
    entry = info(name)
    arguments = dict(entry.small) if small else {}
    arguments.update(kwargs)
    if entry.size_kwarg is not None:
        size = image_size or (entry.small_size if small else entry.input_chw[1])
        arguments.setdefault(entry.size_kwarg, size)
    try:
        return entry.build(**arguments)
    except TypeError as err:
        raise InputError(f"lowerkit.models.get({name!r}): {err}") from None


def input_shape(name: str, batch: int = 1, *, small: bool = False, image_size: int | None = None) -> tuple[int, ...]:
    """The input shape of ``name``: standard size, the small size, or ``image_size``."""
    entry = info(name)
    size = image_size or (entry.small_size if small else entry.input_chw[1])
    return (batch, entry.input_chw[0], size, size)


def example_input(model_name: str, batch: int = 1, seed: int = 0, *, small: bool = False,
                  image_size: int | None = None) -> np.ndarray:
    """A float32 input of the model's shape with ``batch`` rows, uniform in [0, 1)."""
    shape = input_shape(model_name, batch, small=small, image_size=image_size)
    return np.random.default_rng(seed).random(shape, dtype=np.float32)
