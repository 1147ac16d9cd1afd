"""Helpers for the ONNX tests: build small ONNX models and run them in ONNX Runtime."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402


def make_model(
    nodes: Sequence,
    inputs: Sequence[tuple[str, Sequence]],
    outputs: Sequence[tuple],
    initializers: dict[str, np.ndarray] | None = None,
    opset: int = 17,
    elem_type: int = TensorProto.FLOAT,
):
    """A checked ONNX model; dims may be ints or names (symbolic).

    ``outputs`` holds ``(name, shape)`` or ``(name, shape, elem_type)``; a shape of None is
    filled by ONNX shape inference.
    """
    graph = helper.make_graph(
        list(nodes),
        "test_graph",
        [helper.make_tensor_value_info(n, elem_type, list(s)) for n, s in inputs],
        [helper.make_tensor_value_info(o[0], o[2] if len(o) > 2 else elem_type, None if o[1] is None else list(o[1]))
         for o in outputs],
        [numpy_helper.from_array(a, n) for n, a in (initializers or {}).items()],
    )
    opsets = [helper.make_opsetid("", opset)]
    model = helper.make_model(graph, opset_imports=opsets)
    model.ir_version = helper.find_min_ir_version_for(opsets)
    model = onnx.shape_inference.infer_shapes(model, strict_mode=True)  # fills unknown output shapes
    onnx.checker.check_model(model)
    return model


def run_ort(model, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    ort = pytest.importorskip("onnxruntime")
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def rand(*shape: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
