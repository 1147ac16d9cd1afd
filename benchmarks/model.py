"""Whole-model benchmark: a zoo model (ResNet-18 by default) on glow_like (each opt level, and
int8), on ["nnpack", "glow_like"], on reference, on ONNX Runtime and on PyTorch, same weights,
one process; or the whole zoo (--model all) with one summary line per model.

ONNX Runtime runs ``lowerkit.onnx.export`` of the traced zoo model; PyTorch runs the model's
twin written in plain torch.nn (tests/models/zoo_twins.py) under inference_mode, with the
same weights. Prints the median latency, each ratio to ONNX Runtime, the glow_like
memory-plan numbers and the BLAS kernel in use. An engine that cannot run a model (an op it
lacks) is listed as skipped with the reason.

    python benchmarks/model.py                        # ResNet-18, batch 1 and 8 (a few minutes on 2 cores)
    python benchmarks/model.py --model mobilenet_v3_large --batch 1
    python benchmarks/model.py --model all --repeat 5 # the whole zoo at batch 1, real geometry
    python benchmarks/model.py --model all --small    # the whole zoo, small configurations (a smoke run)
    python benchmarks/model.py --int8-accuracy        # int8 vs fp32 accuracy on random inputs (ResNet-18)
    python benchmarks/model.py --instructions         # glow_like opt 2, per instruction, 2 workers vs 1
    python benchmarks/model.py --yardstick --chart docs/performance.png   # docs/performance.md's tables
    python benchmarks/model.py --yardstick --model resnet18 --batch 1      # one model, one batch size
    python benchmarks/model.py --zoo             # ResNet-18/50, MobileNetV2, EfficientNet-B0 vs ORT and
                                                 # OpenVINO (benchmarks/zoo.py; its options after --zoo)
"""

from __future__ import annotations

import argparse
import statistics
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

import numpy as np

import lowerkit as lk
from lowerkit import graph_of, models
from peers import blas_lines


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


# -- the peers, same weights -----------------------------------------------------------------
def onnx_session(module: lk.Module, threads: int | None = None):
    """An ONNX Runtime session on ``lowerkit.onnx.export(module)`` (the traced zoo model)."""
    import onnxruntime as ort

    import lowerkit.onnx

    options = ort.SessionOptions()
    if threads is not None:
        options.intra_op_num_threads = threads
    proto = lowerkit.onnx.export(module)
    return ort.InferenceSession(proto.SerializeToString(), options, providers=["CPUExecutionProvider"])


def torch_twin(name: str, model, kwargs: dict):
    """The zoo model's PyTorch twin (tests/models/zoo_twins.py: plain torch.nn) with its weights."""
    import sys
    from pathlib import Path

    root = str(Path(__file__).resolve().parent.parent)  # the twins live in the test suite
    if root not in sys.path:
        sys.path.insert(0, root)
    from tests.models.zoo_twins import build_twin, load_weights

    twin = build_twin(name, kwargs)
    load_weights(twin, model)
    return twin


def model_kwargs(name: str, small: bool, image_size: int | None) -> dict:
    """The keyword arguments ``models.get`` builds ``name`` with (for the twin)."""
    info = models.info(name)
    kwargs = dict(info.small) if small else {}
    if info.size_kwarg:
        kwargs[info.size_kwarg] = image_size or (info.small_size if small else info.input_chw[1])
    return kwargs


@dataclass
class Row:
    engine: str
    ms: Timing | None
    note: str


