"""Backend discovery and the registry: one pluggy plugin manager per backend.

Backends are found through entry points in the group ``lowerkit.backends``. Listing their
names reads entry points and distribution metadata only; a backend's module is imported
the first time it is used or its availability is asked. A plugin that fails (import
error, malformed hooks, exception in a hook) is reported as broken and never disturbs
the others. ``LOWERKIT_DISABLE_PLUGINS=a,b`` blocks backends before they are imported.
"""

from __future__ import annotations

import difflib
import inspect
import os
import sys
import threading
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import pluggy

from . import hookspecs
from .errors import BackendNotAvailableError, BackendNotFoundError, LowerkitError, PluginError

if sys.version_info >= (3, 12):  # pragma: no cover - depends on the interpreter
    import importlib.metadata as _metadata
else:  # the stdlib API differs before 3.12; the backport is a core dependency there
    try:
        import importlib_metadata as _metadata
    except ImportError:  # pragma: no cover
        import importlib.metadata as _metadata  # type: ignore[no-redef]

__all__ = [
    "ENTRY_POINT_GROUP",
    "Backend",
    "BackendInfo",
    "add_wrapper",
    "backend_names",
    "backends",
    "get_backend",
    "register_backend",
    "unregister_backend",
]

ENTRY_POINT_GROUP = "lowerkit.backends"
DISABLE_ENV = "LOWERKIT_DISABLE_PLUGINS"

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


def disabled_names() -> frozenset[str]:
    """Backend names blocked by ``LOWERKIT_DISABLE_PLUGINS`` (read now, not at import)."""
    raw = os.environ.get(DISABLE_ENV, "")
    return frozenset(part.strip() for part in raw.split(",") if part.strip())


WrapperFactory = Callable[[str], object]


