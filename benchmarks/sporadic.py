"""Calls spaced apart: zoo models (batch 1 by default) with an idle pause before every call, as
a service answering requests one by one sees them, beside ONNX Runtime and OpenVINO in one
process.

The yardstick (``model.py --yardstick``) keeps each engine's best of back-to-back calls. Here
every call comes ``--gap`` seconds after the previous one, so every engine's threads have gone
to sleep and must be woken; the figures are medians and 90th percentiles of the single calls.
Each engine runs its calls in ``--rounds`` blocks (no other engine between two of its calls,
as in a process serving one model), the blocks of the engines interleaved in a new seeded
order each round. ``--unpinned`` adds a second glow_like handle whose calls run with the team
workers' and the pool workers' affinity set back to every CPU and the calling thread left
unpinned (``LOWERKIT_TEAM_PINNING=0`` for its block; all pinned again after it), for the
same-run comparison with the default, pinned threads (``lowerkit.backend.cpu.pin_team_workers``
and ``lowerkit.backend.cpu.pool``); the same calling thread, since a second thread starting
team regions would slow every region of the process. A batch of several images runs as batch
slices on the pool where the handle chooses them. Only same-run ratios mean anything on a
shared machine.

    python benchmarks/sporadic.py                         # the four yardstick models, 0.3 s apart
    python benchmarks/sporadic.py --model mobilenet_v2 --gap 0.05 --calls 60 --unpinned
    python benchmarks/sporadic.py --model mobilenet_v3_small --batch 8 --gap 0.05 --unpinned
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
import warnings
from collections.abc import Callable

import numpy as np

import lowerkit as lk
from lowerkit import models
from lowerkit.backend.cpu import PINNING_ENV, cpu_count
from peers import blas_lines, openvino_version
from yardstick import DEFAULT_MODELS, SerialCalls, _peers

UNPINNED = "glow_like, workers unpinned"


def _pinned_threads() -> dict[int, set[int]]:
    """This process's threads whose affinity is one CPU of several: the calling thread's team
    workers, pinned on its first call (``pin_team_workers``), and the pool's workers, by
    thread id."""
    allowed = os.sched_getaffinity(0)
    found = {}
    for task in os.listdir("/proc/self/task"):
        try:
            cpus = os.sched_getaffinity(int(task))
        except OSError:  # the thread ended meanwhile
            continue
        if len(cpus) == 1 and len(allowed) > 1:
            found[int(task)] = cpus
    return found


def _lowered(module: lk.Module, x: np.ndarray, backends) -> Callable[[], object]:
    """A call of ``module`` lowered to ``backends`` on ``x``."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        lowered = lk.to_backend(module, backends)
    return lambda: lowered(x)


def run(name: str, *, batch: int, gap: float, calls: int, rounds: int, threads: int, unpinned: bool,
        serial: SerialCalls) -> tuple[dict[str, list[float]], dict[str, int]]:
    """Seconds of each engine's calls, each after ``gap`` seconds idle, in ``rounds`` blocks
    per engine, and how many of them ran on serial forms (the handle's stall guard off)."""
    x = models.example_input(name, batch=batch)
    module = lk.trace(models.get(name), x)
    peers, notes = _peers(module, x, threads)
    for engine, note in notes.items():
        print(f"  {engine}: {note}")
    engines = {**peers, "glow_like": _lowered(module, x, "glow_like"),
               "[nnpack, glow_like]": _lowered(module, x, ["nnpack", "glow_like"])}
    workers: dict[int, set[int]] = {}
    if unpinned:
        # The same calling thread, so the same team workers: one process's regions slow down
        # by half once a second thread starts regions too (its own OpenMP workers; measured).
        engines[UNPINNED] = _lowered(module, x, "glow_like")  # a handle of its own: its own stall guard
        engines["glow_like"]()
        workers = _pinned_threads()
        if not workers:
            raise SystemExit("--unpinned: no pinned workers here (LOWERKIT_TEAM_PINNING=0, or neither team nor pool)")
    everywhere = os.sched_getaffinity(0)
    for fn in engines.values():  # warm-up: buffers bound, kernels loaded, workers started
        for _ in range(3):
            fn()
    times: dict[str, list[float]] = {e: [] for e in engines}
    on_serial = dict.fromkeys(engines, 0)
    order = np.random.default_rng(1)
    names = list(engines)
    for round_ in range(rounds):
        for i in order.permutation(len(names)):
            engine = names[i]
            if engine == UNPINNED:
                setting = os.environ.get(PINNING_ENV)
                os.environ[PINNING_ENV] = "0"  # the calling thread stays unpinned too
                for tid in workers:
                    os.sched_setaffinity(tid, everywhere)
            for _ in range(calls // rounds + (round_ < calls % rounds)):
                time.sleep(gap)
                before = serial.count
                start = time.perf_counter()
                engines[engine]()
                times[engine].append(time.perf_counter() - start)
                on_serial[engine] += serial.count - before
            if engine == UNPINNED:
                if setting is None:
                    del os.environ[PINNING_ENV]
                else:
                    os.environ[PINNING_ENV] = setting
                for tid, cpus in workers.items():
                    os.sched_setaffinity(tid, cpus)
    return times, on_serial


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", action="append", help="a zoo model (repeatable; default: the yardstick's four)")
    parser.add_argument("--batch", type=int, default=1, help="images a call")
    parser.add_argument("--gap", type=float, default=0.3, help="idle seconds before every call")
    parser.add_argument("--calls", type=int, default=30, help="timed calls per engine")
    parser.add_argument("--rounds", type=int, default=3, help="blocks of calls per engine, engines interleaved")
    parser.add_argument("--threads", type=int, default=0, help="peer threads (0: all cores)")
    parser.add_argument("--unpinned", action="store_true", help="also glow_like with unpinned team workers")
    args = parser.parse_args()
    threads = args.threads or cpu_count()
    print(f"machine: {cpu_count()} CPUs; OpenVINO {openvino_version()}; peers on {threads} threads; "
          f"batch {args.batch}; {args.calls} calls per engine, each after {args.gap} s idle")
    for line in blas_lines():
        print(line)
    serial = SerialCalls()
    print("\n| model | engine | median ms | p90 ms | median / best peer's | calls on serial forms |\n"
          "|---|---|---|---|---|---|")
    for name in args.model or DEFAULT_MODELS:
        times, on_serial = run(name, batch=args.batch, gap=args.gap, calls=args.calls, rounds=args.rounds, threads=threads, unpinned=args.unpinned,
                               serial=serial)
        medians = {e: statistics.median(t) * 1e3 for e, t in times.items()}
        peer = min((medians[p] for p in ("onnxruntime", "openvino") if p in medians), default=float("nan"))
        for engine, t in times.items():
            p90 = float(np.percentile(t, 90)) * 1e3
            print(f"| {name} | {engine} | {medians[engine]:.2f} | {p90:.2f} | {medians[engine] / peer:.2f}x "
                  f"| {on_serial[engine]} |", flush=True)


if __name__ == "__main__":
    main()
