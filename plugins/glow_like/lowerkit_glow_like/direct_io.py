"""Large inputs read where the caller holds them, large outputs written straight into the
arrays a call returns — not copied into and out of the arena.

A call copies its inputs into their planned buffers and its outputs out of theirs. For a
program on small tensors that is nothing; for a region of a partitioned plan on large maps
it is much of the region's cost: UNet's decoder hands glow_like regions of one transposed
convolution and one concatenation 8-32 MB maps, and each byte crossed memory twice more
than the kernels needed.

Where an input or output of at least :data:`DIRECT_BYTES` is a buffer of its own — no view
of it, nothing written into it in place, an output no instruction reads and one writes —
the instructions that touch it are bound again on every call to the caller's array (an
input that is a C-contiguous array of its dtype and shape; any other is copied in as
before) or to a new output array. The rest of the program keeps its bound calls.

A batch run as slices (``runtime``) does the same per part, where a buffer holds at least
:data:`DIRECT_BYTES` an image: each slice's instructions are bound again to its rows of the
caller's arrays and of the returned ones, and a slice's head (its first instructions, run
an image at a time) to each image's row (:meth:`DirectIO.split`). In a partitioned UNet,
glow_like's regions between nnpack's — a resize, a concatenation, a transposed convolution
and its concatenation — otherwise copied every map in and out of each slice's arena (and a
head's outputs twice: into the slice's arena, then out).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from .lir import Program

# Inputs and outputs from this size are read and written in place: below, a copy costs less
# than binding the instructions that touch them again (tens of microseconds).
DIRECT_BYTES = 1 << 20


@dataclass(frozen=True)
class DirectIO:
    """Which of a program's inputs and outputs a call reads and writes in place."""

    inputs: tuple[tuple[int, int], ...]  # (position among the program's inputs, buffer)
    outputs: tuple[tuple[int, int], ...]  # (position among the program's outputs, buffer)
    touching: dict[int, tuple[int, ...]]  # buffer -> the instructions that read or write it

    @classmethod
    def of(cls, program: Program, min_bytes: int = DIRECT_BYTES) -> DirectIO | None:
        """The program's direct inputs and outputs (see the module docstring) of at least
        ``min_bytes``, or None."""
        buffers, instructions = program.buffers, program.instructions
        viewed = {b.root for b in buffers if b.root != b.id}  # views, and outputs written in place
        readers: dict[int, list[int]] = {}
        writers: dict[int, list[int]] = {}
        for i, ins in enumerate(instructions):
            for b in ins.inputs:
                readers.setdefault(b, []).append(i)
            for b in ins.outputs:
                writers.setdefault(b, []).append(i)

        def own(b: int) -> bool:
            buf = buffers[b]
            return buf.in_arena and buf.root == b and b not in viewed and buf.nbytes >= min_bytes

        inputs = tuple((p, b) for p, b in enumerate(program.inputs)
                       if own(b) and b not in program.outputs and readers.get(b) and not writers.get(b))
        outputs = tuple((p, b) for p, b in enumerate(program.outputs)
                        if own(b) and b not in program.inputs and len(writers.get(b, ())) == 1
                        and not readers.get(b) and program.outputs.count(b) == 1)
        if not inputs and not outputs:
            return None
        touching = {b: (*readers.get(b, ()), *writers.get(b, ())) for _, b in (*inputs, *outputs)}
        return cls(inputs, outputs, touching)

    @staticmethod
    def usable(given: np.ndarray, planned: np.ndarray) -> bool:
        """Whether a caller's input can be read in place of its planned buffer."""
        return (type(given) is np.ndarray and given.dtype == planned.dtype and given.shape == planned.shape
                and given.flags.c_contiguous)

    def split(self, head: int) -> tuple[DirectIO | None, DirectIO | None]:
        """The direct inputs and outputs that only instructions ``[0, head)`` touch, and those
        that only the later ones touch (a batch slice's head runs the first an image at a
        time, the rest over the slice); a buffer both touch is copied, as before."""

        def part(early: bool) -> DirectIO | None:
            def kept(b: int) -> bool:
                return all((i < head) == early for i in self.touching[b])

            inputs = tuple((p, b) for p, b in self.inputs if kept(b))
            outputs = tuple((p, b) for p, b in self.outputs if kept(b))
            if not inputs and not outputs:
                return None
            return DirectIO(inputs, outputs, {b: self.touching[b] for _, b in (*inputs, *outputs)})

        return part(True), part(False)

    def placed(self, inputs: Sequence, planned: Sequence[np.ndarray], outputs: Mapping[int, np.ndarray] | Sequence,
               rows: slice | None = None) -> dict[int, np.ndarray]:
        """Buffer -> the array it is this time: each direct input the caller gave (``inputs``;
        where :meth:`usable` in place of the planned buffer, ``planned``, both by input
        position) and each direct output (``outputs[position]``, the arrays the call returns)
        — their ``rows`` where given, else the arrays themselves."""
        placed = {}
        for p, b in self.inputs:
            given = inputs[p] if rows is None else inputs[p][rows]
            if self.usable(given, planned[p]):
                placed[b] = given
        for p, b in self.outputs:
            placed[b] = outputs[p] if rows is None else outputs[p][rows]
        return placed

    def instructions(self, placed: Sequence[int]) -> list[int]:
        """The instructions to bind again for the buffers ``placed``, in program order."""
        return sorted({i for b in placed for i in self.touching[b]})
