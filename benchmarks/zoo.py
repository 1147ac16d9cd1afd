"""Zoo models on glow_like and [nnpack, glow_like] beside ONNX Runtime and OpenVINO, one process.

Each model is traced once; the peers run the same weights exported with
``lowerkit.onnx.export``. Every engine is timed in ``--rounds`` interleaved rounds (a
seeded new order each round) and keeps its best median-of-round; the table gives ms and the
ratio to the best peer. Models not in ``lowerkit.models`` are listed as skipped.

    python benchmarks/zoo.py                          # ResNet-18/50, MobileNetV2, EfficientNet-B0, batch 1
    python benchmarks/zoo.py --batch 8 --models resnet18
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import time
import warnings
from collections.abc import Callable

import numpy as np

import lowerkit as lk
from lowerkit import models
from lowerkit.backend.cpu import cpu_count
from peers import blas_lines, onnxruntime_runner, openvino_runner, openvino_version, settle

DEFAULT = ("resnet18", "resnet50", "mobilenet_v2", "efficientnet_b0")
PEERS = ("onnxruntime", "openvino")


def _median_ms(fn: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def _build(name: str):
    builder = getattr(models, "get", None)
    if builder is not None:
        return builder(name)
    return getattr(models, name)()


def bench_model(name: str, batch: int, args) -> dict | None:
    if not (hasattr(models, name) or name in getattr(models, "names", lambda: [])()):
        print(f"| {name} | {batch} | skipped: not in lowerkit.models on this branch |")
        return None
    x = models.example_input(name, batch=batch)
    module = lk.trace(_build(name), x)
    expected = module(x)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        start = time.perf_counter()
        spec = {"forward": {"threads": args.threads}} if args.threads else None
        glow = lk.to_backend(module, "glow_like", spec)
        compile_s = time.perf_counter() - start
        engines: dict[str, Callable[[], object]] = {"glow_like": lambda: glow(x)}
        try:
            mixed = lk.to_backend(module, ["nnpack", "glow_like"])
            engines["nnpack+glow_like"] = lambda: mixed(x)
        except Exception as err:  # partitioning or nnpack missing: say so and go on
            print(f"  [nnpack, glow_like] skipped for {name}: {type(err).__name__}: {err}")
    err = float(np.abs(glow(x) - expected).max() / max(1e-6, np.abs(expected).max()))
    from lowerkit.onnx import export

    onnx_model = export(module)
    feed = {onnx_model.graph.input[0].name: x}
    for peer, make in (("onnxruntime", onnxruntime_runner), ("openvino", openvino_runner)):
        try:
            fn = make(onnx_model, feed, args.threads or cpu_count())
        except Exception as exc:  # a peer that cannot take the model is reported, not fatal
            print(f"  {peer} skipped for {name}: {type(exc).__name__}: {exc}")
            fn = None
        if fn is not None:
            engines[peer] = fn
    for fn in engines.values():  # warm-up (JIT-compiled kernels are already loaded at lowering)
        fn()
        fn()
    best: dict[str, float] = {}
    order = np.random.default_rng(0)
    names = list(engines)
    for _ in range(args.rounds):
        for i in order.permutation(len(names)):
            key = names[i]
            settle()  # the previous engine's spinning threads go idle first (peers.py)
            best[key] = min(best.get(key, math.inf), _median_ms(engines[key], args.repeat))
    peer = min((best[p] for p in PEERS if p in best), default=math.nan)
    row = {"model": name, "batch": batch, **best, "best_peer": peer, "err": err, "compile_s": compile_s}
    cells = [name, str(batch)] + [f"{best[k]:.1f}" if k in best else "-" for k in
                                  ("onnxruntime", "openvino", "glow_like", "nnpack+glow_like")]
    cells += [f"{best['glow_like'] / peer:.2f}",
              f"{best['nnpack+glow_like'] / peer:.2f}" if "nnpack+glow_like" in best else "-",
              f"{err:.1e}", f"{compile_s:.1f}"]
    print("| " + " | ".join(cells) + " |", flush=True)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(DEFAULT))
    parser.add_argument("--batch", type=int, action="append")
    parser.add_argument("--repeat", type=int, default=5, help="timed calls per round (median kept)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=0, help="threads of glow_like and the peers (0: all cores)")
    args = parser.parse_args()
    print(f"{cpu_count()} cores, load average {os.getloadavg()[0]:.2f}; OpenVINO {openvino_version()}; "
          f"threads per engine: {args.threads or cpu_count()}")
    for line in blas_lines():
        print(line)
    print("| model | N | ORT ms | OpenVINO ms | glow_like ms | [nnpack, glow_like] ms | glow_like / best peer "
          "| mixed / best peer | glow_like max rel err | glow_like lowering s |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    ratios = []
    for batch in args.batch or [1]:
        for name in args.models.split(","):
            row = bench_model(name, batch, args)
            if row is not None:
                ratios.append(row["glow_like"] / row["best_peer"])
    if ratios:
        geo = math.exp(sum(map(math.log, ratios)) / len(ratios))
        print(f"\ngeomean glow_like / best peer: {geo:.2f} (worst {max(ratios):.2f})")


if __name__ == "__main__":
    main()
