"""Calibration: run the optimized fp32 graph on user inputs, record each value's range."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

from lowerkit.errors import InputError
from lowerkit.ir import Module
from lowerkit.progress import progress as progress_line

from .._compiler import optimized_graph
from .._evaluator import evaluate
from .profile import Profile, graph_fingerprint


def calibrate(
    module: Module,
    batches: Iterable[np.ndarray | Sequence[np.ndarray]],
    method: str = "forward",
    progress: bool = True,
) -> Profile:
    """Record the min/max of every value of ``method`` over ``batches`` of inputs.

    Each batch is one input array (single-input methods) or a sequence of arrays, one per
    input. Shows a progress line on stderr (:mod:`lowerkit.progress`: only on a terminal, not
    when quiet) when ``progress`` and there is more than one batch.
    Returns a :class:`Profile` for ``compile_spec={method: {"precision": "int8", "profile": p}}``.
    """
    graph, _ = optimized_graph(module, method, 2)
    profile = Profile(method, graph_fingerprint(graph))
    total = len(batches) if hasattr(batches, "__len__") else None  # type: ignore[arg-type]
    show = progress and total != 1

    constants = {n.output for n in graph.nodes if n.op == "constant"}

    def observe(value, array) -> None:
        if value not in constants and array.dtype.kind == "f" and array.size:
            profile.observe(value.name, float(array.min()), float(array.max()))

    bar = progress_line(total, f"calibrating {method}", unit="batch", show=show)
    with bar:
        for i, batch in enumerate(batches):
            inputs = [batch] if isinstance(batch, np.ndarray) else list(batch)
            if len(inputs) != len(graph.inputs):
                raise InputError(
                    f"calibrate: method {method!r} takes {len(graph.inputs)} inputs, batch {i} has {len(inputs)}"
                )
            for v, a in zip(graph.inputs, inputs):
                a = np.asarray(a)
                if a.shape != v.type.shape or a.dtype != v.type.numpy_dtype:
                    raise InputError(
                        f"calibrate: method {method!r}, input {v.name!r}: expected {v.type}, "
                        f"got {a.dtype}{list(a.shape)} in batch {i}"
                    )
                observe(v, a)
            evaluate(graph, inputs, observe)
            profile.count_batch()
            bar.update()
    if profile.batches == 0:
        raise InputError("calibrate: no batches given; pass at least one input batch")
    return profile
