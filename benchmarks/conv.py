"""Convolution benchmark: nnpack algorithms vs ONNX Runtime, PyTorch and a numpy im2col+GEMM baseline.

Runs every engine in one process on the ResNet-18 / VGG 3x3 layers (64..512 channels,
56x56..7x7), a 1x1 and a stride-2 layer, at batch 1 and 8, and prints effective GFLOP/s
(direct-convolution FLOPs 2*N*OC*OH*OW*IC*KH*KW over the best time) and ratios. Then the
stride-1 gradient kernels against PyTorch's CPU backward.

    python benchmarks/conv.py --quick      # a minute: batch 1, four layers
    python benchmarks/conv.py              # full table (a few minutes on 2 cores)
    python benchmarks/conv.py --markdown   # the same, as the tables in docs/nnpack.md
    python benchmarks/conv.py --quick --no-dense --no-gradients   # the depthwise table only
    python benchmarks/conv.py --no-depthwise --no-gradients --layers stem   # the stems only

Every table has ONNX Runtime and OpenVINO columns (the same one-node ONNX model; see peers.py).
Two nnpack figures per row: ``auto`` is the kernel API (``lowerkit_nnpack.conv.Conv2d``, its
work split over the thread pool), ``lowered`` the one-convolution module lowered to nnpack —
what a user's lowered model runs for that layer (a team region at batch 1, batch slices on the
workers at batch 8), call overhead included. The issue-14 target is read from ``lowered``.
The depthwise table (MobileNet/EfficientNet layers) compares nnpack's depthwise extension and
glow_like (a lowered one-conv module, call overhead included) with the peers.
"""

from __future__ import annotations

import argparse
import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from threadpoolctl import threadpool_limits

import lowerkit as lk
from lowerkit import nn
from lowerkit.backend.cpu import cpu_count
from lowerkit_nnpack.algorithms import check_algorithm
from lowerkit_nnpack.conv import Conv2d, RunOptions
from lowerkit_nnpack.geometry import ConvGeometry, GeometryError
from lowerkit_nnpack.grad import Conv2dInputGrad, Conv2dWeightGrad
from lowerkit_nnpack.selection import nnpack_rules
from conv_depthwise import depthwise_table
from peers import blas_lines, conv_model, onnxruntime_runner, openvino_runner, openvino_version, settle

ALGORITHMS = ("wt8x8", "wt6x6", "wt4x4", "ft8x8", "ft16x16", "implicit_gemm", "direct")


@dataclass(frozen=True)
class Layer:
    name: str
    c: int
    oc: int
    hw: int
    k: int
    stride: int = 1

    @property
    def pad(self) -> int:
        return self.k // 2

    def geometry(self) -> ConvGeometry:
        p = self.pad
        return ConvGeometry(self.c, self.oc, (self.hw, self.hw), (self.k, self.k), (self.stride,) * 2, (p,) * 4)


LAYERS = [
    Layer("resnet18 conv2_x 3x3", 64, 64, 56, 3),
    Layer("resnet18 conv3_x 3x3", 128, 128, 28, 3),
    Layer("resnet18 conv4_x 3x3", 256, 256, 14, 3),
    Layer("resnet18 conv5_x 3x3", 512, 512, 7, 3),
    Layer("vgg conv3 3x3", 256, 256, 56, 3),
    Layer("vgg conv4 3x3", 512, 512, 28, 3),
    Layer("vgg conv5 3x3", 512, 512, 14, 3),
    Layer("resnet18 1x1 256->256", 256, 256, 14, 1),
    Layer("resnet18 downsample 1x1/2", 64, 128, 56, 1, 2),
    Layer("resnet18 conv3_1 3x3/2", 64, 128, 56, 3, 2),
    Layer("resnet stem 7x7/2", 3, 64, 224, 7, 2),  # direct on the packed weight (lowerkit.backend.cpu.direct)
    Layer("mobilenet_v2 stem 3x3/2", 3, 32, 224, 3, 2),
]
QUICK = [LAYERS[0], LAYERS[2], LAYERS[3], LAYERS[8]]


def timeit(fn: Callable[[], object], budget: float, reps: int) -> float:
    """Best seconds per call: 1 warm-up, then up to ``reps`` calls within ``budget`` seconds.

    The minimum, not the median: on a machine shared with other jobs the minimum is the
    measurement least disturbed by them, for every engine alike.
    """
    fn()
    times: list[float] = []
    start = time.perf_counter()
    while len(times) < reps and (len(times) < 3 or time.perf_counter() - start < budget):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return float(np.min(times))


