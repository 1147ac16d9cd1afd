"""``to_backend``: lower a module to a backend (preprocess here, compile where available)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ..errors import InputError
from ..ir.module import Module, check_inputs, trace_hint
from .delegate import lower_to_one, normalize_compile_spec
from .lowered import Lowered, LoweredModule
from .partitioned import lower_partitioned

__all__ = ["to_backend"]


def to_backend(
    module: Module,
    backend: str | Sequence[str],
    compile_spec: Mapping[str, Mapping[str, Any]] | None = None,
    *,
    keep_source: bool = False,
    submodules: Sequence[str] | None = None,
    plan: str = "priority",
    example_inputs: Sequence[Any] | Mapping[str, Sequence[Any]] | None = None,
    optimize: bool = True,
) -> Lowered:
    """Lower ``module`` to ``backend``; returns a :class:`LoweredModule`.

    ``compile_spec`` maps method names to option dicts (``None``: every method with
    ``{}``; methods not named get ``{}``). Preprocess runs here, always; compile runs now if
    the backend is available, otherwise a ``BackendUnavailableWarning`` says the module can
    be saved and run after loading where it is. ``keep_source=True`` stores the original
    module too, so that ``load(..., fallback="reference")`` can run it.

    With a list of backends (priority order) or ``submodules=[paths]``, the module is
    partitioned (see ``docs/partitioning.md``): each node goes to the first backend that
    supports it, and the result is a :class:`~lowerkit.lowering.PartitionedModule`;
    ``compile_spec`` then maps each method to ``{backend: options}``. The core graph passes
    (batch-norm and constant folding, dead code) run before partitioning, unless
    ``optimize=False`` or ``submodules`` is given. ``plan="measure"``
    with ``example_inputs`` (the inputs of ``forward``, or ``{method: inputs}``) times
    candidate plans on this machine and keeps the fastest; the timings are in the
    partition report (see ``docs/partitioning.md``).

    Raises ``BackendNotFoundError`` (not installed), ``PluginError`` (broken plugin),
    ``InputError`` (bad compile spec) and whatever the backend's preprocess raises
    (``UnsupportedOperatorError``).
    """
    if isinstance(module, Lowered):
        raise InputError(f"{module.name} is already lowered to backend {module.backend!r}")
    if not isinstance(module, Module):
        raise InputError(
            f"to_backend expects a lowerkit.Module, got {type(module).__name__}{trace_hint(module)}"
        )
    names = [backend] if isinstance(backend, str) else _as_list(backend)
    if not names or not all(isinstance(n, str) and n for n in names):
        raise InputError(f"backend must be a name or a non-empty list of names, got {backend!r}")
    if submodules is not None:
        paths = None if isinstance(submodules, str) else _as_list(submodules)
        if paths is None or not all(isinstance(p, str) for p in paths):
            hint = f"; write submodules=[{submodules!r}]" if isinstance(submodules, str) else ""
            raise InputError(f"submodules must be a list of module paths, got {submodules!r}{hint}")
        submodules = paths
    spec = normalize_compile_spec(module, compile_spec)
    examples = _check_plan(module, backend, plan, example_inputs, submodules)
    if not isinstance(backend, str) or submodules is not None:
        if len(set(names)) != len(names):
            raise InputError(f"backend list {names} names a backend twice")
        return lower_partitioned(
            module, names, spec, submodules=submodules, keep_source=keep_source,
            plan=plan, example_inputs=examples, optimize=optimize,
        )
    return lower_to_one(module, names[0], spec, keep_source=keep_source, stacklevel=3)


PLANS = ("priority", "measure")


def _check_plan(
    module: Module,
    backend: object,
    plan: object,
    example_inputs: object,
    submodules: object,
) -> dict[str, list[Any]] | None:
    """Check ``plan`` and ``example_inputs``; the inputs as ``{method: checked arrays}``."""
    if plan not in PLANS:
        raise InputError(f"plan must be one of {list(PLANS)}, got {plan!r}")
    if plan == "priority":
        if example_inputs is not None:
            raise InputError('example_inputs are used only with plan="measure"')
        return None
    if isinstance(backend, str):
        raise InputError(
            f'plan="measure" chooses between backends: give a list, e.g. [{backend!r}, "reference"]'
        )
    if submodules is not None:
        raise InputError('plan="measure" does not combine with submodules=; lower the whole module')
    if example_inputs is None:
        raise InputError(
            'plan="measure" needs example_inputs: the inputs of forward (a tuple of arrays) or '
            "{method: inputs}, to time candidate plans on"
        )
    if isinstance(example_inputs, Mapping):
        given = dict(example_inputs)
    elif isinstance(example_inputs, np.ndarray):
        given = {"forward": [example_inputs]}
    else:
        items = _as_list(example_inputs)
        if items is None:
            raise InputError(
                f"example_inputs must be a tuple of arrays or {{method: inputs}}, got "
                f"{type(example_inputs).__name__}"
            )
        given = {"forward": items}
    checked: dict[str, list[Any]] = {}
    for method, inputs in given.items():
        sig = module.signature(method)  # InputError naming the methods for an unknown one
        items = [inputs] if isinstance(inputs, np.ndarray) else _as_list(inputs)
        if items is None:
            raise InputError(f"example_inputs[{method!r}] must be a tuple of arrays")
        checked[method] = check_inputs(method, sig, items)
    return checked


def _as_list(items: object) -> list[Any] | None:
    """``list(items)``, or None when ``items`` is not iterable."""
    try:
        return list(items)  # type: ignore[call-overload]
    except TypeError:
        return None
