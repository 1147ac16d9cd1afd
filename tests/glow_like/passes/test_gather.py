"""fuse_row_moves: a chain of reshapes, transposes, splits and concats that only moves whole
rows (Swin's cyclic shift and window partition) becomes one glow.gather_rows; chains that move
anything else, or whose values are read elsewhere, stay — against the reference."""

from __future__ import annotations

import numpy as np
import pytest
from tests.glow_like.helpers import assert_close, f32, module_of, reference, run_glow

from lowerkit.ir import Graph, TensorType
from lowerkit.opset import ShapeError, get_schema
from lowerkit_glow_like._compiler import optimized_graph
from lowerkit_glow_like.payload.validate import check_instruction


def _add(g: Graph, op: str, ins, attrs=None):
    schema = get_schema(op)
    full = schema.normalize_attrs(attrs or {})
    outs = schema.infer([v.type for v in ins], full)
    node = g.add_node(op, ins, outs, full)
    return node.outputs if len(outs) > 1 else node.output


def _roll(g, x, shift, dim):
    """torch.roll(x, shift, dim) as the trace records it: a split and a concat."""
    size = x.type.shape[dim]
    head, tail = _add(g, "split", [x], {"dim": dim, "sizes": (size - shift, shift)})
    return _add(g, "concat", [tail, head], {"dim": dim})


def _windows(batch=2, side=8, window=4, channels=6, *, shift=2, extra_reader=False, channel_roll=False):
    """x [B, L, C] -> layer norm -> [B, H, W, C] -> roll by ``shift`` along H and W -> windows
    [B * nW, window^2, C] -> a linear layer -> back: windows reversed, rolled back, + x. With
    ``channel_roll`` the second roll moves channels (not whole rows); with ``extra_reader``
    the rolled map is an output too."""
    rng = np.random.default_rng(0)
    g, params = Graph(), {}
    tokens, n = side * side, side // window
    x = g.add_input("x", f32(batch, tokens, channels))
    params["w"] = (rng.standard_normal((channels, channels)) * 0.5).astype(np.float32)
    w = g.add_node("param", [], [f32(channels, channels)], {"name": "w"}).output
    y = _add(g, "reshape", [_add(g, "sigmoid", [x])], {"shape": (batch, side, side, channels)})
    rolled = _roll(g, _roll(g, y, shift, 1), 1 if channel_roll else shift, 3 if channel_roll else 2)
    parts = _add(g, "reshape", [rolled], {"shape": (batch, n, window, n, window, channels)})
    parts = _add(g, "transpose", [parts], {"perm": (0, 1, 3, 2, 4, 5)})
    parts = _add(g, "reshape", [parts], {"shape": (batch * n * n, window * window, channels)})
    z = _add(g, "matmul", [parts, w])
    back = _add(g, "reshape", [z], {"shape": (batch, n, n, window, window, channels)})
    back = _add(g, "transpose", [back], {"perm": (0, 1, 3, 2, 4, 5)})
    back = _add(g, "reshape", [back], {"shape": (batch, side, side, channels)})
    back = _roll(g, _roll(g, back, side - shift, 1), side - shift, 2)
    out = _add(g, "add", [x, _add(g, "reshape", [back], {"shape": (batch, tokens, channels)})])
    g.set_outputs([out, rolled] if extra_reader else [out])
    return module_of(g, params)


def _ops(module) -> list[str]:
    graph, _ = optimized_graph(module, "forward", 2)
    return [node.op for node in graph.nodes if node.op != "constant"]


@pytest.mark.parametrize("threads", [1, 2])
def test_shift_and_partition_become_one_gather_each_way(threads):
    module = _windows()
    ops = _ops(module)
    assert ops.count("glow.gather_rows") == 2
    assert not {"split", "concat", "transpose"} & set(ops)
    x = np.random.default_rng(1).standard_normal((2, 64, 6)).astype(np.float32)
    assert_close(run_glow(module, x, threads=threads), reference(module, x), rtol=1e-5)


