"""The backend contract: pluggy hook specifications (project name ``lowerkit``).

A backend plugin is the object its entry point (group ``lowerkit.backends``) names: a
module, or a class instantiated without arguments. It marks its hook implementations with
:data:`hookimpl`. Each backend gets its own plugin manager, so a call reaches exactly one
backend (plus cross-cutting wrappers such as the profiler). ``preprocess``, ``compile``
and ``execute`` are required; every other hook is optional.

Every hook is ``firstresult``: the backend's one implementation gives the answer.
Implementations may accept fewer arguments than a spec names (pluggy passes only the ones
they declare), never more: an unknown argument is an error at registration.

Declining with a reason: :func:`lowerkit_is_available` and :func:`lowerkit_is_supported`
may return :class:`Unsupported` ("needs AVX2", "dilation 2 unsupported") instead of
``False``; it is falsy, and lowerkit shows its reason to the user.
"""

from __future__ import annotations

from typing import Any

import pluggy

__all__ = ["Unavailable", "Unsupported", "hookimpl", "hookspec", "HOOK_NAMES", "REQUIRED_HOOKS"]

hookspec = pluggy.HookspecMarker("lowerkit")
hookimpl = pluggy.HookimplMarker("lowerkit")


class Unsupported:
    """A falsy answer that carries a reason, for ``is_available`` and ``is_supported``.

    ``return Unsupported("dilation 2 unsupported")`` declines like ``return False`` and
    lets lowerkit tell the user why.
    """

    __slots__ = ("reason",)

    def __init__(self, reason: str) -> None:
        self.reason = str(reason)

    def __bool__(self) -> bool:
        return False

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Unsupported) and other.reason == self.reason

    def __hash__(self) -> int:
        return hash(("Unsupported", self.reason))

    def __repr__(self) -> str:
        return f"Unsupported({self.reason!r})"


#: Alias that reads better in ``lowerkit_is_available``: ``return Unavailable("needs AVX2")``.
Unavailable = Unsupported


@hookspec(firstresult=True)
def lowerkit_preprocess(module: Any, compile_spec: dict[str, dict[str, Any]]) -> bytes:
    """Turn a module into the backend's payload.

    Called on the **host**, once, by ``lowerkit.to_backend``, whether or not the backend is
    available there. ``module`` is an un-lowered :class:`lowerkit.Module` (its submodules may
    be lowered); ``compile_spec`` maps every method name to a dict of options (``{}`` by
    default). Returns ``bytes``: the payload stored in files and later given to
    :func:`lowerkit_compile`. It must not depend on this machine's hardware; a backend that
    can only compile on the host does its compiling here.

    May raise ``lowerkit.UnsupportedOperatorError`` (naming ``node.where()``) for ops it
    cannot lower, or ``lowerkit.InputError`` for bad options; other exceptions become
    ``BackendExecutionError``.
    """


