"""``lowerkit demo``: lower a zoo model to the installed backends and compare with reference.

Builds a deterministic model from :mod:`lowerkit.models` (ResNet-18 by default, any zoo
model with ``--model``; no network), then for each plan — every single installed backend
that takes whole models, and the partitions ``nnpack`` + ``glow_like`` and ``nnpack`` + ``reference`` — lowers, saves,
loads and runs it, and prints latency against the un-lowered module on ``reference`` and the
largest difference from it.
"""

from __future__ import annotations

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


@dataclass(frozen=True, slots=True)
class PlanResult:
    plan: str
    regions: str
    lower_ms: float
    run_ms: float
    max_diff: float
    path: Path


def run_demo(
    out_dir: str | Path | None = None,
    stream: TextIO | None = None,
    *,
    model: str = "resnet18",
    repeats: int = 5,
    small: bool = False,
    image_size: int | None = None,
) -> int:
    """Run the demo on zoo model ``model`` (any of ``lowerkit.models.names()``), keeping its
    files in ``out_dir`` (default: a fresh temporary directory). ``small`` uses the model's
    small configuration; ``image_size`` overrides its input size.

    Returns 0 when every plan matches ``reference`` within 1e-4 of the largest output (1e-3
    for the transformers), else 1.
    """
    import lowerkit as lk
    from lowerkit import models

    stream = stream or sys.stdout
    out = Path(out_dir) if out_dir is not None else Path(tempfile.mkdtemp(prefix="lowerkit-demo-"))
    out.mkdir(parents=True, exist_ok=True)
    say = lambda text="": print(text, file=stream)  # noqa: E731

    infos = lk.backends()
    say("installed backends:")
    for b in infos:
        state = "broken: " + b.error if b.broken else ("available" if b.available else f"unavailable ({b.note})")
        say(f"  {b.name:<11} {b.distribution or '(in-process)':<20} {b.version or '-':<8} {state}")
    usable = {b.name for b in infos if b.available and not b.broken}
    if "reference" not in usable:
        say("the reference backend is needed to compare against: pip install plugins/reference")
        return 1

    info = models.info(model)
    x = models.example_input(model, small=small, image_size=image_size)
    module = lk.trace(models.get(model, small=small, image_size=image_size), x)
    tolerance = RELATIVE_TOLERANCE * (10 if info.transformer else 1)
    config = " (small configuration)" if small else ""
    say(f"\nmodel: lowerkit.models.get({model!r}){config} traced on input {list(x.shape)}, "
        f"{sum(p.size for p in module.parameters.values()):,} parameters")
    expected = module(x)
    baseline_ms = _median_ms(lambda: module(x), repeats)
    scale = float(np.max(np.abs(expected)))

    results: list[PlanResult] = []
    failed: list[str] = []
    for plan in PLANS:
        missing = [name for name in plan if name not in usable]
        if missing:
            say(f"skipping plan {'+'.join(plan)}: {', '.join(missing)} not installed or not available")
            continue
        try:
            results.append(_run_plan(lk, module, plan, x, expected, out, repeats))
        except lk.UnsupportedOperatorError as err:  # a backend that lacks an op this model uses
            failed.append("+".join(plan))
            say(f"plan {'+'.join(plan)} cannot run this model: {err}")

    say(f"\nlowering plans (regions per backend) and latency against reference "
        f"({baseline_ms:.1f} ms, median of {repeats}):")
    rows = [("PLAN", "REGIONS", "LOWER", "RUN", "VS REFERENCE", "MAX |DIFF|", "")]
    ok = not failed
    for r in results:
        good = r.max_diff <= tolerance * scale
        ok &= good
        rows.append((r.plan, r.regions, f"{r.lower_ms:.0f} ms", f"{r.run_ms:.1f} ms",
                     f"{baseline_ms / r.run_ms:.2f}x faster" if r.run_ms < baseline_ms
                     else f"{r.run_ms / baseline_ms:.2f}x slower",
                     f"{r.max_diff:.2e}", "ok" if good else "MISMATCH"))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        say("  " + "  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip())
    say(f"\nsaved files (each loaded back before running) in {out}:")
    width = max((len(r.path.name) for r in results), default=0)
    for r in results:
        say(f"  {r.path.name:<{width}} {r.path.stat().st_size:>12,} bytes")
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
        _median_ms(lambda: loaded(x), repeats),
        float(np.max(np.abs(got - expected))),
        path,
    )


def _median_ms(fn, repeats: int) -> float:
    fn()  # warm-up: first calls compile and allocate
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        fn()
        times.append((time.perf_counter() - started) * 1e3)
    return statistics.median(times)
