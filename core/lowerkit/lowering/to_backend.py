"""``to_backend``: lower a module to a backend (preprocess here, compile where available)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..errors import InputError
from ..ir.module import Module, trace_hint
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
    ``compile_spec`` then maps each method to ``{backend: options}``.

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
    if not isinstance(backend, str) or submodules is not None:
        if len(set(names)) != len(names):
            raise InputError(f"backend list {names} names a backend twice")
        return lower_partitioned(module, names, spec, submodules=submodules, keep_source=keep_source)
    return lower_to_one(module, names[0], spec, keep_source=keep_source, stacklevel=3)


def _as_list(items: object) -> list[Any] | None:
    """``list(items)``, or None when ``items`` is not iterable."""
    try:
        return list(items)  # type: ignore[call-overload]
    except TypeError:
        return None
