"""The yardstick (``python benchmarks/model.py --yardstick``): zoo models on lowerkit's
backends beside ONNX Runtime and OpenVINO, one process, interleaved rounds, best of each,
ratios against the best peer; the per-call overhead row; a chart of the ratios.

Engines per model and batch:

- ``onnxruntime`` and ``openvino``: ``lowerkit.onnx.export`` of the traced model (same
  weights), CPU, as many threads as cores (``--threads``);
- ``glow_like``: the whole model on glow_like;
- ``[nnpack, glow_like]``: the priority plan (core passes first);
- ``[nnpack, glow_like] measured``: ``plan="measure"`` on the benchmark's input.

Every engine first warms up: at least two calls, then more until it has run
``WARMUP_CALLS`` calls or for ``WARMUP_S`` seconds — long enough for glow_like's form trial
(a batch that can run image by image or as slices times both forms on its first 12-39
calls, ``lowerkit.backend.cpu.FormTrial``) to decide on a model whose call takes up to ~50 ms.
Then every engine runs ``--repeat`` calls per round, ``--rounds`` rounds, in a new seeded order
each round, after a pause that lets the previous engine's spinning threads go idle; each
keeps its best call. Only same-run ratios mean anything on a shared machine. Each of ours
is checked against ONNX Runtime's output on its first call and again after the timed ones,
and marked WRONG past ``TOLERANCE``. The notes say how many of an engine's timed calls ran
on serial forms because its stall guard had turned the team regions off
(``lowerkit.backend.cpu.StallGuard``: another process held a core).
"""

from __future__ import annotations

import math
import os
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

import lowerkit as lk
from lowerkit import models
from peers import settle

PEERS = ("onnxruntime", "openvino")
OURS = ("glow_like", "[nnpack, glow_like]", "[nnpack, glow_like] measured")
DEFAULT_MODELS = ("resnet18", "resnet50", "mobilenet_v2", "efficientnet_b0")
# An output further than this from ONNX Runtime's, relative to its largest value, is marked
# WRONG (fp32 reorderings stay near 1e-6).
TOLERANCE = 1e-4
# Warm-up: two calls at least, then up to this many calls or this many seconds, whichever
# comes first. With two calls only, MobileNetV3-Small at batch 8 timed 12.3-13.0 ms on
# glow_like in the yardstick (its trial still running, both forms slower beside the peers'
# threads) and 10.0 once decided (AMD EPYC Zen 3 VM, session 32).
WARMUP_CALLS = 40
WARMUP_S = 2.0


class SerialCalls:
    """Counts calls that begin with a stall guard off (their team regions then run on the
    calling thread), by wrapping ``StallGuard.begin`` for this process."""

    def __init__(self) -> None:
        from lowerkit.backend.cpu.team import StallGuard

        self.count = 0
        begin = StallGuard.begin

        def counting_begin(guard: StallGuard) -> float:
            start = begin(guard)
            if not guard.on:
                self.count += 1
            return start

        StallGuard.begin = counting_begin


_SERIAL: list[SerialCalls] = []


@dataclass
class Result:
    model: str
    batch: int
    ms: dict[str, float] = field(default_factory=dict)  # engine -> best ms
    notes: dict[str, str] = field(default_factory=dict)  # engine -> why skipped, or max rel err
    errors: dict[str, float] = field(default_factory=dict)  # engine -> max rel err against the reference
    lowering_s: dict[str, float] = field(default_factory=dict)

    @property
    def best_peer(self) -> float:
        return min((self.ms[p] for p in PEERS if p in self.ms), default=math.nan)

    def ratio(self, engine: str) -> float:
        return self.ms[engine] / self.best_peer if engine in self.ms else math.nan


