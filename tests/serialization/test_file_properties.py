"""Property tests: any tensor of any dtype and shape survives a file bit for bit."""

from __future__ import annotations

import numpy as np
import pytest

import lowerkit as lk
from lowerkit.ir import DTYPES, Graph, GraphMethod, Module, TensorType, graph_of

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from hypothesis.extra import numpy as hnp  # noqa: E402

_arrays = st.sampled_from(sorted(DTYPES)).flatmap(
    lambda short: hnp.arrays(
        DTYPES[short], hnp.array_shapes(min_dims=0, max_dims=4, min_side=0, max_side=4)
    )
)


def _holding(array: np.ndarray, attr: float) -> Module:
    g = Graph()
    t = TensorType.of(array)
    p = g.add_node("param", [], [t], {"name": "p"}, debug_handle=0).output
    k = g.add_node("constant", [], [t], {"value": array}, debug_handle=1).output
    x = g.add_input("x", TensorType("f32", (2,)))
    y = g.add_node("clip", [x], [x.type], {"min": attr, "max": attr}, debug_handle=2).output
    g.set_outputs([p, k, y])
    return Module({"p": array}, {"forward": GraphMethod(g, returns_tuple=True)}, name="Prop")


@settings(max_examples=60, deadline=None)
@given(_arrays, st.floats(allow_nan=True, allow_infinity=True))
def test_any_tensor_and_float_round_trips_bit_exactly(array, attr):
    module = _holding(array, attr)
    data = lk.dumps(module)
    loaded = lk.loads(data)
    got = loaded.parameters["p"]
    assert got.dtype == array.dtype and got.shape == array.shape
    assert got.tobytes() == np.ascontiguousarray(array).tobytes()
    value = graph_of(loaded).nodes[1].attrs["value"]
    assert value.dtype == array.dtype and value.tobytes() == np.ascontiguousarray(array).tobytes()
    clip_min = graph_of(loaded).nodes[2].attrs["min"]
    assert np.float64(clip_min).tobytes() == np.float64(attr).tobytes()
    assert lk.dumps(loaded) == data
