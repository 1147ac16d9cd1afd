"""An inverted-residual block (1x1 expansion, 3x3 depthwise, 1x1 projection) in bands of
output rows (``lowerkit.backend.cpu.mbconv``, ``jit.mbconv``) against its three layers run one
after the other on the same compiled kernels (the panel GEMM, the depthwise row kernel), one
thread, one image: what the runtime's block binding changes for a layer's worth of work.

    python benchmarks/mbconv_blocks.py                    # MobileNetV2's blocks, cache flushed
    python benchmarks/mbconv_blocks.py --hot --rounds 50  # each call right after the same call

Each block is ``cin->cexp->cout@side/stride`` (ReLU6 after the expansion and the depthwise
layer, a residual add where the shapes allow). Both forms' outputs are checked against a
float64 reference first. Before each timed call, unless ``--hot``, a 16 MB array is written
(the layer's data then comes from memory or L3, as inside a model); rounds alternate the
forms. Prints each form's median and best µs and the median ratio block / layers; never
asserts a timing. The block's kernels compile for any CPU, but the backends bind blocks only
where vectors hold 16 floats (``jit.select.rows_wanted``).
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from lowerkit.backend.cpu import jit, mbconv, panels
from lowerkit.backend.cpu.jit.vectors import host_full_width

# MobileNetV2's blocks on maps of at least two bands: cin, cexp, cout, side, stride
BLOCKS = [(16, 96, 24, 112, 2), (24, 144, 24, 56, 1), (24, 144, 32, 56, 2), (32, 192, 32, 28, 1),
          (32, 192, 64, 28, 2), (64, 384, 64, 14, 1), (96, 576, 96, 14, 1)]
RELU6 = (jit.activation_code({"act": "clip", "act_min": 0.0, "act_max": 6.0}))
NONE = (0, 0.0, 0.0)


def _parse(spec: str) -> tuple[int, int, int, int, int]:
    channels, _, geometry = spec.partition("@")
    side, _, stride = geometry.partition("/")
    cin, cexp, cout = (int(c) for c in channels.split("->"))
    return cin, cexp, cout, int(side), int(stride or 1)


def forms(cin: int, cexp: int, cout: int, side: int, stride: int) -> dict:
    """The two forms' calls on one seeded block, both checked against float64."""
    rng = np.random.default_rng(0)
    oh = (side - 1) // stride + 1
    x = rng.standard_normal((1, cin, side, side)).astype(np.float32)
    we = (rng.standard_normal((cexp, cin)) / np.sqrt(cin)).astype(np.float32)
    be = (0.1 * rng.standard_normal(cexp)).astype(np.float32)
    wd = (rng.standard_normal((cexp, 1, 3, 3)) / 3).astype(np.float32)
    bd = (0.1 * rng.standard_normal(cexp)).astype(np.float32)
    wp = (rng.standard_normal((cout, cexp)) / np.sqrt(cexp)).astype(np.float32)
    bp = (0.1 * rng.standard_normal(cout)).astype(np.float32)
    residual = rng.standard_normal((1, cout, oh, oh)).astype(np.float32) if stride == 1 and cin == cout else None
    expand, project = panels.PackedWeight.of(we, be), panels.PackedWeight.of(wp, bp)
    expanded = np.empty((1, cexp, side, side), np.float32)
    depthwise = np.empty((1, cexp, oh, oh), np.float32)
    layers_out, block_out = np.empty((1, cout, oh, oh), np.float32), np.empty((1, cout, oh, oh), np.float32)
    dw_scratch = np.empty(jit.load("dwrows").rows_scratch((side, side), (oh, oh), 3, stride), np.float32)
    conv = jit.load("conv")
    no_means = np.empty(0, np.float32)

    def layers() -> None:
        expand.run(x.reshape(cin, -1), expanded.reshape(cexp, -1), RELU6)
        conv.depthwise_rows(expanded, wd, bd, dw_scratch, depthwise, no_means, stride, 1, 1, *RELU6, 0, cexp)
        project.run(depthwise.reshape(cexp, -1), layers_out.reshape(cout, -1), NONE,
                    None if residual is None else residual.reshape(cout, -1))

    block = mbconv.InvertedResidual.of(we, be, wd, bd, wp, bp, stride, (*RELU6, *RELU6, *NONE), side, oh)
    scratch = np.empty(block.scratch_floats(), np.float32)
    banded = block.bind(x, block_out, residual, scratch)
    want = _reference(x, we, be, wd, bd, wp, bp, residual, stride, oh)
    for call, out in ((layers, layers_out), (banded, block_out)):
        call()
        np.testing.assert_allclose(out[0], want, rtol=1e-4, atol=1e-4)
    return {"layers": layers, "block": banded}


def _reference(x, we, be, wd, bd, wp, bp, residual, stride, oh) -> np.ndarray:
    e = np.clip(np.einsum("ek,khw->ehw", we.astype(np.float64), x[0]) + be[:, None, None], 0, 6)
    ep = np.pad(e, ((0, 0), (1, 1), (1, 1)))
    d = np.zeros((e.shape[0], oh, oh)) + bd[:, None, None]
    for i in range(3):
        for j in range(3):
            d += wd[:, 0, i, j, None, None] * ep[:, i:i + stride * (oh - 1) + 1:stride, j:j + stride * (oh - 1) + 1:stride]
    o = np.einsum("oe,ehw->ohw", wp.astype(np.float64), np.clip(d, 0, 6)) + bp[:, None, None]
    return o if residual is None else o + residual[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--blocks", help="comma list of cin->cexp->cout@side/stride (default: MobileNetV2's)")
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--hot", action="store_true", help="no cache flush before the timed calls")
    args = parser.parse_args()
    blocks = [_parse(s) for s in args.blocks.split(",")] if args.blocks else BLOCKS
    junk = np.zeros(4 << 20, np.float32)  # 16 MB
    print(f"one thread, one image, {'hot' if args.hot else 'cache flushed (16 MB written) before each call'}; "
          f"16-float vectors here: {host_full_width()}; {args.rounds} rounds, µs median / best")
    print("| block | layers | block | block / layers |\n|---|---|---|---|")
    for spec in blocks:
        calls = forms(*spec)
        times: dict[str, list[float]] = {name: [] for name in calls}
        for _ in range(args.rounds):
            for name, call in calls.items():
                if args.hot:
                    call()
                else:
                    junk += 1.0
                start = time.perf_counter()
                call()
                times[name].append(time.perf_counter() - start)
        ratio = statistics.median(b / a for a, b in zip(times["layers"], times["block"]))
        cells = [f"{statistics.median(t) * 1e6:.0f} / {min(t) * 1e6:.0f}" for t in times.values()]
        cin, cexp, cout, side, stride = spec
        print(f"| {cin}->{cexp}->{cout}@{side}/{stride} | {cells[0]} | {cells[1]} | {ratio:.2f} |")


if __name__ == "__main__":
    main()
