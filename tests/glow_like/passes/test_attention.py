"""fuse_packed_attention: a transformer's split of its packed q, k, v projection, the three
transposes to heads-first, the attention and the transpose back become one
glow.packed_attention that reads and writes the heads where they lie — on one thread and on
the team, with and without a mask, against the reference."""

from __future__ import annotations

import numpy as np
import pytest
from tests.glow_like.helpers import assert_close, f32, module_of, reference
from tests.team_calls import record_team_calls, team_on_small_layers

from lowerkit.ir import Graph, TensorType
from lowerkit.opset import ShapeError, get_schema
from lowerkit_glow_like._compiler import compile_method, optimized_graph
from lowerkit_glow_like._options import Options
from lowerkit_glow_like.lir.batch import batch_sliceable
from lowerkit_glow_like.payload.validate import check_instruction
from lowerkit_glow_like.runtime import Executable


def _add(g: Graph, op: str, ins, attrs=None):
    schema = get_schema(op)
    full = schema.normalize_attrs(attrs or {})
    (t,) = schema.infer([v.type for v in ins], full)
    return g.add_node(op, ins, [t], full).output


def _block(batch=2, tokens=7, heads=3, depth=4, *, mask=None, causal=False, q_also_out=False, seed=0):
    """x [B, L, C] -> linear to 3C -> [B, L, 3, H, E] -> split -> q, k, v heads-first ->
    attention (``mask``: None, "float" [L, L] or "bool" [B, 1, L, L]) -> back to [B, L, C]
    -> linear: the attention of ViT, DeiT and Swin. ``q_also_out`` makes q an output too."""
    rng = np.random.default_rng(seed)
    g, params = Graph(), {}
    width = heads * depth

    def param(name, shape, dtype="f32"):
        params[name] = (rng.standard_normal(shape).astype(np.float32) * 0.4 if dtype == "f32"
                        else rng.random(shape) > 0.3)
        return g.add_node("param", [], [TensorType(dtype, shape)], {"name": name}).output

    x = g.add_input("x", f32(batch, tokens, width))
    qkv = _add(g, "add", [_add(g, "matmul", [x, param("w_qkv", (width, 3 * width))]), param("b_qkv", (3 * width,))])
    packed = _add(g, "reshape", [qkv], {"shape": (batch, tokens, 3, heads, depth)})
    split = get_schema("split")
    attrs = split.normalize_attrs({"dim": 2, "sizes": (1, 1, 1)})
    parts = g.add_node("split", [packed], split.infer([packed.type], attrs), attrs).outputs
    q, k, v = (_add(g, "transpose", [_add(g, "reshape", [p], {"shape": (batch, tokens, heads, depth)})],
                    {"perm": (0, 2, 1, 3)}) for p in parts)
    operands = [q, k, v]
    if mask == "float":
        operands.append(param("mask", (tokens, tokens)))
    elif mask == "bool":
        keep = param("mask", (batch, 1, tokens, tokens), "bool")
        params["mask"][..., 0] = True  # every query sees a key (no nan rows)
        operands.append(keep)
    attended = _add(g, "scaled_dot_product_attention", operands, {"scale": depth ** -0.5, "is_causal": causal})
    merged = _add(g, "reshape", [_add(g, "transpose", [attended], {"perm": (0, 2, 1, 3)})],
                  {"shape": (batch, tokens, width)})
    out = _add(g, "matmul", [merged, param("w_proj", (width, width))])
    g.set_outputs([out, q] if q_also_out else [out])
    return module_of(g, params)


def _ops(module) -> list[str]:
    graph, _ = optimized_graph(module, "forward", 2)
    return [node.op for node in graph.nodes if node.op != "constant"]


def _run(module, x, threads):
    executable = Executable(compile_method(module, "forward", Options(threads=threads)))
    return executable, executable.run([x])


@pytest.mark.parametrize("mask", [None, "float", "bool"])
@pytest.mark.parametrize("batch", [1, 3])
def test_the_group_becomes_one_instruction_with_the_reference_result(mask, batch):
    module = _block(batch, mask=mask)
    ops = _ops(module)
    assert ops.count("glow.packed_attention") == 1
    assert not {"split", "transpose", "scaled_dot_product_attention"} & set(ops)
    x = np.random.default_rng(1).standard_normal((batch, 7, 12)).astype(np.float32)
    _, got = _run(module, x, threads=1)
    assert_close(got, reference(module, x), rtol=1e-5)