def _peers(module: lk.Module, x: np.ndarray, threads: int) -> tuple[dict[str, Callable[[], object]], dict[str, str]]:
    from peers import onnxruntime_runner, openvino_runner

    import lowerkit.onnx

    proto = lowerkit.onnx.export(module)
    feed = {proto.graph.input[0].name: x}
    engines: dict[str, Callable[[], object]] = {}
    notes: dict[str, str] = {}
    for name, make in (("onnxruntime", onnxruntime_runner), ("openvino", openvino_runner)):
        try:
            fn = make(proto, feed, threads)
        except Exception as err:  # a peer that cannot take the model is reported, not fatal
            notes[name] = f"skipped: {type(err).__name__}: {str(err).splitlines()[0][:100]}"
            continue
        if fn is None:
            notes[name] = "skipped: not installed"
        else:
            engines[name] = fn
    return engines, notes


def _ours(module: lk.Module, x: np.ndarray) -> tuple[dict[str, Callable[[], object]], dict[str, str], dict[str, float]]:
    engines: dict[str, Callable[[], object]] = {}
    notes: dict[str, str] = {}
    lowering: dict[str, float] = {}
    plans = {
        "glow_like": lambda: lk.to_backend(module, "glow_like"),
        "[nnpack, glow_like]": lambda: lk.to_backend(module, ["nnpack", "glow_like"]),
        "[nnpack, glow_like] measured": lambda: lk.to_backend(
            module, ["nnpack", "glow_like"], plan="measure", example_inputs=(x,)
        ),
    }
    for name, make in plans.items():
        start = time.perf_counter()
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                lowered = make()
        except lk.LowerkitError as err:  # a backend without an op this model uses
            notes[name] = f"skipped: {type(err).__name__}: {str(err).splitlines()[0][:100]}"
            continue
        lowering[name] = time.perf_counter() - start
        engines[name] = lambda lowered=lowered: lowered(x)
    return engines, notes, lowering


def bench(name: str, batch: int, *, rounds: int, repeat: int, threads: int) -> Result:
    """Time one zoo model at one batch size on every engine."""
    x = models.example_input(name, batch=batch)
    module = lk.trace(models.get(name), x)
    result = Result(name, batch)
    peers, notes = _peers(module, x, threads)
    ours, our_notes, result.lowering_s = _ours(module, x)
    result.notes.update(notes)
    result.notes.update(our_notes)
    engines = {**peers, **ours}
    reference = np.asarray(peers["onnxruntime"]()[0]) if "onnxruntime" in peers else module(x)
    scale = max(1e-12, float(np.abs(reference).max()))

    def check() -> None:  # the largest error so far, relative to the reference's largest value
        for engine, fn in ours.items():
            err = max(result.errors.get(engine, 0.0), float(np.abs(np.asarray(fn()) - reference).max()) / scale)
            result.errors[engine] = err
            result.notes[engine] = f"max rel err {err:.1e}" + (" — WRONG" if err > TOLERANCE else "")

    check()  # the first call
    for fn in engines.values():  # warm-up: buffers bound, kernels compiled, caches filled, trials decided
        start, calls = time.perf_counter(), 0
        while calls < 2 or (calls < WARMUP_CALLS and time.perf_counter() - start < WARMUP_S):
            fn()
            calls += 1
    best = {e: math.inf for e in engines}
    serial = dict.fromkeys(engines, 0)
    if not _SERIAL:
        _SERIAL.append(SerialCalls())
    counter = _SERIAL[0]
    order = np.random.default_rng(batch)
    names = list(engines)
    for _ in range(rounds):
        for i in order.permutation(len(names)):
            fn = engines[names[i]]
            settle()  # let the last engine's spinning threads go idle first (peers.py)
            before = counter.count
            for _ in range(repeat):
                start = time.perf_counter()
                fn()
                best[names[i]] = min(best[names[i]], time.perf_counter() - start)
            serial[names[i]] += counter.count - before
    result.ms = {e: s * 1e3 for e, s in best.items()}
    check()  # and a call after the timed ones: a race between threads may show only in some calls
    for engine, calls in serial.items():
        if calls:
            note = f"{calls} of {rounds * repeat} timed calls on serial forms (stall guard off)"
            result.notes[engine] = f"{result.notes[engine]}; {note}" if engine in result.notes else note
    return result


