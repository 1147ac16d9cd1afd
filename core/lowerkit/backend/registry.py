"""Backend discovery and the registry: one pluggy plugin manager per backend.

Backends are found through entry points in the group ``lowerkit.backends``. Listing their
names reads entry points and distribution metadata only; a backend's module is imported
the first time it is used or its availability is asked. A plugin that fails (import
error, malformed hooks, exception in a hook) is reported as broken and never disturbs
the others. ``LOWERKIT_DISABLE_PLUGINS=a,b`` blocks backends before they are imported.
"""

from __future__ import annotations

import difflib
import os
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from typing import Any

from ..errors import BackendNotFoundError, LowerkitError, PluginError
from .hookspecs import HOOK_NAMES
from .manager import DISABLE_ENV, Backend, disabled_names, disabled_reason
from .profile import start_env_profile
from .wrappers import WRAPPERS, WrapperFactory



def _metadata() -> Any:
    """``importlib.metadata`` (or its backport before 3.12), imported at the first lookup of
    the installed backends, not at ``import lowerkit`` (it costs milliseconds to import)."""
    if sys.version_info >= (3, 12):  # pragma: no cover - depends on the interpreter
        import importlib.metadata as metadata
    else:  # the stdlib API differs before 3.12; the backport is a core dependency there
        try:
            import importlib_metadata as metadata
        except ImportError:  # pragma: no cover
            import importlib.metadata as metadata  # type: ignore[no-redef]
    return metadata

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
PROBE_TIMEOUT_ENV = "LOWERKIT_PROBE_TIMEOUT"
DEFAULT_PROBE_TIMEOUT = 5.0

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
    #: The entry point's target (``package.module:object``), or the in-process origin.
    module: str = ""
    #: The hooks the plugin implements (``None`` when not loaded).
    hooks: tuple[str, ...] | None = None
    #: ``lowerkit_options()``: dicts with name, type, default, doc (``None``: not declared).
    options: tuple[dict[str, Any], ...] | None = None
    #: ``lowerkit_supported_ops()`` (``None``: not declared, or not asked with
    #: ``backends(ops=False)``; ``()`` with no ``lowerkit_is_supported``: whole modules only).
    ops: tuple[str, ...] | None = None
    #: The payload versions it reads, the written one first (lowerkit_payload_versions);
    #: ``None`` when not asked (check=False), broken, or the backend does not say.
    payload_versions: tuple[str, ...] | None = None

    @property
    def broken(self) -> bool:
        return self.error is not None

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["broken"] = self.broken
        for key in ("hooks", "options", "ops", "payload_versions"):
            if data[key] is not None:
                data[key] = list(data[key])
        return data


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
        for ep in _metadata().entry_points(group=ENTRY_POINT_GROUP):
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

    def infos(self, check: bool, timeout: float | None = None, ops: bool = True) -> list[BackendInfo]:
        with self._lock:
            claims = self.claims()
            in_process = dict(self._in_process)
        result: list[BackendInfo | None] = []
        probes: list[tuple[int, _Probe]] = []
        for name in sorted(set(claims) | set(in_process)):
            if name in in_process:
                b = in_process[name]
                dist, version, module = b.distribution, b.version, b.origin
            else:
                found = claims[name]
                dist = ", ".join(c.distribution for c in found)
                version = ", ".join(c.version for c in found)
                module = ", ".join(c.value for c in found)
            base = BackendInfo(name, dist, version, None, module=module)
            disabled = disabled_reason(name)
            if disabled:
                result.append(replace(base, available=False, note=disabled))
            elif name not in in_process and len(claims[name]) > 1:
                result.append(replace(base, available=False, error=_duplicate_message(name, claims[name])))
            elif not check:
                result.append(base)
            else:
                probes.append((len(result), _Probe(self, base, ops)))
                result.append(None)
        # Probes run side by side, each in a daemon thread, so that one hanging plugin costs
        # at most the timeout and never blocks the listing.
        limit = probe_timeout(timeout)
        for _, probe in probes:
            probe.start()
        deadline = time.monotonic() + limit
        for index, probe in probes:
            result[index] = probe.finish(max(0.0, deadline - time.monotonic()), limit)
        return [info for info in result if info is not None]


def probe_timeout(timeout: float | None = None) -> float:
    """Seconds a listing waits for a backend's probe: ``timeout``, else ``$LOWERKIT_PROBE_TIMEOUT``, else 5."""
    if timeout is None:
        raw = os.environ.get(PROBE_TIMEOUT_ENV, "").strip()
        try:
            timeout = float(raw) if raw else DEFAULT_PROBE_TIMEOUT
        except ValueError:
            timeout = DEFAULT_PROBE_TIMEOUT
    if not timeout > 0:  # also NaN
        timeout = DEFAULT_PROBE_TIMEOUT
    return float(timeout)


