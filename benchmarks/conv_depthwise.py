"""Depthwise layers of MobileNetV2 (3x3), EfficientNet (5x5) and ConvNeXt (7x7), "same"
padding: nnpack's depthwise extension and
glow_like against ONNX Runtime, OpenVINO and PyTorch, one process, interleaved rounds (each
engine after a pause: the others' spinning threads go idle first), best time of each engine;
ratios against the best peer (run from benchmarks/conv.py).

``nnpack`` is the layer object (``lowerkit_nnpack.depthwise.DepthwiseConv2d``), the kernel
with its output; ``nnpack lowered`` and ``glow_like`` are one-layer modules through
``lowerkit.to_backend``, which add a call's checks and, for glow_like, copying the input into
its arena and the output out of it (on large planes, as much as the kernel)."""

from __future__ import annotations

import math
import time
import warnings
from collections.abc import Callable

import numpy as np

from lowerkit.backend.cpu import cpu_count
from lowerkit_nnpack.conv import RunOptions
from lowerkit_nnpack.depthwise import DepthwiseConv2d
from lowerkit_nnpack.geometry import ConvGeometry
from peers import conv_model, onnxruntime_runner, openvino_runner, settle

# (channels, spatial size, stride, kernel): MobileNetV2's 32x112x112, 144x56x56 and 960x7x7
# and two strided ones; EfficientNet-B0's 5x5 layers at 28x28, 14x14 stride 2 and 7x7;
# ConvNeXt-T's 7x7 at 14x14.
LAYERS = [(32, 112, 1, 3), (144, 56, 1, 3), (960, 7, 1, 3), (144, 56, 2, 3), (576, 14, 2, 3),
          (240, 28, 1, 5), (672, 14, 2, 5), (1152, 7, 1, 5), (384, 14, 1, 7)]
PEERS = ("onnxruntime", "openvino", "torch")


def _best(fn: Callable[[], object], budget: float, reps: int) -> float:
    fn()
    times: list[float] = []
    start = time.perf_counter()
    while len(times) < reps and (len(times) < 3 or time.perf_counter() - start < budget):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def _lowered(x: np.ndarray, w: np.ndarray, stride: int, pad: int, backend: str = "glow_like"):
    """The layer as a one-node module lowered to ``backend``, as a zero-argument call."""
    import lowerkit as lk
    from lowerkit.ir import Graph, GraphMethod, Module, TensorType
    from lowerkit.opset import get_schema

    c = x.shape[1]
    g = Graph()
    xv = g.add_input("x", TensorType("f32", x.shape))
    wv = g.add_node("param", [], [TensorType("f32", w.shape)], {"name": "w"}).output
    attrs = get_schema("conv2d").normalize_attrs({"stride": (stride, stride), "padding": (pad,) * 4, "groups": c})
    (t,) = get_schema("conv2d").infer([xv.type, wv.type], attrs)
    g.set_outputs([g.add_node("conv2d", [xv, wv], [t], attrs).output])
    for handle, node in enumerate(g.nodes):
        node.debug_handle = handle
    module = Module({"w": w}, {"forward": GraphMethod(g)}, name="Depthwise")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        lowered = lk.to_backend(module, backend)
    return lambda: lowered(x)


def _torch(x: np.ndarray, w: np.ndarray, stride: int, pad: int):
    try:
        import torch
    except ImportError:
        return None
    xt, wt = torch.from_numpy(x), torch.from_numpy(w)

    def run():
        with torch.no_grad():
            return torch.nn.functional.conv2d(xt, wt, stride=stride, padding=pad, groups=x.shape[1])

    return run


def depthwise_table(batches: list[int], args) -> None:
    cores = cpu_count()
    rng = np.random.default_rng(0)
    order = np.random.default_rng(3)
    cols = ["nnpack", "nnpack lowered", "glow_like", *PEERS]
    print(f"depthwise (kernel // 2 padding), microseconds (best of interleaved rounds), {cores} threads each; "
          "ratio = ours / best peer")
    header = ["layer", "N", "kernel", *cols, "nnpack/best", "lowered/best", "glow_like/best"]
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for c, hw, stride, k in LAYERS:
        w = (rng.standard_normal((c, 1, k, k)) * 0.3).astype(np.float32)
        pad = k // 2
        for n in batches:
            x = rng.standard_normal((n, c, hw, hw)).astype(np.float32)
            geom = ConvGeometry(c, c, (hw, hw), (k, k), (stride, stride), (pad,) * 4)
            nn = DepthwiseConv2d(geom, w, options=RunOptions(args.threads))
            engines = {"nnpack": lambda nn=nn, x=x: nn(x), "nnpack lowered": _lowered(x, w, stride, pad, "nnpack"),
                       "glow_like": _lowered(x, w, stride, pad)}
            model = conv_model(x.shape, w, stride, pad, groups=c)
            for name, make in (("onnxruntime", onnxruntime_runner), ("openvino", openvino_runner)):
                try:
                    fn = make(model, {"x": x}, cores)
                except ImportError:
                    fn = None
                if fn is not None:
                    engines[name] = fn
            tfn = _torch(x, w, stride, pad)
            if tfn is not None:
                engines["torch"] = tfn
            best: dict[str, float] = {}
            names = list(engines)
            for _ in range(args.rounds):
                for i in order.permutation(len(names)):
                    key = names[i]
                    settle()  # the previous engine's spinning threads go idle first (peers.py)
                    best[key] = min(best.get(key, math.inf), _best(engines[key], args.budget, args.reps))
            peer = min((best[p] for p in PEERS if p in best), default=math.nan)
            cells = [f"{k}x{k} {c}x{hw}x{hw} s{stride}", str(n), nn.algorithm]
            cells += [f"{best[k] * 1e6:.0f}" if k in best else "-" for k in cols]
            cells += [f"{best[k] / peer:.2f}" for k in ("nnpack", "nnpack lowered", "glow_like")]
            print("| " + " | ".join(cells) + " |", flush=True)
    print()