def im2col_baseline(x: np.ndarray, w: np.ndarray, stride: int, pad: int) -> np.ndarray:
    """The plain numpy convolution: pad, im2col via sliding windows (a copy), one GEMM per batch."""
    n, c, _, _ = x.shape
    oc, _, kh, kw = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    win = np.lib.stride_tricks.sliding_window_view(xp, (kh, kw), axis=(2, 3))[:, :, ::stride, ::stride]
    oh, ow = win.shape[2], win.shape[3]
    cols = win.transpose(1, 4, 5, 0, 2, 3).reshape(c * kh * kw, n * oh * ow)
    out = w.reshape(oc, -1) @ cols
    return out.reshape(oc, n, oh, ow).transpose(1, 0, 2, 3)


def onnxruntime_conv(x: np.ndarray, w: np.ndarray, stride: int, pad: int, threads: int):
    """A one-node ONNX model (Conv, weight as initializer) in an ONNX Runtime session, or None."""
    try:
        run = onnxruntime_runner(conv_model(x.shape, w, stride, pad), {"x": x}, threads)
    except ImportError:
        return None
    return run


def openvino_conv(x: np.ndarray, w: np.ndarray, stride: int, pad: int, threads: int):
    """The same one-node ONNX model compiled by OpenVINO's CPU plugin, or None."""
    try:
        return openvino_runner(conv_model(x.shape, w, stride, pad), {"x": x}, threads)
    except ImportError:
        return None


def lowered_conv(x: np.ndarray, w: np.ndarray, stride: int, pad: int, backend: str = "nnpack"):
    """A one-convolution lowerkit module (traced from ``lowerkit.nn.Conv2d``, no bias) lowered
    to ``backend``: the plan a lowered model runs for this layer, call overhead included."""
    oc, c, kh, _ = w.shape
    conv = nn.Conv2d(c, oc, kh, stride=stride, padding=pad, bias=False)
    conv.weight = w
    module = lk.to_backend(lk.trace(conv, x), backend)
    return lambda: module(x)


def torch_module():
    try:
        import torch
    except ImportError:
        return None
    return torch


def serving(geom: ConvGeometry) -> list[str]:
    names = []
    for name in ALGORITHMS:
        try:
            check_algorithm(name, geom)
            names.append(name)
        except GeometryError:
            pass
    return names


def geomean(values: list[float]) -> float:
    values = [v for v in values if v > 0 and math.isfinite(v)]
    return math.exp(sum(map(math.log, values)) / len(values)) if values else float("nan")


def forward_table(layers: list[Layer], batches: list[int], args) -> list[dict]:
    cores = cpu_count()
    torch = torch_module()
    if torch is not None:
        torch.set_num_threads(cores)
    rows = []
    rng = np.random.default_rng(0)
    order_rng = np.random.default_rng(2)
    for layer in layers:
        geom = layer.geometry()
        w = rng.standard_normal((layer.oc, layer.c, layer.k, layer.k)).astype(np.float32) * 0.05
        for n in batches:
            x = rng.standard_normal((n, layer.c, layer.hw, layer.hw)).astype(np.float32)
            flops = geom.flops(n)
            row: dict = {"layer": layer.name, "shape": f"{layer.c}->{layer.oc} {layer.hw}x{layer.hw} k{layer.k}/s{layer.stride}", "batch": n}
            gf = lambda seconds: flops / seconds / 1e9  # noqa: E731
            # (column, callable, BLAS thread limit or None). Every engine is timed in each
            # of --rounds rounds, interleaved, and keeps its best: a burst of load from
            # other jobs then costs one round of one engine, not the engine's only sample.
            engines: list[tuple[str, Callable[[], object], int | None]] = []
            for name in serving(geom) + ["auto"]:
                conv = Conv2d(geom, w, algorithm=name, options=RunOptions(args.threads), batch_hint=n)
                engines.append((name, (lambda c: lambda: c(x))(conv), None))
                if name == "auto":
                    row["auto_is"] = conv.algorithm
            engines.append(("lowered", lowered_conv(x, w, layer.stride, layer.pad), None))
            for blas in sorted({1, cores}):
                engines.append(("im2col", lambda: im2col_baseline(x, w, layer.stride, layer.pad), blas))
            ort = onnxruntime_conv(x, w, layer.stride, layer.pad, cores)
            if ort is not None:
                engines.append(("onnxruntime", ort, None))
            ov = openvino_conv(x, w, layer.stride, layer.pad, cores)
            if ov is not None:
                engines.append(("openvino", ov, None))
            if torch is not None:
                xt, wt = torch.from_numpy(x), torch.from_numpy(w)

                def torch_conv(xt=xt, wt=wt, stride=layer.stride, pad=layer.pad):
                    with torch.no_grad():
                        return torch.nn.functional.conv2d(xt, wt, stride=stride, padding=pad)

                engines.append(("torch", torch_conv, None))
            # Each round visits the engines in a new (seeded) order: an engine that leaves
            # spinning BLAS or OpenMP threads behind then slows a different neighbour each
            # round instead of always the same one.
            for _ in range(args.rounds):
                for index in order_rng.permutation(len(engines)):
                    key, fn, blas = engines[index]
                    settle()  # the previous engine's spinning threads go idle first (peers.py)
                    if blas is None:
                        value = gf(timeit(fn, args.budget, args.reps))
                    else:
                        with threadpool_limits(blas, user_api="blas"):
                            value = gf(timeit(fn, args.budget, args.reps))
                    row[key] = max(row.get(key, 0.0), value)
            row.setdefault("onnxruntime", float("nan"))
            row.setdefault("openvino", float("nan"))
            row.setdefault("torch", float("nan"))
            row["nnpack_rules_is"] = nnpack_rules(geom)
            row["nnpack_rules"] = row[row["nnpack_rules_is"]]
            rows.append(row)
            print_row(row, args.markdown)
    return rows


