"""LoweredModule: a module whose methods run on a backend.

:class:`DelegateRecord` is what a file stores for one (the file format serialises it);
``LoweredModule.record`` and ``LoweredModule.from_record`` convert between the two.
"""

from __future__ import annotations

import copy
import threading
import warnings
import weakref
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import (
    BackendExecutionError,
    BackendNotAvailableError,
    BackendNotFoundError,
    BackendUnavailableWarning,
    FormatError,
    InputError,
    LowerkitError,
    PluginError,
)
from ..ir.module import CallableModule, Method, Module, Signature, format_outputs
from ..backend.manager import Backend
from ..backend.registry import DISABLE_ENV, disabled_reason, get_backend

__all__ = ["DelegateRecord", "Lowered", "LoweredMethod", "LoweredModule"]

FALLBACKS = (None, "reference")

@dataclass(frozen=True, slots=True)
class DelegateRecord:
    """Everything a file keeps of a module lowered to one backend."""

    backend: str
    distribution: str
    version: str
    compile_spec: dict[str, dict[str, Any]]  # JSON-serialisable options per method
    payload: bytes
    signatures: dict[str, Signature]
    original: Module | None = None
    name: str = "LoweredModule"
    extra: dict[str, str] = field(default_factory=dict)
    payload_version: str = ""  # the payload format preprocess wrote ("" when the backend does not say)


class LoweredMethod(Method):
    """A method that runs on a backend: it has a signature and no graph."""

    def __init__(self, signature: Signature) -> None:
        self._signature = signature

    @property
    def signature(self) -> Signature:  # type: ignore[override]
        return self._signature

    def __repr__(self) -> str:
        return f"<LoweredMethod {self._signature}>"


class Lowered(CallableModule):
    """What every lowered module tells: single-backend :class:`LoweredModule` and the
    partitioned module of :mod:`lowerkit.lowering.partitioned` both implement it."""

    @property
    def backend(self) -> str | list[str]:
        """The backend's name, or the priority list of a partitioned module."""
        raise NotImplementedError

    @property
    def compile_spec(self) -> dict[str, dict[str, Any]]:
        """The compile spec as given, after defaults (a copy)."""
        raise NotImplementedError

    @property
    def original(self) -> Module | None:
        """The un-lowered module, when kept."""
        raise NotImplementedError

    @property
    def is_compiled(self) -> bool:
        raise NotImplementedError

    @property
    def is_fallback(self) -> bool:
        """True when (part of) the module runs its kept original instead of its backend."""
        raise NotImplementedError

    @property
    def parameters(self) -> dict[str, np.ndarray]:
        return {}


