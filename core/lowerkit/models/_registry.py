"""The zoo's registry: name -> builder, default input size and a small configuration for tests."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, slots=True)
class ModelInfo:
    """One zoo entry."""

    name: str
    build: Callable[..., Any]
    #: the architecture's standard input, [C, H, W]
    input_chw: tuple[int, int, int]
    family: str
    #: attention-based (looser numeric tolerance against PyTorch: softmax, layer norm, GELU)
    transformer: bool = False
    #: keyword arguments and input size of a small, fast variant (same code paths, fewer
    #: blocks/channels, a small image) for tests and smoke runs
    small: Mapping[str, Any] = field(default_factory=dict)
    small_size: int = 32
    #: builder keyword that must match the image size (transformers: positional embeddings)
    size_kwarg: str | None = None
    description: str = ""


MODELS: dict[str, ModelInfo] = {}


def register(info: ModelInfo) -> ModelInfo:
    if info.name in MODELS:
        raise ValueError(f"zoo model {info.name!r} is registered twice")
    MODELS[info.name] = info
    return info