COLUMNS = ["wt8x8", "wt6x6", "wt4x4", "ft8x8", "ft16x16", "implicit_gemm", "direct", "auto", "lowered", "im2col",
           "onnxruntime", "openvino", "torch"]
RATIOS = (("auto", "im2col"), ("auto", "onnxruntime"), ("auto", "openvino"), ("auto", "torch"),
          ("lowered", "onnxruntime"), ("lowered", "openvino"))
SHORT = {"im2col": "im2col", "onnxruntime": "ORT", "openvino": "OV", "torch": "torch"}


def print_header(markdown: bool) -> None:
    names = [f"{a[0] if a == 'auto' else 'low'}/{SHORT[b]}" for a, b in RATIOS]
    cols = ["layer", "N", "auto is"] + COLUMNS + names
    if markdown:
        print("| " + " | ".join(cols) + " |")
        print("|" + "---|" * len(cols))
    else:
        print(f"{'layer':<44} {'N':>2} {'auto is':>13} " + " ".join(f"{c[:9]:>9}" for c in COLUMNS[:-4])
              + f" {'im2col':>7} {'ORT':>7} {'OV':>7} {'torch':>7} " + " ".join(f"{n:>8}" for n in names))


def print_row(row: dict, markdown: bool) -> None:
    def fmt(v) -> str:
        return "-" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.1f}"

    ratios = [row[a] / row[b] for a, b in RATIOS]
    name = f"{row['layer']} ({row['shape']})"
    if markdown:
        cells = [name, str(row["batch"]), row["auto_is"]] + [fmt(row.get(c)) for c in COLUMNS] + [f"{r:.2f}" for r in ratios]
        print("| " + " | ".join(cells) + " |")
    else:
        print(f"{name[:44]:<44} {row['batch']:>2} {row['auto_is']:>13} "
              + " ".join(f"{fmt(row.get(c)):>9}" for c in COLUMNS[:-4])
              + f" {fmt(row['im2col']):>7} {fmt(row['onnxruntime']):>7} {fmt(row['openvino']):>7} {fmt(row['torch']):>7}"
              + " " + " ".join(f"{r:>8.2f}" for r in ratios), flush=True)


