"""Un-lowered modules run on ``reference`` through the registry."""

from __future__ import annotations

import numpy as np
import pytest

import lowerkit as lk
from tests.contract.contract_modules import accum_module, scaled_module
from lowerkit.errors import BackendNotFoundError


def test_unlowered_module_runs_on_reference_once_compiled(xh):
    module = accum_module()
    with lk.profile() as report:
        first = module(*xh)
        second = module.accum(*xh)
    np.testing.assert_array_equal(first[0], xh[0] + xh[1])
    np.testing.assert_array_equal(second, xh[0] + xh[1])
    assert report.calls("reference", "(compile)") == 1
    assert report.calls("reference", "forward") == 1
    assert report.calls("reference", "accum") == 1
    backend, handles = module._runtime_cache
    assert backend.name == "reference" and set(handles) == {"accum", "sub_accum", "forward"}


def test_missing_reference_says_which_package_to_install(monkeypatch):
    monkeypatch.setenv("LOWERKIT_DISABLE_PLUGINS", "reference")
    module = scaled_module(1.0)
    with pytest.raises(BackendNotFoundError, match="un-lowered modules run on the reference backend"):
        module(np.zeros((2, 3), np.float32))


def test_missing_reference_message_names_pip_install():
    from lowerkit.backend.registry import not_found_message

    text = not_found_message("reference", ["toy"])
    assert "pip install lowerkit-reference" in text and "plugins/reference" in text
