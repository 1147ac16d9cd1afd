"""The backend layer: the hook contract, one backend's manager, the registry of installed
backends and profiling wrappers.

``lowerkit.backend.cpu`` holds the CPU support that backend plugins compose (worker pool,
BLAS limit, core count, Winograd matrices, im2col); nothing else in the core imports it.
"""

from __future__ import annotations

from .hookspecs import Unavailable, Unsupported, hookimpl
from .manager import Backend
from .profile import ProfileReport, profile
from .registry import (
    ENTRY_POINT_GROUP,
    BackendInfo,
    add_wrapper,
    backend_names,
    backends,
    get_backend,
    register_backend,
    unregister_backend,
)

__all__ = [
    "ENTRY_POINT_GROUP",
    "Backend",
    "BackendInfo",
    "ProfileReport",
    "Unavailable",
    "Unsupported",
    "add_wrapper",
    "backend_names",
    "backends",
    "get_backend",
    "hookimpl",
    "profile",
    "register_backend",
    "unregister_backend",
]
