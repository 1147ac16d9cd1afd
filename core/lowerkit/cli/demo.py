"""``lowerkit demo``: lower a real CNN to the installed backends and compare with reference.

Builds a deterministic model from :mod:`lowerkit.models` (ResNet-18 by default; no
network), then for each plan of the fixed list :data:`PLANS` (``glow_like`` whole,
``nnpack`` + ``glow_like``, ``nnpack`` + ``reference``, ``reference`` whole) whose backends
are installed and available — lowers, saves, loads and runs it, and prints latency (median
and spread) against the un-lowered module on ``reference`` and the largest difference from
it. A progress line tells which step runs; the files go to a temporary directory removed at
the end, unless ``keep`` names a directory to keep them in.
"""

from __future__ import annotations

import json
import shutil
import statistics
import sys
import tempfile
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

import numpy as np

__all__ = ["run_demo"]

# Plans tried in order; a plan whose backends are not all installed and available is skipped.
PLANS: tuple[tuple[str, ...], ...] = (
    ("glow_like",),
    ("nnpack", "glow_like"),
    ("nnpack", "reference"),
    ("reference",),
)
RELATIVE_TOLERANCE = 1e-4  # of the largest reference output, per plan
NOISY_SPREAD = 0.15  # Timing.spread above this: timings are unreliable (a busy machine)


@dataclass(frozen=True, slots=True)
class Timing:
    """Milliseconds of repeated runs: median, extremes, and the spread: the median absolute
    deviation over the median (robust to one slow run)."""

    median_ms: float
    min_ms: float
    max_ms: float
    spread: float

    def __str__(self) -> str:
        return f"{self.median_ms:.1f} ms ±{100 * self.spread:.0f}%"


@dataclass(frozen=True, slots=True)
class PlanResult:
    plan: str
    regions: str
    lower_ms: float
    run: Timing
    max_diff: float
    path: Path
    size: int


def run_demo(
    keep: str | Path | None = None,
    stream: TextIO | None = None,
    *,
    model: str = "resnet18",
    repeats: int = 5,
    as_json: bool = False,
    small: bool = False,
    image_size: int | None = None,
) -> int:
    """Run the demo on zoo model ``model`` (any of ``lowerkit.models.names()``; ``small``: its
    small configuration, ``image_size``: another input size); its files are kept in ``keep``
    if given, else removed at the end.

    Returns 0 when every plan matches ``reference`` within 1e-4 of the largest output, else 1.
    """
    if repeats < 1:
        from ..errors import InputError

        raise InputError(f"--repeats expects a positive number of timed runs, got {repeats}")
    out = Path(keep) if keep is not None else Path(tempfile.mkdtemp(prefix="lowerkit-demo-"))
    out.mkdir(parents=True, exist_ok=True)
    try:
        return _demo(out, keep is not None, stream or sys.stdout, model, repeats, as_json, small, image_size)
    finally:
        if keep is None:
            shutil.rmtree(out, ignore_errors=True)