class _Probe:
    """Load one backend and ask its availability, options and ops, in a daemon thread."""

    def __init__(self, registry: _Registry, base: BackendInfo, ops: bool) -> None:
        self._registry = registry
        self._base = base
        self._ask_ops = ops
        self._info: BackendInfo | None = None
        self._thread = threading.Thread(target=self._run, name=f"lowerkit-probe-{base.name}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def finish(self, wait: float, limit: float) -> BackendInfo:
        self._thread.join(wait)
        if self._info is not None:
            return self._info
        return replace(
            self._base,
            available=False,
            note=f"did not answer within {limit:g} s (its plugin hangs while loading or in "
            f"lowerkit_is_available; set {PROBE_TIMEOUT_ENV} to wait longer)",
        )

    def _run(self) -> None:
        base = self._base
        try:
            backend = self._registry.get(base.name)
            backend._ensure_loaded()
            available, reason = backend.availability()
            info = replace(base, available=bool(available), note=str(reason or ""))
            hooks = tuple(h for h in HOOK_NAMES if backend.has_hook(h))
            ops = _declared_ops(backend, hooks) if self._ask_ops else None
            info = replace(info, hooks=hooks, options=_declared_options(backend), ops=ops)
            info = replace(info, payload_versions=backend.payload_versions() or None)
        except LowerkitError as err:
            info = replace(base, available=False, error=str(err))
        except BaseException as err:  # noqa: BLE001 - SystemExit at import, a bad answer: listed, never raised
            info = replace(
                base, available=False,
                error=f"backend {base.name!r} ({base.module}) failed while being listed: {type(err).__name__}: {err}",
            )
        self._info = info


def _declared_options(backend: Backend) -> tuple[dict[str, Any], ...] | None:
    if not backend.has_hook("lowerkit_options"):
        return None
    answer = backend.pm.hook.lowerkit_options()
    if not isinstance(answer, (list, tuple)) or not all(isinstance(o, dict) and "name" in o for o in answer):
        raise PluginError(
            f"backend {backend.name!r}: lowerkit_options must return a list of dicts with at least "
            f"a 'name', got {type(answer).__name__}"
        )
    keys = ("name", "type", "default", "doc")
    return tuple({k: _jsonable(o.get(k, "")) for k in keys} for o in answer)


def _declared_ops(backend: Backend, hooks: tuple[str, ...]) -> tuple[str, ...] | None:
    if "lowerkit_supported_ops" in hooks:
        answer = backend.pm.hook.lowerkit_supported_ops()
        if not isinstance(answer, (list, tuple, set, frozenset)) or not all(isinstance(o, str) for o in answer):
            raise PluginError(
                f"backend {backend.name!r}: lowerkit_supported_ops must return a list of op names, "
                f"got {type(answer).__name__}"
            )
        return tuple(sorted(set(answer)))
    return () if "lowerkit_is_supported" not in hooks else None


def _jsonable(value: Any) -> Any:
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return repr(value)


def not_found_message(name: str, installed: list[str]) -> str:
    dist = _KNOWN_DISTRIBUTIONS.get(name)
    hint = f"; install it with `pip install {dist}`" if dist else ""
    if name == "reference":
        hint += " (or `pip install plugins/reference` from a lowerkit checkout)"
    close = difflib.get_close_matches(name, installed, n=1, cutoff=0.6)
    if not close:  # glowlike -> glow_like, NNPACK -> nnpack
        squash = {n.replace("_", "").replace("-", "").lower(): n for n in installed}
        key = name.replace("_", "").replace("-", "").lower()
        close = [squash[key]] if key in squash else []
    mean = f" (did you mean {close[0]!r}?)" if close else ""
    return f"no backend named {name!r} is installed{mean}{hint}; installed backends: {installed or 'none'}"


def _duplicate_message(name: str, claims: list[_Claim]) -> str:
    listed = " and ".join(c.describe() for c in claims)
    return f"backend name {name!r} is claimed by more than one distribution: {listed}; uninstall all but one"


_REGISTRY = _Registry()
WRAPPERS.listen(_wrappers_changed)


def backends(*, check: bool = True, timeout: float | None = None, ops: bool = True) -> list[BackendInfo]:
    """Every installed backend, sorted by name, with distribution, version and availability.

    With ``check=False`` nothing is imported and ``available`` is ``None``. Otherwise each
    backend is loaded and asked (availability, hooks, options, ops) for at most ``timeout``
    seconds (default ``$LOWERKIT_PROBE_TIMEOUT`` or 5); one that does not answer in time is
    listed as unavailable with that reason. A broken plugin is listed with its ``error``
    (whatever it raised, ``SystemExit`` included); it never prevents the others from being
    listed, and listing never raises because of a plugin. With ``ops=False`` the backends are
    not asked for their supported ops (which usually imports their kernels) and ``ops`` is
    ``None``: the quick listing of ``lowerkit backends`` without ``-v``/``--json``.
    """
    start_env_profile()
    return _REGISTRY.infos(check, timeout, ops)


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
