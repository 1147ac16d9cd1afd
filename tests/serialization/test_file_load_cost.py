"""Load memory is linear in the file size, within the bound docs/file-format.md states."""

from __future__ import annotations

import gc
import tracemalloc

import numpy as np

import lowerkit
from lowerkit.ir import Graph, GraphMethod, Module, TensorType

# docs/file-format.md: peak (traced) memory of a load <= NODE_BOUND x file size for
# node-dense graphs, <= WEIGHT_BOUND x file size for parameter-dense files.
NODE_BOUND = 24
WEIGHT_BOUND = 4


def _peak(data: bytes) -> int:
    gc.collect()
    tracemalloc.start()
    try:
        obj = lowerkit.loads(data)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    del obj
    return peak


def _relu_chain(n: int) -> bytes:
    graph = Graph()
    t = TensorType("f32", (4,))
    value = graph.add_input("x", t)
    for i in range(n):
        value = graph.add_node("relu", [value], [t], debug_handle=i).output
    graph.set_outputs([value])
    return lowerkit.dumps(Module({}, {"forward": GraphMethod(graph)}, name="Chain"))


def test_a_long_chain_loads_in_memory_linear_in_its_size():
    small, large = _relu_chain(2_000), _relu_chain(20_000)
    small_ratio, large_ratio = _peak(small) / len(small), _peak(large) / len(large)
    assert large_ratio <= NODE_BOUND
    assert large_ratio <= small_ratio * 1.25  # no growth per byte: linear


def test_a_weight_heavy_file_loads_within_a_few_times_its_size():
    graph = Graph()
    t = TensorType("f32", (512, 512))
    x = graph.add_input("x", t)
    w = graph.add_node("param", [], [t], {"name": "w"}, debug_handle=0).output
    graph.set_outputs([graph.add_node("add", [x, w], [t], debug_handle=1).output])
    data = lowerkit.dumps(Module({"w": np.ones((512, 512), np.float32)}, {"forward": GraphMethod(graph)}))
    assert _peak(data) <= WEIGHT_BOUND * len(data)


def test_a_large_extra_map_loads_in_memory_linear_in_its_size():
    from lowerkit.lowering.lowered import DelegateRecord, LoweredModule

    base = lowerkit.to_backend(lowerkit.loads(_relu_chain(1)), "reference").record

    def fat(n: int) -> bytes:
        extra = {f"key{i:08d}": f"value{i}" for i in range(n)}
        record = DelegateRecord(base.backend, base.distribution, base.version, base.compile_spec,
                                base.payload, base.signatures, base.original, base.name, extra)
        return lowerkit.dumps(LoweredModule.uncompiled(record))

    data = fat(50_000)
    assert lowerkit.loads(data).record.extra["key00049999"] == "value49999"
    assert _peak(data) <= NODE_BOUND * len(data)
