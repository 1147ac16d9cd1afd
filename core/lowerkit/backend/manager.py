"""One backend: its plugin object, its own pluggy plugin manager, and checked hook calls.

:class:`Backend` objects come from the registry (:func:`lowerkit.backend.registry.get_backend`).
Loading imports the plugin and validates its hooks; every hook call turns a plugin's
failure into a lowerkit error that names the backend.
"""

from __future__ import annotations

import difflib
import functools
import inspect
import os
import threading
from collections.abc import Callable
from typing import Any

import numpy as np
import pluggy

from . import hookspecs
from .wrappers import WrapperFactory, WrapperTable
from ..errors import (
    BackendExecutionError,
    BackendNotAvailableError,
    FormatError,
    LowerkitError,
    NodeExecutionError,
    PluginError,
)

__all__ = ["DISABLE_ENV", "Backend", "disabled_names", "disabled_reason"]

DISABLE_ENV = "LOWERKIT_DISABLE_PLUGINS"

# What a plugin may raise that still is the plugin's failure: SystemExit from a stray
# sys.exit() included. KeyboardInterrupt is the user's Ctrl-C during a call and passes
# through; only at import (_LOAD_FAILURES) is it the plugin's.
_HOOK_FAILURES = (Exception, SystemExit)
_LOAD_FAILURES = (Exception, SystemExit, KeyboardInterrupt)


def disabled_names() -> frozenset[str]:
    """Backend names blocked by ``LOWERKIT_DISABLE_PLUGINS`` (read now, not at import)."""
    return _parse_disabled(os.environ.get(DISABLE_ENV, ""))


def disabled_reason(name: str) -> str:
    """``"disabled by LOWERKIT_DISABLE_PLUGINS"`` if ``name`` is blocked, else ``""``.

    The one place that decides: the registry refuses to load a disabled backend, and a
    loaded (in-process registered) one reports itself unavailable with the same reason.
    """
    return f"disabled by {DISABLE_ENV}" if name in disabled_names() else ""


@functools.lru_cache(maxsize=8)
def _parse_disabled(raw: str) -> frozenset[str]:
    return frozenset(part.strip() for part in raw.split(",") if part.strip())


