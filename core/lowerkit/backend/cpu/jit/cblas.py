"""numpy's own ``cblas_sgemm`` as a ctypes function that compiled kernels can call.

The team kernels (:mod:`.team`) multiply inside a numba ``prange`` body, one band of rows
per thread, and finish the band's epilogue while it is in that core's cache; numba calls a
ctypes function natively, with no GIL. numpy's BLAS is tried first (found through
threadpoolctl, the library file numpy loaded), so a team GEMM runs the same kernel as
``np.matmul``; then any other BLAS loaded (SciPy's, which numba's import brings).

Recognised symbols: ``scipy_cblas_sgemm64_`` (numpy's wheels: OpenBLAS, ILP64),
``cblas_sgemm64_`` (ILP64), ``scipy_cblas_sgemm`` and ``cblas_sgemm`` (LP64). No library with
one of them gives ``None``: callers then keep their numpy path.
"""

from __future__ import annotations

import ctypes
import os
import threading
from dataclasses import dataclass
from typing import Any

ROW_MAJOR, NO_TRANS = 101, 111

# (symbol, integer type of its dimensions), tried in order.
_SYMBOLS = (
    ("scipy_cblas_sgemm64_", ctypes.c_int64),
    ("cblas_sgemm64_", ctypes.c_int64),
    ("scipy_cblas_sgemm", ctypes.c_int32),
    ("cblas_sgemm", ctypes.c_int32),
)


@dataclass(frozen=True)
class Sgemm:
    """``cblas_sgemm`` of one library: ``function`` is the ctypes function (pass it to the
    kernels), ``path`` the library file, ``symbol`` the name it was found under."""

    function: Any
    path: str
    symbol: str


_lock = threading.Lock()
_found: list[Sgemm | None] = []


def sgemm() -> Sgemm | None:
    """numpy's ``cblas_sgemm`` (found once per process), or None where it cannot be found."""
    if not _found:
        with _lock:
            if not _found:
                _found.append(_find())
    return _found[0]


def _numpy_blas_paths() -> list[str]:
    """BLAS library files numpy loaded, numpy's own directory first."""
    import numpy as np
    import threadpoolctl

    root = os.path.dirname(os.path.dirname(os.path.abspath(np.__file__)))
    paths = [info["filepath"] for info in threadpoolctl.threadpool_info() if info.get("user_api") == "blas"]
    numpy_dirs = (os.path.join(root, "numpy.libs"), os.path.join(root, "numpy", ".dylibs"))
    return sorted(paths, key=lambda p: not os.path.abspath(p).startswith(numpy_dirs))


def _find() -> Sgemm | None:
    try:
        paths = _numpy_blas_paths()
    except ImportError:
        return None
    for path in paths:
        try:
            library = ctypes.CDLL(path)
        except OSError:
            continue
        for symbol, integer in _SYMBOLS:
            if hasattr(library, symbol):
                c_int, f32, ptr = ctypes.c_int, ctypes.c_float, ctypes.c_size_t
                prototype = ctypes.CFUNCTYPE(None, c_int, c_int, c_int, integer, integer, integer, f32,
                                             ptr, integer, ptr, integer, f32, ptr, integer)
                return Sgemm(prototype((symbol, library)), path, symbol)
    return None
