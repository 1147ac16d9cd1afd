"""Compiled CPU kernels (numba) shared by backend plugins: what numpy cannot fuse.

Importing this package does not import numba. :func:`load` does, on first use (a backend
calls it while compiling, never at plugin import): it points numba's on-disk cache at
:func:`cache_dir` and imports the kernel modules, whose explicitly typed ``@njit(nogil=True,
cache=True)`` kernels then compile (first run ever) or load from the cache. Explicit
signatures also mean nothing compiles later: a call with other types is a ``TypeError``.

Kernels release the GIL; backends run them on the shared worker pool of
:mod:`lowerkit.backend.cpu`, or — for one image — as team regions (:mod:`.team`, numba's
``parallel=True`` on the OpenMP layer; :mod:`.layer` says where they may run).

- :mod:`.conv` — direct grouped / depthwise convolution with bias and activation, im2col,
  the GEMM epilogue;
- :mod:`.winograd` — Winograd F(4x4, 3x3) input and output transforms, fused per tile;
- :mod:`.pool` — max, average and global average pooling;
- :mod:`.resize` — bilinear and nearest resizing of NCHW planes;
- :mod:`.layout` — the transpose of a stack of matrices' last two axes, in 8 x 8 blocks;
- :mod:`.norm` — softmax and layer norm over the last axis, one pass per row;
- :mod:`.panel` — a 1x1 convolution's GEMM on a weight packed once, bias and activation
  fused (LLVM IR micro-kernels; ``lowerkit.backend.cpu.panels`` packs and chooses);
- :mod:`.mbconv` — an inverted-residual block (expansion, depthwise, projection) in bands of
  output rows;
- :mod:`.team` — the kernels above in bands on one parallel region, and GEMMs on the
  ``cblas_sgemm`` :mod:`.cblas` chooses (MKL's where installed, else numpy's);
- :mod:`.activation` — the fused-activation codes (plain Python);
- :func:`relu_inplace` — ReLU over an array in place, compiled where that is faster.
"""

from __future__ import annotations

import importlib
import os
import threading
import time
from collections.abc import Callable
from functools import partial
from types import ModuleType

import numpy as np

from .activation import NAMES as ACTIVATIONS, RELU, activation_code

__all__ = ["ACTIVATIONS", "CACHE_ENV", "COMPILED_RELU_MIN", "KERNEL_MODULES", "activation_code", "cache_dir",
           "flat_float32", "load", "load_seconds", "relu_inplace"]

CACHE_ENV = "LOWERKIT_JIT_CACHE_DIR"
KERNEL_MODULES = ("conv", "winograd", "pool", "norm", "team", "panel", "resize", "layout", "mbconv")
# Environment variables that change what the kernels compile to (``panel.LANES_ENV``): the
# cache's name covers their values, so each setting keeps machine code of its own.
COMPILE_SWITCHES = ("LOWERKIT_PANEL_LANES",)
# Modules outside this package whose functions the kernels compile in (see _sources_digest).
CACHE_SOURCES = ("lowerkit.backend.cpu.winograd",)

_lock = threading.Lock()
_loaded: dict[str, ModuleType] = {}
_seconds: dict[str, float] = {}


def cache_dir(package: str = __name__) -> str:
    """Where the compiled kernels of ``package`` are cached: a directory named after a digest
    of their sources, under ``$LOWERKIT_JIT_CACHE_DIR`` if set, else ``$NUMBA_CACHE_DIR``,
    else ``$XDG_CACHE_HOME/lowerkit/numba`` (``~/.cache/lowerkit/numba``).

    Why a digest: numba keys a cache by the timestamp of the kernel's own file only, but the
    kernels inline helpers from other files (``_act.py``, ``_types.py``); after such a helper
    changed (an edit, a ``git pull`` of an editable install) numba reused machine code built
    from the old helper. A new digest is a new, empty directory: every kernel recompiles.
    """
    base = os.environ.get(CACHE_ENV) or os.environ.get("NUMBA_CACHE_DIR")
    if not base:
        home = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        base = os.path.join(home, "lowerkit", "numba")
    return os.path.join(base, f"kernels-{_sources_digest(package)}")


_digests: dict[str, str] = {}


