"""``to_backend``: lower a module to a backend (preprocess here, compile where available)."""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping, Sequence
from typing import Any

from .lowered import DelegateRecord, LoweredModule
from ..errors import InputError
from ..ir.module import Module, trace_hint

__all__ = ["normalize_compile_spec", "to_backend"]


def to_backend(
    module: Module,
    backend: str | Sequence[str],
    compile_spec: Mapping[str, Mapping[str, Any]] | None = None,
    *,
    keep_source: bool = False,
    submodules: Sequence[str] | None = None,
) -> LoweredModule:
    """Lower ``module`` to ``backend``; returns a :class:`LoweredModule`.

    ``compile_spec`` maps method names to option dicts (``None``: every method with
    ``{}``; methods not named get ``{}``). Preprocess runs here, always; compile runs now if
    the backend is available, otherwise a ``BackendUnavailableWarning`` says the module can
    be saved and run after loading where it is. ``keep_source=True`` stores the original
    module too, so that ``load(..., fallback="reference")`` can run it.

    With a list of backends (priority order) or ``submodules=[paths]``, the module is
    partitioned (see ``docs/partitioning.md``): each node goes to the first backend that
    supports it, and the result is a :class:`~lowerkit.partition.PartitionedModule`;
    ``compile_spec`` then maps each method to ``{backend: options}``.

    Raises ``BackendNotFoundError`` (not installed), ``PluginError`` (broken plugin),
    ``InputError`` (bad compile spec) and whatever the backend's preprocess raises
    (``UnsupportedOperatorError``).
    """
    from ..backend.registry import get_backend

    if isinstance(module, LoweredModule):
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
    if not isinstance(backend, str) or submodules is not None:
        from .partitioned import lower_partitioned

        if len(set(names)) != len(names):
            raise InputError(f"backend list {names} names a backend twice")
        return lower_partitioned(module, names, spec, submodules=submodules, keep_source=keep_source)
    chosen = get_backend(names[0])
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
    return LoweredModule._created(record, chosen)


def _as_list(items: object) -> list[Any] | None:
    """``list(items)``, or None when ``items`` is not iterable."""
    try:
        return list(items)  # type: ignore[call-overload]
    except TypeError:
        return None


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