def test_a_chain_that_moves_channels_stays_apart_from_it():
    """A roll along the channels moves parts of rows: the chain before attention keeps its
    copies; the one after it, rows only, still becomes a gather."""
    module = _windows(channel_roll=True)
    ops = _ops(module)
    assert ops.count("glow.gather_rows") == 1 and "split" in ops and "concat" in ops
    x = np.random.default_rng(2).standard_normal((2, 64, 6)).astype(np.float32)
    assert_close(run_glow(module, x), reference(module, x), rtol=1e-5)


def test_a_value_read_elsewhere_ends_a_group():
    """The rolled map is an output too: the roll becomes a gather of its own, and the window
    partition after it (a single copy) stays a transpose."""
    module = _windows(extra_reader=True)
    ops = _ops(module)
    assert ops.count("glow.gather_rows") == 2 and ops.count("transpose") == 1
    x = np.random.default_rng(3).standard_normal((2, 64, 6)).astype(np.float32)
    assert_close(run_glow(module, x), reference(module, x), rtol=1e-5)


def test_a_lone_transpose_is_left_as_it_is():
    g = Graph()
    x = g.add_input("x", f32(2, 3, 4, 5))
    g.set_outputs([_add(g, "sigmoid", [_add(g, "transpose", [_add(g, "relu", [x])], {"perm": (0, 2, 1, 3)})])])
    assert "glow.gather_rows" not in _ops(module_of(g))


def test_validation_checks_shapes_and_dtypes():
    x, rows = f32(2, 64, 6), TensorType("i32", (128,))
    assert check_instruction("glow.gather_rows", [x, rows], {}, [f32(8, 16, 6)]) == {}
    bad = [
        ([x, TensorType("i64", (128,))], {}, [f32(8, 16, 6)]),
        ([x, rows], {}, [f32(8, 16, 5)]),
        ([x, rows], {}, [f32(8, 15, 6)]),
        ([x, rows], {}, [TensorType("u8", (8, 16, 6))]),
        ([x, rows], {"dim": 0}, [f32(8, 16, 6)]),
        ([x], {}, [f32(8, 16, 6)]),
    ]
    for inputs, attrs, outputs in bad:
        with pytest.raises(ShapeError, match="glow.gather_rows"):
            check_instruction("glow.gather_rows", inputs, attrs, outputs)


def test_row_numbers_out_of_range_fail_the_binding():
    from lowerkit_glow_like.kernels import KERNELS

    x, out = np.zeros((4, 3), np.float32), np.zeros((4, 3), np.float32)
    prepare = KERNELS["glow.gather_rows"].prepare
    with pytest.raises(ValueError, match="row numbers"):
        prepare([x, np.array([0, 1, 2, 4], np.int32)], [out], {}, None)
    run = prepare([x + np.arange(4, dtype=np.float32)[:, None], np.array([3, 0, 0, 1], np.int32)], [out], {}, None)
    run()
    np.testing.assert_array_equal(out[:, 0], [3, 0, 0, 1])


def test_a_saved_program_keeps_its_gathers():
    """The payload carries the instruction and its int32 row numbers: decoded and run, the
    reference's result."""
    import lowerkit_glow_like as glow
    from lowerkit_glow_like.payload.codec import decode

    module = _windows()
    payload = glow.lowerkit_preprocess(module=module, compile_spec={})
    (program,) = decode(payload)
    assert [ins.op for ins in program.instructions].count("glow.gather_rows") == 2
    handle = glow.lowerkit_compile(processed=payload, compile_spec={})["forward"]
    x = np.random.default_rng(4).standard_normal((2, 64, 6)).astype(np.float32)
    assert_close(glow.lowerkit_execute(handle=handle, inputs=[x]), reference(module, x), rtol=1e-5)
