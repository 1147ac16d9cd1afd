"""The low-level IR: programs of explicit-buffer instructions and their memory plan."""

from __future__ import annotations

from .build import build_program
from .memplan import (
    Interval,
    arena_bound,
    assign_offsets,
    live_intervals,
    liveness_lower_bound,
    plan_memory,
    scratch_needed,
)
from .program import ALIGNMENT, Buffer, Instruction, MemoryPlan, Program
from .text import format_program

__all__ = [
    "ALIGNMENT", "Buffer", "arena_bound", "scratch_needed", "Instruction", "Interval", "MemoryPlan", "Program", "assign_offsets",
    "build_program", "format_program", "live_intervals", "liveness_lower_bound", "plan_memory",
]