class Backend:
    """One backend: its plugin object, its own plugin manager and checked hook calls.

    Obtain with :func:`get_backend`. Hook failures are turned into lowerkit errors that
    name the backend; :class:`LowerkitError` raised by a hook passes through unchanged.
    """

    def __init__(
        self,
        name: str,
        distribution: str,
        version: str,
        load: Callable[[], object],
        origin: str,
    ) -> None:
        self.name = name
        self.distribution = distribution
        self.version = version
        self.origin = origin
        self._load = load
        self._lock = threading.RLock()
        self._plugin: object | None = None
        self._pm: pluggy.PluginManager | None = None
        self._error: PluginError | None = None
        self._wrappers: dict[int, object] = {}

    # -- loading and validation ---------------------------------------------------------
    @property
    def plugin(self) -> object:
        self._ensure_loaded()
        return self._plugin

    @property
    def pm(self) -> pluggy.PluginManager:
        self._ensure_loaded()
        assert self._pm is not None
        return self._pm

    def load_error(self) -> PluginError | None:
        """Import and validate the plugin if not done; the error that made it broken, if any."""
        try:
            self._ensure_loaded()
        except PluginError as err:
            return err
        return None

    def _ensure_loaded(self) -> None:
        with self._lock:
            if self._pm is not None:
                return
            if self._error is not None:
                raise self._error
            try:
                plugin = self._load()
                if inspect.isclass(plugin):
                    plugin = plugin()
                pm = _make_manager(self.name, plugin, self.origin)
            except PluginError as err:
                self._error = err
                raise
            except Exception as err:  # an import error or a failing constructor
                self._error = PluginError(
                    f"backend {self.name!r} ({self.origin}) failed to load: "
                    f"{type(err).__name__}: {err}"
                )
                self._error.__cause__ = err
                raise self._error from err
            self._plugin, self._pm = plugin, pm
            for key, factory in list(_WRAPPERS.items()):
                self._add_wrapper(key, factory)

    def _add_wrapper(self, key: int, factory: WrapperFactory) -> None:
        if self._pm is None or key in self._wrappers:
            return
        wrapper = factory(self.name)
        self._pm.register(wrapper, name=f"wrapper-{key}")
        self._wrappers[key] = wrapper

    def _remove_wrapper(self, key: int) -> None:
        wrapper = self._wrappers.pop(key, None)
        if wrapper is not None and self._pm is not None:
            self._pm.unregister(wrapper)

    def has_hook(self, hook: str) -> bool:
        """Whether the plugin itself implements ``hook`` (wrappers do not count)."""
        return _has_impl(self.pm, hook)

    # -- availability -------------------------------------------------------------------
    def availability(self) -> tuple[bool, str]:
        """``(available, reason)``; raises ``PluginError`` if the plugin is broken."""
        if self.name in disabled_names():
            return False, f"disabled by {DISABLE_ENV}"
        pm = self.pm
        if not _has_impl(pm, "lowerkit_is_available"):
            return True, ""
        try:
            answer = pm.hook.lowerkit_is_available()
        except Exception as err:
            raise self._hook_error("lowerkit_is_available", err) from err
        return bool(answer), ("" if answer else getattr(answer, "reason", ""))

    def require_available(self, doing: str = "") -> None:
        """Raise ``BackendNotAvailableError`` (with the backend's reason) unless available."""
        available, reason = self.availability()
        if not available:
            raise BackendNotAvailableError(self.unavailable_message(reason, doing))

    def unavailable_message(self, reason: str, doing: str = "") -> str:
        text = f"Backend {self.name} is not available on this machine"
        if reason:
            text += f": {reason}"
        if doing:
            text += f" (while {doing})"
        return text + "; it runs only where its lowerkit_is_available() is true"

    # -- hooks --------------------------------------------------------------------------
    def preprocess(self, module: Any, compile_spec: dict[str, dict[str, Any]]) -> bytes:
        try:
            payload = self.pm.hook.lowerkit_preprocess(module=module, compile_spec=compile_spec)
        except LowerkitError:
            raise
        except Exception as err:
            raise self._execution_error("lowerkit_preprocess", err) from err
        if isinstance(payload, (bytearray, memoryview)):
            payload = bytes(payload)
        if not isinstance(payload, bytes):
            raise PluginError(
                f"backend {self.name!r}: lowerkit_preprocess must return bytes, "
                f"got {type(payload).__name__}"
            )
        return payload

    def compile(
        self, processed: bytes, compile_spec: dict[str, dict[str, Any]], *, made_by: str = ""
    ) -> dict[str, Any]:
        """Compile a payload; ``made_by`` is the backend version that preprocessed it."""
        from .errors import FormatError

        try:
            handles = self.pm.hook.lowerkit_compile(processed=processed, compile_spec=compile_spec)
        except (FormatError, ValueError) as err:
            made = made_by or "unknown"
            raise FormatError(
                f"backend {self.name!r} rejected its payload: {err} (payload made by "
                f"{self.distribution or self.name} version {made}, installed version "
                f"{self.version or 'unknown'})"
            ) from err
        except LowerkitError:
            raise
        except Exception as err:
            raise self._execution_error("lowerkit_compile", err) from err
        if not isinstance(handles, dict):
            raise PluginError(
                f"backend {self.name!r}: lowerkit_compile must return a dict of method -> "
                f"handle, got {type(handles).__name__}"
            )
        missing = sorted(set(compile_spec) - set(handles))
        if missing:
            raise PluginError(
                f"backend {self.name!r}: lowerkit_compile returned no handle for method(s) "
                f"{missing}; it returned {sorted(handles)}"
            )
        return handles

    def execute(self, handle: Any, inputs: list[Any], method: str) -> list[Any]:
        from .errors import NodeExecutionError

        try:
            outputs = self.pm.hook.lowerkit_execute(handle=handle, inputs=inputs, method=method)
        except NodeExecutionError as err:
            raise NodeExecutionError(
                err.debug_handle, f"backend {self.name!r}, method {method!r}: {err}"
            ) from err
        except LowerkitError:
            raise
        except Exception as err:
            raise self._execution_error("lowerkit_execute", err, method) from err
        if outputs is None or isinstance(outputs, (str, bytes)):
            raise PluginError(
                f"backend {self.name!r}: lowerkit_execute for method {method!r} must return "
                f"a list of arrays, got {type(outputs).__name__}"
            )
        return list(outputs)

    def supports(self, node: Any) -> tuple[bool, str]:
        """``(supported, reason)`` for one node; whole-module backends support nothing."""
        if not _has_impl(self.pm, "lowerkit_is_supported"):
            return False, f"backend {self.name} lowers whole modules only (no lowerkit_is_supported)"
        try:
            answer = self.pm.hook.lowerkit_is_supported(node=node)
        except Exception as err:
            raise self._hook_error("lowerkit_is_supported", err) from err
        return bool(answer), ("" if answer else getattr(answer, "reason", ""))

    def destroy(self, handles: dict[str, Any]) -> None:
        """Free compiled handles if the plugin has ``lowerkit_destroy``; never raises."""
        try:
            if _has_impl(self.pm, "lowerkit_destroy"):
                self.pm.hook.lowerkit_destroy(handles=handles)
        except Exception:  # destroy runs from finalizers, where raising helps nobody
            pass

    def _hook_error(self, hook: str, err: Exception) -> PluginError:
        return PluginError(
            f"backend {self.name!r} ({self.origin}): {hook} raised {type(err).__name__}: {err}"
        )

    def _execution_error(self, hook: str, err: Exception, method: str = "") -> LowerkitError:
        from .errors import BackendExecutionError

        where = f", method {method!r}" if method else ""
        return BackendExecutionError(
            f"backend {self.name!r}{where}: {hook} raised {type(err).__name__}: {err}"
        )

    def __repr__(self) -> str:
        return f"<lowerkit Backend {self.name!r} from {self.origin}>"


def _has_impl(pm: pluggy.PluginManager, hook: str) -> bool:
    caller = getattr(pm.hook, hook, None)
    if caller is None:
        return False
    return any(not (i.hookwrapper or i.wrapper) for i in caller.get_hookimpls())


