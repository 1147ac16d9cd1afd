"""glow_like alone vs ``[nnpack, glow_like]`` with the default (priority) plan, same run.

Issue 14's target for the mixed plan: never slower than the faster single backend by more
than 5%. Both engines are lowered from one traced module, warmed up, then timed in
interleaved rounds (best call each); the ratio mixed / glow_like is what counts on a
shared machine. Also prints the mixed plan's region count.

    python benchmarks/mixed_plan.py --batch 1 --batch 8 --rounds 3
    python benchmarks/mixed_plan.py --model mobilenet_v2 --batch 1
    python benchmarks/mixed_plan.py --batch 1 --batch 8 --pairs 60

``--pairs N`` times the two engines call by call instead (their order alternating) and
prints the median of the N per-pair ratios with its quartiles: on a host whose speed moves
by tens of percent for seconds at a time, a slow phase then slows both calls of a pair,
where the best call of each engine can fall in different phases.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import lowerkit as lk
from lowerkit import models
from peers import settle

ZOO = ("resnet18", "resnet50", "mobilenet_v2", "efficientnet_b0")


def best_ms(engines: dict, x, rounds: int, calls: int) -> dict[str, float]:
    """Best call of each engine over interleaved rounds (after two warm-up calls each)."""
    best = {name: float("inf") for name in engines}
    for engine in engines.values():
        for _ in range(2):
            engine(x)
    for _ in range(rounds):
        for name, engine in engines.items():
            settle()  # the previous engine's spinning threads go idle first (peers.py)
            for _ in range(calls):
                start = time.perf_counter()
                engine(x)
                best[name] = min(best[name], (time.perf_counter() - start) * 1e3)
    return best


def paired_ratios(engines: dict, x, pairs: int) -> tuple[np.ndarray, dict[str, float]]:
    """mixed / glow_like of ``pairs`` pairs of consecutive calls (the order alternating), and
    each engine's best call in ms (after two warm-up calls each)."""
    glow, mixed = engines["glow_like"], engines["mixed"]
    for engine in (glow, mixed):
        for _ in range(2):
            engine(x)
    ratios, best = [], {"glow_like": float("inf"), "mixed": float("inf")}
    for i in range(pairs):
        seconds = {}
        for name in (("glow_like", "mixed") if i % 2 == 0 else ("mixed", "glow_like")):
            start = time.perf_counter()
            engines[name](x)
            seconds[name] = time.perf_counter() - start
            best[name] = min(best[name], seconds[name] * 1e3)
        ratios.append(seconds["mixed"] / seconds["glow_like"])
    return np.array(ratios), best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", action="append", help=f"zoo model (default: {', '.join(ZOO)})")
    parser.add_argument("--batch", type=int, action="append", help="batch size (default: 1)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--calls", type=int, default=4, help="calls per engine per round")
    parser.add_argument("--pairs", type=int, help="time call by call: the median of this many per-pair ratios")
    args = parser.parse_args()
    if args.pairs:
        print("| model | N | glow_like best ms | [nnpack, glow_like] best ms | mixed / glow_like, median of pairs "
              "(quartiles) | regions |")
    else:
        print("| model | N | glow_like ms | [nnpack, glow_like] ms | mixed / glow_like | regions |")
    print("|---|---|---|---|---|---|")
    for batch in args.batch or [1]:
        for name in args.model or ZOO:
            x = models.example_input(name, batch=batch)
            module = lk.trace(models.get(name), x)
            engines = {"glow_like": lk.to_backend(module, "glow_like"),
                       "mixed": lk.to_backend(module, ["nnpack", "glow_like"])}
            regions = len(engines["mixed"].partition_report().regions)
            if args.pairs:
                ratios, best = paired_ratios(engines, x, args.pairs)
                q1, median, q3 = np.percentile(ratios, [25, 50, 75])
                print(f"| {name} | {batch} | {best['glow_like']:.1f} | {best['mixed']:.1f} | "
                      f"{median:.3f}x ({q1:.3f}-{q3:.3f}) | {regions} |", flush=True)
                continue
            best = best_ms(engines, x, args.rounds, args.calls)
            print(f"| {name} | {batch} | {best['glow_like']:.1f} | {best['mixed']:.1f} | "
                  f"{best['mixed'] / best['glow_like']:.2f}x | {regions} |", flush=True)


if __name__ == "__main__":
    main()
