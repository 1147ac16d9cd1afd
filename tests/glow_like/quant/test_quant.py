"""int8 quantization: profiles, the integer kernels' exactness, accuracy against fp32."""

from __future__ import annotations

import numpy as np
import pytest
from tests.glow_like.helpers import rand, traced

import lowerkit as lk
import lowerkit_glow_like as glow
from lowerkit.errors import FormatError, InputError
from lowerkit_glow_like.kernels import KERNELS
from lowerkit_glow_like.quant.rewrite import activation_qparams, weight_qparams


def _batches(shape, n, seed=100):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(shape).astype(np.float32) for _ in range(n)]


def test_profile_saves_and_loads_as_json(tmp_path):
    module, x = traced("small_cnn")
    profile = glow.calibrate(module, [x], progress=False)
    path = tmp_path / "profile.json"
    profile.save(path)
    assert path.read_text().lstrip().startswith("{")
    loaded = glow.Profile.load(path)
    assert loaded == profile and loaded.batches == 1 and "x" in loaded.ranges


def test_a_file_that_is_not_a_profile_is_a_format_error(tmp_path):
    path = tmp_path / "bad.json"
    path.write_text('{"format": "something else"}')
    with pytest.raises(FormatError, match="not a glow_like profile"):
        glow.Profile.load(path)


def test_calibration_shows_progress_on_a_terminal_only(capsys, monkeypatch):
    import lowerkit.progress

    module, x = traced("small_cnn")
    glow.calibrate(module, _batches(x.shape, 3))  # stderr is not a terminal here: quiet
    assert capsys.readouterr().err == ""
    monkeypatch.setattr(lowerkit.progress, "enabled", lambda stream=None: True)
    glow.calibrate(module, _batches(x.shape, 3))
    assert "calibrating forward" in capsys.readouterr().err


def test_calibration_checks_its_inputs():
    module, _ = traced("small_cnn")
    with pytest.raises(InputError, match=r"expected f32\[1, 3, 8, 8\]"):
        glow.calibrate(module, [np.zeros((1, 3, 4, 4), np.float32)], progress=False)


def test_profile_of_another_model_is_refused():
    small, x = traced("small_cnn")
    other, _ = traced("small_cnn", batch=2)
    profile = glow.calibrate(small, [x], progress=False)
    with pytest.raises(InputError, match="recorded on another model"):
        lk.to_backend(other, "glow_like", {"forward": {"precision": "int8", "profile": profile}})


@pytest.mark.parametrize("channels, extreme", [(5, False), (128, True)])
def test_quantized_conv_equals_integer_arithmetic(channels, extreme):
    # 128 channels x 3x3 = 1152 terms: three float32 chunks; large operands make sums above
    # 2^24 with arbitrary low bits, which one float32 GEMM could not hold exactly.
    rng = np.random.default_rng(0)
    if extreme:
        x = rng.integers(128, 256, (1, channels, 6, 6)).astype(np.uint8)
        w = np.full((4, channels, 3, 3), 127, np.int8)
        x_zp = 0
    else:
        x = rng.integers(0, 256, (1, channels, 6, 6)).astype(np.uint8)
        w = rng.integers(-127, 128, (4, channels, 3, 3)).astype(np.int8)
        x_zp = 7
    bias = rng.integers(-1000, 1000, 4).astype(np.int32)
    mult = rng.uniform(1e-7, 1e-6, 4) if extreme else rng.uniform(1e-4, 1e-3, 4)
    attrs = {"stride": (1, 1), "padding": (1, 1, 1, 1), "dilation": (1, 1), "groups": 1,
             "x_zp": x_zp, "out_zp": 3, "qmin": 0, "qmax": 255}
    out = np.empty((1, 4, 6, 6), np.uint8)
    KERNELS["glow.qconv2d"].prepare([x, w, bias, mult], [out], attrs, None)()
    # Integer reference: int64 accumulation over the zero-padded, zero-point-shifted input.
    xs = np.pad(x.astype(np.int64) - x_zp, ((0, 0), (0, 0), (1, 1), (1, 1)))
    acc = np.zeros((4, 6, 6), np.int64)
    for kh in range(3):
        for kw in range(3):
            acc += np.einsum("oc,chw->ohw", w[:, :, kh, kw].astype(np.int64), xs[0, :, kh : kh + 6, kw : kw + 6])
    assert not extreme or np.abs(acc).max() > 2**24  # beyond float32's exact integers
    expected = np.clip(np.rint((acc + bias[:, None, None]) * mult[:, None, None]) + 3, 0, 255)
    np.testing.assert_array_equal(out[0], expected.astype(np.uint8))


def test_exact_matmul_accumulates_beyond_float32_integers():
    from lowerkit_glow_like.kernels.quant import exact_matmul

    rng = np.random.default_rng(3)
    a = rng.integers(100, 128, (8, 1152)).astype(np.float32)  # int8 weights, same sign
    b = rng.integers(128, 256, (1152, 40)).astype(np.float32)  # shifted uint8 activations
    acc = np.empty((8, 40), np.float64)
    exact_matmul(a, b, acc, np.empty((8, 40), np.float32))
    expected = a.astype(np.int64) @ b.astype(np.int64)
    assert expected.min() > 2**24  # every sum is beyond float32's exact integers
    np.testing.assert_array_equal(acc, expected)