@pytest.mark.parametrize("batch, heads", [(3, 4), (1, 3)])
@pytest.mark.parametrize("mask", [None, "float", "bool"])
def test_the_query_rows_split_on_the_team(monkeypatch, mask, batch, heads):
    """Two threads: one team region (two with a mask, added in between) reading the packed
    projections in place, each thread an equal band of the heads' query rows (one image of
    three heads: the boundary inside the second head); the serial program's values."""
    from lowerkit_glow_like import runtime

    team_on_small_layers(monkeypatch)
    monkeypatch.setattr(runtime, "_THREADED_MATMUL_MACS", 0)  # the tiny projections count as work
    monkeypatch.setenv("LOWERKIT_GLOW_SPLIT_BATCH", "0")
    module = _block(batch, tokens=9, heads=heads, depth=8, mask=mask)
    x = np.random.default_rng(2).standard_normal((batch, 9, heads * 8)).astype(np.float32)
    executable, _ = _run(module, x, threads=2)
    assert executable.team is not None
    ran = record_team_calls(monkeypatch)
    got = executable.run([x])
    assert ran.count("packed_attention") == (1 if mask is None else 2)
    assert_close(got, reference(module, x), rtol=1e-5)
    _, serial = _run(module, x, threads=1)
    assert_close(got, serial, rtol=1e-5)


def test_batch_slices_run_it_per_image():
    """The instruction is per sample: a sliceable program stays sliceable, and its slices
    give the whole batch's result."""
    module = _block(4)
    program = compile_method(module, "forward", Options(threads=2))
    assert batch_sliceable(program)
    x = np.random.default_rng(3).standard_normal((4, 7, 12)).astype(np.float32)
    executable = Executable(program)
    assert_close(executable.run([x]), reference(module, x), rtol=1e-5)


@pytest.mark.parametrize("variant", ["causal", "q_also_out"])
def test_the_group_stays_where_it_does_not_match(variant):
    """A causal attention, or a q read by another node, keeps the split and transposes."""
    module = _block(2, causal=variant == "causal", q_also_out=variant == "q_also_out")
    ops = _ops(module)
    assert "glow.packed_attention" not in ops and "scaled_dot_product_attention" in ops
    x = np.random.default_rng(4).standard_normal((2, 7, 12)).astype(np.float32)
    _, got = _run(module, x, threads=1)
    assert_close(got, reference(module, x), rtol=1e-5)


def test_validation_checks_shapes_mask_and_scale():
    qkv, out = f32(2, 7, 3, 3, 4), f32(2, 7, 3, 4)
    assert check_instruction("glow.packed_attention", [qkv], {"scale": 0.5}, [out]) == {"scale": 0.5}
    assert check_instruction("glow.packed_attention", [qkv, TensorType("bool", (2, 1, 7, 7))], {"scale": 1},
                             [out]) == {"scale": 1.0}
    bad = [
        ([f32(2, 7, 2, 3, 4)], {"scale": 0.5}, [out]),  # not three projections
        ([qkv], {"scale": 0.5}, [f32(2, 7, 12)]),  # output not [B, L, H, E]
        ([qkv, f32(3, 3, 7, 7)], {"scale": 0.5}, [out]),  # a mask that widens the scores
        ([qkv, TensorType("i32", (7, 7))], {"scale": 0.5}, [out]),
        ([qkv], {"scale": float("inf")}, [out]),
        ([qkv], {"scale": 0.5, "is_causal": True}, [out]),
        ([qkv], {}, [out]),
    ]
    for inputs, attrs, outputs in bad:
        with pytest.raises(ShapeError, match="glow.packed_attention"):
            check_instruction("glow.packed_attention", inputs, attrs, outputs)


def test_a_saved_program_keeps_the_instruction():
    """The payload carries glow.packed_attention: decoded, validated and run, it gives the
    reference's result."""
    import lowerkit_glow_like as glow
    from lowerkit_glow_like.payload.codec import decode, encode

    module = _block(2, mask="float")
    payload = glow.lowerkit_preprocess(module=module, compile_spec={})
    (program,) = decode(payload)
    assert [ins.op for ins in program.instructions].count("glow.packed_attention") == 1
    assert encode([program]) == payload
    handle = glow.lowerkit_compile(processed=payload, compile_spec={})["forward"]
    x = np.random.default_rng(5).standard_normal((2, 7, 12)).astype(np.float32)
    assert_close(glow.lowerkit_execute(handle=handle, inputs=[x]), reference(module, x), rtol=1e-5)