@hookspec(firstresult=True)
def lowerkit_compile(processed: bytes, compile_spec: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Prepare a payload for execution; return ``{method name: handle}``.

    Called where the backend is **available** (host or target): at creation when available
    there, at load, or at the first call once the backend became available. ``processed``
    is exactly what :func:`lowerkit_preprocess` returned (possibly on another machine,
    possibly by another version of the backend). Handles are opaque to lowerkit and are
    given back to :func:`lowerkit_execute` and :func:`lowerkit_destroy`.

    A payload the backend rejects (corrupt, written by an incompatible version) must raise
    ``lowerkit.FormatError`` or ``ValueError``; lowerkit reports it as ``FormatError``
    naming the backend and both versions.
    """


@hookspec(firstresult=True)
def lowerkit_execute(handle: Any, inputs: list[Any], method: str) -> list[Any]:
    """Run one method on numpy ``inputs``; return the list of output arrays.

    Called at every call of a lowered method, only where the backend is available.
    ``handle`` is the one :func:`lowerkit_compile` returned for ``method``; inputs have
    already been checked against the method's signature and outputs are checked after.
    Implementations usually take only ``(handle, inputs)``; ``method`` is there for
    wrappers (the profiler) and for backends that want it.

    To blame one node of the graph, raise ``lowerkit.errors.NodeExecutionError(debug_handle,
    message)``; any other exception becomes ``BackendExecutionError``.
    """


@hookspec(firstresult=True)
def lowerkit_is_available() -> Any:
    """Say whether both compile and execute can run on this machine.

    Optional (absent means always available). Called when availability is asked
    (``lowerkit.backends()``), before compile and before every execute, so it must be
    cheap (cache hardware probes). Return ``True``, ``False``, or
    ``Unsupported("reason")`` to say why not.
    """


@hookspec(firstresult=True)
def lowerkit_is_supported(node: Any, graph: Any) -> Any:
    """Say whether the backend can run one IR node; used by partitioning.

    Optional: a backend without it takes whole modules only. Called on the host. ``node``
    is a :class:`lowerkit.ir.Node` (op, attrs, input/output types). ``graph`` is the
    :class:`lowerkit.ir.Graph` holding it, read-only, so an answer may depend on the node's
    neighbours (a backend that fuses an activation into the layer producing its input can
    decline one whose producer it does not run). It is given where partitioning chooses
    between two or more backends for every node, and None otherwise (one backend, selective
    lowering with ``submodules``, a node asked about alone). An implementation may leave ``graph`` out of its signature (pluggy passes only
    the arguments it names). Return ``True``, ``False`` or
    ``Unsupported("dilation 2 unsupported")``.
    """


@hookspec(firstresult=True)
def lowerkit_destroy(handles: dict[str, Any]) -> None:
    """Free what :func:`lowerkit_compile` allocated.

    Optional. Called once with the dict compile returned, when the lowered module owning
    the handles is garbage collected (or at interpreter exit). Must not raise.
    """


@hookspec(firstresult=True)
def lowerkit_describe(processed: bytes) -> str | None:
    """Describe a payload for people: e.g. the compiled program and its memory plan.

    Optional. Called by tools (``lowerkit inspect``) on any machine where the backend is
    installed, even when it is unavailable: it must not compile or run anything. Gets
    the bytes :func:`lowerkit_preprocess` returned; returns text (or ``None``).
    """


@hookspec(firstresult=True)
def lowerkit_payload_versions() -> list[str] | None:
    """The payload format versions this backend's compile reads, the one its preprocess
    writes first (e.g. ``["3", "2"]``).

    Optional. Lets ``lowerkit check`` tell, without compiling, whether a file's payload can
    be read here or on a target, and lets lowerkit record in files the version each payload
    was written in. Must be cheap and must not import heavy dependencies. A backend without
    it is assumed to read what it wrote (the check compares nothing).
    """


@hookspec(firstresult=True)
def lowerkit_options() -> list[dict[str, Any]]:
    """Describe the backend's compile-spec options, for listings and error messages.

    Optional. Returns one dict per option: ``{"name": "threads", "type": "int",
    "default": 0, "doc": "worker threads; 0: one per core"}`` (``type`` is free text such
    as ``"int"``, ``"str: auto|gemm"``; ``default`` must be JSON data). Must be cheap and
    must not import heavy dependencies: ``lowerkit backends --json`` calls it.
    """


@hookspec(firstresult=True)
def lowerkit_supported_ops() -> list[str]:
    """Name the IR ops :func:`lowerkit_is_supported` may accept (before looking at attributes
    and dtypes), for listings.

    Optional; a backend without it is listed as claiming ops "not declared" (or "whole
    modules only" when it has no ``lowerkit_is_supported``). ``is_supported`` keeps the final
    word per node: this is what a user reads to plan a partition.
    """


HOOK_NAMES = (
    "lowerkit_preprocess",
    "lowerkit_compile",
    "lowerkit_execute",
    "lowerkit_is_available",
    "lowerkit_is_supported",
    "lowerkit_destroy",
    "lowerkit_describe",
    "lowerkit_payload_versions",
    "lowerkit_options",
    "lowerkit_supported_ops",
)
REQUIRED_HOOKS = ("lowerkit_preprocess", "lowerkit_compile", "lowerkit_execute")