def gradient_table(layers: list[Layer], batch: int, args) -> None:
    torch = torch_module()
    rng = np.random.default_rng(1)
    print()
    header = ["layer", "N", "input grad nnpack", "input grad torch", "ratio", "weight grad nnpack", "weight grad torch", "ratio"]
    if args.markdown:
        print("| " + " | ".join(header) + " |")
        print("|" + "---|" * len(header))
    else:
        print("gradients (GFLOP/s, stride-1 3x3 layers): " + ", ".join(header))
    for layer in layers:
        if layer.stride != 1 or layer.k != 3:
            continue
        geom = layer.geometry()
        flops = geom.flops(batch)
        w = rng.standard_normal((layer.oc, layer.c, 3, 3)).astype(np.float32)
        x = rng.standard_normal((batch, layer.c, layer.hw, layer.hw)).astype(np.float32)
        dy = rng.standard_normal((batch, layer.oc, *geom.out_hw)).astype(np.float32)
        dgrad = Conv2dInputGrad(geom, w, options=RunOptions(args.threads))
        wgrad = Conv2dWeightGrad(geom, options=RunOptions(args.threads))
        ours_in = flops / timeit(lambda: dgrad(dy), args.budget, args.reps) / 1e9
        ours_w = flops / timeit(lambda: wgrad(x, dy), args.budget, args.reps) / 1e9
        theirs_in = theirs_w = float("nan")
        if torch is not None:
            wt, xt, dyt = torch.from_numpy(w), torch.from_numpy(x), torch.from_numpy(dy)
            theirs_in = flops / timeit(lambda: torch.nn.grad.conv2d_input(x.shape, wt, dyt, padding=1), args.budget, args.reps) / 1e9
            theirs_w = flops / timeit(lambda: torch.nn.grad.conv2d_weight(xt, w.shape, dyt, padding=1), args.budget, args.reps) / 1e9
        cells = [f"{layer.name} ({layer.c}->{layer.oc} {layer.hw}x{layer.hw})", str(batch),
                 f"{ours_in:.1f}", f"{theirs_in:.1f}", f"{ours_in / theirs_in:.2f}",
                 f"{ours_w:.1f}", f"{theirs_w:.1f}", f"{ours_w / theirs_w:.2f}"]
        print(("| " + " | ".join(cells) + " |") if args.markdown else "  ".join(cells), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="batch 1, four layers, short budget")
    parser.add_argument("--markdown", action="store_true", help="print Markdown tables")
    parser.add_argument("--threads", type=int, default=0, help="nnpack pool threads (0: all cores)")
    parser.add_argument("--reps", type=int, default=15, help="max timed calls per measurement")
    parser.add_argument("--budget", type=float, default=0.5, help="seconds per measurement (after 3 calls)")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds per row; each engine keeps its best")
    parser.add_argument("--no-gradients", action="store_true")
    parser.add_argument("--no-dense", action="store_true", help="skip the dense-convolution table")
    parser.add_argument("--no-depthwise", action="store_true", help="skip the depthwise table")
    parser.add_argument("--layers", default="", help="only the dense layers whose name contains this text")
    args = parser.parse_args()
    if args.quick:
        args.reps, args.budget, args.rounds = min(args.reps, 5), min(args.budget, 0.3), min(args.rounds, 2)
    layers, batches = (QUICK, [1]) if args.quick else (LAYERS, [1, 8])
    layers = [layer for layer in layers if args.layers in layer.name]

    print(f"cores: {cpu_count()}  load: {os.getloadavg()}  OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE', '<unset>')}")
    for line in blas_lines(paths=True):
        print(line)
    print("effective GFLOP/s = 2*N*OC*OH*OW*IC*KH*KW / best time over interleaved rounds; "
          "im2col = best of BLAS 1 and all-core threads")
    print(f"OpenVINO {openvino_version()} (CPU plugin, fp32, latency hint)")
    print()
    if not args.no_depthwise:
        depthwise_table([1] if args.quick else [1, 8], args)
    if args.no_dense:
        return
    print_header(args.markdown)
    rows = forward_table(layers, batches, args)
    three = [r for r in rows if "3x3" in r["layer"] and "/2" not in r["layer"]]
    print()
    if three:  # (none where --layers left no stride-1 3x3 row)
        for label, key in (("im2col", "im2col"), ("ONNX Runtime", "onnxruntime"), ("OpenVINO", "openvino"),
                           ("torch", "torch")):
            print(f"geomean auto/{label} over the stride-1 3x3 rows: {geomean([r['auto'] / r[key] for r in three]):.2f}")
        for label, key in (("ONNX Runtime", "onnxruntime"), ("OpenVINO", "openvino")):
            ratios = [r["lowered"] / r[key] for r in three]
            lowest = min((v for v in ratios if math.isfinite(v)), default=float("nan"))
            print(f"geomean lowered/{label} over the stride-1 3x3 rows: {geomean(ratios):.2f} (lowest {lowest:.2f})")
    print(f"geomean auto/ONNX Runtime over all rows: {geomean([r['auto'] / r['onnxruntime'] for r in rows]):.2f}")
    print(f"geomean auto (measured policy) / NNPACK's published rules over all rows: "
          f"{geomean([r['auto'] / r['nnpack_rules'] for r in rows]):.2f}")
    if not args.no_gradients:
        gradient_table(layers, 1 if args.quick else 8, args)


if __name__ == "__main__":
    main()
