"""Winograd F(4x4, 3x3)'s compiled input and output transforms (``lowerkit.backend.cpu.jit.
winograd``), each of their forms on the same arrays, one thread: what ``winograd_input`` and
``winograd_output`` choose between where vectors hold 16 floats (``VECTOR_FORMS``).

    python benchmarks/winograd_transforms.py                       # the ResNets' maps
    python benchmarks/winograd_transforms.py --shapes 1x64x56,4x256x14 --rounds 50

Each shape is ``images x channels x side`` (a square map, padding 1, ReLU; the output
transform with a residual where ``--residual``): a batch slice's four images or a head's one
image. The forms' outputs are compared bit for bit before they are timed; rounds alternate the
forms, each call right after the same call (hot caches). Prints each form's median and best
µs and its median ratio to the planes form; never asserts a timing. The register forms
compile for any CPU, but only run inside a model where ``VECTOR_FORMS`` is true.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from lowerkit.backend.cpu import input_scratch_floats, jit, output_group_tiles
from lowerkit.backend.cpu.jit.vectors import host_full_width

SHAPES = [(1, 64, 112), (1, 64, 56), (4, 64, 56), (1, 128, 28), (4, 128, 28), (1, 256, 14), (4, 256, 14),
          (1, 512, 7), (4, 512, 7)]
INPUT_FORMS = ("planes", "gathered", "rows")
OUTPUT_FORMS = ("planes", "rows")
RELU = (1, 0.0, 0.0)


def _timed(calls: dict, rounds: int) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {name: [] for name in calls}
    for _ in range(rounds):
        for name, call in calls.items():
            call()
            start = time.perf_counter()
            call()
            times[name].append(time.perf_counter() - start)
    return times


def input_calls(kernels, images: int, channels: int, side: int) -> dict:
    """Each input form's call on one seeded map; their results agree bit for bit."""
    x = np.random.default_rng(0).standard_normal((images, channels, side, side)).astype(np.float32)
    th = tw = -(-side // 4)
    calls, results = {}, []
    for form in INPUT_FORMS:
        v = np.empty((36, channels, images * th * tw), np.float32)
        scratch = np.zeros(input_scratch_floats(th, tw), np.float32)
        fn = getattr(kernels, f"winograd_input_{form}")
        calls[form] = lambda fn=fn, v=v, scratch=scratch: fn(x, v, 1, 1, th, tw, 0, images, 0, channels, scratch)
        calls[form]()
        results.append(v)
    for v in results[1:]:
        np.testing.assert_array_equal(v, results[0])
    return calls


def output_calls(kernels, images: int, channels: int, side: int, residual: bool) -> dict:
    """Each output form's call on one seeded product; their results agree bit for bit."""
    rng = np.random.default_rng(1)
    th = tw = -(-side // 4)
    m = rng.standard_normal((36, channels, images * th * tw)).astype(np.float32)
    bias = rng.standard_normal(channels).astype(np.float32)
    added = (rng.standard_normal((images, channels, side, side)).astype(np.float32) if residual
             else np.empty((0, 0, 0, 0), np.float32))
    group = output_group_tiles(tw)
    s, y = np.empty((6, 4, group), np.float32), np.empty((4, 4, group), np.float32)
    calls, results = {}, []
    for form in OUTPUT_FORMS:
        out = np.empty((images, channels, side, side), np.float32)
        fn = getattr(kernels, f"winograd_output_{form}")
        calls[form] = lambda fn=fn, out=out: fn(m, bias, out, 0, channels, 0, images, th, tw, *RELU, s, y, added)
        calls[form]()
        results.append(out)
    for out in results[1:]:
        np.testing.assert_array_equal(out, results[0])
    return calls


def _report(label: str, times: dict[str, list[float]]) -> None:
    base = times["planes"]
    cells = []
    for name, t in times.items():
        ratio = statistics.median(b / a for a, b in zip(base, t))
        cells.append(f"{name} {statistics.median(t) * 1e6:7.0f} / {min(t) * 1e6:7.0f} ({ratio:.2f})")
    print(f"{label:>24}  " + "  ".join(cells), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shapes", help="IMAGESxCHANNELSxSIDE,... (default: the ResNets' maps above)")
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--residual", action="store_true", help="the output transform adds a residual")
    args = parser.parse_args()
    shapes = SHAPES if not args.shapes else [tuple(int(v) for v in s.split("x")) for s in args.shapes.split(",")]
    kernels = jit.load("winograd")
    from llvmlite import binding

    print(f"CPU {binding.get_host_cpu_name()}; 16-float vectors at full width: {host_full_width()} "
          f"(the register forms run inside models: {kernels.VECTOR_FORMS}); one thread; µs median / best "
          f"(median ratio to the planes form) of {args.rounds} rounds")
    for images, channels, side in shapes:
        label = f"{images}x{channels}x{side}"
        _report(f"input {label}", _timed(input_calls(kernels, images, channels, side), args.rounds))
        out_label = f"output {label}{' +res' if args.residual else ''}"
        _report(out_label, _timed(output_calls(kernels, images, channels, side, args.residual), args.rounds))


if __name__ == "__main__":
    main()
