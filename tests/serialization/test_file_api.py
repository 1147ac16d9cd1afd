"""dumps/loads/save/load of modules: bit-exact round trips, metadata, atomic writes."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import numpy as np
import pytest

import lowerkit as lk
from lowerkit.errors import FormatError, InputError, VerificationError
from lowerkit.ir import Graph, GraphMethod, Module, SourceLocation, TensorType, graph_of
from lowerkit.serialization import BASE_FORMAT_VERSION, FORMAT_VERSION

from tests.serialization.file_examples import T, assert_modules_equal, cnn_module, every_dtype_module, nested_module, tiny_module

BUILDERS = [tiny_module, every_dtype_module, cnn_module, nested_module]


@pytest.mark.parametrize("build", BUILDERS, ids=lambda f: f.__name__)
def test_round_trip_is_bit_exact(build):
    module = build()
    data = lk.dumps(module)
    loaded = lk.loads(data)
    assert_modules_equal(module, loaded)
    assert lk.dumps(loaded) == data
    assert lk.dumps(build()) == data  # deterministic: a fresh equal module gives the same bytes


def test_every_dtype_keeps_dtype_shape_and_bits():
    module = every_dtype_module()
    loaded = lk.loads(lk.dumps(module))
    assert len(module.parameters) == 8
    for name, array in module.parameters.items():
        got = loaded.parameters[name]
        assert got.dtype == array.dtype
        np.testing.assert_array_equal(got, array)
    for node, other in zip(graph_of(module).nodes, graph_of(loaded).nodes):
        if node.op == "constant":
            value, got = node.attrs["value"], other.attrs["value"]
            assert got.dtype == value.dtype and got.shape == value.shape
            np.testing.assert_array_equal(got, value)


def test_metadata_is_kept():
    loaded = lk.loads(lk.dumps(cnn_module()))
    conv = next(n for n in graph_of(loaded).nodes if n.op == "conv2d")
    assert conv.scope == "conv"
    assert conv.source == SourceLocation("model.py", 10)
    assert conv.debug_handle == 2
    assert conv.outputs[0].name == "conv"
    assert conv.attrs["padding"] == (1, 1, 1, 1) and conv.attrs["groups"] == 1
    clip = next(n for n in graph_of(loaded).nodes if n.op == "clip")
    assert clip.attrs["min"] == -np.inf and type(clip.attrs["min"]) is float
    assert loaded.name == "SmallCNN"
    assert loaded.methods["both"].returns_tuple and not loaded.methods["forward"].returns_tuple


def test_tuple_method_and_repeated_output_survive():
    loaded = lk.loads(lk.dumps(cnn_module()))
    g = graph_of(loaded, "both")
    assert len(g.outputs) == 3 and g.outputs[0] is g.outputs[2]
    assert str(loaded.signature("both")).startswith("(x: f32[1, 3, 4, 4]) -> (")


def test_nested_submodules_keep_order_and_run():
    module = nested_module()
    loaded = lk.loads(lk.dumps(module))
    assert list(loaded.submodules) == ["head", "block"]
    assert list(loaded.submodules["block"].submodules) == ["inner"]
    x = np.random.default_rng(0).standard_normal((1, 3, 4, 4)).astype(np.float32)
    try:
        expected = module(x)
    except Exception as err:  # the reference backend is another area's work
        pytest.skip(f"reference backend cannot run here: {err}")
    np.testing.assert_array_equal(loaded(x), expected)


def test_namespace_is_rebuilt_so_new_names_stay_unique():
    loaded = lk.loads(lk.dumps(cnn_module()))
    g = graph_of(loaded)
    node = g.add_node("relu", [g.outputs[0]], [g.outputs[0].type], output_hints=["conv"])
    assert node.output.name not in {v.name for n in g.nodes[:-1] for v in n.outputs}
    assert node.output.name.startswith("conv_")


def test_loaded_parameters_are_read_only():
    loaded = lk.loads(lk.dumps(tiny_module()))
    with pytest.raises(ValueError):
        loaded.parameters["w"][0] = 3.0


def test_save_and_load_files(tmp_path):
    module = cnn_module()
    path = tmp_path / "net.lkm"
    lk.save(module, path)
    assert path.read_bytes() == lk.dumps(module)
    assert_modules_equal(module, lk.load(path))
    lk.save(module, str(path))  # str paths too; overwrites
    assert_modules_equal(module, lk.load(str(path)))
    assert sorted(os.listdir(tmp_path)) == ["net.lkm"]


def test_header_carries_the_format_version():
    data = lk.dumps(tiny_module())
    assert data[:8] == b"\x89LKM\r\n\x1a\n"
    # A file using no 1.1 field (output names, symbolic dims, payload versions) is 1.0.
    assert int.from_bytes(data[8:10], "little") == BASE_FORMAT_VERSION[0] == 1
    assert int.from_bytes(data[10:12], "little") == BASE_FORMAT_VERSION[1] == 0
    assert int.from_bytes(data[12:20], "little") == len(data) - 52


def test_saving_something_else_is_an_input_error():
    with pytest.raises(InputError, match="can only save a lowerkit.Module or lowerkit.LoweredModule, got dict"):
        lk.dumps({"w": np.ones(2)})


def test_saving_an_invalid_module_fails_before_writing(tmp_path):
    g = Graph()
    x = g.add_input("x", T("f32", 2))
    g.add_node("relu", [x], [T("f32", 3)], debug_handle=0)  # wrong output shape
    g.set_outputs([g.nodes[0].output])
    path = tmp_path / "bad.lkm"
    with pytest.raises(VerificationError, match="relu"):
        lk.save(Module(methods={"forward": GraphMethod(g)}), path)
    assert not path.exists()


def test_unsupported_attribute_value_is_an_input_error():
    module = tiny_module()
    graph_of(module).nodes[0].attrs["extra"] = {"a": 1}
    pytest.importorskip("lowerkit.ir.verify")
    with pytest.raises((InputError, VerificationError), match="extra"):
        lk.dumps(module)


def test_failed_write_leaves_the_old_file_and_no_temporary(tmp_path, monkeypatch):
    path = tmp_path / "m.lkm"
    lk.save(tiny_module(), path)
    before = path.read_bytes()

    def broken_replace(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", broken_replace)
    with pytest.raises(OSError, match="disk full"):
        lk.save(cnn_module(), path)
    assert path.read_bytes() == before
    assert sorted(os.listdir(tmp_path)) == ["m.lkm"]


def test_failure_while_writing_leaves_no_partial_file(tmp_path, monkeypatch):
    path = tmp_path / "new.lkm"

    def broken_fsync(fd):
        raise OSError("I/O error")

    monkeypatch.setattr(os, "fsync", broken_fsync)
    with pytest.raises(OSError, match="I/O error"):
        lk.save(cnn_module(), path)
    assert os.listdir(tmp_path) == []


def test_saved_file_gets_ordinary_permissions(tmp_path):
    path = tmp_path / "m.lkm"
    lk.save(tiny_module(), path)
    mask = os.umask(0)
    os.umask(mask)
    assert path.stat().st_mode & 0o777 == 0o666 & ~mask


def test_loading_a_missing_file_is_an_os_error(tmp_path):
    with pytest.raises(FileNotFoundError):
        lk.load(tmp_path / "absent.lkm")


def test_loading_an_onnx_model_points_at_the_onnx_importer(tmp_path):
    path = tmp_path / "model.onnx"
    path.write_bytes(b"\x08\x07\x12\x07pytorch")
    with pytest.raises(FormatError, match=r"model\.onnx: not a lowerkit file.*ONNX models are imported with lowerkit\.onnx\.load"):
        lk.load(path)


def test_saving_into_a_missing_directory_names_the_target_not_the_temporary(tmp_path):
    target = tmp_path / "absent" / "m.lkm"
    with pytest.raises(FileNotFoundError, match=r"No such file or directory: '.*absent/m\.lkm'$"):
        lk.save(tiny_module(), target)


@pytest.mark.parametrize(
    "data, message",
    [
        ("net.lkm", r"loads expects the bytes lowerkit.dumps made, got str 'net.lkm'; use lowerkit.load\(path\)"),
        (Path("net.lkm"), r"got PosixPath 'net.lkm'; use lowerkit.load\(path\)|got WindowsPath"),
        (None, r"loads expects the bytes lowerkit.dumps made, got NoneType"),
    ],
)
def test_loads_of_something_other_than_bytes_is_an_input_error(data, message):
    with pytest.raises(InputError, match=message):
        lk.loads(data)


def _ir_examples():
    path = Path(__file__).parents[1] / "ir" / "ir_examples.py"
    if not path.exists():
        pytest.skip("tests/ir/ir_examples.py not present")
    spec = importlib.util.spec_from_file_location("_serialization_ir_examples", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _module_around(graph: Graph, op: str) -> Module:
    """A module in which the one-node example graph of ``op`` verifies."""
    node = graph.nodes[0]
    params, subs = {}, {}
    if op == "param":
        params[node.attrs["name"]] = np.zeros(node.output.type.shape, np.float32)
    if op == "call":
        sub_graph = Graph()
        ins = [sub_graph.add_input(f"a{i}", v.type) for i, v in enumerate(node.inputs)]
        const = np.arange(2, dtype=np.int64)
        k = sub_graph.add_node("constant", [], [TensorType.of(const)], {"value": const}, debug_handle=0)
        sub_graph.set_outputs([ins[0], k.output])
        subs[node.attrs["module"]] = Module(
            methods={node.attrs["method"]: GraphMethod(sub_graph, returns_tuple=True)}, name="Sub"
        )
    return Module(params, {"forward": GraphMethod(graph)}, subs, name=f"Example_{op}")


def test_every_registered_op_round_trips():
    from lowerkit.opset import all_schemas

    examples = _ir_examples()
    for schema in all_schemas():
        if schema.name not in examples.EXAMPLES:
            continue  # tests/ir checks that every op has an example
        module = _module_around(examples.example_graph(schema.name), schema.name)
        data = lk.dumps(module)
        loaded = lk.loads(data)
        assert_modules_equal(module, loaded)
        assert lk.dumps(loaded) == data, schema.name


def test_traced_model_round_trips(tmp_path):
    """The issue's example: trace, save, load, same outputs."""
    from lowerkit import models

    x = np.random.default_rng(0).random((1, 3, 8, 8)).astype(np.float32)
    module = lk.trace(models.small_cnn(), x)
    path = tmp_path / "net.lkm"
    lk.save(module, path)
    loaded = lk.load(path)
    assert_modules_equal(module, loaded)
    assert str(loaded) == str(module)
    np.testing.assert_array_equal(loaded(x), module(x))


