"""The verifier: one test per broken invariant, each checking the message names the node."""

from __future__ import annotations

import numpy as np
import pytest

from tests.ir.ir_examples import EXAMPLES, T, cnn_graph, example_graph, two_method_module
from lowerkit.errors import VerificationError
from lowerkit.ir import Graph, GraphMethod, Module, SourceLocation, Value, verify_graph, verify_module
from lowerkit.opset import all_schemas


def cnn_module() -> Module:
    g, params = cnn_graph()
    return Module(params, {"forward": GraphMethod(g)}, name="Net")


@pytest.mark.parametrize("op", [s.name for s in all_schemas()])
def test_every_op_example_verifies(op):
    if op not in EXAMPLES:
        pytest.skip(f"no example for {op} yet")
    verify_graph(example_graph(op))


def test_valid_modules_verify():
    verify_module(cnn_module())
    verify_module(two_method_module())
    verify_graph(cnn_graph()[0])  # free graph: params are not checked


# -- SSA and order ---------------------------------------------------------------------------


def test_value_bound_twice():
    g, _ = cnn_graph()
    g.nodes[3].outputs = [g.nodes[2].output]
    with pytest.raises(VerificationError, match=r"method 'forward', node relu #3 at net.py:13: "
                       r"output 0 %conv is bound a second time \(SSA\)"):
        verify_graph(g)


def test_name_bound_twice():
    g, _ = cnn_graph()
    g.nodes[3].output.name = "conv"
    with pytest.raises(VerificationError, match=r"node relu #3 .*output 0 is named %conv, "
                       r"a name already bound by node conv2d #2 in conv at net.py:12"):
        verify_graph(g)


def test_use_before_definition():
    g, _ = cnn_graph()
    g.nodes[2], g.nodes[3] = g.nodes[3], g.nodes[2]
    with pytest.raises(VerificationError, match=r"node relu #3 at net.py:13: input 0 reads %conv "
                       r"before it is defined \(nodes must be in topological order\)"):
        verify_graph(g)


def test_use_of_foreign_value():
    g, _ = cnn_graph()
    g.nodes[3].inputs = [Value("ghost", T("f32", 1, 4, 8, 8))]
    with pytest.raises(VerificationError, match=r"input 0 reads %ghost which no input or node"):
        verify_graph(g)


def test_undefined_graph_output():
    g, _ = cnn_graph()
    g.set_outputs([Value("ghost", T("f32", 1, 10))])
    with pytest.raises(VerificationError, match=r"method 'forward': graph output 0 %ghost is not bound"):
        verify_graph(g)


def test_untyped_value():
    g = example_graph("relu")
    g.nodes[0].outputs[0].type = (2, 3)  # type: ignore[assignment]
    with pytest.raises(VerificationError, match=r"node relu #7 in layer1.0.conv1 at models/net.py:42: "
                       r"output 0 is not a typed Value"):
        verify_graph(g)


# -- ops, arity and attributes -----------------------------------------------------------------


def test_unknown_op():
    g = example_graph("relu")
    g.nodes[0].op = "swizzle"
    with pytest.raises(VerificationError, match=r"node swizzle #7 .*unknown op 'swizzle'"):
        verify_graph(g)


@pytest.mark.parametrize(
    "op, keep, message",
    [
        ("add", 1, r"add takes 2 inputs \(a, b\), got 1"),
        ("linear", 1, r"linear takes 2 to 3 inputs \(x, weight, bias\), got 1"),
        ("relu", 0, r"relu takes 1 inputs \(x\), got 0"),
    ],
)
def test_too_few_inputs(op, keep, message):
    g = example_graph(op)
    g.nodes[0].inputs = g.nodes[0].inputs[:keep]
    with pytest.raises(VerificationError, match=message):
        verify_graph(g)


def test_too_many_inputs():
    g = example_graph("relu")
    g.nodes[0].inputs.append(g.inputs[0])
    with pytest.raises(VerificationError, match=r"relu takes 1 inputs \(x\), got 2"):
        verify_graph(g)


def test_variadic_ops_take_any_count():
    g = example_graph("concat")
    extra = g.add_input("extra", T("f32", 2, 1))
    node = g.nodes[0]
    node.inputs.append(extra)
    node.outputs[0].type = T("f32", 2, 9)
    verify_graph(g)


def test_wrong_output_count():
    g = example_graph("relu")
    g.nodes[0].outputs.append(Value("second", T("f32", 2, 3)))
    with pytest.raises(VerificationError, match=r"relu has 1 output\(s\), node binds 2"):
        verify_graph(g)


def test_unknown_attribute():
    g = example_graph("relu")
    g.nodes[0].attrs["alpha"] = 1.0
    with pytest.raises(VerificationError, match=r"node relu #7 .*relu has no attribute\(s\) \['alpha'\]"):
        verify_graph(g)


def test_missing_required_attribute():
    g = example_graph("transpose")
    del g.nodes[0].attrs["perm"]
    with pytest.raises(VerificationError, match=r"transpose needs attribute 'perm' \(ints\)"):
        verify_graph(g)


