"""ONNX's own node test suite (``onnx.backend.test``) run through lowerkit backends.

The suite is generated from the case definitions shipped inside the ``onnx`` package.
Only the cases of the ops lowerkit imports are run (``INCLUDE``); every case expected to
fail is listed once in ``KNOWN_FAILURES`` with its reason, as a strict xfail, so a case that
starts passing is noticed. The pass counts are recorded in docs/onnx.md.
"""

from __future__ import annotations

import re
import warnings

import pytest

pytest.importorskip("onnx")

import lowerkit  # noqa: E402
from lowerkit.onnx.backend_test_adapter import backend_for  # noqa: E402

# The lowerkit backend choices the suite runs against (label -> backend or list).
BACKENDS: dict[str, str | list[str]] = {
    "reference": "reference",
    "nnpack+reference": ["nnpack", "reference"],
    "glow_like": "glow_like",
}

# Node test cases of the imported ops ("expanded" variants use ops lowerkit lacks).
INCLUDE = [
    r"^test_(add|sub|mul|div)(_[a-z0-9]+)*$",
    r"^test_(relu|leakyrelu|sigmoid|tanh|exp|log|sqrt|neg)(_[a-z0-9]+)*$",
    r"^test_clip(_[a-z0-9]+)*$",
    r"^test_(basic_conv|conv)_with(out)?_[a-z_]+$",
    r"^test_matmul_[0-9a-z_]+$",
    r"^test_gemm_[a-z_]+$",
    r"^test_batchnorm_[a-z_]+$",
    r"^test_(maxpool|averagepool)_[0-9a-z_]+$",
    r"^test_globalaveragepool(_precomputed)?$",
    r"^test_flatten_[a-z0-9_]+$",
    r"^test_reshape_[a-z_]+$",
    r"^test_transpose_[a-z0-9_]+$",
    r"^test_(un)?squeeze(_[a-z0-9_]+)?$",
    r"^test_concat_[0-9a-z_]+$",
    r"^test_(log)?softmax_[a-z0-9_]+$",
    r"^test_constant$",
    r"^test_identity$",
    r"^test_(training_)?dropout_[a-z_]+$",
    # The ops of mobile CNNs and transformers (issue 13).
    r"^test_(hardsigmoid|hardswish|erf)(_[a-z]+)*$",
    r"^test_gelu_(default|tanh)_[12]$",
    r"^test_pow(_[a-z0-9_]+)?$",
    r"^test_where(_[a-z]+)*$",
    r"^test_reduce_(mean|sum|max|min)_(?!square)[a-z0-9_]+$",
    r"^test_layer_normalization_[a-z0-9_]+$",
    r"^test_(group_normalization|instancenorm)_[a-z]+$",
    r"^test_slice(_[a-z_]+)?$",
    r"^test_split_(?!to_sequence)[a-z0-9_]+$",
    r"^test_gather_(0|1|2d_indices|negative_indices)$",
    r"^test_(constant|reflect|edge|wrap)_pad(_[a-z_]+)?$",
    r"^test_expand_dim_(changed|unchanged)$",
    r"^test_resize_[a-z0-9_]+$",
    r"^test_convtranspose(_[a-z0-9_]+)?$",
    r"^test_cast_(FLOAT|DOUBLE|FLOAT16)_to_(FLOAT|DOUBLE|FLOAT16)$",
]
EXCLUDE = r"_expanded"

_ALL = frozenset(BACKENDS)

