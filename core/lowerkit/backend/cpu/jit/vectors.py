"""Whether the host CPU runs 512-bit vectors at full width: what decides the vector width of
the compiled panel GEMM's main tile (``jit.panel``) and which layers it takes
(``panels.fits``). Plain Python, no numba: asks llvmlite (numba's own dependency) for the
host CPU."""

from __future__ import annotations

from collections.abc import Mapping

# AVX-512 CPUs (LLVM's names) that split each 512-bit operation into two 256-bit halves, so an
# 8-float kernel has the same peak: AMD Zen 4 VM (``znver4``), 2 cores, OpenBLAS 0.3.31
# (SkylakeX kernels), ``benchmarks/panel.py``, panel / sgemm + epilogue 0.99-1.83 on one thread
# and 1.01-2.84 on two.
HALF_WIDTH_CPUS = frozenset({"znver4"})


def full_width_avx512(features: Mapping[str, bool], cpu_name: str) -> bool:
    """Whether a CPU with these LLVM host ``features`` and name has AVX-512F and is not one of
    :data:`HALF_WIDTH_CPUS`."""
    return bool(features.get("avx512f", False)) and cpu_name not in HALF_WIDTH_CPUS


def host_full_width() -> bool:
    """:func:`full_width_avx512` of this machine's CPU (False where llvmlite is missing or gives
    no feature list), asked once."""
    if not _HOST:
        try:
            from llvmlite import binding

            _HOST.append(full_width_avx512(binding.get_host_cpu_features(), binding.get_host_cpu_name()))
        except Exception:  # no llvmlite (then no compiled kernels either), or no feature list
            _HOST.append(False)
    return _HOST[0]


_HOST: list[bool] = []
