"""Static memory planning: buffers with known lifetimes packed into one arena."""

from __future__ import annotations

from collections.abc import Sequence

from .aligned import ALIGNMENT


def pack_lifetimes(lifetimes: Sequence[tuple[int, int, int]], alignment: int = ALIGNMENT) -> tuple[list[int], int]:
    """Arena offsets for buffers given as ``(first, last, nbytes)``: alive from time ``first``
    to time ``last``, both included. Two buffers alive at a common time never share a byte.

    Largest first (ties: earliest first, then input order), each buffer goes into the tightest
    gap among the placed buffers alive with it (best fit), else on top of them; sizes are
    rounded up to ``alignment``, so every offset is a multiple of it. Returns the offsets, in
    the order of ``lifetimes``, and the arena's size in bytes.
    """
    sizes = [-(-nbytes // alignment) * alignment for _, _, nbytes in lifetimes]
    offsets = [0] * len(lifetimes)
    placed: list[int] = []
    top = 0
    for i in sorted(range(len(lifetimes)), key=lambda i: (-sizes[i], lifetimes[i][0], i)):
        first, last, _ = lifetimes[i]
        busy = sorted((offsets[j], offsets[j] + sizes[j]) for j in placed
                      if first <= lifetimes[j][1] and lifetimes[j][0] <= last)
        best, waste, cursor = None, None, 0
        for lo, hi in busy:
            gap = lo - cursor
            if gap >= sizes[i] and (waste is None or gap - sizes[i] < waste):
                best, waste = cursor, gap - sizes[i]
            cursor = max(cursor, hi)
        offsets[i] = cursor if best is None else best
        placed.append(i)
        top = max(top, offsets[i] + sizes[i])
    return offsets, top