# Every expected failure, once: (backends, test-name regex, reason).
KNOWN_FAILURES: list[tuple[frozenset[str], str, str]] = [
    (_ALL, r"^test_(add|sub|mul|div)_(int16|uint16|uint32|uint64)$",
     "lowerkit has no int16, uint16, uint32 or uint64 dtype"),
    (_ALL, r"^test_div_(int8|uint8|int32_trunc)$",
     "ONNX integer Div truncates; lowerkit's div is true division (import refuses it)"),
    (_ALL, r"^test_clip_default_int8_", "lowerkit's clip takes float tensors only"),
    (_ALL, r"^test_maxpool_2d_uint8$", "lowerkit's max_pool2d takes float tensors only"),
    (_ALL, r"^test_(maxpool|averagepool)_3d_", "3-D pooling is not imported (1-D and 2-D are)"),
    (_ALL, r"^test_averagepool_2d_dilations$", "lowerkit's avg_pool2d has no dilation"),
    (_ALL, r"^test_maxpool_with_argmax_", "MaxPool's Indices output is not imported"),
    (_ALL, r"^test_batchnorm_.*_training_mode$", "training-mode BatchNormalization (batch statistics)"),
    (_ALL, r"^test_training_dropout(_default|_mask|_default_mask)$",
     "training-mode Dropout with a non-zero ratio is random; inference only"),
    # The ops of mobile CNNs and transformers (issue 13).
    (_ALL, r"^test_cast_", "onnx generates the Cast node tests at opset 28, beyond the importer's range (7-25); "
     "Cast itself imports (tests/onnx/test_model_ops.py)"),
    (_ALL, r"^test_pow_types_", "Pow with operands of two dtypes: lowerkit's pow takes one float dtype (a constant "
     "exponent is converted; a graph input is not)"),
    (_ALL, r"^test_reduce_(max|min)_(bool_inputs|empty_set(_bool)?)$",
     "bool reductions and max/min over an empty dim (no identity value) are refused"),
    (_ALL, r"^test_convtranspose_3d$", "3-D ConvTranspose is not imported (1-D and 2-D are)"),
    (_ALL, r"^test_wrap_pad$", "Pad mode 'wrap' is not supported (constant, reflect and edge are)"),
    (_ALL, r"^test_resize_.*(cubic|antialias|tf_crop_and_resize|half_pixel_symmetric)",
     "Resize: cubic mode, antialias and the tf_crop_and_resize / half_pixel_symmetric modes are not supported"),
    (_ALL, r"^test_resize_(up|down)sample_sizes_nearest_not_(larger|smaller)$",
     "Resize keep_aspect_ratio_policy other than stretch is not supported"),
    (_ALL, r"^test_resize_downsample_scales_linear_align_corners$",
     "align_corners with scales giving a fractional size: ONNX divides by the unrounded size, lowerkit (as "
     "PyTorch) by the output size"),
]


def _known_failure(label: str, name: str) -> str | None:
    for backends, pattern, reason in KNOWN_FAILURES:
        if label in backends and re.search(pattern, name):
            return reason
    return None


def _node_case_names() -> list[str]:
    from onnx.backend.test.loader import load_node_model_tests

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the case generators overflow casts on purpose
        cases = load_node_model_tests()
    return sorted(
        c.name for c in cases
        if any(re.search(p, c.name) for p in INCLUDE) and not re.search(EXCLUDE, c.name)
    )


def _installed() -> set[str]:
    return {info.name for info in lowerkit.backends(check=False) if info.error is None}


def _params() -> list:
    installed = _installed()
    params = []
    for label, choice in BACKENDS.items():
        needed = [choice] if isinstance(choice, str) else choice
        missing = [b for b in needed if b not in installed]
        for name in _node_case_names():
            marks = []
            if missing:
                marks.append(pytest.mark.skip(reason=f"backend(s) {missing} not installed"))
            else:
                reason = _known_failure(label, name)
                if reason is not None:
                    marks.append(pytest.mark.xfail(reason=reason, strict=True))
            params.append(pytest.param(label, name, marks=marks, id=f"{label}-{name}"))
    return params


_SUITES: dict[str, type] = {}


def _suite(label: str) -> type:
    """The unittest class ``BackendTest`` builds for one backend choice (cached)."""
    if label not in _SUITES:
        from onnx.backend.test import BackendTest

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            runner = BackendTest(backend_for(BACKENDS[label]), __name__)
        for pattern in INCLUDE:
            runner.include(pattern[:-1] + "_cpu$")
        _SUITES[label] = runner.test_cases["OnnxBackendNodeModelTest"]
    return _SUITES[label]


@pytest.mark.parametrize(("label", "name"), _params())
def test_onnx_node(label: str, name: str) -> None:
    case = _suite(label)
    test_name = f"{name}_cpu"
    getattr(case(test_name), test_name)()


def test_known_failures_name_real_cases() -> None:
    """Every entry of the known-failure table matches at least one included case."""
    names = _node_case_names()
    for _, pattern, reason in KNOWN_FAILURES:
        assert any(re.search(pattern, n) for n in names), (pattern, reason)


def test_include_list_covers_every_imported_op() -> None:
    """Each ONNX op lowerkit imports has node test cases in the run."""
    from onnx.backend.test.loader import load_node_model_tests

    from lowerkit.onnx import _import_ops  # noqa: F401
    from lowerkit.onnx._registry import IMPORTERS

    selected = set(_node_case_names())
    covered = {
        n.op_type for c in load_node_model_tests() if c.name in selected for n in c.model.graph.node
    }
    assert set(IMPORTERS) <= covered, sorted(set(IMPORTERS) - covered)
