"""Whole-model benchmark: ResNet-18 on glow_like (each opt level, and int8), on
["nnpack", "glow_like"], on reference, on ONNX Runtime and on PyTorch, same weights, one process.

ONNX Runtime gets an ONNX graph built with onnx.helper from the lowerkit module; PyTorch
runs the same graph op by op with torch.nn.functional under inference_mode (what the
equivalent torch model's forward does). Prints the median latency, each ratio to ONNX
Runtime, the glow_like memory-plan numbers and the BLAS kernel in use.

    python benchmarks/model.py              # batch 1 and 8 (a few minutes on 2 cores)
    python benchmarks/model.py --batch 1    # batch 1 only
    python benchmarks/model.py --repeat 5   # fewer timed runs
    python benchmarks/model.py --int8-accuracy   # int8 vs fp32 accuracy on random inputs
    python benchmarks/model.py --instructions    # glow_like opt 2, per instruction, 2 workers vs 1
"""

from __future__ import annotations

import argparse
import statistics
import time
import warnings
from collections.abc import Callable

import numpy as np
from threadpoolctl import threadpool_info

import lowerkit as lk
from lowerkit import graph_of, models


class Timing(float):
    """Median latency in ms (the float value), with the best run kept as ``best``."""

    best: float


def median_ms(fn: Callable[[], object], repeat: int, warmup: int = 2) -> Timing:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    result = Timing(statistics.median(times) * 1e3)
    result.best = min(times) * 1e3
    return result


