"""A readable listing of a program: options, instructions with their buffers, the plan."""

from __future__ import annotations

import numpy as np

from .program import Buffer, Program


def _mib(n: int) -> str:
    return f"{n} B ({n / 2**20:.2f} MiB)"


def _buffer(buf: Buffer) -> str:
    shape = ", ".join(str(d) for d in buf.shape)
    where = f"const#{buf.constant}" if buf.kind == "constant" else f"@{buf.offset}"
    return f"%{buf.name}:{buf.dtype}[{shape}]{where}"


def _attr(value) -> str:
    if isinstance(value, np.ndarray):
        return f"<{value.dtype}{list(value.shape)}>"
    if isinstance(value, tuple):
        return "[" + ", ".join(str(v) for v in value) + "]"
    return str(value)


def format_program(program: Program) -> str:
    """The instruction list, then the three memory numbers and the scratch size."""
    opts = ", ".join(f"{k}={v}" for k, v in sorted(program.options.items()) if k != "profile")
    lines = [f"method {program.method} ({opts})"]
    if program.passes:
        lines.append("  passes fired: " + ", ".join(program.passes))
    lines.append("  inputs: " + ", ".join(_buffer(program.buffers[b]) for b in program.inputs))
    for i, ins in enumerate(program.instructions):
        outs = ", ".join(_buffer(program.buffers[b]) for b in ins.outputs)
        args = ", ".join(_buffer(program.buffers[b]) for b in ins.inputs)
        attrs = " ".join(f"{k}={_attr(v)}" for k, v in sorted(ins.attrs.items()))
        scope = f"  # {ins.scope}" if ins.scope else ""
        lines.append(f"  {i:4d}: {outs} = {ins.op}({args}) {attrs}".rstrip() + scope)
    lines.append("  outputs: " + ", ".join(_buffer(program.buffers[b]) for b in program.outputs))
    plan = program.plan
    const_bytes = sum(c.nbytes for c in program.constants)
    ratio = plan.peak_bytes / plan.lower_bound_bytes if plan.lower_bound_bytes else 1.0
    saved = 1 - plan.peak_bytes / plan.sum_bytes if plan.sum_bytes else 0.0
    lines += [
        f"  planned peak activation bytes: {_mib(plan.peak_bytes)}",
        f"  sum of all activations (no reuse): {_mib(plan.sum_bytes)}",
        f"  liveness lower bound: {_mib(plan.lower_bound_bytes)}",
        f"  peak / lower bound: {ratio:.3f}; saved against no reuse: {saved:.1%}",
        f"  scratch per thread: {_mib(plan.scratch_bytes)}; constants: {_mib(const_bytes)}",
    ]
    return "\n".join(lines)