def test_attribute_of_wrong_kind():
    g = example_graph("conv2d")
    g.nodes[0].attrs["groups"] = "two"
    with pytest.raises(VerificationError, match=r"node conv2d #7 .*attribute 'groups' expects int"):
        verify_graph(g)


@pytest.mark.parametrize(
    "op, key, value, message",
    [
        ("clip", "min", 0, r"attribute 'min' should be stored as float \(canonical form 0.0\), got 0 of type int"),
        ("conv2d", "stride", [2, 1], r"attribute 'stride' should be stored as ints .* got \[2, 1\] of type list"),
        ("softmax", "dim", np.int64(1), r"attribute 'dim' should be stored as int .*of type int64"),
    ],
)
def test_attribute_not_in_canonical_form(op, key, value, message):
    g = example_graph(op)
    g.nodes[0].attrs[key] = value
    with pytest.raises(VerificationError, match=message):
        verify_graph(g)


def test_missing_defaulted_attributes_are_fine():
    g = example_graph("conv2d")
    g.nodes[0].attrs = {k: v for k, v in g.nodes[0].attrs.items() if k == "stride" or k == "padding"}
    g.nodes[0].attrs["dilation"] = (1, 2)
    g.nodes[0].attrs["groups"] = 2
    verify_graph(g)
    del g.nodes[0].attrs["groups"]
    with pytest.raises(VerificationError, match="conv2d"):
        verify_graph(g)  # groups=1 no longer matches the weight's channels


# -- types ---------------------------------------------------------------------------------------


def test_output_type_differs_from_inference():
    g, _ = cnn_graph()
    g.nodes[3].outputs[0].type = T("f32", 1, 4, 8, 9)
    with pytest.raises(VerificationError, match=r"node relu #3 at net.py:13: output types "
                       r"\(f32\[1, 4, 8, 9\]\) differ from the inferred \(f32\[1, 4, 8, 8\]\)"):
        verify_graph(g)


def test_shape_error_names_the_node():
    g = example_graph("matmul")
    g.inputs[1].type = T("f32", 5, 4)
    with pytest.raises(VerificationError, match=r"method 'forward', node matmul #7 in layer1.0.conv1 at "
                       r"models/net.py:42: invalid inputs \(f32\[2, 3\], f32\[5, 4\]\): "):
        verify_graph(g)


def test_constant_type_must_match_its_value():
    g = example_graph("constant")
    g.nodes[0].outputs[0].type = T("f64", 2, 3)
    with pytest.raises(VerificationError, match=r"node constant #7 .*differ from the inferred \(f32\[2, 3\]\)"):
        verify_graph(g)


# -- structural ops ------------------------------------------------------------------------------


def test_param_must_exist_in_module():
    m = cnn_module()
    m.methods["forward"].graph.nodes[0].attrs["name"] = "conv.wieght"
    with pytest.raises(VerificationError, match=r"node param #0 in conv at net.py:12: no parameter "
                       r"'conv.wieght' in module Net \(has: conv.bias, conv.weight, fc.bias, fc.weight\)"):
        verify_module(m)


def test_param_type_must_match_module():
    m = cnn_module()
    m.methods["forward"].graph.nodes[1].outputs[0].type = T("f64", 4)
    with pytest.raises(VerificationError, match=r"param 'conv.bias' is f32\[4\] in the module, node says f64\[4\]"):
        verify_module(m)


def test_call_to_missing_method():
    m = two_method_module()
    m.methods["forward"].graph.nodes[2].attrs["method"] = "acum"
    with pytest.raises(VerificationError, match=r"node call #6: module Cell has no method 'acum' "
                       r"\(has: \['accum', 'forward'\]\)"):
        verify_module(m)


def test_call_to_missing_submodule():
    m = two_method_module()
    m.methods["forward"].graph.nodes[3].attrs["module"] = "actv"
    with pytest.raises(VerificationError, match=r"node call #7 in act: no submodule 'actv' in module Cell"):
        verify_module(m)


def test_call_to_missing_submodule_method():
    m = two_method_module()
    m.methods["forward"].graph.nodes[3].attrs["method"] = "backward"
    with pytest.raises(VerificationError, match=r"submodule 'act' has no method 'backward'"):
        verify_module(m)


def test_call_argument_types_must_match_signature():
    m = two_method_module()
    call = m.methods["forward"].graph.nodes[2]
    call.inputs = call.inputs[:1]
    with pytest.raises(VerificationError, match=r"call to 'accum' of module Cell passes \(f32\[2, 3\]\), "
                       r"it takes \(f32\[2, 3\], f32\[2, 3\]\)"):
        verify_module(m)


def test_call_result_types_must_match_signature():
    m = two_method_module()
    call = m.methods["forward"].graph.nodes[2]
    call.outputs = call.outputs[:1]
    with pytest.raises(VerificationError, match=r"call to 'accum' of module Cell binds \(f32\[2, 3\]\), "
                       r"it returns \(f32\[2, 3\], f32\[2, 3\]\)"):
        verify_module(m)


