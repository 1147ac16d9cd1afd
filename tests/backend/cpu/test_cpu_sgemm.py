"""Which ``cblas_sgemm`` the compiled kernels call (lowerkit.backend.cpu.jit.cblas): MKL's,
sequential, where it is installed and the CPU is Intel's (or ``LOWERKIT_SGEMM=mkl``); numpy's
own BLAS with ``LOWERKIT_SGEMM=numpy``, on other vendors' CPUs, or where the process's MKL
already runs threaded; and the team GEMM is right on either. Each choice is made once per
process, so the cases run in fresh processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("numba")
pytest.importorskip("threadpoolctl")

from lowerkit.backend.cpu.jit import cblas  # noqa: E402

# In a fresh process: the choice, why MKL is not it, and a team GEMM (2 row bands, bias, ReLU)
# on that sgemm against float64 numpy.
_PROBE = """
import json, numpy as np
from lowerkit.backend.cpu.jit import cblas
{before}
found = cblas.sgemm()
error = None
from lowerkit.backend.cpu.jit.layer import team_ready
if found is not None and team_ready():
    from lowerkit.backend.cpu import blas_limit, jit
    team = jit.load("team")
    rng = np.random.default_rng(0)
    w, x, bias = (rng.standard_normal(s).astype(np.float32) for s in ((37, 29), (29, 53), (37,)))
    out = np.full((37, 53), np.nan, np.float32)
    with blas_limit(1):
        team.gemm_bias_activation(w, x, bias, out, *jit.activation_code({{"act": "relu"}}), 2, False, found.function)
    expected = np.maximum(w.astype(np.float64) @ x + bias[:, None], 0)
    error = float(np.abs(out - expected).max())
print(json.dumps({{"library": found and found.library, "path": found and found.path,
                  "why_not_mkl": cblas.why_not_mkl(), "error": error}}))
"""


def _probe(before: str = "", **env: str) -> dict:
    result = subprocess.run([sys.executable, "-c", _PROBE.format(before=before)], env={**os.environ, **env},
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


def _assert_team_gemm_right(found: dict) -> None:
    if found["error"] is not None:  # None: team kernels cannot run here (no OpenMP layer)
        assert found["error"] < 1e-4


def test_an_sgemm_is_found():
    found = cblas.sgemm()
    assert found is not None, "no BLAS exports a cblas_sgemm lowerkit recognises"
    assert os.path.exists(found.path)
    assert found.library.startswith("MKL") or found.library == "numpy's BLAS"
    assert (found.library == "numpy's BLAS") == (cblas.why_not_mkl() is not None)


@pytest.mark.skipif(not cblas._mkl_paths(), reason="MKL is not installed (pip install mkl)")
def test_mkl_when_asked_for_is_sequential():
    found = _probe(before="import threadpoolctl", LOWERKIT_SGEMM="mkl")
    assert found["library"].startswith("MKL") and found["library"].endswith("(sequential)"), found
    assert found["why_not_mkl"] is None
    _assert_team_gemm_right(found)


@pytest.mark.skipif(not cblas._mkl_paths(), reason="MKL is not installed (pip install mkl)")
@pytest.mark.parametrize("vendor, mkl", [("GenuineIntel", True), (None, True), ("AuthenticAMD", False),
                                         ("HygonGenuine", False)])
def test_auto_prefers_mkl_on_intel_cpus_only(vendor, mkl):
    """MKL's fast kernels are dispatched for Intel CPUs; on an AMD EPYC numpy's OpenBLAS measured
    faster, so by default other vendors keep numpy's BLAS (and say why)."""
    found = _probe(before=f"cblas.cpu_vendor = lambda: {vendor!r}", LOWERKIT_SGEMM="auto")
    assert found["library"].startswith("MKL") == mkl, found
    if mkl:
        assert found["why_not_mkl"] is None
    else:
        assert vendor in found["why_not_mkl"] and "LOWERKIT_SGEMM=mkl" in found["why_not_mkl"]
    _assert_team_gemm_right(found)


def test_the_cpu_vendor_is_told_on_linux():
    if not os.path.exists("/proc/cpuinfo"):
        pytest.skip("no /proc/cpuinfo")
    with open("/proc/cpuinfo") as cpuinfo:
        listed = [line.split(":")[1].strip() for line in cpuinfo if line.startswith("vendor_id")]
    assert cblas.cpu_vendor() == (listed[0] if listed else None)


def test_env_keeps_numpys_blas():
    found = _probe(LOWERKIT_SGEMM="numpy")
    assert found["library"] == "numpy's BLAS", found
    assert "LOWERKIT_SGEMM=numpy" in found["why_not_mkl"]
    _assert_team_gemm_right(found)


@pytest.mark.skipif(not cblas._mkl_paths(), reason="MKL is not installed (pip install mkl)")
def test_mkl_already_threaded_in_the_process_is_left_alone():
    """Someone initialised MKL on its threaded layer first: its threads would run inside every
    band, so the kernels keep numpy's BLAS, and MKL's layer is not changed."""
    before = ("import ctypes\n"
              f"mkl = ctypes.CDLL({cblas._mkl_paths()[0]!r})\n"
              "mkl.MKL_Set_Threading_Layer(2)  # GNU OpenMP\n"
              "mkl.MKL_Get_Max_Threads()")
    found = _probe(before=before, LOWERKIT_SGEMM="mkl")
    assert found["library"] == "numpy's BLAS", found
    assert "already runs another threading layer" in found["why_not_mkl"]
    _assert_team_gemm_right(found)