def bench_batch(name: str, batch: int, repeat: int, *, full: bool, with_int8: bool, small: bool = False,
                image_size: int | None = None) -> list[Row]:
    """Time one zoo model on every engine; ``full`` adds each glow_like opt level and thread setting."""
    x = models.example_input(name, batch=batch, small=small, image_size=image_size)
    model = models.get(name, small=small, image_size=image_size)
    module = lk.trace(model, x)
    expected = None
    rows: list[Row] = []
    feed = {graph_of(module).inputs[0].name: x}

    try:
        sess = onnx_session(module)
        expected = sess.run(None, feed)[0]
        rows.append(Row("onnxruntime", median_ms(lambda: sess.run(None, feed), repeat), "default threads"))
        sess1 = onnx_session(module, threads=1)
        rows.append(Row("onnxruntime, 1 thread", median_ms(lambda: sess1.run(None, feed), repeat),
                        "intra_op_num_threads=1"))
        del sess, sess1  # ORT's intra-op threads spin after a run: let them go before the next engine
    except Exception as err:  # not installed, or an op lowerkit cannot export: say so and go on
        rows.append(Row("onnxruntime", None, f"skipped: {type(err).__name__}: {str(err).splitlines()[0][:120]}"))

    try:
        import torch

        twin = torch_twin(name, model, model_kwargs(name, small, image_size))
        tx = torch.from_numpy(x)
        with torch.inference_mode():
            got = twin(tx).numpy()
            rows.append(Row("pytorch (eager twin, same weights)", median_ms(lambda: twin(tx), repeat),
                            f"threads={torch.get_num_threads()}"))
        expected = got if expected is None else expected
    except ImportError as err:
        rows.append(Row("pytorch", None, f"skipped: {err}"))

    if expected is None:
        expected = module(x)

    def check(out) -> str:
        err = float(np.abs(out - expected).max() / np.abs(expected).max())
        return f"max rel err {err:.1e}"

    def lowered_row(label: str, target, spec=None, note: str = "", runs: int = repeat, warmup: int = 2):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                lowered = lk.to_backend(module, target, spec)
        except lk.LowerkitError as err:  # a backend without an op this model uses
            rows.append(Row(label, None, f"skipped: {type(err).__name__}: {str(err).splitlines()[0][:120]}"))
            return None
        rows.append(Row(label, median_ms(lambda: lowered(x), runs, warmup), f"{check(lowered(x))}{note}"))
        return lowered

    plans = {}
    for level in (0, 1, 2) if full else (2,):
        lowered = lowered_row(f"glow_like opt {level}", "glow_like", {"forward": {"opt_level": level}},
                              "; default threads (one intra-op worker per CPU)")
        if lowered is not None:
            plans[level] = lowered
    if full:
        for threads, note in ((1, "single-threaded BLAS"), ("blas", "OpenBLAS's own threads")):
            lowered_row(f"glow_like opt 2, threads={threads!r}", "glow_like",
                        {"forward": {"opt_level": 2, "threads": threads}}, f"; {note}")
    if with_int8 and plans:
        import lowerkit_glow_like as glow

        rng = np.random.default_rng(1)
        calib = [rng.standard_normal(x.shape).astype(np.float32) for _ in range(4)]
        profile = glow.calibrate(module, calib, progress=False)
        lowered_row("glow_like int8 (opt 2)", "glow_like", {"forward": {"precision": "int8", "profile": profile}},
                    " (quantized)", runs=max(3, repeat // 2))
    lowered_row('["nnpack", "glow_like"]', ["nnpack", "glow_like"])
    lowered_row("reference", "reference", runs=max(3, repeat // 4), warmup=1)

    base = next((r.ms for r in rows if r.engine == "onnxruntime" and r.ms is not None), None)
    config = " (small configuration)" if small else ""
    print(f"\n{name}{config}, batch {batch}, input {list(x.shape)} (median and best of {repeat} runs; "
          "ratios of medians and of bests to ONNX Runtime)")
    print(f"  {'engine':36s} {'median':>9s} {'/ ORT':>7s} {'best':>9s} {'/ ORT':>7s}  note")
    for r in rows:
        if r.ms is None:
            print(f"  {r.engine:36s} {'-':>9s} {'-':>7s} {'-':>9s} {'-':>7s}  {r.note}")
        else:
            ratio = f"{r.ms / base:6.2f}x" if base else "-"
            best = f"{r.ms.best / base.best:6.2f}x" if base else "-"
            print(f"  {r.engine:36s} {r.ms:9.2f} {ratio:>7s} {r.ms.best:9.2f} {best:>7s}  {r.note}")
    single = next((r.ms for r in rows if r.engine == "onnxruntime, 1 thread" and r.ms is not None), None)
    glow1 = next((r.ms for r in rows if r.engine == "glow_like opt 2, threads=1" and r.ms is not None), None)
    if single and glow1:
        print(f"  single-threaded: glow_like opt 2 / onnxruntime = {glow1 / single:.2f}x (medians), "
              f"{glow1.best / single.best:.2f}x (bests)")
    if full:
        from lowerkit_glow_like.payload.codec import decode

        for level, lowered in plans.items():
            (program,) = decode(lowered.record.payload)
            p = program.plan
            print(f"  memory plan opt {level}: peak {p.peak_bytes / 2**20:.2f} MiB, no reuse {p.sum_bytes / 2**20:.2f} MiB, "
                  f"lower bound {p.lower_bound_bytes / 2**20:.2f} MiB (peak/bound {p.peak_bytes / p.lower_bound_bytes:.3f}, "
                  f"saves {1 - p.peak_bytes / p.sum_bytes:.1%}), scratch {p.scratch_bytes / 2**20:.2f} MiB, "
                  f"{len(program.instructions)} instructions")
    return rows


def zoo_summary(results: dict[str, list[Row]]) -> None:
    """One line per model: each engine's median and its ratio to ONNX Runtime."""
    engines = ["onnxruntime", "pytorch (eager twin, same weights)", "glow_like opt 2", '["nnpack", "glow_like"]',
               "reference"]
    short = ["ORT", "PyTorch", "glow_like", "nnpack+glow", "reference"]
    print("\nzoo summary: median ms (ratio to ONNX Runtime); '-' = skipped (see above)")
    print(f"  {'model':20s} " + " ".join(f"{s:>20s}" for s in short))
    for name, rows in results.items():
        by = {r.engine: r.ms for r in rows}
        base = by.get("onnxruntime")
        cells = []
        for engine in engines:
            ms = by.get(engine)
            if ms is None:
                cells.append(f"{'-':>20s}")
            else:
                cells.append(f"{ms:11.2f} ({ms / base:5.2f}x)" if base else f"{ms:20.2f}")
        print(f"  {name:20s} " + " ".join(cells))


def int8_accuracy(calibration: int, held_out: int, batch: int = 1) -> None:
    """int8 against fp32 glow_like on random inputs: max abs error and top-1 agreement."""
    import lowerkit_glow_like as glow

    x = models.example_input(name, batch=batch)
    module = lk.trace(models.get(name), x)
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


def bound_glow_like(module: lk.Module, x: np.ndarray, threads: int | None):
    """glow_like's compiled program (opt 2) bound the way a call binds it — this thread's
    arena, scratch and kernels: ``(program, executable, calls)``, the bound kernels in schedule
    order (a batch run as slices, one per worker: the first slice's; an instruction of its
    head, which the slice runs image by image, as one call per image of the slice, on the
    first image's rows). Close the executable."""
    from lowerkit_glow_like._compiler import compile_method
    from lowerkit_glow_like._options import Options
    from lowerkit_glow_like.runtime import Executable

    program = compile_method(module, "forward", Options(threads=threads))
    executable = Executable(program)
    executable.run([x])  # binds this thread's arena, scratch and kernels
    state = executable._state()
    if state.slices is None:
        return program, executable, state.calls
    part = state.slices[0]
    images = part.rows.stop - part.rows.start
    head = [] if part.head is None else [partial(_repeat, call, images) for call in part.head.calls]
    return program, executable, head + part.calls


def _repeat(call: Callable[[], object], times: int) -> None:
    for _ in range(times):
        call()


def instruction_times(name: str, batch: int, repeat: int) -> None:
    """Median time of every glow_like instruction (opt 2), with the default workers and with one.

    Binds the compiled program the way a call does (one thread's arena and scratch, BLAS's
    threads as the program sets them) and runs it whole ``repeat`` times, timing every kernel in schedule
    order (so caches hold what they would in a real call); the columns add up to about a
    whole call minus the input/output copies.
    """
    from lowerkit.backend.cpu import blas_limit

    x = models.example_input(name, batch=batch)
    module = lk.trace(models.get(name), x)
    columns = {}
    notes: list[str] = []
    for label, threads in (("default workers", None), ("1 thread", 1)):
        program, executable, calls = bound_glow_like(module, x, threads)
        if executable.batch_slices is not None:  # the first slice's kernels, timed alone on this thread
            notes.append(f"{label}: batch {batch} runs as slices {[(s.start, s.stop) for s in executable.batch_slices]}, "
                         f"one per worker; the column times the first slice alone")
        times: list[list[float]] = [[] for _ in calls]
        try:
            with blas_limit(executable.blas_threads or 1):  # as a call sets it
                for _ in range(2 + repeat):  # the first two runs warm up
                    for call, kept in zip(calls, times):
                        start = time.perf_counter()
                        call()
                        kept.append(time.perf_counter() - start)
            columns[label] = [statistics.median(t[2:]) * 1e3 for t in times]
        finally:
            executable.close()
    print(f"\nglow_like opt 2, {name} batch {batch}: median ms per instruction over {repeat} runs")
    print(f"  {'default workers':>15} {'1 thread':>9}  instruction")
    for i, ins in enumerate(program.instructions):
        shape = list(program.buffers[ins.outputs[0]].shape)
        algo = f" [{ins.attrs['algo']}]" if "algo" in ins.attrs else ""
        print(f"  {columns['default workers'][i]:15.3f} {columns['1 thread'][i]:9.3f}  "
              f"{ins.op}{algo} -> {shape}  {ins.scope}")
    print(f"  {sum(columns['default workers']):15.3f} {sum(columns['1 thread']):9.3f}  total")
    for note in notes:
        print(f"  ({note})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="resnet18", metavar="NAME",
                        help="a zoo model (lowerkit.models.names()) or 'all' for the whole zoo; default resnet18")
    parser.add_argument("--small", action="store_true", help="the models' small configurations (a quick smoke run)")
    parser.add_argument("--image-size", type=int, help="input height and width (default: each model's standard size)")
    parser.add_argument("--batch", type=int, action="append",
                        help="batch size(s); default 1 and 8 for one model, 1 for --model all")
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--no-int8", action="store_true")
    parser.add_argument("--int8-accuracy", action="store_true", help="only measure int8 accuracy against fp32")
    parser.add_argument("--instructions", action="store_true",
                        help="only time each glow_like instruction (opt 2), default workers and 1 thread")
    parser.add_argument("--yardstick", action="store_true",
                        help="the yardstick (docs/performance.md): models beside ONNX Runtime and OpenVINO, "
                             "interleaved rounds, ratios to the best peer; --model takes a comma list "
                             "(default resnet18,resnet50,mobilenet_v2,efficientnet_b0)")
    parser.add_argument("--rounds", type=int, default=3, help="--yardstick: interleaved rounds")
    parser.add_argument("--threads", type=int, default=0, help="--yardstick: peer threads (0: all cores)")
    parser.add_argument("--chart", metavar="PNG", help="--yardstick: draw the ratios into this PNG (matplotlib)")
    parser.add_argument("--zoo", action="store_true", help="run benchmarks/zoo.py (zoo models vs ORT and OpenVINO)")
    args, rest = parser.parse_known_args()
    if args.zoo:
        import sys

        import zoo

        sys.argv = [sys.argv[0], *rest]
        zoo.main()
        return
    if rest:
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    if args.yardstick:
        from lowerkit.backend.cpu import cpu_count
        from yardstick import DEFAULT_MODELS, run

        names = args.model.split(",") if "--model" in " ".join(__import__("sys").argv) else list(DEFAULT_MODELS)
        unknown = [n for n in names if n not in models.names()]
        if unknown:
            parser.error(f"--model: unknown model(s) {unknown}; choose from {', '.join(models.names())}")
        run(names, args.batch or [1, 8], rounds=args.rounds, repeat=min(args.repeat, 5),
            threads=args.threads or cpu_count(), chart=args.chart)
        return
    if args.model != "all" and args.model not in models.names():
        parser.error(f"--model: unknown model {args.model!r}; choose 'all' or one of {', '.join(models.names())}")
    if args.int8_accuracy:
        int8_accuracy(calibration=16, held_out=32)
        return
    if args.instructions:
        for batch in args.batch or [1]:
            instruction_times("resnet18" if args.model == "all" else args.model, batch, args.repeat)
        return
    import os

    print(f"machine: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f} (1 min) at start")
    for line in blas_lines():
        print(line)
    if args.model == "all":
        for batch in args.batch or [1]:
            results = {name: bench_batch(name, batch, args.repeat, full=False, with_int8=False, small=args.small,
                                         image_size=args.image_size)
                       for name in models.names() if name != "small_cnn"}
            zoo_summary(results)
        return
    for batch in args.batch or [1, 8]:
        bench_batch(args.model, batch, args.repeat if batch == 1 else max(3, args.repeat // 4), full=True,
                    with_int8=not args.no_int8, small=args.small, image_size=args.image_size)


if __name__ == "__main__":
    main()