def _sources_digest(package: str) -> str:
    """SHA-256 (first 16 hex digits) of the sources the kernels of ``package`` compile from:
    this package's files, ``package``'s files and the modules its ``CACHE_SOURCES`` names
    (modules outside the package whose constants or helpers its kernels compile in), and the
    values of :data:`COMPILE_SWITCHES`."""
    digest = _digests.get(package)
    if digest is None:
        import hashlib
        import importlib.util

        extra = getattr(importlib.import_module(package), "CACHE_SOURCES", ())
        files = sorted(_package_files(__name__) | _package_files(package)
                       | {importlib.util.find_spec(name).origin for name in extra})
        h = hashlib.sha256()
        for path in files:
            with open(path, "rb") as f:
                h.update(f.read())
        for name in COMPILE_SWITCHES:
            h.update(f"{name}={os.environ.get(name, '')}".encode())
        digest = _digests[package] = h.hexdigest()[:16]
    return digest


def _package_files(package: str) -> set[str]:
    import importlib.util

    spec = importlib.util.find_spec(package)
    folders = list(spec.submodule_search_locations or []) if spec is not None else []
    return {os.path.join(folder, name) for folder in folders for name in os.listdir(folder) if name.endswith(".py")}


def _configure_numba(package: str) -> None:
    """numba's cache in :func:`cache_dir` for ``package``. The setting stays for the process:
    a kernel module imported directly later (``from ...jit.conv import ...``) caches there too,
    and every digest covers this package's sources, so any of them is safe."""
    import numba.core.config as config

    from ..blas import LIMITER

    config.CACHE_DIR = cache_dir(package)  # read by numba when each kernel's cache is located
    LIMITER.rescan()  # importing numba loads scipy, and with it a second OpenBLAS


def load(name: str, package: str = __name__) -> ModuleType:
    """The kernel module ``package.name``, imported (compiled or loaded from cache) on first use.

    Thread-safe; records the seconds the first import took (see :func:`load_seconds`).
    """
    key = f"{package}.{name}"
    module = _loaded.get(key)
    if module is not None:
        return module
    with _lock:
        module = _loaded.get(key)
        if module is None:
            _configure_numba(package)
            start = time.perf_counter()
            module = importlib.import_module(key)
            _seconds[key] = time.perf_counter() - start
            _loaded[key] = module
    return module


def load_seconds() -> dict[str, float]:
    """Seconds each loaded kernel module took to compile or load from the cache, by module."""
    return dict(_seconds)


# From this many elements a contiguous float32 ReLU runs compiled (one call costs ~1.5 us more
# than numpy's): numpy's maximum against a scalar was 6x slower on an AMD EPYC (Zen 3) VM,
# 200,704 floats 0.093 vs 0.014 ms.
COMPILED_RELU_MIN = 4096


def flat_float32(*arrays: np.ndarray) -> bool:
    """Whether the arrays are C-contiguous float32 of one shape: an element-wise compiled pass
    (``conv.add_activation``) may then run over their flat views."""
    shape = arrays[0].shape
    return all(a.dtype == np.float32 and a.flags.c_contiguous and a.shape == shape for a in arrays)


def gate_planes(x: np.ndarray, gate: np.ndarray, out: np.ndarray) -> Callable[[], None] | None:
    """``out = x * gate`` for a map ``x`` [N, C, H, W] and its squeeze-excitation gate [N, C,
    1, 1] (``out`` may be ``x``) as a zero-argument call: one compiled pass over the planes
    (``conv.scale_rows``; imports numba on first use) where ``x`` and ``out`` are C-contiguous
    float32 of one shape and the gate C-contiguous float32; None for any other operands."""
    if not (x.ndim == 4 and gate.shape == (*x.shape[:2], 1, 1) and flat_float32(x, out)
            and gate.dtype == np.float32 and gate.flags.c_contiguous):
        return None
    rows = x.shape[0] * x.shape[1]
    return partial(load("conv").scale_rows, x.reshape(rows, -1), gate.reshape(rows), out.reshape(rows, -1))


def relu_inplace(a: np.ndarray) -> None:
    """``a = max(a, 0)`` in place: the compiled pass for C-contiguous float32 arrays of at
    least :data:`COMPILED_RELU_MIN` elements (imports numba on first use), numpy otherwise."""
    if a.dtype == np.float32 and a.size >= COMPILED_RELU_MIN and a.flags.c_contiguous:
        load("conv").activate(a.reshape(-1), RELU, 0.0, 0.0)
    else:
        np.maximum(a, a.dtype.type(0), out=a)
