"""Training-step benchmark: one lowerkit.autograd.Trainer step against PyTorch doing the same
SGD step (forward, cross-entropy, backward, update) from the same weights, in one process.

Models: the zoo's ResNet-18 (10 classes) and MobileNetV2 (small configuration) on 32x32
images, and the small CNN at 8x8. Plans: reference, glow_like and
["nnpack", "glow_like", "reference"]. Prints the median step time of each engine and its
ratio to PyTorch (> 1: lowerkit slower); threads are limited to --threads for everyone.

    python benchmarks/train_step.py --quick      # small CNN and ResNet-18, batch 8
    python benchmarks/train_step.py              # all models, batch 8 and 32
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import warnings
from pathlib import Path

import numpy as np
from threadpoolctl import threadpool_info, threadpool_limits

import lowerkit as lk
from lowerkit import models

PLANS = {"reference": "reference", "glow_like": "glow_like", "nnpack+glow_like+ref": ["nnpack", "glow_like", "reference"]}
CONFIGS = {  # name -> (builder kwargs, image size)
    "small_cnn": ({}, 8),
    "resnet18": ({"num_classes": 10}, 32),
    "mobilenet_v2": ({"num_classes": 10, "width_mult": 0.25, "depth_mult": 0.34}, 32),
}


def _twins():
    """tests/models/zoo_twins.py: the zoo's PyTorch twins (the repository root goes on sys.path)."""
    root = str(Path(__file__).resolve().parents[1])
    if root not in sys.path:
        sys.path.insert(0, root)
    from tests.models import zoo_twins

    return zoo_twins


def _median_time(fn, repeats: int) -> float:
    fn()  # warm-up (compiles, allocates)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def bench(name: str, batch: int, repeats: int) -> list[tuple[str, float]]:
    import torch

    kwargs, size = CONFIGS[name]
    model = models.get(name, **kwargs)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((batch, 3, size, size)).astype(np.float32)
    y = rng.integers(0, 10, batch)
    traced = lk.trace(model, x)
    rows = []
    twins = _twins()
    twin = twins.build_twin(name, kwargs)
    twins.load_weights(twin, model)
    twin.train()
    opt = torch.optim.SGD(twin.parameters(), lr=0.01, momentum=0.9)
    tx, ty = torch.from_numpy(x), torch.from_numpy(y)

    def torch_step():
        opt.zero_grad()
        torch.nn.functional.cross_entropy(twin(tx), ty).backward()
        opt.step()

    rows.append(("pytorch", _median_time(torch_step, repeats)))
    for label, plan in PLANS.items():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            trainer = lk.autograd.Trainer(traced, "cross_entropy", lk.autograd.SGD(lr=0.01, momentum=0.9),
                                          backend=plan)
        rows.append((label, _median_time(lambda: trainer.step(x, y), repeats)))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="small CNN and ResNet-18 at batch 8")
    parser.add_argument("--threads", type=int, default=1, help="BLAS/torch threads for every engine")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--model", choices=sorted(CONFIGS), action="append", help="only these models (repeatable)")
    args = parser.parse_args()
    import torch

    torch.set_num_threads(args.threads)
    names = args.model or (["small_cnn", "resnet18"] if args.quick else list(CONFIGS))
    batches = [8] if args.quick else [8, 32]
    with threadpool_limits(args.threads):
        blas = ", ".join(f"{i['internal_api']} {i.get('version')}" for i in threadpool_info())
        print(f"BLAS: {blas}; threads: {args.threads}; median of {args.repeats} steps\n")
        print(f"{'model':14} {'batch':>5}  {'engine':22} {'step ms':>9}  {'vs pytorch':>10}")
        for name in names:
            for batch in batches:
                rows = bench(name, batch, args.repeats)
                base = rows[0][1]
                for label, seconds in rows:
                    print(f"{name:14} {batch:>5}  {label:22} {seconds * 1e3:9.2f}  {seconds / base:9.2f}x")


if __name__ == "__main__":
    main()
