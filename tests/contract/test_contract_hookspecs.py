"""The hook specs document themselves and Unsupported behaves as a falsy reason."""

from __future__ import annotations

import inspect

import lowerkit
from lowerkit import hookspecs


def test_unsupported_is_falsy_and_carries_its_reason():
    answer = lowerkit.Unsupported("dilation 2 unsupported")
    assert not answer
    assert answer.reason == "dilation 2 unsupported"
    assert answer == hookspecs.Unavailable("dilation 2 unsupported")
    assert "dilation 2" in repr(answer)


def test_every_hook_is_firstresult_and_documented():
    for name in hookspecs.HOOK_NAMES:
        function = getattr(hookspecs, name)
        opts = function.lowerkit_spec
        assert opts["firstresult"] is True, name
        doc = inspect.getdoc(function)
        assert doc and len(doc.splitlines()) >= 3, name
    assert set(hookspecs.REQUIRED_HOOKS) < set(hookspecs.HOOK_NAMES)


def test_execute_spec_names_the_method_for_wrappers():
    params = list(inspect.signature(hookspecs.lowerkit_execute).parameters)
    assert params == ["handle", "inputs", "method"]


def test_node_execution_error_carries_the_debug_handle():
    err = lowerkit.errors.NodeExecutionError(7, "kernel exploded")
    assert isinstance(err, lowerkit.BackendExecutionError)
    assert err.debug_handle == 7
    assert str(err) == "kernel exploded"
