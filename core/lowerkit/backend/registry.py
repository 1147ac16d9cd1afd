"""Backend discovery and the registry: one pluggy plugin manager per backend.

Backends are found through entry points in the group ``lowerkit.backends``. Listing their
names reads entry points and distribution metadata only; a backend's module is imported
the first time it is used or its availability is asked. A plugin that fails (import
error, malformed hooks, exception in a hook) is reported as broken and never disturbs
the others. ``LOWERKIT_DISABLE_PLUGINS=a,b`` blocks backends before they are imported.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from ..errors import BackendNotFoundError, LowerkitError, PluginError
from .manager import DISABLE_ENV, Backend, disabled_names, disabled_reason
from .profile import start_env_profile
from .wrappers import WRAPPERS, WrapperFactory

if sys.version_info >= (3, 12):  # pragma: no cover - depends on the interpreter
    import importlib.metadata as _metadata
else:  # the stdlib API differs before 3.12; the backport is a core dependency there
    try:
        import importlib_metadata as _metadata
    except ImportError:  # pragma: no cover
        import importlib.metadata as _metadata  # type: ignore[no-redef]

__all__ = [
    "DISABLE_ENV",
    "ENTRY_POINT_GROUP",
    "Backend",
    "BackendInfo",
    "add_wrapper",
    "backend_names",
    "backends",
    "disabled_names",
    "disabled_reason",
    "get_backend",
    "register_backend",
    "unregister_backend",
]

ENTRY_POINT_GROUP = "lowerkit.backends"

# Where to get the backends the core itself relies on, for "not installed" messages.
_KNOWN_DISTRIBUTIONS = {"reference": "lowerkit-reference"}


@dataclass(frozen=True, slots=True)
class BackendInfo:
    """One installed backend as ``lowerkit.backends()`` lists it.

    ``available`` is ``None`` when it was not asked (``backends(check=False)``). ``note``
    holds the reason a backend is unavailable or disabled; ``error`` is set for a broken
    plugin (import error, malformed hooks, a hook raising, a name claimed twice).
    """

    name: str
    distribution: str
    version: str
    available: bool | None
    note: str = ""
    error: str | None = None

    @property
    def broken(self) -> bool:
        return self.error is not None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True, slots=True)
class _Claim:
    """One entry point claiming a backend name."""

    name: str
    value: str
    distribution: str
    version: str
    entry_point: Any

    def describe(self) -> str:
        return f"{self.distribution} {self.version} ({self.name} = {self.value})"


def add_wrapper(factory: WrapperFactory) -> Callable[[], None]:
    """Register ``factory(backend_name) -> plugin`` in every backend's manager, now and later.

    The plugin holds pluggy wrapper implementations (``@hookimpl(wrapper=True)``). Returns
    a function that removes it again.
    """
    return WRAPPERS.add(factory)


def _wrappers_changed(key: int, factory: WrapperFactory | None) -> None:
    for backend in _REGISTRY.loaded():
        if factory is None:
            backend._remove_wrapper(key)
        else:
            backend._add_wrapper(key, factory)


# -- the registry ---------------------------------------------------------------------------
class _Registry:
    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._from_entry_points: dict[tuple[str, str, str], Backend] = {}
        self._in_process: dict[str, Backend] = {}
        self._claims_cache: tuple[tuple[str, ...], dict[str, list[_Claim]]] | None = None

    def loaded(self) -> list[Backend]:
        with self._lock:
            every = list(self._from_entry_points.values()) + list(self._in_process.values())
        return [b for b in every if b._pm is not None]

    def claims(self) -> dict[str, list[_Claim]]:
        """Entry points by backend name; reads metadata only, imports nothing.

        Reading every distribution's metadata takes milliseconds, and partitioning asks
        once per region, so the answer is kept until ``sys.path`` changes.
        """
        key = tuple(sys.path)
        cached = self._claims_cache
        if cached is not None and cached[0] == key:
            return cached[1]
        result = self._read_claims()
        self._claims_cache = (key, result)
        return result

    @staticmethod
    def _read_claims() -> dict[str, list[_Claim]]:
        result: dict[str, list[_Claim]] = {}
        for ep in _metadata.entry_points(group=ENTRY_POINT_GROUP):
            dist = getattr(ep, "dist", None)
            dist_name = dist.metadata["Name"] if dist is not None else ""
            version = dist.version if dist is not None else ""
            claim = _Claim(ep.name, ep.value, dist_name or "", version or "", ep)
            claims = result.setdefault(ep.name, [])
            if all(c.distribution != claim.distribution or c.value != claim.value for c in claims):
                claims.append(claim)
        return result

    def names(self) -> list[str]:
        with self._lock:
            return sorted(set(self.claims()) | set(self._in_process))

    def register(self, backend: Backend, replace: bool) -> None:
        with self._lock:
            if backend.name in self._in_process and not replace:
                raise PluginError(
                    f"a backend named {backend.name!r} is already registered in-process "
                    f"({self._in_process[backend.name].origin}); pass replace=True"
                )
            self._in_process[backend.name] = backend

    def unregister(self, name: str) -> None:
        with self._lock:
            self._in_process.pop(name, None)

    def get(self, name: str) -> Backend:
        """The backend called ``name``: in-process registrations shadow entry points."""
        if not isinstance(name, str) or not name:
            raise BackendNotFoundError(f"a backend name must be a non-empty string, got {name!r}")
        if disabled_reason(name):
            raise BackendNotFoundError(
                f"backend {name!r} is disabled by {DISABLE_ENV}={os.environ.get(DISABLE_ENV, '')}"
            )
        with self._lock:
            if name in self._in_process:
                return self._in_process[name]
            claims = self.claims()
            found = claims.get(name, [])
            if not found:
                raise BackendNotFoundError(not_found_message(name, sorted(set(claims) | set(self._in_process))))
            if len(found) > 1:
                raise PluginError(_duplicate_message(name, found))
            claim = found[0]
            key = (claim.name, claim.distribution, claim.value)
            backend = self._from_entry_points.get(key)
            if backend is None:
                backend = Backend(
                    claim.name,
                    claim.distribution,
                    claim.version,
                    claim.entry_point.load,
                    f"distribution {claim.describe()}",
                    WRAPPERS,
                )
                self._from_entry_points[key] = backend
            return backend

    def infos(self, check: bool) -> list[BackendInfo]:
        with self._lock:
            claims = self.claims()
            in_process = dict(self._in_process)
        result = []
        for name in sorted(set(claims) | set(in_process)):
            if name in in_process:
                b = in_process[name]
                dist, version = b.distribution, b.version
            else:
                found = claims[name]
                dist = ", ".join(c.distribution for c in found)
                version = ", ".join(c.version for c in found)
            disabled = disabled_reason(name)
            if disabled:
                result.append(BackendInfo(name, dist, version, False, disabled))
                continue
            if name not in in_process and len(claims[name]) > 1:
                error = _duplicate_message(name, claims[name])
                result.append(BackendInfo(name, dist, version, False, "", error))
                continue
            if not check:
                result.append(BackendInfo(name, dist, version, None))
                continue
            try:
                available, reason = self.get(name).availability()
            except LowerkitError as err:
                result.append(BackendInfo(name, dist, version, False, "", str(err)))
                continue
            result.append(BackendInfo(name, dist, version, available, reason))
        return result


def not_found_message(name: str, installed: list[str]) -> str:
    dist = _KNOWN_DISTRIBUTIONS.get(name)
    hint = f"; install it with `pip install {dist}`" if dist else ""
    if name == "reference":
        hint += " (or `pip install plugins/reference` from a lowerkit checkout)"
    return f"no backend named {name!r} is installed{hint}; installed backends: {installed or 'none'}"


def _duplicate_message(name: str, claims: list[_Claim]) -> str:
    listed = " and ".join(c.describe() for c in claims)
    return f"backend name {name!r} is claimed by more than one distribution: {listed}; uninstall all but one"


_REGISTRY = _Registry()
WRAPPERS.listen(_wrappers_changed)


def backends(*, check: bool = True) -> list[BackendInfo]:
    """Every installed backend, sorted by name, with distribution, version and availability.

    With ``check=False`` nothing is imported and ``available`` is ``None``. A broken plugin
    is listed with its ``error``; it never prevents the others from being listed.
    """
    start_env_profile()
    return _REGISTRY.infos(check)


def backend_names() -> list[str]:
    """Names of installed and registered backends; reads metadata only, imports nothing."""
    return _REGISTRY.names()


def get_backend(name: str) -> Backend:
    """The :class:`Backend` called ``name`` (loaded and validated).

    Raises ``BackendNotFoundError`` if none is installed (or it is disabled) and
    ``PluginError`` if it is broken or its name is claimed by two distributions.
    """
    start_env_profile()
    backend = _REGISTRY.get(name)
    backend._ensure_loaded()
    return backend


def register_backend(
    plugin: object,
    name: str,
    *,
    distribution: str = "",
    version: str = "",
    replace: bool = False,
) -> None:
    """Register a backend in this process (tests, embedding), validating its hooks now.

    ``plugin`` is a module, an object, or a class (instantiated without arguments). It
    shadows an installed backend of the same name until :func:`unregister_backend`.
    Raises ``PluginError`` naming the plugin if its hooks are malformed.
    """
    if not isinstance(name, str) or not name:
        raise PluginError(f"a backend name must be a non-empty string, got {name!r}")
    backend = Backend(name, distribution, version, lambda: plugin, "registered in-process", WRAPPERS)
    backend._ensure_loaded()
    _REGISTRY.register(backend, replace)


def unregister_backend(name: str) -> None:
    """Forget an in-process registration (installed backends are unaffected)."""
    _REGISTRY.unregister(name)
