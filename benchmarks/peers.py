"""Peer engines for the benchmarks: one ONNX model, run by ONNX Runtime and by OpenVINO.

Both return a no-argument callable running the model on fixed inputs, or None when the
peer is not installed. OpenVINO reads the same ONNX bytes (from a temporary file) and
compiles for CPU with the given thread count and the latency hint.
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Callable

import numpy as np


# Pause before each engine's block of timed calls. After a call, OpenBLAS's threads spin for
# their timeout (2^28 cycles, ~0.1 s) and ONNX Runtime's and OpenVINO's for theirs: without
# the pause an engine's block starts with the previous engine's spinning threads taking a
# core (measured: ONNX Runtime's MobileNetV2 4.6 ms right after glow_like, 3.1-3.3 ms rested).
SETTLE_S = 0.3


def settle() -> None:
    """Let the previous engine's spinning threads go idle before timing the next one."""
    time.sleep(SETTLE_S)


def conv_model(x_shape, w: np.ndarray, stride: int, pad: int, groups: int = 1):
    """A one-node ONNX model: Conv with the weight as an initializer."""
    from onnx import TensorProto, helper, numpy_helper

    oc, _, kh, kw = w.shape
    node = helper.make_node("Conv", ["x", "w"], ["y"], kernel_shape=[kh, kw], strides=[stride] * 2,
                            pads=[pad] * 4, group=groups)
    graph = helper.make_graph(
        [node], "conv", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x_shape))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [numpy_helper.from_array(w, "w")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = min(model.ir_version, 9)
    return model


def onnxruntime_runner(model, feed: dict[str, np.ndarray], threads: int) -> Callable[[], object] | None:
    try:
        import onnxruntime as ort
    except ImportError:
        return None
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return lambda: session.run(None, feed)


def openvino_runner(model, feed: dict[str, np.ndarray], threads: int) -> Callable[[], object] | None:
    """``openvino.Core().compile_model`` on the ONNX model, CPU plugin, fp32, ``threads`` threads."""
    try:
        import openvino as ov
    except ImportError:
        return None
    core = ov.Core()
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "model.onnx")
        with open(path, "wb") as f:
            f.write(model.SerializeToString())
        compiled = core.compile_model(path, "CPU", {"INFERENCE_NUM_THREADS": threads, "PERFORMANCE_HINT": "LATENCY",
                                                     "INFERENCE_PRECISION_HINT": "f32"})
    request = compiled.create_infer_request()
    inputs = list(feed.values())
    return lambda: request.infer(inputs)


def openvino_version() -> str:
    try:
        import openvino as ov
    except ImportError:
        return "not installed"
    return ov.__version__


def blas_lines(*, paths: bool = False) -> list[str]:
    """What does the GEMMs: every BLAS library loaded (kernel architecture, threads) and the
    ``cblas_sgemm`` lowerkit's compiled kernels call (MKL's or numpy's, jit.cblas)."""
    from threadpoolctl import threadpool_info

    lines = []
    try:
        from lowerkit.backend.cpu.jit import cblas

        found = cblas.sgemm()  # chosen now, so a library it loads is listed below
        why = cblas.why_not_mkl()
        lines.append(f"compiled kernels' sgemm: {found.library if found else 'none'}" + (f" ({why})" if why else ""))
    except ImportError:  # no numba/threadpoolctl: no compiled kernels
        pass
    for info in threadpool_info():
        where = f" ({info.get('filepath')})" if paths else f" ({info.get('user_api')})"
        lines.insert(-1 if lines else 0, f"BLAS: {info.get('internal_api')} {info.get('version')} "
                                         f"kernel={info.get('architecture')} threads={info.get('num_threads')}{where}")
    return lines
