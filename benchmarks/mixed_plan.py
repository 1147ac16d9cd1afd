"""glow_like alone vs ``[nnpack, glow_like]`` with the default (priority) plan, same run.

Issue 14's target for the mixed plan: never slower than the faster single backend by more
than 5%. Both engines are lowered from one traced module, warmed up, then timed in
interleaved rounds (best call each); the ratio mixed / glow_like is what counts on a
shared machine. Also prints the mixed plan's region count.

    python benchmarks/mixed_plan.py --batch 1 --batch 8 --rounds 3
    python benchmarks/mixed_plan.py --model mobilenet_v2 --batch 1
"""

from __future__ import annotations

import argparse
import time

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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", action="append", help=f"zoo model (default: {', '.join(ZOO)})")
    parser.add_argument("--batch", type=int, action="append", help="batch size (default: 1)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--calls", type=int, default=4, help="calls per engine per round")
    args = parser.parse_args()
    print("| model | N | glow_like ms | [nnpack, glow_like] ms | mixed / glow_like | regions |")
    print("|---|---|---|---|---|---|")
    for batch in args.batch or [1]:
        for name in args.model or ZOO:
            x = models.example_input(name, batch=batch)
            module = lk.trace(models.get(name), x)
            engines = {"glow_like": lk.to_backend(module, "glow_like"),
                       "mixed": lk.to_backend(module, ["nnpack", "glow_like"])}
            regions = len(engines["mixed"].partition_report().regions)
            best = best_ms(engines, x, args.rounds, args.calls)
            print(f"| {name} | {batch} | {best['glow_like']:.1f} | {best['mixed']:.1f} | "
                  f"{best['mixed'] / best['glow_like']:.2f}x | {regions} |", flush=True)


if __name__ == "__main__":
    main()
