"""Lowering one module to one backend: preprocess here, compile where available.

Both ``to_backend`` and partitioned lowering (for each region) come here.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from typing import Any

from ..backend.registry import get_backend
from ..errors import InputError
from ..ir.module import Module
from .lowered import DelegateRecord, LoweredModule

__all__ = ["lower_to_one", "normalize_compile_spec"]


def lower_to_one(
    module: Module, backend: str, spec: dict[str, dict[str, Any]], *, keep_source: bool, stacklevel: int = 2
) -> LoweredModule:
    """Preprocess ``module`` on ``backend`` with a normalized ``spec``; compile if available.

    ``stacklevel`` points the unavailability warning at the user's call.
    """
    chosen = get_backend(backend)
    payload = chosen.preprocess(module, copy.deepcopy(spec))
    record = DelegateRecord(
        backend=chosen.name,
        distribution=chosen.distribution,
        version=chosen.version,
        compile_spec=spec,
        payload=payload,
        signatures={m: module.signature(m) for m in module.methods},
        original=module if keep_source else None,
        name=module.name,
    )
    return LoweredModule._created(record, chosen, stacklevel=stacklevel + 1)


def normalize_compile_spec(
    module: Module, compile_spec: Mapping[str, Mapping[str, Any]] | None
) -> dict[str, dict[str, Any]]:
    """Fill defaults (``{}`` per method) and check a compile spec; returns a fresh dict."""
    methods = sorted(module.methods)
    if compile_spec is None:
        compile_spec = {}
    if not isinstance(compile_spec, Mapping):
        raise InputError(
            f"compile_spec must map method names to option dicts, got {type(compile_spec).__name__}"
        )
    unknown = sorted(str(k) for k in compile_spec if k not in module.methods)
    if unknown:
        raise InputError(
            f"compile_spec names method(s) {unknown} that {module.name} does not have; "
            f"its methods are {methods}"
        )
    result: dict[str, dict[str, Any]] = {}
    for method in module.methods:
        options = compile_spec.get(method, {})
        if not isinstance(options, Mapping):
            raise InputError(
                f"compile_spec[{method!r}] must be a dict of options, got {type(options).__name__}"
            )
        options = {str(k): v for k, v in options.items()}
        try:
            json.dumps(options, allow_nan=False)
        except (TypeError, ValueError) as err:
            raise InputError(
                f"compile_spec[{method!r}] must hold JSON values (str, number, bool, None, "
                f"lists, dicts) so it can be saved: {err}"
            ) from None
        result[method] = copy.deepcopy(options)
    return result
