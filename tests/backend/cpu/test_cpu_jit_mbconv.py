"""The inverted-residual block in bands of output rows (lowerkit.backend.cpu.jit.mbconv, and
its team form jit.team.mbconv_rows) against the three layers computed in float64 numpy: odd
sizes, partial bands, stride 1 and 2, residual or not, several images, thread bands."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("numba")

from lowerkit.backend.cpu import jit, panels  # noqa: E402
from lowerkit.backend.cpu.team import make_team  # noqa: E402

ACTS = {
    "none": ((0, 0.0, 0.0), lambda a: a),
    "relu6": ((jit.activation_code({"act": "clip", "act_min": 0.0, "act_max": 6.0})),
              lambda a: np.clip(a, 0.0, 6.0)),
    "hardswish": (jit.activation_code({"act": "hardswish"}), lambda a: a * np.clip(a + 3.0, 0.0, 6.0) / 6.0),
    "silu": (jit.activation_code({"act": "silu"}), lambda a: a / (1.0 + np.exp(-a))),
}


def _block(n, cin, cexp, cout, h, w, stride, residual, seed=0):
    rng = np.random.default_rng(seed)
    oh, ow = (h - 1) // stride + 1, (w - 1) // stride + 1  # 3x3, padding 1
    arrays = {
        "x": rng.standard_normal((n, cin, h, w)),
        "we": rng.standard_normal((cexp, cin)) / np.sqrt(cin),
        "be": 0.1 * rng.standard_normal(cexp),
        "wd": rng.standard_normal((cexp, 1, 3, 3)) / 3.0,
        "bd": 0.1 * rng.standard_normal(cexp),
        "wp": rng.standard_normal((cout, cexp)) / np.sqrt(cexp),
        "bp": 0.1 * rng.standard_normal(cout),
        "res": rng.standard_normal((n, cout, oh, ow)) if residual else None,
    }
    return {k: None if v is None else v.astype(np.float32) for k, v in arrays.items()}, (oh, ow)


def _reference(a, stride, oh, ow, acts):
    """The three layers in float64."""
    ea, da, pa = (ACTS[name][1] for name in acts)
    x = a["x"].astype(np.float64)
    n, cexp = x.shape[0], a["we"].shape[0]
    e = ea(np.einsum("ek,nkhw->nehw", a["we"].astype(np.float64), x) + a["be"][None, :, None, None])
    ep = np.pad(e, ((0, 0), (0, 0), (1, 1), (1, 1)))
    d = np.zeros((n, cexp, oh, ow)) + a["bd"][None, :, None, None]
    for i in range(3):
        for j in range(3):
            tap = ep[:, :, i:i + stride * (oh - 1) + 1:stride, j:j + stride * (ow - 1) + 1:stride]
            d += a["wd"][None, :, 0, i, j, None, None].astype(np.float64) * tap
    d = da(d)
    o = np.einsum("oe,nehw->nohw", a["wp"].astype(np.float64), d) + a["bp"][None, :, None, None]
    if a["res"] is not None:
        o = o + a["res"]
    return pa(o)


def _arguments(a, stride, oh, ow, acts, band):
    n, cin, h, w = a["x"].shape
    cexp, cout = a["we"].shape[0], a["wp"].shape[0]
    pe, pp = panels.PackedWeight.of(a["we"], a["be"]), panels.PackedWeight.of(a["wp"], a["bp"])
    out = np.full((n, cout, oh * ow), np.nan, np.float32)
    residual = (a["res"].reshape(n, cout, oh * ow) if a["res"] is not None else np.empty((0, 0, 0), np.float32))
    codes = tuple(v for name in acts for v in ACTS[name][0])
    head = (pe.panels, pe.bias, pe.columns, a["wd"], a["bd"], pp.panels, pp.bias, pp.columns)
    floats = jit.load("mbconv").scratch_floats(cexp, w, ow, band, stride)
    return a["x"].reshape(n, cin, h * w), head, out, residual, floats, codes


CASES = [  # n, cin, cexp, cout, h, w, stride, residual, band
    (1, 16, 96, 24, 28, 28, 2, False, 7),
    (2, 24, 144, 24, 17, 19, 1, True, 7),  # partial last band, odd sides, two images
    (3, 8, 40, 12, 15, 9, 2, False, 4),  # odd input at stride 2, bands of 4
    (1, 32, 190, 32, 14, 14, 1, True, 7),  # channels not a multiple of the panel's 6
    (1, 5, 30, 7, 23, 40, 1, False, 3),  # rows wider than 32 lanes, bands of 3
    (2, 12, 60, 20, 7, 7, 1, True, 7),  # a single band
    (1, 6, 18, 6, 9, 9, 1, True, 1),  # one row a band: the halo moves every band
]


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("acts", [("relu6", "relu6", "none"), ("hardswish", "silu", "relu6")])
def test_block_matches_its_layers(case, acts):
    n, cin, cexp, cout, h, w, stride, residual, band = case
    a, (oh, ow) = _block(n, cin, cexp, cout, h, w, stride, residual)
    x, head, out, res, floats, codes = _arguments(a, stride, oh, ow, acts, band)
    scratch = np.full(floats, np.nan, np.float32)  # the kernel must not read what it did not write
    jit.load("mbconv").mbconv(x, *head, out, res, scratch, stride, 1, 1, w, ow, *codes, band)
    want = _reference(a, stride, oh, ow, acts)
    np.testing.assert_allclose(out.reshape(want.shape), want, rtol=2e-5, atol=2e-5)


@pytest.mark.parametrize("case", CASES[:5])
@pytest.mark.parametrize("ways", [2, 3])
def test_team_form_gives_the_same_bits(case, ways):
    """Each thread's bands of rows: the values of the one-thread form, bit for bit."""
    n, cin, cexp, cout, h, w, stride, residual, band = case
    a, (oh, ow) = _block(n, cin, cexp, cout, h, w, stride, residual, seed=1)
    acts = ("relu6", "relu6", "none")
    x, head, out, res, floats, codes = _arguments(a, stride, oh, ow, acts, band)
    jit.load("mbconv").mbconv(x, *head, out, res, np.empty(floats, np.float32), stride, 1, 1, w, ow, *codes, band)
    team = make_team(ways)
    together = np.full_like(out, np.nan)
    scratch = np.full((ways, floats), np.nan, np.float32)
    for i in range(n):
        team.kernels().mbconv_rows(x[i], *head, together[i], res[i] if residual else res.reshape(0, 0), scratch,
                                   stride, 1, 1, w, ow, *codes, band, ways)
    np.testing.assert_array_equal(together, out)


def test_depthwise_activation_outside_registers_is_refused():
    a, (oh, ow) = _block(1, 4, 12, 4, 8, 8, 1, False)
    x, head, out, res, floats, codes = _arguments(a, 1, oh, ow, ("relu6", "relu6", "none"), 7)
    gelu = jit.activation_code({"act": "gelu"})
    with pytest.raises(ValueError, match="registers"):
        jit.load("mbconv").mbconv(x, *head, out, res, np.empty(floats, np.float32), 1, 1, 1, 8, ow, *codes[:3],
                                  *gelu, *codes[6:], 7)
