"""How an un-lowered module runs: on the ``reference`` backend, through the registry.

The module is preprocessed and compiled once per :class:`Module` instance; the result is
kept in ``module._runtime_cache`` (modules are immutable once built).
"""

from __future__ import annotations

import weakref
from typing import Any

import numpy as np

from ..errors import BackendNotFoundError
from ..backend.registry import get_backend
from ..ir import calls

REFERENCE = "reference"


def run_module_method(module: Any, method: str, inputs: list[np.ndarray]) -> list[np.ndarray]:
    """Run one method of an un-lowered module on ``reference``; inputs are already checked."""
    cache = module._runtime_cache
    if cache is None:
        cache = module._runtime_cache = _compile_on_reference(module)
    backend, handles = cache
    return [np.asarray(o) for o in backend.execute(handles[method], inputs, method)]


def _compile_on_reference(module: Any) -> tuple[Any, dict[str, Any]]:
    try:
        backend = get_backend(REFERENCE)
    except BackendNotFoundError as err:
        raise BackendNotFoundError(
            f"un-lowered modules run on the reference backend: {err}"
        ) from err
    backend.require_available(f"running {module.name}")
    spec = {m: {} for m in module.methods}
    payload = backend.preprocess(module, spec)
    handles = backend.compile(payload, spec, made_by=backend.version)
    if backend.has_hook("lowerkit_destroy"):
        weakref.finalize(module, backend.destroy, handles)
    return backend, handles


calls.install(runner=run_module_method)
