"""``out = a @ b`` of float32 matrices on the BLAS that fits the moment.

Inside a region that holds BLAS at one thread (batch slices, pool bands, serial calls:
:func:`.blas.blas_limit`), where :func:`.jit.cblas.sgemm` chose MKL, the product is MKL's
sequential ``sgemm`` (called through ctypes, which releases the GIL); elsewhere — BLAS on
several threads, other layouts, no MKL — it is ``np.matmul`` (numpy's own BLAS). One
thread of a Xeon, the zoo's convolution GEMMs are 1.1-1.8x faster on MKL (``benchmarks/sgemm.py``);
a trial routing the batch slices' GEMMs through MKL took ResNet-18 at batch 8 from ~103 to
~96 ms.
"""

from __future__ import annotations

import numpy as np

from .blas import LIMITER
from .jit.cblas import NO_TRANS, ROW_MAJOR, sgemm

# Products under this many multiply-adds stay on np.matmul: the ctypes call and its checks
# cost ~6 us more than numpy's dispatch, more than MKL saves on ~4 MFLOP.
MIN_MACS = 2_000_000
_mkl: list = []  # [function or None], found on first use


def matmul_into(a: np.ndarray, b: np.ndarray, out: np.ndarray) -> None:
    """``out[...] = a @ b`` for 2-D ``a`` [M, K], ``b`` [K, N], ``out`` [M, N]."""
    sgemm = _mkl[0] if _mkl else _find_mkl()
    if sgemm is not None and LIMITER.in_force == 1 and _rows_of_floats(a, b, out):
        m, k = a.shape
        n = b.shape[1]
        sgemm(ROW_MAJOR, NO_TRANS, NO_TRANS, m, n, k, 1.0, a.ctypes.data, a.strides[0] // 4,
              b.ctypes.data, b.strides[0] // 4, 0.0, out.ctypes.data, out.strides[0] // 4)
        return
    np.matmul(a, b, out=out)


def _rows_of_floats(a: np.ndarray, b: np.ndarray, out: np.ndarray) -> bool:
    """Row-major float32 matrices (unit column stride, whole-float row strides) of matching
    shapes, at least ``MIN_MACS`` multiply-adds, ``out`` apart from the operands: what
    ``cblas_sgemm`` takes, and where it pays."""
    for v in (a, b, out):
        if v.dtype != np.float32 or v.ndim != 2 or v.strides[1] != 4 or v.strides[0] % 4 or v.strides[0] < 4 * v.shape[1]:
            return False
    m, k = a.shape
    return (b.shape[0] == k and out.shape == (m, b.shape[1]) and m * k * b.shape[1] >= MIN_MACS
            and not np.may_share_memory(out, a) and not np.may_share_memory(out, b))


def _find_mkl():
    try:
        found = sgemm()
    except ImportError:  # pragma: no cover - threadpoolctl missing: numpy's matmul
        found = None
    _mkl[:] = [found.function if found is not None and found.library.startswith("MKL") else None]
    return _mkl[0]
