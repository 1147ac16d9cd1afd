"""The plugin surface: entry point, is_supported, options, calls to methods and submodules."""

from __future__ import annotations

from importlib.metadata import entry_points

import numpy as np
import pytest
from tests.glow_like.helpers import assert_close, f32, module_of, rand, reference, run_glow

import lowerkit_glow_like as glow
from lowerkit.errors import InputError
from lowerkit.ir import Graph, GraphMethod, Module, Node, TensorType, Value


def test_entry_point_names_the_package():
    (ep,) = [e for e in entry_points(group="lowerkit.backends") if e.name == "glow_like"]
    assert ep.value == "lowerkit_glow_like" and ep.load() is glow


def _node(op: str, dtype: str = "f32") -> Node:
    t = TensorType(dtype, (2,))
    return Node(op, [Value("a", t)], [Value("b", t)])


def test_claims_fp32_registry_ops_and_declines_others_with_a_reason():
    assert glow.lowerkit_is_supported(_node("relu")) is True
    for node, reason in [(_node("relu", "i32"), "float32 only"), (_node("frobnicate"), "no kernel"),
                         (_node("call"), "inlines calls")]:
        answer = glow.lowerkit_is_supported(node)
        assert not answer and reason in getattr(answer, "reason", reason)


@pytest.mark.parametrize(
    "options, message",
    [({"opt_level": 3}, "opt_level must be 0, 1 or 2"), ({"threads": 0}, "threads must be a positive int, 'blas' or None"),
     ({"precision": "int4"}, "precision must be 'fp32' or 'int8'"), ({"precision": "int8"}, "needs a 'profile'"),
     ({"precision": "int8", "profile": "p.json", "opt_level": 1}, "needs opt_level 2, got 1")],
)
def test_bad_options_are_input_errors(options, message):
    g = Graph()
    x = g.add_input("x", f32(2))
    g.set_outputs([g.add_node("relu", [x], [f32(2)]).output])
    with pytest.raises(InputError, match=message):
        glow.lowerkit_preprocess(module=module_of(g), compile_spec={"forward": options})


def test_unknown_options_are_errors_naming_the_known_ones():
    g = Graph()
    x = g.add_input("x", f32(2))
    g.set_outputs([g.add_node("relu", [x], [f32(2)]).output])
    with pytest.raises(InputError, match=r"unknown option\(s\) \['opt_levle'\]; known options are"):
        glow.lowerkit_preprocess(module=module_of(g), compile_spec={"forward": {"opt_levle": 1}})


def test_calls_to_other_methods_and_submodules_are_inlined():
    inner = Graph()
    a = inner.add_input("a", f32(3))
    w = inner.add_node("param", [], [f32(3)], {"name": "w"}, debug_handle=1).output
    inner.set_outputs([inner.add_node("mul", [a, w], [f32(3)], debug_handle=2).output])
    sub = Module({"w": np.full(3, 2.0, np.float32)}, {"forward": GraphMethod(inner)}, name="Sub")
    g = Graph()
    x = g.add_input("x", f32(3))
    y = g.add_node("call", [x], [f32(3)], {"method": "forward", "module": "sub"}, debug_handle=1).output
    z = g.add_node("call", [y], [f32(3)], {"method": "twice", "module": ""}, debug_handle=2).output
    g.set_outputs([z])
    tw = Graph()
    b = tw.add_input("b", f32(3))
    tw.set_outputs([tw.add_node("add", [b, b], [f32(3)], debug_handle=3).output])
    module = Module({}, {"forward": GraphMethod(g), "twice": GraphMethod(tw)}, {"sub": sub}, name="Outer")
    inp = rand(3)
    assert_close(run_glow(module, inp), reference(module, inp))


def test_describe_hook_is_exposed_exactly_when_the_core_declares_it():
    from lowerkit import hookspecs

    assert hasattr(glow, "lowerkit_describe") == ("lowerkit_describe" in hookspecs.HOOK_NAMES)
    g = Graph()
    x = g.add_input("x", f32(2))
    g.set_outputs([g.add_node("relu", [x], [f32(2)]).output])
    text = glow.describe(glow.lowerkit_preprocess(module=module_of(g), compile_spec={}))
    assert text.startswith("method forward (opt_level=2") and "relu(%x:f32[2]@" in text


def test_outputs_that_are_inputs_constants_or_repeated():
    g = Graph()
    x = g.add_input("x", f32(3))
    c = g.add_node("param", [], [f32(3)], {"name": "c"}).output
    y = g.add_node("relu", [x], [f32(3)]).output
    g.set_outputs([x, c, y, y])
    module = Module({"c": np.arange(3, dtype=np.float32)}, {"forward": GraphMethod(g, returns_tuple=True)})
    for i, node in enumerate(g.nodes):
        node.debug_handle = i + 1
    inp = rand(3)
    for level in (0, 2):
        got = run_glow(module, inp, opt_level=level)
        assert_close(got, reference(module, inp))
        got[0][0] = 99.0  # outputs are fresh arrays, not views of the input or constants
        assert inp[0] != 99.0
