"""The profiler: a pluggy wrapper plugin registered in every backend's plugin manager.

``with lowerkit.profile() as report: ...`` collects, per backend and per method, how many
times each hook ran and how long it took; ``print(report)`` shows a table. With
``LOWERKIT_PROFILE=1`` in the environment a process-wide report is printed at exit.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass

from .hookspecs import hookimpl
from .wrappers import WRAPPERS

__all__ = ["ProfileReport", "ProfileRow", "profile"]

PROFILE_ENV = "LOWERKIT_PROFILE"

# Pseudo method names for the hooks that are not per method.
PREPROCESS = "(preprocess)"
COMPILE = "(compile)"


@dataclass(frozen=True, slots=True)
class ProfileRow:
    """Totals for one backend and method (or ``(preprocess)``/``(compile)``)."""

    backend: str
    method: str
    calls: int
    total_s: float

    @property
    def mean_s(self) -> float:
        return self.total_s / self.calls if self.calls else 0.0


class ProfileReport:
    """Call counts and times per backend and method, filled while a profile is active."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._totals: dict[tuple[str, str], list[float]] = {}

    def record(self, backend: str, method: str, seconds: float) -> None:
        with self._lock:
            entry = self._totals.setdefault((backend, method), [0, 0.0])
            entry[0] += 1
            entry[1] += seconds

    @property
    def rows(self) -> list[ProfileRow]:
        with self._lock:
            items = sorted(self._totals.items())
        return [ProfileRow(b, m, int(c), t) for (b, m), (c, t) in items]

    def calls(self, backend: str, method: str) -> int:
        """How many times ``method`` ran on ``backend`` (0 if never)."""
        with self._lock:
            entry = self._totals.get((backend, method))
        return int(entry[0]) if entry else 0

    def as_dict(self) -> dict[str, dict[str, dict[str, float]]]:
        """``{backend: {method: {"calls", "total_s", "mean_s"}}}``."""
        result: dict[str, dict[str, dict[str, float]]] = {}
        for row in self.rows:
            result.setdefault(row.backend, {})[row.method] = {
                "calls": row.calls,
                "total_s": row.total_s,
                "mean_s": row.mean_s,
            }
        return result

    def __str__(self) -> str:
        rows = self.rows
        if not rows:
            return "lowerkit profile: no backend calls"
        header = ("BACKEND", "METHOD", "CALLS", "TOTAL ms", "MEAN ms")
        table = [header] + [
            (r.backend, r.method, str(r.calls), f"{r.total_s * 1e3:.3f}", f"{r.mean_s * 1e3:.3f}")
            for r in rows
        ]
        widths = [max(len(line[i]) for line in table) for i in range(len(header))]
        lines = []
        for line in table:
            cells = [
                cell.ljust(w) if i < 2 else cell.rjust(w)
                for i, (cell, w) in enumerate(zip(line, widths))
            ]
            lines.append("  ".join(cells).rstrip())
        return "\n".join(lines)

    def __repr__(self) -> str:
        return f"<lowerkit.ProfileReport {len(self._totals)} rows>"


# Reports currently collecting; the wrappers feed all of them (profiles may nest).
_ACTIVE: list[ProfileReport] = []
_ACTIVE_LOCK = threading.Lock()
_remove_wrapper = None


class _ProfilerPlugin:
    """Times every hook call of one backend; registered by lowerkit in that backend's manager."""

    def __init__(self, backend: str) -> None:
        self.backend = backend

    def _record(self, method: str, started: float) -> None:
        elapsed = time.perf_counter() - started
        with _ACTIVE_LOCK:
            reports = list(_ACTIVE)
        for report in reports:
            report.record(self.backend, method, elapsed)

    @hookimpl(wrapper=True)
    def lowerkit_execute(self, method: str):  # type: ignore[no-untyped-def]
        started = time.perf_counter()
        try:
            return (yield)
        finally:
            self._record(method, started)

    @hookimpl(wrapper=True)
    def lowerkit_compile(self):  # type: ignore[no-untyped-def]
        started = time.perf_counter()
        try:
            return (yield)
        finally:
            self._record(COMPILE, started)

    @hookimpl(wrapper=True)
    def lowerkit_preprocess(self):  # type: ignore[no-untyped-def]
        started = time.perf_counter()
        try:
            return (yield)
        finally:
            self._record(PREPROCESS, started)


def _start(report: ProfileReport) -> None:
    global _remove_wrapper
    with _ACTIVE_LOCK:
        _ACTIVE.append(report)
        first = _remove_wrapper is None
        if first:
            _remove_wrapper = WRAPPERS.add(_ProfilerPlugin)


def _stop(report: ProfileReport) -> None:
    global _remove_wrapper
    with _ACTIVE_LOCK:
        if report in _ACTIVE:
            _ACTIVE.remove(report)
        remove = _remove_wrapper if not _ACTIVE else None
        if remove is not None:
            _remove_wrapper = None
    if remove is not None:
        remove()


@contextlib.contextmanager
def profile() -> Iterator[ProfileReport]:
    """Collect per-backend, per-method call counts and times while the block runs.

    >>> with lowerkit.profile() as report:
    ...     lowered(x)
    >>> print(report)
    """
    report = ProfileReport()
    _start(report)
    try:
        yield report
    finally:
        _stop(report)


_ENV_REPORT: ProfileReport | None = None


def start_env_profile() -> None:
    """If ``LOWERKIT_PROFILE=1``, start a process-wide profile printed at exit (once)."""
    global _ENV_REPORT
    if _ENV_REPORT is not None or os.environ.get(PROFILE_ENV, "") in ("", "0"):
        return
    _ENV_REPORT = ProfileReport()
    _start(_ENV_REPORT)
    atexit.register(_print_env_report, _ENV_REPORT)


def _print_env_report(report: ProfileReport) -> None:
    print(report, file=sys.stderr)
