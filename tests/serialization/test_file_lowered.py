"""Lowered modules in files: DelegateRecord <-> proto, and save/load through a real backend."""

from __future__ import annotations

import hashlib
import json
import warnings

import numpy as np
import pytest

import lowerkit as lk
from lowerkit.lowering.lowered import DelegateRecord, LoweredModule
from lowerkit.errors import BackendNotFoundError, FormatError, InputError
from lowerkit.ir import Graph, GraphMethod, Module, Signature
from lowerkit.serialization import container, decoder, encoder
from lowerkit.serialization import lowerkit_pb2 as pb

from tests.serialization.file_examples import T, assert_modules_equal, cnn_module, tiny_module

BACKEND = "serialization_test_backend"


def _record(**changes) -> DelegateRecord:
    fields = dict(
        backend="fake",
        distribution="lowerkit-fake",
        version="1.2.3",
        compile_spec={"forward": {"threads": 2, "tile": [4, 4], "name": "é", "fast": True}},
        payload=bytes(range(256)),
        signatures={
            "forward": Signature((("x", T("f32", 2)),), (T("f32", 2),)),
            "both": Signature((("x", T("f32", 2)), ("h", T("i64", 3, 1))), (T("f32", 2), T("bool")), True),
            "nothing": Signature((), (), True),
        },
        original=tiny_module(),
        name="Lowered",
        extra={"b": "2", "a": "1"},
    )
    fields.update(changes)
    return DelegateRecord(**fields)


def _record_round_trip(record: DelegateRecord) -> tuple[DelegateRecord, bytes]:
    data = encoder.record_to_proto(record, pb.LoweredModule()).SerializeToString(deterministic=True)
    msg = pb.LoweredModule()
    msg.ParseFromString(data)
    return decoder.record_from_proto(msg), data


def test_record_round_trip_keeps_every_field():
    record = _record()
    back, data = _record_round_trip(record)
    for field in ("backend", "distribution", "version", "compile_spec", "payload", "signatures", "name", "extra"):
        assert getattr(back, field) == getattr(record, field), field
    assert list(back.signatures) == ["forward", "both", "nothing"]
    assert_modules_equal(record.original, back.original)
    assert _record_round_trip(back)[1] == data


def test_record_without_original_or_extras():
    back, _ = _record_round_trip(_record(original=None, extra={}, compile_spec={}))
    assert back.original is None and back.extra == {} and back.compile_spec == {}


def test_compile_spec_is_stored_as_canonical_json():
    msg = encoder.record_to_proto(_record(), pb.LoweredModule())
    assert msg.compile_spec_json == '{"forward":{"fast":true,"name":"é","threads":2,"tile":[4,4]}}'
    assert msg.payload_sha256 == hashlib.sha256(bytes(range(256))).digest()


@pytest.mark.parametrize(
    "spec", [{"forward": {"f": np.float32(1.0)}}, {"forward": {"x": float("nan")}}, {"forward": {"s": {1, 2}}}]
)
def test_compile_spec_that_is_not_json_is_an_input_error(spec):
    with pytest.raises(InputError, match="compile_spec must be JSON data"):
        encoder.record_to_proto(_record(compile_spec=spec), pb.LoweredModule())


def _damaged(change) -> pb.LoweredModule:
    msg = encoder.record_to_proto(_record(), pb.LoweredModule())
    change(msg)
    return msg


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda m: setattr(m, "payload", b"tampered"), "payload does not match its sha256"),
        (lambda m: setattr(m, "payload_sha256", b""), "payload does not match its sha256"),
        (lambda m: setattr(m, "backend", ""), "no backend name"),
        (lambda m: setattr(m, "compile_spec_json", "{not json"), "compile spec is not valid JSON"),
        (lambda m: setattr(m, "compile_spec_json", "[1, 2]"), "must map method names to option objects"),
        (lambda m: setattr(m, "compile_spec_json", '{"forward": 3}'), "must map method names"),
        (lambda m: m.methods[0].graph.SetInParent(), "method 'forward': expected a signature"),
        (lambda m: m.methods[1].signature.inputs[0].type.shape.append(-1), "negative dimension"),
        (lambda m: setattr(m.methods[2], "name", "forward"), "method 'forward' appears twice"),
        (lambda m: setattr(m.methods[1], "returns_tuple", False), "returns 2 outputs but is not marked"),
        (lambda m: setattr(m.original.parameters[0].tensor, "dtype", "object"), "original module .*unknown dtype"),
    ],
)
def test_damaged_record_is_a_format_error(change, message):
    with pytest.raises(FormatError, match=message):
        decoder.record_from_proto(_damaged(change))


