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
- :mod:`.norm` — softmax and layer norm over the last axis, one pass per row;
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
from types import ModuleType

import numpy as np

from .activation import NAMES as ACTIVATIONS, RELU, activation_code

__all__ = ["ACTIVATIONS", "CACHE_ENV", "COMPILED_RELU_MIN", "KERNEL_MODULES", "activation_code", "cache_dir", "load",
           "load_seconds", "relu_inplace"]

CACHE_ENV = "LOWERKIT_JIT_CACHE_DIR"
KERNEL_MODULES = ("conv", "winograd", "pool", "norm", "team")

_lock = threading.Lock()
_loaded: dict[str, ModuleType] = {}
_seconds: dict[str, float] = {}


def cache_dir() -> str:
    """Where compiled kernels are cached: ``$LOWERKIT_JIT_CACHE_DIR`` if set, else
    ``$NUMBA_CACHE_DIR`` if set, else numba's default (``__pycache__`` beside each kernel
    source file when writable, else a per-user directory)."""
    for env in (CACHE_ENV, "NUMBA_CACHE_DIR"):
        if os.environ.get(env):
            return os.environ[env]
    return "__pycache__ beside the kernel sources (numba's default)"


def _configure_numba() -> None:
    import numba.core.config as config

    from ..blas import LIMITER

    chosen = os.environ.get(CACHE_ENV)
    if chosen:
        config.CACHE_DIR = chosen  # read by numba when a cache is first located
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
            _configure_numba()
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


def relu_inplace(a: np.ndarray) -> None:
    """``a = max(a, 0)`` in place: the compiled pass for C-contiguous float32 arrays of at
    least :data:`COMPILED_RELU_MIN` elements (imports numba on first use), numpy otherwise."""
    if a.dtype == np.float32 and a.size >= COMPILED_RELU_MIN and a.flags.c_contiguous:
        load("conv").activate(a.reshape(-1), RELU, 0.0, 0.0)
    else:
        np.maximum(a, a.dtype.type(0), out=a)