class Backend:
    """One backend: its plugin object, its own plugin manager and checked hook calls.

    Obtain with :func:`lowerkit.backend.registry.get_backend`. Hook failures are turned into lowerkit errors that
    name the backend; :class:`LowerkitError` raised by a hook passes through unchanged.
    """

    def __init__(
        self,
        name: str,
        distribution: str,
        version: str,
        load: Callable[[], object],
        origin: str,
        wrappers: WrapperTable | None = None,
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
        self._wrapper_table = wrappers
        self._wrappers: dict[int, object] = {}
        self._direct: dict[str, tuple[Any, Any, Callable[..., Any]] | None] = {}

    # -- loading and validation ---------------------------------------------------------
    @property
    def plugin(self) -> object:
        self._ensure_loaded()
        return self._plugin

    @property
    def pm(self) -> pluggy.PluginManager:
        pm = self._pm
        if pm is None:  # the common case skips the lock
            self._ensure_loaded()
            pm = self._pm
            assert pm is not None
        return pm

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
            except _LOAD_FAILURES as err:  # an import error, a failing constructor, sys.exit()
                self._error = PluginError(
                    f"backend {self.name!r} ({self.origin}) failed to load: "
                    f"{type(err).__name__}: {err}"
                )
                self._error.__cause__ = err
                raise self._error from err
            self._plugin, self._pm = plugin, pm
            for key, factory in self._wrapper_table.items() if self._wrapper_table else ():
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

    def _direct_call(self, hook: str) -> Callable[..., Any] | None:
        """The plugin's own implementation of ``hook``, as a plain function, when it is the
        hook's only implementation (no wrapper installed); else None (call through pluggy).

        Every hook is ``firstresult`` with one implementation per manager, so calling that
        implementation directly is what pluggy would do, minus its dispatch. The answer is
        cached with the implementation it saw, and checked against the hook's current
        implementations on every call: a wrapper registered by any means (the profiler, or
        ``backend.pm.register``) switches the call back to pluggy at once.
        """
        cached = self._direct.get(hook)
        if cached is not None:
            impl, impls, function = cached
            if len(impls) == 1 and impls[0] is impl:  # the hook's live list: nothing added since
                return function
        caller = getattr(self.pm.hook, hook, None)
        if caller is None:
            return None
        impls = caller.get_hookimpls()
        if len(impls) != 1 or impls[0].hookwrapper or impls[0].wrapper:
            return None
        impl = impls[0]
        live = getattr(caller, "_hookimpls", None)  # pluggy's own list, edited in place on (un)register
        if not isinstance(live, list):
            return None  # a pluggy without it: stay on the checked path
        self._direct[hook] = (impl, live, _positional(impl.function, tuple(impl.argnames)))
        return self._direct[hook][2]

    def has_hook(self, hook: str) -> bool:
        """Whether the plugin itself implements ``hook`` (wrappers do not count)."""
        return _has_impl(self.pm, hook)

    # -- availability -------------------------------------------------------------------
    def availability(self, *, environment: bool = True) -> tuple[bool, str]:
        """``(available, reason)``; raises ``PluginError`` if the plugin is broken.

        ``environment=False`` skips reading ``LOWERKIT_DISABLE_PLUGINS`` (a microsecond or
        more per read): the per-call check of a compiled module asks only the plugin, the
        setting being read at lookup, lowering and loading.
        """
        if environment:
            disabled = disabled_reason(self.name)
            if disabled:
                return False, disabled
        direct = self._direct_call("lowerkit_is_available")
        if direct is None and not _has_impl(self.pm, "lowerkit_is_available"):
            return True, ""
        try:
            answer = direct() if direct is not None else self.pm.hook.lowerkit_is_available()
        except _HOOK_FAILURES as err:
            raise self._hook_error("lowerkit_is_available", err) from err
        return self._answer("lowerkit_is_available", answer)

    def _answer(self, hook: str, answer: Any) -> tuple[bool, str]:
        """``(yes, reason)`` from a bool-or-Unsupported answer; ``PluginError`` for anything else."""
        if isinstance(answer, (bool, np.bool_)):
            return bool(answer), ""
        if isinstance(answer, hookspecs.Unsupported):
            return False, answer.reason
        raise PluginError(
            f"backend {self.name!r} ({self.origin}): {hook} must return a bool or "
            f"lowerkit.hookspecs.Unsupported, got {type(answer).__name__}"
        )

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
        except _HOOK_FAILURES as err:
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
        try:
            handles = self.pm.hook.lowerkit_compile(processed=processed, compile_spec=compile_spec)
        except _HOOK_FAILURES as err:
            rejected = isinstance(err, FormatError) or (
                isinstance(err, ValueError) and not isinstance(err, LowerkitError)
            )
            if rejected:
                raise FormatError(
                    f"backend {self.name!r} rejected its payload: {err} (payload made by "
                    f"{self.distribution or self.name} version {made_by or 'unknown'}, "
                    f"installed version {self.version or 'unknown'})"
                ) from err
            if isinstance(err, LowerkitError):  # e.g. InputError for a bad option
                raise
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
        try:
            direct = self._direct_call("lowerkit_execute")
            if direct is not None:  # the hot path: no pluggy dispatch when nothing wraps it
                outputs = direct(handle=handle, inputs=inputs, method=method)
            else:
                outputs = self.pm.hook.lowerkit_execute(handle=handle, inputs=inputs, method=method)
        except NodeExecutionError as err:
            raise NodeExecutionError(
                err.debug_handle, f"backend {self.name!r}, method {method!r}: {err}"
            ) from err
        except LowerkitError:
            raise
        except _HOOK_FAILURES as err:
            raise self._execution_error("lowerkit_execute", err, method) from err
        return self._checked_outputs(outputs, method)

    def _checked_outputs(self, outputs: Any, method: str) -> list[Any]:
        """The outputs as a list of arrays, O(outputs) and without copies; any other answer
        (``5``, a string, a generator that raises) is ``BackendExecutionError``."""
        if not isinstance(outputs, (list, tuple)):
            if outputs is None or isinstance(outputs, (str, bytes, np.ndarray)) or not hasattr(outputs, "__iter__"):
                raise BackendExecutionError(
                    f"backend {self.name!r}, method {method!r}: lowerkit_execute must return a list "
                    f"of arrays, got {type(outputs).__name__}"
                )
            try:  # an iterable such as a generator: its failures are the plugin's too
                outputs = list(outputs)
            except LowerkitError:
                raise
            except _HOOK_FAILURES as err:
                raise self._execution_error("lowerkit_execute", err, method) from err
        for position, array in enumerate(outputs):
            if not isinstance(array, (np.ndarray, np.generic)):
                raise BackendExecutionError(
                    f"backend {self.name!r}, method {method!r}: lowerkit_execute returned "
                    f"{type(array).__name__} as output {position}, expected a numpy array"
                )
        return list(outputs)

    def supports(self, node: Any, graph: Any = None) -> tuple[bool, str]:
        """``(supported, reason)`` for one node (of ``graph``, where known); whole-module
        backends support nothing."""
        if not _has_impl(self.pm, "lowerkit_is_supported"):
            return False, f"backend {self.name} lowers whole modules only (no lowerkit_is_supported)"
        try:
            answer = self.pm.hook.lowerkit_is_supported(node=node, graph=graph)
        except _HOOK_FAILURES as err:
            raise self._hook_error("lowerkit_is_supported", err) from err
        return self._answer("lowerkit_is_supported", answer)

    def describe(self, payload: bytes) -> str | None:
        """The backend's own description of a payload (``lowerkit_describe``), if it has one.

        Raises ``PluginError`` when the hook fails.
        """
        if not _has_impl(self.pm, "lowerkit_describe"):
            return None
        try:
            text = self.pm.hook.lowerkit_describe(processed=payload)
        except _HOOK_FAILURES as err:
            raise self._hook_error("lowerkit_describe", err) from err
        return None if text is None else str(text)

    def payload_versions(self) -> tuple[str, ...]:
        """The payload versions the backend reads, the one it writes first (``()`` when it
        does not say: no ``lowerkit_payload_versions``). Raises ``PluginError`` when the hook
        fails or answers something other than a list of strings."""
        if not _has_impl(self.pm, "lowerkit_payload_versions"):
            return ()
        try:
            answer = self.pm.hook.lowerkit_payload_versions()
        except Exception as err:
            raise self._hook_error("lowerkit_payload_versions", err) from err
        if answer is None:
            return ()
        if isinstance(answer, (str, bytes)) or not all(isinstance(v, (str, int)) for v in answer):
            raise PluginError(
                f"backend {self.name!r} ({self.origin}): lowerkit_payload_versions must return a "
                f"list of version strings, got {answer!r}"
            )
        return tuple(str(v) for v in answer)

    def destroy(self, handles: dict[str, Any]) -> None:
        """Free compiled handles if the plugin has ``lowerkit_destroy``; never raises."""
        try:
            if _has_impl(self.pm, "lowerkit_destroy"):
                self.pm.hook.lowerkit_destroy(handles=handles)
        except _HOOK_FAILURES:  # destroy runs from finalizers, where raising helps nobody
            pass

    def _hook_error(self, hook: str, err: BaseException) -> PluginError:
        return PluginError(
            f"backend {self.name!r} ({self.origin}): {hook} raised {type(err).__name__}: {err}"
        )

    def _execution_error(self, hook: str, err: BaseException, method: str = "") -> LowerkitError:
        where = f", method {method!r}" if method else ""
        return BackendExecutionError(
            f"backend {self.name!r}{where}: {hook} raised {type(err).__name__}: {err}"
        )

    def __repr__(self) -> str:
        return f"<lowerkit Backend {self.name!r} from {self.origin}>"


def _positional(function: Callable[..., Any], argnames: tuple[str, ...]) -> Callable[..., Any]:
    """``function`` called with keyword hook arguments, passing only those it declares, by
    position (as pluggy does for an implementation taking a subset of the spec's arguments)."""
    if not argnames:
        return lambda **_: function()
    if len(argnames) == 1:
        (a,) = argnames
        return lambda **kw: function(kw[a])
    if len(argnames) == 2:
        a, b = argnames
        return lambda **kw: function(kw[a], kw[b])
    return lambda **kw: function(*[kw[n] for n in argnames])


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
