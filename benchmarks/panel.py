"""The panel GEMM (``lowerkit.backend.cpu.panels``) against sgemm + the epilogue pass, on the
zoo's convolution GEMM shapes, one thread and a two-thread team region.

    python benchmarks/panel.py                 # every shape, 1 and 2 threads
    python benchmarks/panel.py --threads 1 --shapes 512x4608x49,960x160x49

Each shape is ``out[M, N] = relu6(w[M, K] @ x[K, N] + bias)`` (M output channels, K input
channels x taps, N pixels). Engines, same process, interleaved rounds, best call:

- ``panel``: ``PackedWeight.run`` (one thread) / ``run_team`` (a team region): the image is
  copied into 16-column strips where a call covers at least ``jit.panel.PACK_PANELS`` panels;
- ``in place``: the same kernel given no scratch, so it reads the image where it lies;
- ``sgemm``: one thread ``np.matmul`` at one BLAS thread then bias and clip in numpy; two
  threads ``jit.team.gemm_bias_activation`` (sgemm bands in a team region, epilogue fused per
  band) — what a layer runs where ``panels.fits`` says no.

Prints GFLOP/s (2MNK / best time) and the ratios; never asserts a timing.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import numpy as np
from threadpoolctl import threadpool_limits

from lowerkit.backend.cpu import blas_limit, jit, make_team, panels
from peers import blas_lines

SHAPES = [
    (512, 4608, 49), (2048, 512, 49), (960, 160, 49), (1152, 192, 49), (320, 960, 49),
    (1024, 256, 196), (256, 2304, 196), (576, 96, 196), (96, 576, 196),
    (144, 24, 3136), (24, 144, 3136), (96, 16, 12544), (64, 147, 12544),
]
RELU6 = (2, 0.0, 6.0)  # jit.activation_code of a clip to [0, 6]
NO_RESIDUAL = np.empty((0, 0), np.float32)  # the kernels' residual argument: none


def best(fn: Callable[[], object], calls: int) -> float:
    fn()
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def engines(m: int, k: int, n: int, threads: int, team) -> tuple[dict[str, Callable[[], object]], list]:
    rng = np.random.default_rng(0)
    w = rng.standard_normal((m, k)).astype(np.float32)
    x = rng.standard_normal((k, n)).astype(np.float32)
    bias = rng.standard_normal(m).astype(np.float32)
    packed = panels.PackedWeight.of(w, bias)
    kernels, none = packed.kernels, np.empty(0, np.float32)
    outs = [np.empty((m, n), np.float32) for _ in range(3)]
    if threads == 1:
        def sgemm():
            np.matmul(w, x, out=outs[2])
            np.clip(outs[2] + bias[:, None], 0.0, 6.0, out=outs[2])

        return {
            "panel": lambda: packed.run(x, outs[0], RELU6),
            "in place": lambda: kernels.gemm(packed.panels, packed.bias, x, outs[1], none, k, m, packed.columns,
                                             *RELU6, 0, packed.count, 0, n, NO_RESIDUAL),
            "sgemm": sgemm,
        }, outs
    tk = team.kernels()
    return {
        "panel": lambda: packed.run_team(x, outs[0], RELU6, threads),
        "in place": lambda: kernels.team_gemm(packed.panels, packed.bias, x, outs[1], none, k, m, packed.columns,
                                              *RELU6, threads, n >= m, NO_RESIDUAL),
        "sgemm": lambda: tk.gemm_bias_activation(w, x, bias, outs[2], *RELU6, threads, m <= 64 and k >= 2 * m,
                                                 team.sgemm),
    }, outs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, nargs="*", default=[1, 2])
    parser.add_argument("--shapes", help="MxKxN,... (default: the zoo shapes above)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--calls", type=int, default=25)
    args = parser.parse_args()
    shapes = SHAPES if not args.shapes else [tuple(int(v) for v in s.split("x")) for s in args.shapes.split(",")]
    for line in blas_lines():
        print(line)
    panel_kernels = jit.load("panel")
    print(f"image copied into strips from {panel_kernels.PACK_PANELS} panels ({6 * panel_kernels.PACK_PANELS} "
          f"rows of the weight) and {panel_kernels.PACK_INPUTS} inputs")
    print(f"{'threads':>7} {'M x K x N':>16} {'panel':>7} {'in place':>9} {'sgemm':>7}   GFLOP/s;"
          "  panel/in place  panel/sgemm")
    for threads in args.threads:
        team = make_team(threads) if threads > 1 else None
        if threads > 1 and team is None:
            print(f"no team regions here: {threads} threads skipped")
            continue
        limit = threadpool_limits(1) if threads == 1 else blas_limit(1)
        with limit:
            for m, k, n in shapes:
                fns, outs = engines(m, k, n, threads, team)
                times = {name: float("inf") for name in fns}
                for _ in range(args.rounds):
                    for name, fn in fns.items():
                        times[name] = min(times[name], best(fn, args.calls))
                for out in outs[1:]:
                    np.testing.assert_allclose(out, outs[0], rtol=1e-3, atol=1e-3 * np.sqrt(k))
                gf = {name: 2 * m * k * n / t / 1e9 for name, t in times.items()}
                print(f"{threads:>7} {f'{m}x{k}x{n}':>16} {gf['panel']:7.1f} {gf['in place']:9.1f} {gf['sgemm']:7.1f}"
                      f"   {times['in place'] / times['panel']:14.2f} {times['sgemm'] / times['panel']:12.2f}")


if __name__ == "__main__":
    main()