def test_damaged_record_inside_a_file_is_a_format_error():
    msg = pb.File()
    msg.lowered.CopyFrom(_damaged(lambda m: setattr(m, "payload", b"x")))
    with pytest.raises(FormatError, match=r"lowered module 'Lowered' \(backend 'fake'\): the payload does not match"):
        lk.loads(container.frame(msg.SerializeToString()))


# -- through a real backend registered in-process ------------------------------------------


class _FileTestBackend:
    """Stores the module itself (as a lowerkit file) as its payload and runs it on reference."""

    def __init__(self) -> None:
        self.compiled = 0

    @lk.hookimpl
    def lowerkit_preprocess(self, module, compile_spec):
        return b"FTB1" + lk.dumps(module)

    @lk.hookimpl
    def lowerkit_compile(self, processed, compile_spec):
        if not processed.startswith(b"FTB1"):
            raise ValueError("not a payload of this backend")
        self.compiled += 1
        module = lk.loads(processed[4:])
        return {name: module for name in module.methods}

    @lk.hookimpl
    def lowerkit_execute(self, handle, inputs, method):
        out = handle.run(method, *inputs)
        return list(out) if isinstance(out, tuple) else [out]


@pytest.fixture()
def backend():
    from lowerkit.backend import register_backend, unregister_backend

    plugin = _FileTestBackend()
    register_backend(plugin, BACKEND, distribution="lowerkit-file-test", version="0.0.1")
    yield plugin
    unregister_backend(BACKEND)


def _x(*shape):
    return np.random.default_rng(0).standard_normal(shape).astype(np.float32)


def _lower(module, **kwargs):
    return lk.to_backend(module, BACKEND, {"forward": {"threads": 2}}, **kwargs)


def test_lowered_module_round_trips(backend):
    lowered = _lower(cnn_module(), keep_source=True)
    data = lk.dumps(lowered)
    loaded = lk.loads(data)
    assert isinstance(loaded, LoweredModule)
    assert lk.dumps(loaded) == data
    assert loaded.backend == BACKEND
    assert loaded.compile_spec == lowered.compile_spec
    assert loaded.record.distribution == "lowerkit-file-test" and loaded.record.version == "0.0.1"
    assert loaded.record.signatures == lowered.record.signatures
    assert_modules_equal(lowered.record.original, loaded.record.original)
    x = _x(1, 3, 4, 4)
    np.testing.assert_array_equal(loaded(x), lowered(x))
    np.testing.assert_array_equal(loaded.run("both", x)[0], lowered.run("both", x)[0])


def test_lowered_submodule_nests_in_a_module(backend, tmp_path):
    inner = _lower(tiny_module())
    g = Graph()
    x = g.add_input("x", T("f32", 2))
    y = g.add_node("call", [x], [T("f32", 2)], {"method": "forward", "module": "low"}, debug_handle=0).output
    z = g.add_node("call", [y], [T("f32", 2)], {"method": "forward", "module": "plain"}, debug_handle=1).output
    outer = Module(methods={"forward": GraphMethod(g)}, submodules={"low": inner, "plain": tiny_module()}, name="Outer")
    path = tmp_path / "outer.lkm"
    lk.save(outer, path)
    loaded = lk.load(path)
    assert isinstance(loaded.submodules["low"], LoweredModule)
    assert isinstance(loaded.submodules["plain"], Module)
    assert lk.dumps(loaded) == path.read_bytes()
    xs = np.array([0.5, 3.0], np.float32)
    np.testing.assert_array_equal(loaded(xs), outer(xs))


