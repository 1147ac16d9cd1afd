"""Load cost against file size: time and peak memory of ``lowerkit.loads``.

Two shapes of file grow with ``n``: a chain of ``n`` relu nodes (the graph dominates) and
a lowered module with an ``extra`` map of ``n`` entries (the record dominates). For each
size the script prints the file size, the load time, the peak memory tracemalloc sees
during the load, and both divided by the file size: flat ratios mean linear cost.

    python benchmarks/load_cost.py                 # 10k, 100k, 1M
    python benchmarks/load_cost.py --sizes 10000 50000 --no-extra

Peak memory comes from tracemalloc (Python and numpy allocations; protobuf's C++ parse
buffers are not traced), time from a run without tracemalloc (it slows allocation down).
"""

from __future__ import annotations

import argparse
import gc
import time
import tracemalloc

import numpy as np

import lowerkit
from lowerkit.ir import Graph, GraphMethod, Module, TensorType


def relu_chain(n: int) -> Module:
    """``forward(x)`` = relu applied ``n`` times to a 4-element vector."""
    graph = Graph()
    t = TensorType("f32", (4,))
    value = graph.add_input("x", t)
    for i in range(n):
        value = graph.add_node("relu", [value], [t], debug_handle=i).output
    graph.set_outputs([value])
    return Module({}, {"forward": GraphMethod(graph)}, name="Chain")


def extra_map(n: int) -> bytes:
    """A reference-lowered tiny module whose record carries ``n`` ``extra`` entries."""
    from lowerkit.lowering.lowered import DelegateRecord, LoweredModule

    lowered = lowerkit.to_backend(relu_chain(1), "reference")
    record = lowered.record
    extra = {f"key{i:08d}": f"value{i}" for i in range(n)}
    fat = DelegateRecord(
        record.backend, record.distribution, record.version, record.compile_spec,
        record.payload, record.signatures, record.original, record.name, extra,
    )
    return lowerkit.dumps(LoweredModule.uncompiled(fat))


def measure(data: bytes) -> tuple[float, int]:
    """(seconds, peak traced bytes) of one ``lowerkit.loads(data)``."""
    gc.collect()
    start = time.perf_counter()
    obj = lowerkit.loads(data)
    seconds = time.perf_counter() - start
    del obj
    gc.collect()
    tracemalloc.start()
    obj = lowerkit.loads(data)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    del obj
    return seconds, peak


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000, 1_000_000])
    parser.add_argument("--no-extra", action="store_true", help="skip the extra-map files")
    args = parser.parse_args()
    print(f"{'file':>12} {'n':>9} {'bytes':>11} {'load s':>8} {'us/KB':>7} {'peak MB':>8} {'peak/size':>9}")
    kinds = [("relu chain", lambda n: lowerkit.dumps(relu_chain(n)))]
    if not args.no_extra:
        kinds.append(("extra map", extra_map))
    for label, make in kinds:
        for n in args.sizes:
            data = make(n)
            seconds, peak = measure(data)
            print(
                f"{label:>12} {n:>9} {len(data):>11} {seconds:>8.2f} "
                f"{seconds * 1e6 / (len(data) / 1024):>7.1f} {peak / 2**20:>8.1f} {peak / len(data):>9.2f}"
            )


if __name__ == "__main__":
    np.seterr(all="ignore")
    main()
