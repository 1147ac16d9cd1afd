"""Cutting a range of work into contiguous, nearly equal parts."""

from __future__ import annotations


def split(total: int, parts: int, *, keep_empty: bool = False) -> list[slice]:
    """``range(total)`` cut into ``parts`` contiguous slices whose sizes differ by at most one.

    The first ``total % parts`` slices get the extra item. By default only non-empty slices
    are returned (fewer than ``parts`` when ``total < parts``, at least one): each is a
    task worth handing to a worker. With ``keep_empty=True`` exactly ``parts`` slices are
    returned, the last ones empty when ``total < parts``: for kernels that lay out one
    scratch area per worker and index slices by worker number.
    """
    parts = max(1, parts)
    used = max(1, min(parts, total))
    base, extra = divmod(max(0, total), used)
    slices, start = [], 0
    for i in range(used):
        stop = start + base + (1 if i < extra else 0)
        slices.append(slice(start, stop))
        start = stop
    if keep_empty:
        slices.extend(slice(start, start) for _ in range(parts - used))
    return slices