def _demo(out: Path, kept: bool, stream: TextIO, model: str, repeats: int, as_json: bool,
          small: bool = False, image_size: int | None = None) -> int:
    import lowerkit as lk
    from lowerkit import models

    from ..progress import progress

    say = (lambda text="": None) if as_json else (lambda text="": print(text, file=stream))  # noqa: E731

    infos = lk.backends()
    say("installed backends:")
    for b in infos:
        state = "broken: " + (b.error or "") if b.broken else ("available" if b.available else f"unavailable ({b.note})")
        say(f"  {b.name:<11} {b.distribution or '(in-process)':<20} {b.version or '-':<8} {state}")
    usable = {b.name for b in infos if b.available and not b.broken}
    if "reference" not in usable:
        say("the reference backend is needed to compare against: pip install plugins/reference")
        if as_json:
            print(json.dumps({"ok": False, "error": "the reference backend is not available"}), file=stream)
        return 1

    plans = [plan for plan in PLANS if all(name in usable for name in plan)]
    with progress(2 + len(plans), "demo", unit="step") as bar:
        bar.describe(f"demo: tracing {model}")
        info = models.info(model)
        x = models.example_input(model, small=small, image_size=image_size)
        module = lk.trace(models.get(model, small=small, image_size=image_size), x)
        tolerance = RELATIVE_TOLERANCE * (10 if info.transformer else 1)
        bar.update()
        config = " (small configuration)" if small else ""
        say(f"\nmodel: lowerkit.models.get({model!r}){config} traced on input {list(x.shape)}, "
            f"{sum(p.size for p in module.parameters.values()):,} parameters")
        bar.describe("demo: timing the un-lowered module on reference")
        expected = module(x)
        baseline = _timing(lambda: module(x), repeats)
        bar.update()
        scale = float(np.max(np.abs(expected)))

        results: list[PlanResult] = []
        failed: list[str] = []
        for plan in PLANS:
            missing = [name for name in plan if name not in usable]
            if missing:
                say(f"skipping plan {'+'.join(plan)}: {', '.join(missing)} not installed or not available")
                continue
            bar.describe(f"demo: lowering to {'+'.join(plan)}, saving, loading, timing")
            try:
                results.append(_run_plan(lk, module, plan, x, expected, out, repeats))
            except lk.UnsupportedOperatorError as err:  # a backend that lacks an op this model uses
                failed.append("+".join(plan))
                say(f"plan {'+'.join(plan)} cannot run this model: {err}")
            bar.update()

    ok = not failed and all(r.max_diff <= tolerance * scale for r in results)
    noisy = [r.plan for r in results if r.run.spread > NOISY_SPREAD] + (
        ["reference (un-lowered)"] if baseline.spread > NOISY_SPREAD else [])
    if as_json:
        print(json.dumps({
            "model": model, "input_shape": list(x.shape), "repeats": repeats, "ok": ok,
            "baseline_ms": {"median": baseline.median_ms, "min": baseline.min_ms, "max": baseline.max_ms},
            "plans": [{
                "plan": r.plan, "regions": r.regions, "lower_ms": r.lower_ms,
                "run_ms": {"median": r.run.median_ms, "min": r.run.min_ms, "max": r.run.max_ms},
                "max_diff": r.max_diff, "matches": r.max_diff <= tolerance * scale,
                "file_bytes": r.size,
            } for r in results],
            "noisy": noisy, "failed": failed,
            "files": str(out) if kept else None,
        }, indent=2), file=stream)
        return 0 if ok else 1

    say(f"\nlowering plans (regions per backend) and latency against reference "
        f"({baseline}, median and spread of {repeats}):")
    rows = [("PLAN", "REGIONS", "LOWER", "RUN", "VS REFERENCE", "MAX |DIFF|", "")]
    for r in results:
        good = r.max_diff <= tolerance * scale
        ratio = baseline.median_ms / r.run.median_ms if r.run.median_ms > 0 else float("inf")
        rows.append((r.plan, r.regions, f"{r.lower_ms:.0f} ms", str(r.run),
                     f"{ratio:.2f}x faster" if ratio >= 1 else f"{1 / ratio:.2f}x slower",
                     f"{r.max_diff:.2e}", "ok" if good else "MISMATCH"))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        say("  " + "  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip())
    if noisy:
        say(f"warning: timings of {', '.join(noisy)} vary by more than {100 * NOISY_SPREAD:.0f}% "
            "between runs (a busy machine?); compare ratios from a quieter run or raise --repeats")
    if kept:
        say(f"\nsaved files (each loaded back before running) in {out}:")
        width = max((len(r.path.name) for r in results), default=0)
        for r in results:
            say(f"  {r.path.name:<{width}} {r.size:>12,} bytes")
    else:
        say("\nsaved files were loaded back before running, then removed (--keep DIR keeps them)")
    if failed:
        say(f"plans that could not run: {', '.join(failed)}")
    say("all plans match reference" if ok else "some plans differ from reference or could not run!")
    return 0 if ok else 1


def _run_plan(lk, module, plan, x, expected, out: Path, repeats: int) -> PlanResult:
    target = plan[0] if len(plan) == 1 else list(plan)
    started = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        lowered = lk.to_backend(module, target)
    lower_ms = (time.perf_counter() - started) * 1e3
    path = out / f"{module.name.lower()}.{'+'.join(plan)}.lkm"
    lk.save(lowered, path)
    loaded = lk.load(path)
    got = loaded(x)
    if hasattr(loaded, "partition_report"):
        counts: dict[str, int] = {}
        for region in loaded.partition_report().regions:
            counts[region.backend] = counts.get(region.backend, 0) + 1
        regions = ", ".join(f"{b} {n}" for b, n in counts.items())
    else:
        regions = f"{plan[0]} (whole)"
    return PlanResult(
        "+".join(plan),
        regions,
        lower_ms,
        _timing(lambda: loaded(x), repeats),
        float(np.max(np.abs(got - expected))),
        path,
        path.stat().st_size,
    )


def _timing(fn, repeats: int) -> Timing:
    fn()  # warm-up: first calls compile and allocate
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        fn()
        times.append((time.perf_counter() - started) * 1e3)
    median = statistics.median(times)
    deviation = statistics.median(abs(t - median) for t in times)
    return Timing(median, min(times), max(times), deviation / median if median > 0 else 0.0)