# -- ONNX export of the (traced) lowerkit graph ---------------------------------------------------
def to_onnx(module: lk.Module):
    """An ONNX model computing ``module.forward`` (the ops a traced ResNet uses)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    graph = graph_of(module, "forward")
    names = {id(v): v.name for v in graph.inputs}
    nodes, inits = [], []

    def init(name: str, array: np.ndarray) -> str:
        inits.append(numpy_helper.from_array(np.ascontiguousarray(array), name))
        return name

    for node in graph.nodes:
        out = node.output.name
        names[id(node.output)] = out
        ins = [names[id(v)] for v in node.inputs]
        a = node.attrs
        if node.op == "param":
            init(out, module.parameters[a["name"]])
        elif node.op == "constant":
            init(out, a["value"])
        elif node.op == "conv2d":
            nodes.append(helper.make_node("Conv", ins, [out], strides=list(a["stride"]), pads=list(a["padding"]),
                                          dilations=list(a["dilation"]), group=a["groups"]))
        elif node.op == "batch_norm":
            x, mean, var, w, b = ins
            nodes.append(helper.make_node("BatchNormalization", [x, w, b, mean, var], [out], epsilon=a["eps"]))
        elif node.op in ("relu", "add"):
            nodes.append(helper.make_node(node.op.capitalize(), ins, [out]))
        elif node.op == "max_pool2d":
            nodes.append(helper.make_node("MaxPool", ins, [out], kernel_shape=list(a["kernel_size"]),
                                          strides=list(a["stride"]), pads=list(a["padding"]),
                                          ceil_mode=int(a["ceil_mode"])))
        elif node.op == "global_avg_pool2d":
            nodes.append(helper.make_node("GlobalAveragePool", ins, [out]))
        elif node.op == "flatten" and a["end_dim"] in (-1, node.inputs[0].type.rank - 1):
            nodes.append(helper.make_node("Flatten", ins, [out], axis=a["start_dim"]))
        elif node.op == "linear":
            nodes.append(helper.make_node("Gemm", ins, [out], transB=1))
        else:
            raise NotImplementedError(f"benchmark ONNX export: no mapping for {node.op}")
    io = lambda v: helper.make_tensor_value_info(names[id(v)], TensorProto.FLOAT, list(v.type.shape))  # noqa: E731
    g = helper.make_graph(nodes, "forward", [io(v) for v in graph.inputs], [io(v) for v in graph.outputs], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


# -- PyTorch, same weights ---------------------------------------------------------------------
def torch_runner(module: lk.Module):
    """A function running ``module.forward`` with torch.nn.functional on torch tensors."""
    import torch
    import torch.nn.functional as F

    graph = graph_of(module, "forward")
    params = {k: torch.from_numpy(np.array(v)) for k, v in module.parameters.items()}

    def pads(p):  # symmetric padding only, as ResNet uses
        top, left, bottom, right = p
        assert (top, left) == (bottom, right)
        return (top, left)

    def run(x: torch.Tensor) -> torch.Tensor:
        env = {id(graph.inputs[0]): x}
        for node in graph.nodes:
            a = node.attrs
            ins = [env[id(v)] for v in node.inputs]
            if node.op == "param":
                y = params[a["name"]]
            elif node.op == "conv2d":
                y = F.conv2d(*ins, stride=a["stride"], padding=pads(a["padding"]), dilation=a["dilation"],
                             groups=a["groups"])
            elif node.op == "batch_norm":
                x_, mean, var, w, b = ins
                y = F.batch_norm(x_, mean, var, w, b, training=False, eps=a["eps"])
            elif node.op == "relu":
                y = F.relu(ins[0])
            elif node.op == "add":
                y = ins[0] + ins[1]
            elif node.op == "max_pool2d":
                y = F.max_pool2d(ins[0], a["kernel_size"], a["stride"], pads(a["padding"]), ceil_mode=a["ceil_mode"])
            elif node.op == "global_avg_pool2d":
                y = F.adaptive_avg_pool2d(ins[0], 1)
            elif node.op == "flatten":
                y = torch.flatten(ins[0], a["start_dim"], a["end_dim"])
            elif node.op == "linear":
                y = F.linear(*ins)
            else:
                raise NotImplementedError(f"benchmark torch runner: no mapping for {node.op}")
            env[id(node.output)] = y
        return env[id(graph.outputs[0])]

    return run


def bench_batch(batch: int, repeat: int, with_int8: bool) -> None:
    x = models.example_input("resnet18", batch=batch)
    module = lk.trace(models.resnet18(), x)
    expected = None
    rows: list[tuple[str, float | None, str]] = []

    try:
        import onnxruntime as ort

        so = ort.SessionOptions()
        sess = ort.InferenceSession(to_onnx(module).SerializeToString(), so, providers=["CPUExecutionProvider"])
        expected = sess.run(None, {graph_of(module).inputs[0].name: x})[0]
        feed = {graph_of(module).inputs[0].name: x}
        rows.append(("onnxruntime", median_ms(lambda: sess.run(None, feed), repeat), "default threads"))
        so1 = ort.SessionOptions()
        so1.intra_op_num_threads = 1
        sess1 = ort.InferenceSession(to_onnx(module).SerializeToString(), so1, providers=["CPUExecutionProvider"])
        rows.append(("onnxruntime, 1 thread", median_ms(lambda: sess1.run(None, feed), repeat), "intra_op_num_threads=1"))
    except ImportError as err:
        rows.append(("onnxruntime", None, f"skipped: {err}"))

    try:
        import torch

        run = torch_runner(module)
        tx = torch.from_numpy(x)
        with torch.inference_mode():
            got = run(tx).numpy()
            rows.append(("pytorch (F ops, same weights)", median_ms(lambda: run(tx), repeat),
                         f"threads={torch.get_num_threads()}"))
        expected = got if expected is None else expected
    except ImportError as err:
        rows.append(("pytorch", None, f"skipped: {err}"))

    if expected is None:
        expected = module(x)

    def check(out) -> str:
        err = float(np.abs(out - expected).max() / np.abs(expected).max())
        return f"max rel err {err:.1e}"

    plans = {}
    for level in (0, 1, 2):
        lowered = lk.to_backend(module, "glow_like", {"forward": {"opt_level": level}})
        rows.append((f"glow_like opt {level}", median_ms(lambda: lowered(x), repeat),
                     f"{check(lowered(x))}; default threads (one intra-op worker per CPU)"))
        plans[level] = lowered
    for threads, note in ((1, "single-threaded BLAS"), ("blas", "OpenBLAS's own threads")):
        lowered = lk.to_backend(module, "glow_like", {"forward": {"opt_level": 2, "threads": threads}})
        rows.append((f"glow_like opt 2, threads={threads!r}", median_ms(lambda: lowered(x), repeat),
                     f"{check(lowered(x))}; {note}"))
    if with_int8:
        import lowerkit_glow_like as glow

        rng = np.random.default_rng(1)
        calib = [rng.standard_normal(x.shape).astype(np.float32) for _ in range(4)]
        profile = glow.calibrate(module, calib, progress=False)
        q = lk.to_backend(module, "glow_like", {"forward": {"precision": "int8", "profile": profile}})
        rows.append(("glow_like int8 (opt 2)", median_ms(lambda: q(x), max(3, repeat // 2)), check(q(x)) + " (quantized)"))
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            mixed = lk.to_backend(module, ["nnpack", "glow_like"])
        rows.append(('["nnpack", "glow_like"]', median_ms(lambda: mixed(x), repeat), check(mixed(x))))
    except Exception as err:  # partitioning or nnpack missing: say so and go on
        rows.append(('["nnpack", "glow_like"]', None, f"skipped: {type(err).__name__}: {err}"))
    ref = lk.to_backend(module, "reference")
    rows.append(("reference", median_ms(lambda: ref(x), max(3, repeat // 4), warmup=1), check(ref(x))))

    base = next((ms for name, ms, _ in rows if name == "onnxruntime" and ms is not None), None)
    print(f"\nResNet-18, batch {batch}, input {list(x.shape)} (median and best of {repeat} runs; "
          "ratios of medians and of bests to ONNX Runtime)")
    print(f"  {'engine':32s} {'median':>9s} {'/ ORT':>7s} {'best':>9s} {'/ ORT':>7s}  note")
    for name, ms, note in rows:
        if ms is None:
            print(f"  {name:32s} {'-':>9s} {'-':>7s} {'-':>9s} {'-':>7s}  {note}")
        else:
            ratio = f"{ms / base:6.2f}x" if base else "-"
            best = f"{ms.best / base.best:6.2f}x" if base else "-"
            print(f"  {name:32s} {ms:9.2f} {ratio:>7s} {ms.best:9.2f} {best:>7s}  {note}")
    single = next((ms for name, ms, _ in rows if name == "onnxruntime, 1 thread" and ms is not None), None)
    glow1 = next((ms for name, ms, _ in rows if name == "glow_like opt 2, threads=1" and ms is not None), None)
    if single and glow1:
        print(f"  single-threaded: glow_like opt 2 / onnxruntime = {glow1 / single:.2f}x (medians), "
              f"{glow1.best / single.best:.2f}x (bests)")
    from lowerkit_glow_like.payload.codec import decode

    for level, lowered in plans.items():
        (program,) = decode(lowered.record.payload)
        p = program.plan
        print(f"  memory plan opt {level}: peak {p.peak_bytes / 2**20:.2f} MiB, no reuse {p.sum_bytes / 2**20:.2f} MiB, "
              f"lower bound {p.lower_bound_bytes / 2**20:.2f} MiB (peak/bound {p.peak_bytes / p.lower_bound_bytes:.3f}, "
              f"saves {1 - p.peak_bytes / p.sum_bytes:.1%}), scratch {p.scratch_bytes / 2**20:.2f} MiB, "
              f"{len(program.instructions)} instructions")


def int8_accuracy(calibration: int, held_out: int, batch: int = 1) -> None:
    """int8 against fp32 glow_like on random inputs: max abs error and top-1 agreement."""
    import lowerkit_glow_like as glow

    x = models.example_input("resnet18", batch=batch)
    module = lk.trace(models.resnet18(), x)
    rng = np.random.default_rng(2024)
    calib = [rng.standard_normal(x.shape).astype(np.float32) for _ in range(calibration)]
    profile = glow.calibrate(module, calib)
    fp32 = lk.to_backend(module, "glow_like")
    int8 = lk.to_backend(module, "glow_like", {"forward": {"precision": "int8", "profile": profile}})
    max_abs, max_ref, agree, total = 0.0, 0.0, 0, 0
    for _ in range(held_out):
        inp = rng.standard_normal(x.shape).astype(np.float32)
        a, b = fp32(inp), int8(inp)
        max_abs = max(max_abs, float(np.abs(a - b).max()))
        max_ref = max(max_ref, float(np.abs(a).max()))
        agree += int((a.argmax(axis=1) == b.argmax(axis=1)).sum())
        total += a.shape[0]
    print(f"\nint8 ResNet-18 vs fp32 ({calibration} calibration inputs, {held_out * batch} held-out random inputs):")
    print(f"  max abs error {max_abs:.4f} (largest |fp32 logit| {max_ref:.3f}, ratio {max_abs / max_ref:.4f}); "
          f"top-1 agreement {agree}/{total} ({agree / total:.0%})")


def instruction_times(batch: int, repeat: int) -> None:
    """Median time of every glow_like instruction (opt 2), with the default workers and with one.

    Binds the compiled program the way a call does (one thread's arena and scratch, BLAS
    single-threaded) and runs it whole ``repeat`` times, timing every kernel in schedule
    order (so caches hold what they would in a real call); the columns add up to about a
    whole call minus the input/output copies.
    """
    from lowerkit_glow_like._compiler import compile_method
    from lowerkit_glow_like._options import Options
    from lowerkit.backend.cpu import blas_limit
    from lowerkit_glow_like.runtime import Executable

    x = models.example_input("resnet18", batch=batch)
    module = lk.trace(models.resnet18(), x)
    columns = {}
    for label, threads in (("default workers", None), ("1 thread", 1)):
        program = compile_method(module, "forward", Options(threads=threads))
        executable = Executable(program)
        executable.run([x])  # binds this thread's arena, scratch and kernels
        calls = executable._state().calls  # the bound kernels, in schedule order
        times: list[list[float]] = [[] for _ in calls]
        try:
            with blas_limit(1):
                for _ in range(2 + repeat):  # the first two runs warm up
                    for call, kept in zip(calls, times):
                        start = time.perf_counter()
                        call()
                        kept.append(time.perf_counter() - start)
            columns[label] = [statistics.median(t[2:]) * 1e3 for t in times]
        finally:
            executable.close()
    print(f"\nglow_like opt 2, ResNet-18 batch {batch}: median ms per instruction over {repeat} runs")
    print(f"  {'default workers':>15} {'1 thread':>9}  instruction")
    for i, ins in enumerate(program.instructions):
        shape = list(program.buffers[ins.outputs[0]].shape)
        algo = f" [{ins.attrs['algo']}]" if "algo" in ins.attrs else ""
        print(f"  {columns['default workers'][i]:15.3f} {columns['1 thread'][i]:9.3f}  "
              f"{ins.op}{algo} -> {shape}  {ins.scope}")
    print(f"  {sum(columns['default workers']):15.3f} {sum(columns['1 thread']):9.3f}  total")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, action="append", help="batch size(s); default 1 and 8")
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--no-int8", action="store_true")
    parser.add_argument("--int8-accuracy", action="store_true", help="only measure int8 accuracy against fp32")
    parser.add_argument("--instructions", action="store_true",
                        help="only time each glow_like instruction (opt 2), default workers and 1 thread")
    args = parser.parse_args()
    if args.int8_accuracy:
        int8_accuracy(calibration=16, held_out=32)
        return
    if args.instructions:
        for batch in args.batch or [1]:
            instruction_times(batch, args.repeat)
        return
    import os

    print(f"machine: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f} (1 min) at start")
    for info in threadpool_info():
        print(f"BLAS: {info.get('internal_api')} {info.get('version')} {info.get('architecture')} "
              f"threads={info.get('num_threads')} ({info.get('user_api')})")
    for batch in args.batch or [1, 8]:
        bench_batch(batch, args.repeat if batch == 1 else max(3, args.repeat // 4), not args.no_int8)


if __name__ == "__main__":
    main()
