"""The ``cblas_sgemm`` that compiled kernels call: MKL's where installed, else numpy's own.

The team kernels (:mod:`.team`) multiply inside a numba ``prange`` body, one band of rows
per thread, and finish the band's epilogue while it is in that core's cache; numba calls a
ctypes function natively, with no GIL. Each band runs on one thread, so the library must be
sequential there.

Where it is looked for, in order:

1. **Intel MKL** (``pip install 'lowerkit[mkl]'``, i.e. the ``mkl`` wheel) on Intel CPUs:
   its runtime library ``mkl_rt`` in the environment's library folder, switched to MKL's
   sequential threading layer. Measured on a Xeon (AVX-512), one thread, MKL's ``sgemm`` is
   1.1-1.8x OpenBLAS's on the zoo's convolution shapes (most on the stems' short K = 27 /
   147), and the models' batch-1 time drops ~12%; on an AMD EPYC (AVX2) it is the other way
   round — MKL 0.9-1.3x *slower* than OpenBLAS's Haswell kernels, ResNet-18 15% slower
   (docs/compiled-kernels.md) — so on a CPU that is known not to be Intel's MKL is passed
   over unless ``LOWERKIT_SGEMM=mkl``. Not used where the process's MKL already runs another
   threading layer (someone loaded it first), nor when ``LOWERKIT_SGEMM=numpy``.
2. **numpy's BLAS** (found through threadpoolctl, the library file numpy loaded), so a team
   GEMM runs the same kernel as ``np.matmul``; then any other BLAS loaded (SciPy's, which
   numba's import brings). Callers hold every BLAS at one thread around team regions.

Recognised symbols: ``cblas_sgemm_64`` (MKL, ILP64), ``scipy_cblas_sgemm64_`` (numpy's
wheels: OpenBLAS, ILP64), ``cblas_sgemm64_`` (ILP64), ``scipy_cblas_sgemm`` and
``cblas_sgemm`` (LP64). No library with one of them gives ``None``: callers then keep their
numpy path.
"""

from __future__ import annotations

import ctypes
import glob
import os
import sys
import threading
from dataclasses import dataclass
from typing import Any

ROW_MAJOR, NO_TRANS, TRANS = 101, 111, 112
SGEMM_ENV = "LOWERKIT_SGEMM"
"""Environment variable: ``numpy`` keeps compiled kernels on numpy's BLAS even where MKL is
installed; ``mkl`` prefers MKL on any CPU; unset (or ``auto``) prefers MKL on Intel CPUs
(and where the vendor cannot be told)."""

_MKL_SEQUENTIAL = 1  # MKL_THREADING_SEQUENTIAL in mkl_service.h

# (symbol, integer type of its dimensions), tried in order.
_SYMBOLS = (
    ("cblas_sgemm_64", ctypes.c_int64),
    ("scipy_cblas_sgemm64_", ctypes.c_int64),
    ("cblas_sgemm64_", ctypes.c_int64),
    ("scipy_cblas_sgemm", ctypes.c_int32),
    ("cblas_sgemm", ctypes.c_int32),
)


@dataclass(frozen=True)
class Sgemm:
    """``cblas_sgemm`` of one library: ``function`` is the ctypes function (pass it to the
    kernels), ``path`` the library file, ``symbol`` the name it was found under, ``library``
    what it is (``"MKL 2026.0.0 (sequential)"``, ``"numpy's BLAS"``)."""

    function: Any
    path: str
    symbol: str
    library: str = "numpy's BLAS"


_lock = threading.Lock()
_found: list[Sgemm | None] = []
_why_not_mkl: list[str] = []


def sgemm() -> Sgemm | None:
    """The ``cblas_sgemm`` compiled kernels call (chosen once per process), or None where no
    BLAS exports one."""
    if not _found:
        with _lock:
            if not _found:
                _found.append(_choose_mkl() or _find_numpy())
    return _found[0]


def why_not_mkl() -> str | None:
    """Why :func:`sgemm` is not MKL's (None where it is, or before the choice was made)."""
    return _why_not_mkl[0] if _why_not_mkl else None


def _choose_mkl() -> Sgemm | None:
    choice = os.environ.get(SGEMM_ENV, "auto").strip().lower()
    if choice == "numpy":
        return _not_mkl(f"{SGEMM_ENV}=numpy")
    vendor = cpu_vendor()
    if choice != "mkl" and vendor not in (None, "GenuineIntel"):
        return _not_mkl(f"the CPU is {vendor}'s: MKL's fast kernels are Intel's, and numpy's BLAS measured "
                        f"faster there ({SGEMM_ENV}=mkl to use MKL anyway)")
    return _find_mkl()


