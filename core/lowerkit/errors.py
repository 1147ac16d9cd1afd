"""The exceptions and warnings lowerkit raises.

Every user mistake is a :class:`LowerkitError` subclass whose message says what was
expected, what was given and where (method, input name, node scope and source line).
"""

from __future__ import annotations

__all__ = [
    "LowerkitError",
    "InputError",
    "VerificationError",
    "ParseError",
    "FormatError",
    "BackendNotFoundError",
    "BackendNotAvailableError",
    "BackendExecutionError",
    "NodeExecutionError",
    "PluginError",
    "UnsupportedOperatorError",
    "BackendUnavailableWarning",
]


class LowerkitError(Exception):
    """Base class of every error lowerkit raises on purpose."""


class InputError(LowerkitError, ValueError):
    """A value given by the user does not match what was expected (count, dtype, shape, option)."""


class VerificationError(LowerkitError):
    """A graph breaks an IR invariant (SSA, order, arity, attribute types, shapes)."""


class ParseError(LowerkitError):
    """The text form of a graph could not be parsed; the message names line and column."""


class FormatError(LowerkitError):
    """A file or payload is corrupt, truncated, foreign or from an incompatible version."""


class BackendNotFoundError(LowerkitError):
    """No installed plugin provides the requested backend."""


class BackendNotAvailableError(LowerkitError):
    """The backend is installed but cannot compile or execute on this machine."""


class BackendExecutionError(LowerkitError):
    """A backend raised while executing; the backend's own error is chained as ``__cause__``."""


class PluginError(LowerkitError):
    """A plugin is malformed: unknown hooks, wrong arguments, duplicate names, import failures."""


class UnsupportedOperatorError(LowerkitError):
    """Some ops are supported by none of the requested backends or front ends."""


class BackendUnavailableWarning(UserWarning):
    """A module was lowered on a host where its backend cannot compile or run."""


class NodeExecutionError(BackendExecutionError):
    """A backend failed while running one node; ``debug_handle`` names that node.

    Backends raise it from ``lowerkit_execute`` so that lowerkit (and partitioning) can
    point at the node's op, scope and source line.
    """

    def __init__(self, debug_handle: int, message: str) -> None:
        super().__init__(message)
        self.debug_handle = int(debug_handle)
