"""Single-thread ``sgemm`` on the zoo's convolution GEMM shapes: numpy's BLAS (``np.matmul``
and its ``cblas_sgemm`` through ctypes) against MKL's sequential ``cblas_sgemm`` — the two
libraries :mod:`lowerkit.backend.cpu.jit.cblas` chooses between for the compiled kernels'
GEMMs (each team band is one such single-thread call).

    python benchmarks/sgemm.py            # needs MKL (pip install mkl) for its column

Each shape is ``C[M, N] = A[M, K] @ B[K, N]`` (row-major: M output channels, K = input
channels x kernel taps, N output pixels), timed hot (the same operands every call) and cold
(weights rotated over 12 copies, as in a model where every layer's weights come from memory);
best of 5 rounds, GFLOP/s = 2MNK / time. Same process, interleaved.

The 1x1 shapes also run as a one-node ``Conv`` on ONNX Runtime and OpenVINO at one thread
(hot; their call overhead and NCHW in/out included): is the GEMM itself behind the peers?
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable

import numpy as np
from threadpoolctl import threadpool_limits

from lowerkit.backend.cpu.jit import cblas
from lowerkit.backend.cpu.jit.cblas import NO_TRANS, ROW_MAJOR
from peers import blas_lines, conv_model, onnxruntime_runner, openvino_runner

# (what, M, K, N): ResNet 3x3 layers at 56..7 (im2col), MobileNetV2 / EfficientNet 1x1 layers, the stems
SHAPES = [
    ("ResNet 3x3 64ch 56x56", 64, 576, 3136),
    ("ResNet 3x3 128ch 28x28", 128, 1152, 784),
    ("ResNet 3x3 256ch 14x14", 256, 2304, 196),
    ("ResNet 3x3 512ch 7x7", 512, 4608, 49),
    ("MobileNetV2 expand 24->144 56x56", 144, 24, 3136),
    ("MobileNetV2 project 384->64 14x14", 64, 384, 196),
    ("MobileNetV2 expand 160->960 7x7", 960, 160, 49),
    ("MobileNetV2 project 96->576 band 14x14", 288, 96, 196),
    ("MobileNetV2 expand 16->96 112x112", 96, 16, 12544),
    ("MobileNetV2 project 576->96 14x14", 96, 576, 196),
    ("stem 3x3/2 3->32 (K=27)", 32, 27, 12544),
    ("ResNet stem 7x7/2 3->64 (K=147)", 64, 147, 12544),
]


def best_us(calls: list[Callable[[], object]], rounds: int = 5, budget_s: float = 0.05) -> float:
    """Best per-call time over rounds of the calls in turn (each round ~``budget_s``)."""
    for call in calls:
        call()
    start = time.perf_counter()
    calls[0]()
    reps = max(1, int(budget_s / max(time.perf_counter() - start, 1e-6) / len(calls)))
    best = float("inf")
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(reps):
            for call in calls:
                call()
        best = min(best, (time.perf_counter() - start) / reps / len(calls))
    return best * 1e6


def ctypes_sgemm(found: cblas.Sgemm, a: np.ndarray, b: np.ndarray, c: np.ndarray) -> Callable[[], None]:
    m, k = a.shape
    n = b.shape[1]
    fn = found.function
    return lambda: fn(ROW_MAJOR, NO_TRANS, NO_TRANS, m, n, k, 1.0, a.ctypes.data, k, b.ctypes.data, n, 0.0,
                      c.ctypes.data, n)


def main() -> None:
    print(f"cores: {os.cpu_count()}  load: {os.getloadavg()[0]:.2f}  one thread per GEMM")
    numpy_blas = cblas._find_numpy()
    mkl = cblas._find_mkl()
    for line in blas_lines():
        print(line)
    if mkl is None:
        print(f"MKL column skipped: {cblas.why_not_mkl()}")
    print("\n| shape | M x K x N | numpy matmul us (GF/s) | numpy cblas cold us | MKL hot us (GF/s) | MKL cold us "
          "| MKL / numpy, cold | ORT 1x1 Conv us | OpenVINO 1x1 Conv us | numpy / best peer, hot |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    rng = np.random.default_rng(0)
    with threadpool_limits(1):
        for what, m, k, n in SHAPES:
            weights = [rng.standard_normal((m, k)).astype(np.float32) for _ in range(12)]
            b = rng.standard_normal((k, n)).astype(np.float32)
            c = np.empty((m, n), np.float32)
            flops = 2.0 * m * k * n
            hot = best_us([lambda: np.matmul(weights[0], b, out=c)])
            numpy_cold = best_us([ctypes_sgemm(numpy_blas, w, b, c) for w in weights])
            cells = [f"{hot:.0f} ({flops / hot / 1e3:.0f})", f"{numpy_cold:.0f}"]
            if mkl is not None:
                mkl_hot = best_us([ctypes_sgemm(mkl, weights[0], b, c)])
                mkl_cold = best_us([ctypes_sgemm(mkl, w, b, c) for w in weights])
                np.testing.assert_allclose(c, weights[-1] @ b, rtol=1e-3, atol=1e-3 * np.sqrt(k))
                cells += [f"{mkl_hot:.0f} ({flops / mkl_hot / 1e3:.0f})", f"{mkl_cold:.0f}",
                          f"{mkl_cold / numpy_cold:.2f}"]
            else:
                cells += ["-", "-", "-"]
            cells += _pointwise_peers(what, m, k, n, weights[0], b, hot)
            print(f"| {what} | {m}x{k}x{n} | " + " | ".join(cells) + " |", flush=True)


def _pointwise_peers(what: str, m: int, k: int, n: int, a: np.ndarray, b: np.ndarray, numpy_us: float) -> list[str]:
    """ONNX Runtime's and OpenVINO's one-thread times for a 1x1 shape as a Conv node, and numpy / the faster."""
    side = int(round(n ** 0.5))
    if "3x3" in what or "7x7/2" in what or side * side != n:
        return ["-", "-", "-"]
    x = np.ascontiguousarray(b.reshape(1, k, side, side))
    model = conv_model(x.shape, np.ascontiguousarray(a.reshape(m, k, 1, 1)), 1, 0)
    times = []
    for runner in (onnxruntime_runner, openvino_runner):
        run = runner(model, {"x": x}, 1)
        times.append(best_us([run]) if run is not None else None)
    cells = [f"{t:.0f}" if t is not None else "not installed" for t in times]
    known = [t for t in times if t is not None]
    return cells + ([f"{numpy_us / min(known):.2f}"] if known else ["-"])


if __name__ == "__main__":
    main()