def test_batched_quantized_conv_equals_the_per_image_one():
    rng = np.random.default_rng(1)
    x = rng.integers(0, 256, (3, 4, 5, 5)).astype(np.uint8)
    w = rng.integers(-127, 128, (6, 4, 3, 3)).astype(np.int8)
    bias = rng.integers(-500, 500, 6).astype(np.int32)
    mult = rng.uniform(1e-4, 1e-3, 6)
    attrs = {"stride": (1, 1), "padding": (1, 1, 1, 1), "dilation": (1, 1), "groups": 1,
             "x_zp": 9, "out_zp": 4, "qmin": 4, "qmax": 255}
    batched = np.empty((3, 6, 5, 5), np.uint8)
    KERNELS["glow.qconv2d"].prepare([x, w, bias, mult], [batched], attrs, None)()
    for i in range(3):
        single = np.empty((1, 6, 5, 5), np.uint8)
        KERNELS["glow.qconv2d"].prepare([x[i : i + 1], w, bias, mult], [single], attrs, None)()
        np.testing.assert_array_equal(batched[i], single[0])


def test_parallel_quantized_conv_equals_the_serial_one(monkeypatch):
    from lowerkit_glow_like.kernels import conv
    from lowerkit.backend.cpu import Parallel

    monkeypatch.setattr(conv, "PARALLEL_MIN_FLOPS", 0)
    rng = np.random.default_rng(4)
    w = rng.integers(-127, 128, (6, 4, 3, 3)).astype(np.int8)
    bias = rng.integers(-500, 500, 6).astype(np.int32)
    mult = rng.uniform(1e-4, 1e-3, 6)
    attrs = {"stride": (1, 1), "padding": (1, 1, 1, 1), "dilation": (1, 1), "groups": 1,
             "x_zp": 9, "out_zp": 4, "qmin": 0, "qmax": 255}
    for shape in ((1, 4, 33, 33), (3, 4, 5, 5)):  # per-image bands, batched GEMM bands
        x = rng.integers(0, 256, shape).astype(np.uint8)
        outs = []
        for parallel in (None, Parallel(2)):
            out = np.empty((shape[0], 6) + shape[2:], np.uint8)
            KERNELS["glow.qconv2d"].prepare([x, w, bias, mult], [out], attrs, None, parallel=parallel)()
            outs.append(out)
        np.testing.assert_array_equal(outs[0], outs[1])


def test_qparams_represent_zero_exactly_and_weights_per_channel():
    scale, zp = activation_qparams(-1.0, 3.0)
    assert round(0.0 / scale) + zp == zp and 0 <= zp <= 255
    assert abs((255 - zp) * scale - 3.0) <= scale and abs(-zp * scale + 1.0) <= scale  # nudged by < 1 step
    w = np.stack([np.linspace(-1, 1, 8), np.linspace(-0.01, 0.01, 8)]).astype(np.float32)
    q, s = weight_qparams(w, axis=0)
    assert q.dtype == np.int8 and np.abs(q).max(axis=1).tolist() == [127, 127]
    np.testing.assert_allclose(q * s[:, None], w, atol=float(s.max()) / 2 + 1e-9)


def test_int8_small_cnn_through_to_backend_and_save_load(tmp_path):
    module, x = traced("small_cnn")
    profile = glow.calibrate(module, _batches(x.shape, 32), progress=False)
    profile_path = tmp_path / "p.json"
    profile.save(profile_path)
    lowered = lk.to_backend(module, "glow_like", {"forward": {"precision": "int8", "profile": str(profile_path)}})
    path = tmp_path / "q.lkm"
    lk.save(lowered, path)
    loaded = lk.load(path)
    expected = module(x)
    got = loaded(x)
    np.testing.assert_array_equal(got, lowered(x))
    assert np.abs(got - expected).max() <= 0.1 * np.abs(expected).max()


def test_int8_resnet18_accuracy_against_fp32():
    module, x = traced("resnet18", hw=64)
    profile = glow.calibrate(module, _batches(x.shape, 8), progress=False)
    fp32 = lk.to_backend(module, "glow_like")
    int8 = lk.to_backend(module, "glow_like", {"forward": {"precision": "int8", "profile": profile}})
    held_out = _batches(x.shape, 8, seed=999)
    errors, agree = [], 0
    for inp in held_out:
        a, b = fp32(inp), int8(inp)
        errors.append(float(np.abs(a - b).max() / np.abs(a).max()))
        agree += int(a.argmax() == b.argmax())
    print(f"int8 ResNet-18 (64x64): max abs error / max |fp32| = {max(errors):.4f}, top-1 agreement {agree}/8")
    assert max(errors) < 0.15
    assert agree >= 6
