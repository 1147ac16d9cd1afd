"""Whether the team kernels (:mod:`.team`) may run: numba's OpenMP threading layer.

Team kernels are numba ``parallel=True`` functions: each call is one OpenMP parallel region
whose threads spin between regions, so handing a band to the second core costs ~2 us
(empty; ~3.5 us for a small kernel called from Python) instead of the ~90 us a sleeping
Python pool worker takes to wake on a 2-core VM. Only the
OpenMP layer gives that: numba's ``workqueue`` layer sleeps (140 us a region measured here)
and is not thread-safe, and with TBB (the default when the ``tbb`` package is installed) a
region's second band often ran on the calling thread after the first — no faster than one
thread. So:

- :func:`team_ready` puts OpenMP first in numba's layer priority, unless the user chose a
  layer (``NUMBA_THREADING_LAYER``) or numba already started one, and answers whether the
  layer running is OpenMP;
- GNU OpenMP cannot be used in a child forked after the parent used it: in any child forked
  after this module was imported (a backend imports it when it binds team forms)
  :func:`team_ready` says False from the fork on, and bound kernels fall back to their
  serial forms (see :func:`forked`).
"""

from __future__ import annotations

import os
import threading

_forked = False
_lock = threading.Lock()
_ready: list[bool] = []


def _after_fork_in_child() -> None:
    global _forked
    _forked = True


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def forked() -> bool:
    """True in a process forked from one that imported lowerkit's compiled kernels."""
    return _forked


def team_ready() -> bool:
    """True when team kernels may run here: numba's threading layer is OpenMP (put first in
    numba's priority where the user left the choice open) and this is not a forked child."""
    if _forked:
        return False
    if not _ready:
        with _lock:
            if not _ready:
                _ready.append(_start_openmp())
    return _ready[0]


def why_not() -> str:
    """Why :func:`team_ready` says False here (for messages), or ``""``."""
    if _forked:
        return "a child forked after the team support was imported"
    if _ready and not _ready[0]:
        try:
            import numba

            layer = numba.threading_layer()
        except (ImportError, ValueError):
            layer = "none"
        return f"numba's threading layer is {layer!r}, not OpenMP ('omp')"
    return ""


# How long a team thread spins after a region before it sleeps, in GNU OpenMP's spins
# (``GOMP_SPINCOUNT``; ~27 ns each on an AMD EPYC Zen 3 VM, ~12 ns on an Intel Xeon VM with
# AVX-512). Two costs pull apart:
# - too long, and after a call the team thread takes a core from the next library's threads:
#   GNU OpenMP's default, 300,000, kept it busy ~8 ms on Zen 3, and ``[nnpack, glow_like]`` on
#   DeiT-Tiny (then two regions: nnpack's patch embedding on the team, glow_like's layers on
#   OpenBLAS's two threads) took 43-45 ms against 27 for glow_like alone;
# - too short, and the team thread sleeps between two regions of one call whenever the calling
#   thread spends longer than the spin between them, and the next region waits for it to
#   wake. On the Xeon VM, with 10,000 spins (~0.12 ms), a third of MobileNetV3-Large's calls
#   at batch 1 after a 0.3 s pause slept and woke at nearly every region (~110 voluntary
#   context switches a call, 2-5x the call's time), and three such calls in a row tripped the
#   stall guard onto the serial forms; with 100,000 none did (performance.md, "Session 34").
SPIN_COUNT = 100_000


def _spin_briefly() -> None:
    """Set ``GOMP_SPINCOUNT`` to :data:`SPIN_COUNT` for the OpenMP runtime about to start,
    unless the user chose (it, or ``OMP_WAIT_POLICY``). GNU OpenMP reads it once, when it
    loads: a runtime another library loaded first keeps its own setting."""
    if "GOMP_SPINCOUNT" not in os.environ and "OMP_WAIT_POLICY" not in os.environ:
        os.environ["GOMP_SPINCOUNT"] = str(SPIN_COUNT)


def _start_openmp() -> bool:
    try:
        import numba
        from numba.core import config
        from numba.np.ufunc import parallel
    except ImportError:
        return False
    if not getattr(parallel, "_is_initialized", False) and not os.environ.get("NUMBA_THREADING_LAYER"):
        if str(config.THREADING_LAYER).lower() == "default":
            config.THREADING_LAYER_PRIORITY = ["omp"] + [n for n in config.THREADING_LAYER_PRIORITY if n != "omp"]
    if not getattr(parallel, "_is_initialized", False):
        _spin_briefly()
    try:
        parallel._launch_threads()
        return numba.threading_layer() == "omp"
    except (ValueError, ImportError, OSError):
        return False
