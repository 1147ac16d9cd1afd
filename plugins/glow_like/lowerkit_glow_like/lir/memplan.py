"""Liveness and the static memory plan.

A root buffer is live from the instruction that writes it (inputs: from the start) to the
last instruction reading it or any of its views (graph outputs: to the end, when they are
copied out). Two buffers whose live ranges overlap must not share bytes. Offsets are chosen
greedily by size: largest first, each at the lowest-waste gap among the buffers already
placed that are live at the same time (best fit), else on top of them.
"""

from __future__ import annotations

from dataclasses import dataclass

from lowerkit.backend.cpu import pack_lifetimes

from ..kernels import KERNELS
from .program import ALIGNMENT, MemoryPlan, Program


@dataclass(frozen=True, slots=True)
class Interval:
    root: int
    start: int
    end: int
    size: int

    def overlaps(self, other: Interval) -> bool:
        return self.start <= other.end and other.start <= self.end


def _aligned(n: int) -> int:
    return (n + ALIGNMENT - 1) // ALIGNMENT * ALIGNMENT


def live_intervals(program: Program) -> list[Interval]:
    """One interval per arena root buffer, in instruction time (0 .. len(instructions))."""
    n = len(program.instructions)
    start: dict[int, int] = {}
    end: dict[int, int] = {}
    for b in program.inputs:
        start[program.buffers[b].root] = 0
    for t, ins in enumerate(program.instructions):
        for b in ins.outputs:
            r = program.buffers[b].root
            start.setdefault(r, t)
            end[r] = max(end.get(r, t), t)
        for b in ins.inputs:
            buf = program.buffers[b]
            if buf.in_arena:
                end[buf.root] = max(end.get(buf.root, t), t)
    for b in program.outputs:
        buf = program.buffers[b]
        if buf.in_arena:
            end[buf.root] = n
    return [
        Interval(r, s, max(end.get(r, s), s), _aligned(program.buffers[r].nbytes))
        for r, s in sorted(start.items())
    ]


def liveness_lower_bound(intervals: list[Interval], steps: int) -> int:
    """The most bytes simultaneously live at any instruction: no plan can use less."""
    delta = [0] * (steps + 2)
    for iv in intervals:
        delta[iv.start] += iv.size
        delta[iv.end + 1] -= iv.size
    best = live = 0
    for d in delta:
        live += d
        best = max(best, live)
    return best


def assign_offsets(intervals: list[Interval]) -> dict[int, int]:
    """Greedy-by-size placement with best fit among time-overlapping placed buffers
    (``lowerkit.backend.cpu.pack_lifetimes``, which nnpack's arena uses too)."""
    ordered = sorted(intervals, key=lambda iv: iv.root)  # ties placed by root, as before
    offsets, _ = pack_lifetimes([(iv.start, iv.end, iv.size) for iv in ordered], ALIGNMENT)
    return {iv.root: offset for iv, offset in zip(ordered, offsets)}


def plan_memory(program: Program) -> MemoryPlan:
    """Place every arena buffer; fill in the plan's numbers and each buffer's offset."""
    intervals = live_intervals(program)
    offsets = assign_offsets(intervals)
    for buf in program.buffers:
        if buf.in_arena:
            buf.offset = offsets[buf.root]
    by_root = {iv.root: iv for iv in intervals}
    outputs = {b for ins in program.instructions for b in ins.outputs}
    owned = [b for b in program.buffers if b.in_arena and (b.id in outputs or b.id in program.inputs)]
    plan = MemoryPlan(
        peak_bytes=max((offsets[r] + by_root[r].size for r in offsets), default=0),
        sum_bytes=sum(b.nbytes for b in owned),
        lower_bound_bytes=liveness_lower_bound(intervals, len(program.instructions)),
        scratch_bytes=scratch_needed(program),
    )
    program.plan = plan
    return plan


def scratch_needed(program: Program) -> int:
    """The per-thread scratch bytes the program's largest kernel workspace needs."""
    return max((_scratch(program, ins) for ins in program.instructions), default=0)


def arena_bound(program: Program) -> int:
    """No valid plan needs more arena than every root buffer side by side."""
    return sum(_aligned(b.nbytes) for b in program.buffers if b.in_arena and b.root == b.id)


def _scratch(program: Program, ins) -> int:
    from lowerkit.ir import TensorType

    types = [TensorType(program.buffers[b].dtype, program.buffers[b].shape) for b in ins.inputs]
    outs = [TensorType(program.buffers[b].dtype, program.buffers[b].shape) for b in ins.outputs]
    return KERNELS[ins.op].scratch_bytes(types, outs, ins.attrs)
