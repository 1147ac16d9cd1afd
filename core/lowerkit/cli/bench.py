"""Benchmarking a module: ``lowerkit.bench(...)`` and ``lowerkit bench FILE``.

Inputs come from the caller (arrays or ``.npy`` files) or are drawn at random from the
method's signature. After ``warmup`` untimed calls, the method runs ``repeats`` times (or
for ``seconds``); the result holds every latency, the min/p50/p90/p99 and the throughput,
and with ``profile=True`` the time per backend (``lowerkit.profile``) and per region of a
partitioned module.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import InputError

__all__ = ["BenchResult", "bench", "free_dims", "random_inputs"]

DEFAULT_REPEATS = 20


@dataclass(frozen=True, slots=True)
class BenchResult:
    """Latencies of one method; times in milliseconds."""

    name: str
    method: str
    backend: str | list[str]
    batch: int
    warmup: int
    latencies_ms: tuple[float, ...]
    backends_ms: dict[str, float] = field(default_factory=dict)  # total per backend (with profile)
    regions_ms: dict[str, float] = field(default_factory=dict)  # total per region (with profile)

    @property
    def repeats(self) -> int:
        return len(self.latencies_ms)

    def percentile(self, q: float) -> float:
        return float(np.percentile(self.latencies_ms, q))

    @property
    def throughput(self) -> float:
        """Samples per second: batch size over the mean latency."""
        total_s = sum(self.latencies_ms) / 1e3
        return self.batch * self.repeats / total_s if total_s > 0 else float("inf")

    def as_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "name": self.name, "method": self.method, "backend": self.backend, "batch": self.batch,
            "warmup": self.warmup, "repeats": self.repeats,
            "latency_ms": {
                "min": min(self.latencies_ms), "p50": self.percentile(50), "p90": self.percentile(90),
                "p99": self.percentile(99), "max": max(self.latencies_ms),
                "mean": float(np.mean(self.latencies_ms)),
            },
            "throughput_per_s": self.throughput,
        }
        if self.backends_ms or self.regions_ms:
            data["profile_ms"] = {"backends": dict(self.backends_ms), "regions": dict(self.regions_ms)}
        return data

    def __str__(self) -> str:
        d = self.as_dict()
        lat = d["latency_ms"]
        backend = self.backend if isinstance(self.backend, str) else "+".join(self.backend)
        lines = [
            f"{self.name}.{self.method} on {backend}: batch {self.batch}, {self.repeats} runs after {self.warmup} warm-up",
            f"latency ms: min {lat['min']:.3f}  p50 {lat['p50']:.3f}  p90 {lat['p90']:.3f}  "
            f"p99 {lat['p99']:.3f}  max {lat['max']:.3f}",
            f"throughput: {self.throughput:.1f} samples/s",
        ]
        total = sum(self.latencies_ms)
        for title, table in (("per backend", self.backends_ms), ("per region", self.regions_ms)):
            if table:
                lines.append(f"time {title} (all timed runs):")
                for key, ms in sorted(table.items(), key=lambda kv: -kv[1]):
                    share = f"{100 * ms / total:5.1f}%" if total else "-"
                    lines.append(f"  {key:<24} {ms:10.3f} ms  {share}")
        return "\n".join(lines)


def free_dims(sig: Any) -> list[tuple[str, int]]:
    """(input name, axis) of every dimension the signature leaves free (not an int)."""
    return [(name, axis) for name, t in sig.inputs for axis, d in enumerate(t.shape) if not isinstance(d, int)]


def random_inputs(sig: Any, batch: int | None = None, seed: int = 0) -> dict[str, np.ndarray]:
    """Random inputs fitting ``sig``; free dimensions take ``batch`` (default 1)."""
    rng = np.random.default_rng(seed)
    out = {}
    for name, t in sig.inputs:
        shape = tuple(d if isinstance(d, int) else (batch or 1) for d in t.shape)
        dtype = np.dtype(t.numpy_dtype)
        if dtype.kind == "f":
            out[name] = rng.standard_normal(shape).astype(dtype)
        elif dtype.kind == "b":
            out[name] = rng.integers(0, 2, shape).astype(dtype)
        else:
            out[name] = rng.integers(0, 10, shape).astype(dtype)
    return out


def _check_batch(sig: Any, method: str, batch: int | None) -> int:
    if batch is None:
        return 1
    if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
        raise InputError(f"--batch expects a positive integer, got {batch!r}")
    if not free_dims(sig):
        shown = ", ".join(f"{n}: {t}" for n, t in sig.inputs)
        raise InputError(
            f"--batch {batch}: method {method!r} has no free batch dimension (its inputs are {shown}); "
            "lower the model with a free batch dimension, or leave out --batch"
        )
    return batch


@contextlib.contextmanager
def _region_timer(obj: Any) -> Iterator[dict[str, float]]:
    """Time each region of a partitioned module by its compiled handle (a profiler wrapper)."""
    from ..backend.hookspecs import hookimpl
    from ..backend.registry import add_wrapper

    regions = getattr(obj, "regions", None) or {}
    totals: dict[str, float] = {}
    pairs: list[tuple[Any, str]] = []
    for name, region in regions.items():
        handles = getattr(region, "_handles", None) or {}
        pairs += [(h, name) for h in handles.values()]

    class _Timer:
        def __init__(self, backend: str) -> None:
            self.backend = backend

        @hookimpl(wrapper=True)
        def lowerkit_execute(self, handle):  # type: ignore[no-untyped-def]
            started = time.perf_counter()
            try:
                return (yield)
            finally:
                for h, name in pairs:
                    if h is handle:
                        totals[name] = totals.get(name, 0.0) + (time.perf_counter() - started) * 1e3
                        break

    remove = add_wrapper(_Timer) if pairs else None
    try:
        yield totals
    finally:
        if remove is not None:
            remove()


def bench(
    module: Any,
    inputs: Mapping[str, Any] | Sequence[Any] | None = None,
    *,
    method: str = "forward",
    batch: int | None = None,
    warmup: int = 3,
    repeats: int | None = None,
    seconds: float | None = None,
    profile: bool = False,
    seed: int = 0,
) -> BenchResult:
    """Time ``module.run(method, ...)``: ``repeats`` runs (default 20) or as many as fit ``seconds``.

    ``module`` is a module (plain, lowered or partitioned) or the path of a saved one;
    ``inputs`` a feed dict or a list in signature order, or ``None`` for random inputs
    drawn from the signature (free dimensions take ``batch``). Shows a progress line on a
    terminal. Raises ``InputError`` for bad counts, a ``batch`` on a module whose batch is
    fixed, or inputs that do not fit.
    """
    from ..progress import progress

    if isinstance(module, str) or hasattr(module, "__fspath__"):
        from .. import serialization

        module = serialization.load(module)
    if repeats is not None and seconds is not None:
        raise InputError("give --repeats or --time, not both")
    if repeats is not None and (isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 1):
        raise InputError(f"--repeats expects a positive number of timed runs, got {repeats!r}")
    if seconds is not None and not (isinstance(seconds, (int, float)) and seconds > 0):
        raise InputError(f"--time expects a positive number of seconds, got {seconds!r}")
    if isinstance(warmup, bool) or not isinstance(warmup, int) or warmup < 0:
        raise InputError(f"--warmup expects a number of runs >= 0, got {warmup!r}")
    if method not in getattr(module, "methods", {}):
        raise InputError(f"--method {method}: the module has no such method; its methods are {sorted(module.methods)}")
    sig = module.signature(method)
    batch_size = _check_batch(sig, method, batch)
    if inputs is None:
        feed: Any = random_inputs(sig, batch, seed)
    elif isinstance(inputs, Mapping):
        feed = dict(inputs)
    else:
        feed = dict(zip(sig.input_names, inputs))
        if len(inputs) != len(sig.inputs):
            raise InputError(f"method {method!r} takes {len(sig.inputs)} inputs, got {len(inputs)}")
    if inputs is not None and batch is None and free_dims(sig):
        name, axis = free_dims(sig)[0]
        batch_size = int(np.shape(feed[name])[axis])
    args = [feed[n] for n in sig.input_names] if all(n in feed for n in sig.input_names) else None
    if args is None:
        module.run(method, feed)  # raises the InputError naming what is missing
    for _ in range(max(warmup, 1)):  # at least one: the first call compiles and allocates
        module.run(method, *args)
    count = repeats if repeats is not None else (None if seconds is not None else DEFAULT_REPEATS)
    latencies: list[float] = []
    backends_ms: dict[str, float] = {}
    regions_ms: dict[str, float] = {}
    with contextlib.ExitStack() as stack:
        report = None
        if profile:
            from ..backend.profile import profile as profile_calls

            report = stack.enter_context(profile_calls())
            regions_ms = stack.enter_context(_region_timer(module))
        bar = stack.enter_context(progress(count, f"bench {method}", unit="run"))
        deadline = time.perf_counter() + seconds if seconds is not None else None
        while True:
            started = time.perf_counter()
            module.run(method, *args)
            now = time.perf_counter()
            latencies.append((now - started) * 1e3)
            bar.update()
            if count is not None and len(latencies) >= count:
                break
            if deadline is not None and now >= deadline:
                break
        if report is not None:
            for row in report.rows:
                if not row.method.startswith("("):
                    backends_ms[row.backend] = backends_ms.get(row.backend, 0.0) + row.total_s * 1e3
    return BenchResult(
        getattr(module, "name", "module"), method, getattr(module, "backend", "reference"),
        batch_size, warmup, tuple(latencies), backends_ms, dict(regions_ms),
    )
