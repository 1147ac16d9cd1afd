"""One progress line for long work (calibration, the demo, ``lowerkit bench``), from tqdm.

Shown on stderr only when stderr is a terminal, and never when quiet: ``lowerkit -q``,
:func:`set_quiet`, or the environment variable ``LOWERKIT_QUIET=1``. Everything else in
lowerkit and its backends uses this helper instead of writing its own bar, so that one
switch quiets them all. tqdm (a small pure-Python dependency of the core) draws the line;
without it, nothing is drawn.

    from lowerkit.progress import progress

    with progress(total=len(batches), desc="calibrating forward", unit="batch") as bar:
        for batch in batches:
            ...
            bar.update()
"""

from __future__ import annotations

import os
import sys
from types import TracebackType
from typing import Any, TextIO

__all__ = ["QUIET_ENV", "Progress", "enabled", "progress", "set_quiet"]

QUIET_ENV = "LOWERKIT_QUIET"
_quiet = False


def set_quiet(quiet: bool = True) -> None:
    """Silence (or allow again) every progress line in this process."""
    global _quiet
    _quiet = bool(quiet)


def enabled(stream: TextIO | None = None) -> bool:
    """Whether a progress line would be shown on ``stream`` (default stderr)."""
    if _quiet or os.environ.get(QUIET_ENV, "").strip() not in ("", "0"):
        return False
    stream = stream if stream is not None else sys.stderr
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # closed or not a real file
        return False


class Progress:
    """A progress line; a do-nothing one when not :func:`enabled`. Use as a context manager."""

    def __init__(self, total: int | None, desc: str, unit: str, show: bool) -> None:
        self._bar: Any = None
        if show:
            try:
                from tqdm import tqdm
            except ImportError:  # pragma: no cover - tqdm is a dependency; degrade quietly
                return
            self._bar = tqdm(total=total, desc=desc, unit=unit, leave=False, file=sys.stderr,
                             dynamic_ncols=True)

    def update(self, n: int = 1) -> None:
        if self._bar is not None:
            self._bar.update(n)

    def describe(self, desc: str) -> None:
        """Change the text before the bar (the step being worked on)."""
        if self._bar is not None:
            self._bar.set_description_str(desc)

    def note(self, text: str) -> None:
        """Text after the bar (e.g. the latest latency)."""
        if self._bar is not None:
            self._bar.set_postfix_str(text)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None

    def __enter__(self) -> Progress:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def progress(total: int | None = None, desc: str = "", *, unit: str = "it",
             show: bool | None = None) -> Progress:
    """A progress line of ``total`` steps (``None``: unknown); ``show`` overrides :func:`enabled`."""
    return Progress(total, desc, unit, enabled() if show is None else (show and enabled()))
