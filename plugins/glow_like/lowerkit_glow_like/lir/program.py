"""The low-level IR: buffers with explicit storage, and a flat instruction list.

Every tensor is a :class:`Buffer`. Constants point into the program's constant table;
inputs and activations live in one per-thread arena at a planned byte ``offset``. A buffer
whose ``root`` is another buffer shares that buffer's storage (a reshape view, or the
output of an element-wise instruction run in place).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from lowerkit.ir import DTYPES

ALIGNMENT = 64  # bytes; every arena buffer starts on a cache line


@dataclass(slots=True)
class Buffer:
    id: int
    name: str
    dtype: str
    shape: tuple[int, ...]
    kind: str  # "input", "activation" or "constant"
    root: int  # the buffer whose storage this one uses (itself if it owns storage)
    offset: int = 0  # arena byte offset of the root's storage
    constant: int = -1  # index in Program.constants for kind "constant"

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * DTYPES[self.dtype].itemsize

    @property
    def in_arena(self) -> bool:
        return self.kind != "constant"


@dataclass(slots=True)
class Instruction:
    op: str
    inputs: list[int]
    outputs: list[int]
    attrs: dict = field(default_factory=dict)
    scope: str = ""
    debug_handle: int = -1


@dataclass(slots=True)
class MemoryPlan:
    """Planned arena size and the numbers it is judged by (bytes)."""

    peak_bytes: int = 0  # arena size: highest planned offset + size
    sum_bytes: int = 0  # every input and instruction output in its own memory (no reuse)
    lower_bound_bytes: int = 0  # max over time of the bytes of simultaneously live buffers
    scratch_bytes: int = 0  # per-thread kernel workspace (im2col columns), outside the arena


@dataclass(slots=True)
class Program:
    """One method, compiled: what preprocess decides and compile binds."""

    method: str
    buffers: list[Buffer]
    instructions: list[Instruction]
    inputs: list[int]
    outputs: list[int]
    constants: list[np.ndarray]
    plan: MemoryPlan = field(default_factory=MemoryPlan)
    options: dict = field(default_factory=dict)
    passes: list[str] = field(default_factory=list)