def markdown(results: list[Result]) -> str:
    """The results as a Markdown table (ms, and each of ours over the best peer), plus geomeans."""
    head = ["model", "N", "ORT ms", "OpenVINO ms", "glow_like ms", "[nnpack, glow_like] ms", "measured ms",
            "glow_like / best peer", "mixed / best peer", "measured / best peer"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in results:
        cells = [r.model, str(r.batch)]
        cells += [f"{r.ms[e]:.1f}" if e in r.ms else "-" for e in PEERS + OURS]
        cells += [f"{r.ratio(e):.2f}x" if e in r.ms else "-" for e in OURS]
        lines.append("| " + " | ".join(cells) + " |")
    lines.append("")
    for batch in sorted({r.batch for r in results}):
        for engine in OURS:
            ratios = [r.ratio(engine) for r in results if r.batch == batch and engine in r.ms]
            if ratios:
                geo = math.exp(sum(map(math.log, ratios)) / len(ratios))
                lines.append(f"- batch {batch}, {engine}: geomean {geo:.2f}x the best peer, worst {max(ratios):.2f}x")
    shown = [(r.model, r.batch, e, n) for r in results for e, n in r.notes.items()
             if n.startswith("skipped") or "stall guard" in n or "WRONG" in n]
    for model, batch, engine, note in shown:
        lines.append(f"- {model} batch {batch}, {engine}: {note}")
    return "\n".join(lines)


def overhead_markdown(calls: int = 2000, rounds: int = 5) -> str:
    """The per-call overhead row: a 1-element add on every engine (benchmarks/overhead.py)."""
    from overhead import measure

    best = measure(calls, rounds)
    lines = ["| engine | µs per call (1-element add) |", "|---|---|"]
    lines += [f"| {name} | {us:.1f} |" for name, us in best.items()]
    return "\n".join(lines)


def draw_chart(results: list[Result], path: str) -> None:
    """Grouped bars: per model and batch, each of ours over the best peer (1.0 = as fast)."""
    import matplotlib
    import matplotlib.ticker

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = [f"{r.model}\nN={r.batch}" for r in results]
    width = 0.8 / len(OURS)
    fig, ax = plt.subplots(figsize=(max(6.0, 1.3 * len(results)), 4.0))
    for k, engine in enumerate(OURS):
        xs = [i + (k - (len(OURS) - 1) / 2) * width for i in range(len(results))]
        ax.bar(xs, [r.ratio(engine) for r in results], width, label=engine)
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_xticks(range(len(results)), labels, fontsize=8)
    ax.set_ylabel("time / best of ONNX Runtime, OpenVINO")
    ax.set_yscale("log")
    ax.yaxis.set_major_formatter(matplotlib.ticker.FormatStrFormatter("%.3gx"))
    ax.yaxis.set_minor_formatter(matplotlib.ticker.FormatStrFormatter("%.3gx"))
    ax.tick_params(axis="y", which="minor", labelsize=7)
    ax.set_title("lowerkit vs the best peer, same run (lower is better)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def run(names: list[str], batches: list[int], *, rounds: int, repeat: int, threads: int, chart: str | None) -> None:
    from peers import blas_lines, openvino_version

    print(f"machine: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f} (1 min) at start; "
          f"OpenVINO {openvino_version()}; peers on {threads} threads; {rounds} rounds x {repeat} calls, best call")
    for line in blas_lines():
        print(line)
    results = []
    for batch in batches:
        for name in names:
            r = bench(name, batch, rounds=rounds, repeat=repeat, threads=threads)
            results.append(r)
            cells = ", ".join(f"{e} {ms:.1f} ms" for e, ms in r.ms.items())
            checks = ", ".join(f"{e}: {note}" for e, note in r.notes.items() if note.startswith("max rel err"))
            print(f"  {name} N={batch}: {cells}\n    against ONNX Runtime's output: {checks}", flush=True)
    print()
    print(markdown(results))
    print()
    print(overhead_markdown())
    print(f"\nload average {os.getloadavg()[0]:.2f} (1 min) at the end")
    if chart:
        draw_chart(results, chart)
        print(f"chart written to {chart}")