def _make_manager(name: str, plugin: object, origin: str) -> pluggy.PluginManager:
    """A manager holding the hook specs and ``plugin``, after validating its hooks."""
    who = f"backend {name!r} ({origin})"
    for attr in dir(plugin):
        if not attr.startswith("lowerkit_"):
            continue
        value = getattr(plugin, attr, None)
        if not inspect.isroutine(value):
            continue
        opts = getattr(value, "lowerkit_impl", None)
        if opts is None:
            raise PluginError(f"{who}: {attr} is not marked with @lowerkit.hookimpl")
        hook = opts.get("specname") or attr
        if hook not in hookspecs.HOOK_NAMES:
            close = difflib.get_close_matches(hook, hookspecs.HOOK_NAMES, n=1)
            hint = f"; did you mean {close[0]}?" if close else ""
            raise PluginError(
                f"{who}: unknown hook {hook}{hint} (known hooks: {', '.join(hookspecs.HOOK_NAMES)})"
            )
    pm = pluggy.PluginManager("lowerkit")
    pm.add_hookspecs(hookspecs)
    try:
        pm.register(plugin, name=name)
        pm.check_pending()
    except pluggy.PluginValidationError as err:
        text = " ".join(str(err).split())
        raise PluginError(f"{who}: invalid hook implementation: {text}") from err
    missing = [h for h in hookspecs.REQUIRED_HOOKS if not _has_impl(pm, h)]
    if missing:
        raise PluginError(f"{who} does not implement required hook(s) {', '.join(missing)}")
    return pm


# -- wrappers (profiler, tracing) ------------------------------------------------------------
_WRAPPERS: dict[int, WrapperFactory] = {}
_wrapper_counter = iter(range(1, sys.maxsize))


def add_wrapper(factory: WrapperFactory) -> Callable[[], None]:
    """Register ``factory(backend_name) -> plugin`` in every backend's manager, now and later.

    The plugin holds pluggy wrapper implementations (``@hookimpl(wrapper=True)``). Returns
    a function that removes it again.
    """
    key = next(_wrapper_counter)
    _WRAPPERS[key] = factory
    for backend in _REGISTRY.loaded():
        backend._add_wrapper(key, factory)

    def remove() -> None:
        _WRAPPERS.pop(key, None)
        for backend in _REGISTRY.loaded():
            backend._remove_wrapper(key)

    return remove


# -- the registry ---------------------------------------------------------------------------
class _Registry:
    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._from_entry_points: dict[tuple[str, str, str], Backend] = {}
        self._in_process: dict[str, Backend] = {}

    def loaded(self) -> list[Backend]:
        with self._lock:
            every = list(self._from_entry_points.values()) + list(self._in_process.values())
        return [b for b in every if b._pm is not None]

    def claims(self) -> dict[str, list[_Claim]]:
        """Entry points by backend name; reads metadata only, imports nothing."""
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
        if name in disabled_names():
            raise BackendNotFoundError(
                f"backend {name!r} is disabled by {DISABLE_ENV}={os.environ.get(DISABLE_ENV, '')}"
            )
        with self._lock:
            if name in self._in_process:
                return self._in_process[name]
            claims = self.claims()
            found = claims.get(name, [])
            if not found:
                raise BackendNotFoundError(_not_found_message(name, sorted(set(claims) | set(self._in_process))))
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
                )
                self._from_entry_points[key] = backend
            return backend

    def infos(self, check: bool) -> list[BackendInfo]:
        with self._lock:
            claims = self.claims()
            in_process = dict(self._in_process)
        blocked = disabled_names()
        result = []
        for name in sorted(set(claims) | set(in_process)):
            if name in in_process:
                b = in_process[name]
                dist, version = b.distribution, b.version
            else:
                found = claims[name]
                dist = ", ".join(c.distribution for c in found)
                version = ", ".join(c.version for c in found)
            if name in blocked:
                result.append(BackendInfo(name, dist, version, False, f"disabled by {DISABLE_ENV}"))
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


def _not_found_message(name: str, installed: list[str]) -> str:
    dist = _KNOWN_DISTRIBUTIONS.get(name)
    hint = f"; install it with `pip install {dist}`" if dist else ""
    if name == "reference":
        hint += " (or `pip install plugins/reference` from a lowerkit checkout)"
    return f"no backend named {name!r} is installed{hint}; installed backends: {installed or 'none'}"


def _duplicate_message(name: str, claims: list[_Claim]) -> str:
    listed = " and ".join(c.describe() for c in claims)
    return f"backend name {name!r} is claimed by more than one distribution: {listed}; uninstall all but one"


_REGISTRY = _Registry()


def backends(*, check: bool = True) -> list[BackendInfo]:
    """Every installed backend, sorted by name, with distribution, version and availability.

    With ``check=False`` nothing is imported and ``available`` is ``None``. A broken plugin
    is listed with its ``error``; it never prevents the others from being listed.
    """
    from ._profile import start_env_profile

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
    from ._profile import start_env_profile

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
    backend = Backend(name, distribution, version, lambda: plugin, "registered in-process")
    backend._ensure_loaded()
    _REGISTRY.register(backend, replace)


def unregister_backend(name: str) -> None:
    """Forget an in-process registration (installed backends are unaffected)."""
    _REGISTRY.unregister(name)