def cpu_vendor() -> str | None:
    """The CPU's vendor string (``GenuineIntel``, ``AuthenticAMD``, ...), or None where it cannot
    be told (read from /proc/cpuinfo on Linux, from the processor name on Windows)."""
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("vendor_id"):
                    return line.partition(":")[2].strip() or None
    except OSError:
        pass
    import platform  # only where /proc/cpuinfo is missing

    name = platform.processor()
    return next((v for v in ("GenuineIntel", "AuthenticAMD") if v in name), None)


def _not_mkl(reason: str) -> None:
    _why_not_mkl.append(reason)
    return None


def _mkl_paths() -> list[str]:
    """``mkl_rt`` library files of this environment (the ``mkl`` wheel's data folder), newest first."""
    folders = [os.path.join(sys.prefix, "lib"), os.path.join(sys.prefix, "Library", "bin")]
    patterns = ("libmkl_rt.so*", "libmkl_rt*.dylib", "mkl_rt*.dll")
    paths = {p for folder in folders for pattern in patterns for p in glob.glob(os.path.join(folder, pattern))}
    return sorted(paths, reverse=True)


def _find_mkl() -> Sgemm | None:
    if _numpy_uses_mkl():
        # Its layer is numpy's to choose (switching it would make every np.matmul sequential);
        # numpy's own cblas_sgemm is MKL's, held at one thread inside team regions.
        return _not_mkl("numpy's own BLAS is MKL: its cblas_sgemm is used, through numpy")
    for path in _mkl_paths():
        try:
            library = ctypes.CDLL(path)
            set_layer = library.MKL_Set_Threading_Layer
        except (OSError, AttributeError):
            continue
        set_layer.argtypes, set_layer.restype = [ctypes.c_int], ctypes.c_int
        # Returns the layer in force: another one means MKL was already running threaded in this
        # process; its threads inside our bands would oversubscribe the cores.
        if set_layer(_MKL_SEQUENTIAL) != _MKL_SEQUENTIAL:
            return _not_mkl(f"{path} already runs another threading layer in this process")
        found = _sgemm_in(library, path, f"MKL {_mkl_version(library)} (sequential)")
        return found or _not_mkl(f"{path} exports no cblas_sgemm")
    return _not_mkl("MKL is not installed (pip install mkl)")


def _mkl_version(library: Any) -> str:
    try:
        text = ctypes.create_string_buffer(256)
        library.MKL_Get_Version_String(text, len(text))
        words = text.value.decode(errors="replace").split()
        return next((w.split("-")[0] for w in words if w[:1].isdigit()), "?")
    except (AttributeError, OSError):
        return "?"


def _numpy_uses_mkl() -> bool:
    """True where numpy was built against MKL (conda's numpy): from numpy's build record."""
    import numpy as np

    try:
        blas = np.__config__.CONFIG["Build Dependencies"]["blas"]["name"]
    except (AttributeError, KeyError, TypeError):
        return False
    return "mkl" in str(blas).lower()


def _numpy_blas_paths() -> list[str]:
    """BLAS library files numpy loaded, numpy's own directory first."""
    import numpy as np
    import threadpoolctl

    root = os.path.dirname(os.path.dirname(os.path.abspath(np.__file__)))
    paths = [info["filepath"] for info in threadpoolctl.threadpool_info() if info.get("user_api") == "blas"]
    numpy_dirs = (os.path.join(root, "numpy.libs"), os.path.join(root, "numpy", ".dylibs"))
    return sorted(paths, key=lambda p: not os.path.abspath(p).startswith(numpy_dirs))


def _find_numpy() -> Sgemm | None:
    try:
        paths = _numpy_blas_paths()
    except ImportError:
        return None
    for path in paths:
        try:
            library = ctypes.CDLL(path)
        except OSError:
            continue
        found = _sgemm_in(library, path, "numpy's BLAS")
        if found is not None:
            return found
    return None


def _sgemm_in(library: Any, path: str, name: str) -> Sgemm | None:
    for symbol, integer in _SYMBOLS:
        if hasattr(library, symbol):
            c_int, f32, ptr = ctypes.c_int, ctypes.c_float, ctypes.c_size_t
            prototype = ctypes.CFUNCTYPE(None, c_int, c_int, c_int, integer, integer, integer, f32,
                                         ptr, integer, ptr, integer, f32, ptr, integer)
            return Sgemm(prototype((symbol, library)), path, symbol, name)
    return None
