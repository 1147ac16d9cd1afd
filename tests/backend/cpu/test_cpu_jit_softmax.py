"""``jit.norm.softmax_rows``: softmax and log-softmax of rows against numpy in float64, with
the edge values numpy's exp gives — keys masked with -inf weigh exactly 0, a row of -inf or
with a nan in it is nan — on row lengths around the vector widths; and glow_like's attention
kernel, which runs it on the scores, against the reference with a row masked out entirely."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("numba")

from lowerkit.backend.cpu import jit  # noqa: E402


def _softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


@pytest.mark.parametrize("width", [1, 7, 8, 9, 16, 49, 197, 1000])
@pytest.mark.parametrize("log", [False, True])
def test_rows_match_numpy(width, log):
    x = (np.random.default_rng(width).standard_normal((13, width)) * 6).astype(np.float32)
    out = np.full_like(x, np.nan)
    jit.load("norm").softmax_rows(x, out, log, 0, 13)
    expected = _softmax(x.astype(np.float64))
    if log:
        np.testing.assert_allclose(out, np.log(expected), rtol=1e-5, atol=1e-5)
    else:
        np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("rows, width", [(100, 49), (30, 197), (3, 5000)])
def test_blocks_of_rows_in_place_and_in_a_range(rows, width):
    """Softmax runs blocks of about ``SOFTMAX_BLOCK_FLOATS``: several blocks (a last partial
    one), rows wider than a block, written over its input, and only rows [first, last)."""
    x = (np.random.default_rng(rows).standard_normal((rows, width)) * 6).astype(np.float32)
    x[rows // 2, ::4] = -np.inf
    expected = _softmax(x.astype(np.float64))
    first, last = 1, rows - 1
    out = np.full_like(x, 7.0)
    jit.load("norm").softmax_rows(x, out, False, first, last)
    np.testing.assert_allclose(out[first:last], expected[first:last], rtol=1e-5, atol=1e-7)
    assert np.all(out[:first] == 7.0) and np.all(out[last:] == 7.0)
    assert np.all(out[rows // 2, ::4] == 0.0)
    inplace = x.copy()
    jit.load("norm").softmax_rows(inplace, inplace, False, 0, rows)
    np.testing.assert_allclose(inplace, expected, rtol=1e-5, atol=1e-7)


def test_masked_keys_weigh_nothing_and_bad_rows_are_nan():
    x = np.random.default_rng(0).standard_normal((4, 49)).astype(np.float32)
    x[0, ::3] = -np.inf  # masked keys
    x[1, :] = -np.inf  # every key masked
    x[2, 5] = np.nan
    x[3, 0] = -200.0  # far below the row's maximum: underflows to 0, as numpy's exp
    out = np.empty_like(x)
    jit.load("norm").softmax_rows(x, out, False, 0, 4)
    assert np.all(out[0, ::3] == 0.0)
    np.testing.assert_allclose(out[0], _softmax(x[0].astype(np.float64)), rtol=1e-5, atol=1e-7)
    assert np.isnan(out[1]).all() and np.isnan(out[2]).all()
    assert out[3, 0] == 0.0 and abs(out[3].sum() - 1.0) < 1e-5


def test_glow_like_attention_with_a_row_masked_out_matches_the_reference():
    glow = pytest.importorskip("lowerkit_glow_like")
    from lowerkit.ir import Graph, GraphMethod, Module, TensorType
    from lowerkit.opset import get_schema

    rng = np.random.default_rng(1)
    q, k, v = (rng.standard_normal((2, 3, 49, 32)).astype(np.float32) for _ in range(3))
    for mask in (rng.standard_normal((3, 49, 49)).astype(np.float32),  # a float mask over windows
                 rng.random((2, 3, 49, 49)) > 0.3):
        if mask.dtype == np.bool_:
            mask[0, 1, 7] = False  # one query sees no key: nan, as in torch
        g = Graph()
        ins = [g.add_input(n, TensorType("f32", a.shape)) for n, a in zip("qkv", (q, k, v))]
        ins.append(g.add_input("mask", TensorType("bool" if mask.dtype == np.bool_ else "f32", mask.shape)))
        attrs = get_schema("scaled_dot_product_attention").normalize_attrs({"scale": 32 ** -0.5})
        (t,) = get_schema("scaled_dot_product_attention").infer([i.type for i in ins], attrs)
        node = g.add_node("scaled_dot_product_attention", ins, [t], attrs)
        node.debug_handle = 1
        g.set_outputs([node.output])
        module = Module({}, {"forward": GraphMethod(g)}, name="Attention")
        payload = glow.lowerkit_preprocess(module=module, compile_spec={"forward": {}})
        handle = glow.lowerkit_compile(processed=payload, compile_spec={})["forward"]
        expected = module.run("forward", q, k, v, mask)
        for _ in range(2):
            np.testing.assert_allclose(handle.run([q, k, v, mask])[0], expected, rtol=1e-5, atol=1e-6, equal_nan=True)