def test_untraced_nn_module_gets_a_hint():
    from lowerkit import models

    with pytest.raises(InputError, match=r"got SmallCNN; trace it first with lowerkit.trace"):
        lk.dumps(models.small_cnn())


@pytest.mark.parametrize(
    "damage, message",
    [
        (lambda g: setattr(g.nodes[0], "debug_handle", 2**70), "Tiny cannot be saved: Value out of range"),
        (lambda g: setattr(g.inputs[0], "name", "x\udc80"), "Tiny cannot be saved: .*surrogates not allowed"),
    ],
    ids=["int-overflow", "lone-surrogate"],
)
def test_values_protobuf_cannot_hold_are_input_errors(damage, message):
    module = tiny_module()
    damage(graph_of(module))
    with pytest.raises(InputError, match=message):
        lk.dumps(module)


def test_a_symbolic_dim_or_a_payload_version_stamps_format_1_1():
    x = np.ones((2, 3), np.float32)
    free = lk.trace(lambda a: a + 1, x, dynamic_batch=True)
    assert int.from_bytes(lk.dumps(free)[10:12], "little") == FORMAT_VERSION[1] == 1
    pytest.importorskip("lowerkit_glow_like")
    static = lk.trace(lambda a: a + 1, x)
    lowered = lk.to_backend(static, "glow_like")  # glow_like declares its payload version
    assert lowered.record.payload_version
    assert int.from_bytes(lk.dumps(lowered)[10:12], "little") == 1