def test_missing_backend_is_not_a_format_error(backend):
    from lowerkit.backend import unregister_backend

    data = lk.dumps(_lower(tiny_module(), keep_source=True))
    unregister_backend(BACKEND)
    try:
        with pytest.raises(BackendNotFoundError, match=BACKEND):
            lk.loads(data)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            fallback = lk.loads(data, fallback="reference")
        xs = np.array([0.5, 3.0], np.float32)
        np.testing.assert_array_equal(fallback(xs), tiny_module()(xs))
    finally:
        from lowerkit.backend import register_backend

        register_backend(backend, BACKEND)


def test_backend_rejecting_its_payload_is_a_format_error(backend):
    lowered = _lower(tiny_module())
    msg = pb.File()
    encoder.record_to_proto(lowered.record, msg.lowered)
    msg.lowered.payload = b"XXXX" + msg.lowered.payload[4:]
    msg.lowered.payload_sha256 = hashlib.sha256(msg.lowered.payload).digest()
    with pytest.raises(FormatError, match=BACKEND):
        lk.loads(container.frame(msg.SerializeToString()))


def test_compile_spec_reads_back_equal(backend):
    spec = {"forward": {"threads": 4, "mode": "fast", "tiles": [2, 2], "nested": {"a": None}}}
    lowered = lk.to_backend(tiny_module(), BACKEND, spec)
    loaded = lk.loads(lk.dumps(lowered))
    assert loaded.compile_spec == lowered.compile_spec
    assert json.loads(json.dumps(loaded.compile_spec)) == loaded.compile_spec


def _file_with(record: DelegateRecord) -> bytes:
    msg = pb.File()
    encoder.record_to_proto(record, msg.lowered)
    return container.frame(msg.SerializeToString(deterministic=True))


def test_loading_a_record_of_an_unknown_backend_names_it():
    with pytest.raises(BackendNotFoundError, match="fake"):
        lk.loads(_file_with(_record()))


def test_decode_reports_version_and_size_and_can_skip_compiling():
    from lowerkit.serialization import decode

    data = _file_with(_record())
    decoded = decode(data, rebuild=lambda record: record)
    assert decoded.version == (1, 0)
    assert decoded.payload_size == len(data) - container.HEADER_SIZE
    assert isinstance(decoded.obj, DelegateRecord)
    assert decoded.obj.backend == "fake" and decoded.obj.compile_spec == _record().compile_spec


class _Stub:
    """Stands in for a lowered submodule when inspecting a file without compiling."""

    def __init__(self, record: DelegateRecord) -> None:
        self.record = record

    def signature(self, method: str) -> Signature:
        return self.record.signatures[method]


def test_decode_with_a_stub_rebuild_verifies_calls_into_lowered_submodules():
    from lowerkit.serialization import decode

    g = Graph()
    x = g.add_input("x", T("f32", 2))
    y = g.add_node("call", [x], [T("f32", 2)], {"method": "forward", "module": "low"}, debug_handle=0).output
    g.set_outputs([y])
    msg = pb.File()
    encoder.module_to_proto(Module(methods={"forward": GraphMethod(g)}, name="Outer"), msg.module)
    encoder.record_to_proto(_record(), msg.module.submodules.add(name="low").lowered)
    data = container.frame(msg.SerializeToString())
    outer = decode(data, rebuild=_Stub).obj
    assert isinstance(outer.submodules["low"], _Stub)
    assert outer.submodules["low"].record.backend == "fake"
    msg.module.submodules[0].lowered.methods[0].signature.outputs[0].shape[:] = [3]
    msg.module.submodules[0].lowered.payload_sha256 = hashlib.sha256(msg.module.submodules[0].lowered.payload).digest()
    with pytest.raises(FormatError, match="does not verify"):
        decode(container.frame(msg.SerializeToString()), rebuild=_Stub)
