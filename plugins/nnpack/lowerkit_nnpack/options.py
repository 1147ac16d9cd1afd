"""Compile-spec options of the nnpack backend and their validation."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from lowerkit.errors import InputError

from .algorithms import ALGORITHMS
from .conv import DEFAULT_BATCH_THRESHOLD, RunOptions

TRANSFORM_STRATEGIES = ("precompute", "compute")

DEFAULTS: dict[str, Any] = {
    "algorithm": "auto",
    "transform_strategy": "precompute",
    "threads": 0,  # 0: the machine's cores, decided where the module runs
    "batch_threshold": DEFAULT_BATCH_THRESHOLD,
}


def validate_options(method: str, options: Mapping[str, Any] | None) -> dict[str, Any]:
    """Options of ``method`` with defaults filled in; ``InputError`` for anything unknown or out of range."""
    options = dict(options or {})
    unknown = sorted(set(options) - set(DEFAULTS))
    if unknown:
        raise InputError(
            f"nnpack: method {method!r}: unknown option(s) {unknown}; valid options are {sorted(DEFAULTS)}"
        )
    result = {**DEFAULTS, **options}
    if result["algorithm"] not in ALGORITHMS:
        raise InputError(
            f"nnpack: method {method!r}: algorithm must be one of {list(ALGORITHMS)}, got {result['algorithm']!r}"
        )
    if result["transform_strategy"] not in TRANSFORM_STRATEGIES:
        raise InputError(
            f"nnpack: method {method!r}: transform_strategy must be one of {list(TRANSFORM_STRATEGIES)}, "
            f"got {result['transform_strategy']!r}"
        )
    for name, minimum in (("threads", 0), ("batch_threshold", 1)):
        value = result[name]
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise InputError(
                f"nnpack: method {method!r}: {name} must be an integer >= {minimum}, got {value!r}"
            )
    return result


def run_options(options: Mapping[str, Any]) -> RunOptions:
    """The scheduling part of validated options."""
    return RunOptions(threads=int(options["threads"]), batch_threshold=int(options["batch_threshold"]))