def test_recursive_calls_are_rejected():
    m = two_method_module()
    accum = m.methods["accum"].graph
    x, h = accum.inputs
    accum.add_node("call", [x, h], [x.type, x.type], {"method": "forward", "module": ""}, debug_handle=50)
    m.methods["forward"].graph.nodes[2].inputs = [m.methods["forward"].graph.inputs[0]] * 2
    # forward(x) -> accum(x, x); accum now also calls forward with two inputs: fix its signature
    accum.nodes[-1].inputs = [x]
    accum.nodes[-1].outputs = accum.nodes[-1].outputs[:1]
    with pytest.raises(VerificationError, match=r"methods call each other recursively "
                       r"\((forward -> accum -> forward|accum -> forward -> accum)\)"):
        verify_module(m)


def test_submodule_errors_name_the_submodule():
    m = two_method_module()
    m.submodules["act"].methods["forward"].graph.nodes[0].op = "swizzle"
    with pytest.raises(VerificationError, match=r"submodule 'act': method 'forward', node swizzle #0 in act"):
        verify_module(m)


# -- debug handles -----------------------------------------------------------------------------


def test_unset_handle_is_allowed_only_in_free_graphs():
    g, params = cnn_graph()
    g.nodes[4].debug_handle = -1
    verify_graph(g)
    with pytest.raises(VerificationError, match=r"node max_pool2d #-1 at net.py:13: has no debug handle"):
        verify_module(Module(params, {"forward": GraphMethod(g)}))


def test_handles_unique_within_a_graph():
    g, _ = cnn_graph()
    g.nodes[5].debug_handle = 2
    with pytest.raises(VerificationError, match=r"node flatten #2 at net.py:14: debug handle 2 is also "
                       r"used by node conv2d #2 in conv at net.py:12 in method 'forward'"):
        verify_graph(g)


def test_handles_unique_across_methods():
    m = two_method_module()
    m.methods["accum"].graph.nodes[0].debug_handle = 4
    with pytest.raises(VerificationError, match=r"debug handle 4 is also used by node constant #4 in method 'forward'"):
        verify_module(m)


def test_negative_handles_other_than_unset():
    g = example_graph("relu")
    g.nodes[0].debug_handle = -5
    with pytest.raises(VerificationError, match=r"debug handle must be an int >= 0 \(or -1 unset\), got -5"):
        verify_graph(g)


def test_errors_carry_source_location():
    g = Graph()
    x = g.add_input("x", T("f32", 2))
    g.add_node("relu", [x], [T("f32", 3)], debug_handle=1, scope="blk.0",
               source=SourceLocation("model.py", 77))
    with pytest.raises(VerificationError, match=r"node relu #1 in blk.0 at model.py:77"):
        verify_graph(g)


class _LoweredStub:
    """Stands in for a LoweredModule: signatures only, no graphs."""

    def __init__(self, signatures):
        from types import SimpleNamespace

        self.record = SimpleNamespace(signatures=signatures)
        self.backend = "stub"

    def signature(self, method):
        from lowerkit.errors import InputError

        try:
            return self.record.signatures[method]
        except KeyError:
            raise InputError(f"no method {method!r}") from None


def test_call_into_a_lowered_submodule_checks_its_signature():
    from lowerkit.ir import Signature

    m = two_method_module()
    sig = Signature((("x", T("f32", 2, 3)),), (T("f32", 2, 3),))
    m.submodules["act"] = _LoweredStub({"forward": sig})
    verify_module(m)
    m.submodules["act"] = _LoweredStub({"run": sig})
    with pytest.raises(VerificationError, match=r"submodule 'act' has no method 'forward' \(has: \['run'\]\)"):
        verify_module(m)


def test_non_int_handle():
    g = example_graph("relu")
    g.nodes[0].debug_handle = "7"  # type: ignore[assignment]
    with pytest.raises(VerificationError, match=r"debug handle must be an int >= 0 \(or -1 unset\), got '7'"):
        verify_graph(g)


def test_long_call_chains_do_not_exhaust_the_stack():
    methods = {}
    for i in range(3000):
        g = Graph()
        x = g.add_input("x", T("f32", 1))
        if i < 2999:
            node = g.add_node("call", [x], [x.type], {"method": f"m{i + 1}", "module": ""}, debug_handle=i)
        else:
            node = g.add_node("call", [x], [x.type], {"method": "m0", "module": ""}, debug_handle=i)
        g.set_outputs(node.outputs)
        methods[f"m{i}"] = GraphMethod(g)
    with pytest.raises(VerificationError, match=r"methods call each other recursively \(m0 -> m1 -> .* -> m2999 -> m0\)"):
        verify_module(Module(methods=methods))


def test_inference_crash_becomes_verification_error(monkeypatch):
    import dataclasses

    import lowerkit.opset.registry as registry
    from lowerkit.opset import get_schema

    schema = get_schema("relu")

    def broken(types, attrs):
        raise IndexError("tuple index out of range")

    g = example_graph("relu")
    monkeypatch.setitem(registry._SCHEMAS, "relu", dataclasses.replace(schema, infer=broken))
    with pytest.raises(VerificationError, match=r"node relu #7 .*type inference failed .*IndexError: tuple index"):
        verify_graph(g)
