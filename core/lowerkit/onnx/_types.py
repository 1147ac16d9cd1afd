"""ONNX element types and lowerkit dtype short names."""

from __future__ import annotations

# TensorProto.DataType values (fixed by the ONNX spec) for the dtypes lowerkit has.
ONNX_TO_DTYPE: dict[int, str] = {
    1: "f32",  # FLOAT
    2: "u8",  # UINT8
    3: "i8",  # INT8
    6: "i32",  # INT32
    7: "i64",  # INT64
    9: "bool",  # BOOL
    10: "f16",  # FLOAT16
    11: "f64",  # DOUBLE
}
DTYPE_TO_ONNX: dict[str, int] = {v: k for k, v in ONNX_TO_DTYPE.items()}


def onnx_type_name(elem_type: int) -> str:
    """The ONNX spelling of an element type (``FLOAT``), for messages."""
    from onnx import TensorProto

    try:
        return TensorProto.DataType.Name(elem_type)
    except ValueError:
        return f"<element type {elem_type}>"
