"""Inverted-residual blocks bound as one call: three consecutive instructions — a 1x1
convolution, a 3x3 depthwise one, a 1x1 one (with or without a fused residual add), each
reading only the one before — run as ``lowerkit.backend.cpu.mbconv.InvertedResidual``, band by
band of output rows, so that the expanded tensor and the depthwise output stay in cache.

The program does not change: its instructions, buffers and memory plan stay as they are (the
two inner buffers are simply never touched), and a saved program loads anywhere. The runtime
decides, where it binds a program's instructions (``runtime.Executable._prepare``), which runs
of three it binds as one call: :func:`blocks` finds them, :func:`bind_block` binds one.
``LOWERKIT_GLOW_BLOCKS=0`` (read when a handle is made) binds every instruction on its own.
"""

from __future__ import annotations

import os
from collections.abc import Callable

import numpy as np

from lowerkit.backend.cpu import mbconv
from lowerkit.backend.cpu.jit import activation_code

from ..lir.program import Program
from ._base import conv_geometry

BLOCKS_ENV = "LOWERKIT_GLOW_BLOCKS"
_CONVOLUTIONS = ("conv2d", "glow.conv2d")


def _constants(program: Program, ins, first: int) -> bool:
    """Whether the instruction's inputs from ``first`` on (weight, bias) are constants."""
    return all(program.buffers[b].kind == "constant" for b in ins.inputs[first:3])


def _pointwise(program: Program, ins) -> bool:
    """A 1x1 convolution ``mbconv.pointwise`` takes, on a constant weight and bias (a residual
    add allowed)."""
    if ins.op not in _CONVOLUTIONS or len(ins.outputs) != 1 or not _constants(program, ins, 1):
        return False
    return mbconv.pointwise(program.buffers[ins.inputs[1]].shape, *conv_geometry(ins.attrs))


def _depthwise(program: Program, ins, channels: int) -> bool:
    """A depthwise convolution of ``channels`` planes on a constant weight and bias, no
    residual, that ``mbconv.fits`` takes."""
    if (ins.op not in _CONVOLUTIONS or len(ins.outputs) != 1 or ins.attrs.get("residual") or len(ins.inputs) > 3
            or not _constants(program, ins, 1)):
        return False
    w, out = program.buffers[ins.inputs[1]], program.buffers[ins.outputs[0]]
    return mbconv.fits(w.shape, channels, *conv_geometry(ins.attrs), out.shape[2], activation_code(ins.attrs)[0])


def blocks(program: Program) -> list[int]:
    """The instructions ``i`` from which ``i``, ``i + 1`` and ``i + 2`` form a block
    :func:`bind_block` takes: the expansion's output read only by
    the depthwise layer, the depthwise output only by the projection, no buffer of the three a
    program input or output, float32 throughout, the block's input and output apart in the
    arena, and a depthwise layer ``mbconv.fits`` takes."""
    if os.environ.get(BLOCKS_ENV) == "0":
        return []
    instructions = program.instructions
    readers: dict[int, int] = {}
    for ins in instructions:
        for b in ins.inputs:
            root = program.buffers[b].root
            readers[root] = readers.get(root, 0) + 1
    # the program's inputs and outputs too: the runtime may bind their instructions again to
    # the caller's arrays (direct_io), one instruction at a time
    outside = {program.buffers[b].root for b in (*program.inputs, *program.outputs)}
    found, i = [], 0
    while i + 2 < len(instructions):
        if _block_at(program, i, readers, outside):
            found.append(i)
            i += 3
        else:
            i += 1
    return found


def _block_at(program: Program, i: int, readers: dict[int, int], outside: set[int]) -> bool:
    expand, depthwise, project = program.instructions[i:i + 3]
    buffers = program.buffers
    if any(buffers[b].root in outside for ins in (expand, depthwise, project) for b in (*ins.inputs, *ins.outputs)):
        return False
    if not (_pointwise(program, expand) and len(expand.inputs) <= 3 and not expand.attrs.get("residual")
            and _pointwise(program, project)):
        return False
    expanded, dw_out = expand.outputs[0], depthwise.outputs[0]
    if not (depthwise.inputs[0] == expanded and project.inputs[0] == dw_out
            and _depthwise(program, depthwise, buffers[expanded].shape[1])):
        return False
    for b in (expanded, dw_out):
        if buffers[b].root != b or readers.get(b) != 1:
            return False
    arrays = [buffers[b] for ins in (expand, depthwise, project) for b in (*ins.inputs, *ins.outputs)]
    return (all(buf.dtype == "f32" for buf in arrays)
            and not _share_bytes(program, expand.inputs[0], project.outputs[0]))


def _share_bytes(program: Program, a: int, b: int) -> bool:
    """Whether buffers ``a`` and ``b`` may share arena bytes. The plan lets the block's output
    reuse its input's bytes where the input dies with the expansion, but the block writes its
    first rows of output before it reads its last rows of input."""
    ra, rb = program.buffers[program.buffers[a].root], program.buffers[program.buffers[b].root]
    return ra.offset < rb.offset + rb.nbytes and rb.offset < ra.offset + ra.nbytes


def block_of(program: Program, i: int, views: list[np.ndarray]) -> mbconv.InvertedResidual | None:
    """The block at instruction ``i`` (see :func:`blocks`) with its constants from ``views``
    (one array per buffer), packed once per handle; None where a weight is not a constant the
    handle holds."""
    expand, depthwise, project = program.instructions[i:i + 3]

    def bias(ins):
        return views[ins.inputs[2]] if len(ins.inputs) > 2 else None

    acts = tuple(v for ins in (expand, depthwise, project) for v in activation_code(ins.attrs))
    x, out = program.buffers[expand.inputs[0]], program.buffers[project.outputs[0]]
    return mbconv.InvertedResidual.shared(views[expand.inputs[1]], bias(expand), views[depthwise.inputs[1]],
                                          bias(depthwise), views[project.inputs[1]], bias(project),
                                          conv_geometry(depthwise.attrs)[0][0], acts, x.shape[3], out.shape[3])


def bind_block(program: Program, i: int, block: mbconv.InvertedResidual, views: list[np.ndarray],
               scratch: np.ndarray, team=None) -> Callable[[], None]:
    """The block at instruction ``i`` on ``views`` as one call (``InvertedResidual.bind``)."""
    expand, _, project = program.instructions[i:i + 3]
    residual = views[project.inputs[3]] if project.attrs.get("residual") else None
    return block.bind(views[expand.inputs[0]], views[project.outputs[0]], residual, scratch, team)