class LoweredModule(Lowered):
    """A module whose methods run on a backend.

    Made by :func:`lowerkit.to_backend` or loaded from a file. Call it like a module:
    ``lowered(x)`` (method ``forward``), ``lowered.forward(x)``, ``lowered.run("m", x)``.
    ``backend`` names the backend and ``compile_spec`` is the spec after defaults. Compiled
    handles are freed through the backend's ``lowerkit_destroy`` when the object dies.
    """

    def __init__(self, record: DelegateRecord) -> None:
        # Private constructor: use lowerkit.to_backend or LoweredModule.from_record.
        self._record = record
        self._backend: Backend | None = None
        self._handles: dict[str, Any] | None = None
        self._fallback: Module | None = None
        self._lock = threading.Lock()
        self._finalizer: weakref.finalize | None = None
        self.methods: dict[str, LoweredMethod] = {
            name: LoweredMethod(sig) for name, sig in record.signatures.items()
        }

    # -- what it is -----------------------------------------------------------------------
    @property
    def backend(self) -> str:
        """The backend's name."""
        return self._record.backend

    @property
    def name(self) -> str:
        return self._record.name

    @property
    def compile_spec(self) -> dict[str, dict[str, Any]]:
        """The compile spec as given to ``to_backend``, after defaults (a copy)."""
        return copy.deepcopy(self._record.compile_spec)

    @property
    def record(self) -> DelegateRecord:
        """What a file stores for this module."""
        return self._record

    @property
    def original(self) -> Module | None:
        """The un-lowered module, when lowered with ``keep_source=True``."""
        return self._record.original

    @property
    def is_compiled(self) -> bool:
        return self._handles is not None

    @property
    def is_fallback(self) -> bool:
        """True when this module runs its kept original instead of its backend."""
        return self._fallback is not None

    @property
    def submodules(self) -> dict[str, Any]:
        return {}

    def signature(self, method: str) -> Signature:
        try:
            return self._record.signatures[method]
        except KeyError:
            raise InputError(
                f"{self.name} (lowered to {self.backend}) has no method {method!r}; "
                f"its methods are {sorted(self._record.signatures)}"
            ) from None

    # -- making ---------------------------------------------------------------------------
    @classmethod
    def _created(cls, record: DelegateRecord, backend: Backend, stacklevel: int = 2) -> LoweredModule:
        """A freshly lowered module: compile if available here, else warn (creation)."""
        lowered = cls(record)
        lowered._backend = backend
        available, reason = backend.availability()
        if available:
            lowered._compile(backend)
        else:
            why = f" ({reason})" if reason else ""
            warnings.warn(
                f"Backend {backend.name} is not available on this machine{why}: the lowered "
                f"module was preprocessed but not compiled; it can be saved and run after "
                f"loading where the backend is available",
                BackendUnavailableWarning,
                stacklevel=stacklevel + 1,
            )
        return lowered

    @classmethod
    def from_record(cls, record: DelegateRecord, fallback: str | None = None) -> LoweredModule:
        """Rebuild a lowered module from a file's record, compiling it on this machine.

        Raises ``BackendNotFoundError`` (naming the distribution to install) when the
        backend is not installed, ``BackendNotAvailableError`` when it is unavailable here
        and ``FormatError`` when it rejects the payload. With ``fallback="reference"`` and a
        record that kept its original module, runs the original instead, with a warning.
        """
        if fallback not in FALLBACKS:
            raise InputError(f"fallback must be None or 'reference', got {fallback!r}")
        lowered = cls(record)
        try:
            backend = lowered._resolve_backend()
            backend.require_available(f"loading {record.name}")
            lowered._compile_loaded(backend)
        except (BackendNotFoundError, BackendNotAvailableError, PluginError, FormatError) as err:
            if fallback is None:
                raise
            if record.original is None:
                raise type(err)(
                    f"{err}; cannot fall back to {fallback!r}: the file keeps no original "
                    f"module (lower with keep_source=True)"
                ) from err
            warnings.warn(
                f"{err}; running the kept original module on {fallback} instead",
                BackendUnavailableWarning,
                stacklevel=2,
            )
            lowered._fallback = record.original
        return lowered

    @classmethod
    def uncompiled(cls, record: DelegateRecord) -> LoweredModule:
        """A lowered module that neither looks up nor compiles its backend until first called.

        For tools that only look at files (``lowerkit inspect``): pass it as the ``rebuild``
        of :func:`lowerkit.serialization.decode`.
        """
        return cls(record)

    def _resolve_backend(self) -> Backend:
        if self._backend is None:
            try:
                self._backend = get_backend(self.backend)
            except BackendNotFoundError as err:
                record = self._record
                if disabled_reason(record.backend):  # installed, switched off: not "install"
                    raise BackendNotFoundError(
                        f"{err}; {record.name} was lowered to it: remove {record.backend!r} from "
                        f"{DISABLE_ENV} to run it"
                    ) from err
                dist = record.distribution or f"the package providing backend {record.backend!r}"
                made = f" (the file was made with version {record.version})" if record.version else ""
                raise BackendNotFoundError(
                    f"{err}. {record.name} was lowered to backend {record.backend!r}: "
                    f"install {dist}{made}"
                ) from err
        return self._backend

    def _compile_loaded(self, backend: Backend) -> None:
        """Compile a file's payload: whatever the plugin's compile refuses is the file's fault,
        so every lowerkit error but unavailability becomes ``FormatError`` naming the backend."""
        record = self._record
        where = f"{record.name}: backend {record.backend!r} ({record.distribution} {record.version})"
        try:
            handles = self._compile(backend)
        except (BackendNotAvailableError, FormatError):
            raise
        except LowerkitError as err:  # InputError, PluginError, UnsupportedOperatorError, ...
            raise FormatError(f"{where} cannot load the file's payload: {type(err).__name__}: {err}") from err
        missing = sorted(set(record.signatures) - set(handles))
        if missing:
            raise FormatError(
                f"{where}: the file's method(s) {missing} have no compiled handle in its payload, "
                f"which holds {sorted(handles)}"
            )

    def _compile(self, backend: Backend) -> dict[str, Any]:
        with self._lock:
            if self._handles is None:
                spec = copy.deepcopy(self._record.compile_spec)
                handles = backend.compile(self._record.payload, spec, made_by=self._record.version)
                self._handles = handles
                if backend.has_hook("lowerkit_destroy"):
                    self._finalizer = weakref.finalize(self, backend.destroy, handles)
            return self._handles

    # -- calling --------------------------------------------------------------------------
    def _execute(self, method: str, sig: Signature, arrays: list[np.ndarray]) -> Any:
        backend, handles = self._backend, self._handles
        if handles is None or backend is None:  # first call, a copy, or a fallback
            if self._fallback is not None:
                return self._fallback.run(method, *arrays)
            backend = self._resolve_backend()
            backend.require_available(f"calling {self.name}.{method}")
            handles = self._compile(backend)
        else:  # compiled and called before: ask the plugin only (see Backend.availability)
            available, reason = backend.availability(environment=False)
            if not available:
                raise BackendNotAvailableError(
                    backend.unavailable_message(reason, f"calling {self.name}.{method}")
                )
        outputs = backend.execute(handles[method], arrays, method)
        for i, out in enumerate(outputs):
            if type(out) is not np.ndarray:
                outputs[i] = np.asarray(out)
        try:
            return format_outputs(method, sig, outputs)
        except InputError as err:
            raise BackendExecutionError(f"backend {self.backend!r} returned bad outputs: {err}") from None

    def __copy__(self) -> LoweredModule:
        # A copy shares the immutable record and compiles its own handles when first called.
        twin = type(self)(self._record)
        twin._backend = self._backend
        twin._fallback = self._fallback
        return twin

    def __deepcopy__(self, memo: dict[int, Any]) -> LoweredModule:
        return self.__copy__()

    def __repr__(self) -> str:
        return f"<lowerkit.LoweredModule {self.name} backend={self.backend!r} methods={sorted(self.methods)}>"

    def __str__(self) -> str:
        record = self._record
        made = " ".join(p for p in (record.distribution, record.version) if p)
        lines = [
            f"LoweredModule {record.name} on backend {record.backend}"
            + (f" ({made})" if made else ""),
            f"  payload: {len(record.payload)} bytes",
        ]
        for method, sig in record.signatures.items():
            lines.append(f"  {method}{sig}  options={record.compile_spec.get(method, {})}")
        return "\n".join(lines)
