"""Per-call overhead: a 1-element add through a lowered module, beside the peers, one process.

What a call costs when the work is nothing: input checks, dispatch to the backend, the
backend's own bookkeeping and the output copy. Every engine adds two float32 arrays of one
element; engines are timed in interleaved rounds and each keeps its best round (mean µs per
call over a round of ``--calls`` calls).

    python benchmarks/overhead.py               # glow_like, nnpack+glow_like, reference, ORT, OpenVINO, torch, numpy
    python benchmarks/overhead.py --rounds 9
"""

from __future__ import annotations

import argparse
import math
import time
import warnings
from collections.abc import Callable

import numpy as np

import lowerkit as lk
from lowerkit import nn


class _Add(nn.Module):
    def forward(self, x, y):
        return x + y


def engines() -> dict[str, Callable[[], object]]:
    """Name -> a no-argument call adding two 1-element arrays; peers that are missing are left out."""
    x = np.ones((1,), np.float32)
    y = np.full((1,), 2.0, np.float32)
    module = lk.trace(_Add(), x, y)
    result: dict[str, Callable[[], object]] = {"numpy (np.add, the floor)": lambda: np.add(x, y)}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for label, target in (("lowerkit glow_like", "glow_like"), ("lowerkit reference", "reference")):
            try:
                lowered = lk.to_backend(module, target)
                result[label] = lambda lowered=lowered: lowered(x, y)
            except lk.LowerkitError:
                pass
    try:
        import lowerkit.onnx
        from peers import onnxruntime_runner, openvino_runner

        proto = lowerkit.onnx.export(module)
        feed = {proto.graph.input[0].name: x, proto.graph.input[1].name: y}
        for label, make in (("onnxruntime", onnxruntime_runner), ("openvino", openvino_runner)):
            fn = make(proto, feed, 1)
            if fn is not None:
                result[label] = fn
    except ImportError:
        pass
    try:
        import torch

        tx, ty = torch.from_numpy(x), torch.from_numpy(y)
        result["torch (eager)"] = lambda: torch.add(tx, ty)
    except ImportError:
        pass
    return result


def measure(calls: int = 2000, rounds: int = 5) -> dict[str, float]:
    """Best mean µs per call of every engine, interleaved rounds."""
    fns = engines()
    best = {name: math.inf for name in fns}
    for fn in fns.values():
        for _ in range(100):
            fn()
    for _ in range(rounds):
        for name, fn in fns.items():
            start = time.perf_counter()
            for _ in range(calls):
                fn()
            best[name] = min(best[name], (time.perf_counter() - start) / calls * 1e6)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    best = measure(args.calls, args.rounds)
    glow = best.get("lowerkit glow_like")
    print(f"{'engine':28s} {'µs/call':>9s} {'/ glow_like':>12s}")
    for name, us in best.items():
        ratio = f"{us / glow:.2f}" if glow else "-"
        print(f"{name:28s} {us:9.2f} {ratio:>12s}")


if __name__ == "__main__":
    main()
