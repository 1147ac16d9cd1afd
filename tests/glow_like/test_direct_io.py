"""Large inputs read where the caller holds them and large outputs written into the returned
arrays (``lowerkit_glow_like.direct_io``): the same results as the copies, the caller's
arrays never written, fresh outputs every call, the copies kept wherever in-place reading or
writing would be wrong."""

from __future__ import annotations

import numpy as np
import pytest
from tests.glow_like.helpers import f32, glow, module_of, rand, reference
from tests.team_calls import from_threads

from lowerkit.ir import Graph

SHAPE = (1, 16, 128, 128)  # 1 MiB of float32: direct_io.DIRECT_BYTES


def _handle(module, **options):
    payload = glow.lowerkit_preprocess(module=module, compile_spec={"forward": options})
    return glow.lowerkit_compile(processed=payload, compile_spec={})["forward"]


def _two_convolutions(both_outputs: bool = False):
    """y = conv1x1(x), z = conv1x1(y) on a 1 MiB map; returns z (and y)."""
    g = Graph()
    x = g.add_input("x", f32(*SHAPE))
    w1 = g.add_node("param", [], [f32(16, 16, 1, 1)], {"name": "w1"}).output
    w2 = g.add_node("param", [], [f32(16, 16, 1, 1)], {"name": "w2"}).output
    y = g.add_node("conv2d", [x, w1], [f32(*SHAPE)], {}).output
    z = g.add_node("conv2d", [y, w2], [f32(*SHAPE)], {}).output
    g.set_outputs([z, y] if both_outputs else [z])
    return module_of(g, {"w1": rand(16, 16, 1, 1, seed=1), "w2": rand(16, 16, 1, 1, seed=2)})


def _relu_of_input():
    g = Graph()
    x = g.add_input("x", f32(*SHAPE))
    g.set_outputs([g.add_node("relu", [x], [f32(*SHAPE)], {}).output])
    return module_of(g)


@pytest.mark.parametrize("threads", [1, 2])  # a serial program, a team one
def test_a_large_input_is_read_in_place_and_a_large_output_written_into_a_new_array(threads):
    module = _two_convolutions()
    handle = _handle(module, threads=threads)
    direct = handle.direct
    assert [p for p, _ in direct.inputs] == [0] and [p for p, _ in direct.outputs] == [0]
    x = rand(*SHAPE, seed=3)
    kept = x.copy()
    handle.run([x])  # binds this thread's arena
    state = handle._state()
    state.inputs[0].fill(np.nan)  # the planned input buffer: a copy into it would show
    first = handle.run([x])[0]
    np.testing.assert_allclose(first, reference(module, x)[0], rtol=1e-4, atol=1e-4)
    assert np.isnan(state.inputs[0]).all()
    np.testing.assert_array_equal(x, kept)
    second = handle.run([x * 2])[0]
    assert second is not first and not np.shares_memory(second, first)
    np.testing.assert_allclose(first, reference(module, x)[0], rtol=1e-4, atol=1e-4)  # untouched
    np.testing.assert_allclose(second, reference(module, x * 2)[0], rtol=1e-4, atol=1e-4)


def test_an_input_that_is_not_c_contiguous_is_copied_in():
    module = _two_convolutions()
    handle = _handle(module, threads=1)
    x = rand(*SHAPE, seed=4)
    strided = np.ascontiguousarray(x.transpose(0, 1, 3, 2)).transpose(0, 1, 3, 2)  # x's values, other strides
    assert not strided.flags.c_contiguous
    np.testing.assert_allclose(handle.run([strided])[0], reference(module, x)[0], rtol=1e-4, atol=1e-4)
    np.testing.assert_array_equal(handle.run([x])[0], handle.run([strided])[0])


def test_an_output_a_later_instruction_reads_and_an_input_written_in_place_are_copied():
    both = _handle(_two_convolutions(both_outputs=True), threads=1)
    z, y = both.program.outputs
    assert [b for _, b in both.direct.outputs] == [z]  # y feeds the second convolution
    x = rand(*SHAPE, seed=5)
    got = both.run([x])
    for a, b in zip(got, reference(_two_convolutions(both_outputs=True), x)):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4)
    relu = _handle(_relu_of_input(), threads=1)
    program = relu.program
    assert program.buffers[program.outputs[0]].root == program.inputs[0]  # relu writes into its input's buffer
    assert relu.direct is None  # so that buffer is never the caller's array, nor the output a new one
    kept = x.copy()
    np.testing.assert_array_equal(relu.run([x])[0], np.maximum(kept, 0))
    np.testing.assert_array_equal(x, kept)


def test_eight_threads_reading_their_own_inputs_in_place():
    module = _two_convolutions()
    handle = _handle(module, threads=1)
    inputs = [rand(*SHAPE, seed=10 + i) for i in range(8)]
    expected = [reference(module, a)[0] for a in inputs]
    results = from_threads(lambda i: [handle.run([inputs[i]])[0] for _ in range(3)])
    for i in range(8):
        for got in results[i]:
            np.testing.assert_allclose(got, expected[i], rtol=1e-4, atol=1e-4)


# -- batch slices ------------------------------------------------------------------------
# Two workers, two images each: every slice runs its convolution (on a map of 16384 pixels)
# as its head, an image at a time, and the concatenation after it over both images.
SLICED = (4, 16, 128, 128)  # 1 MiB an image


def _head_and_rest(batch: int = SLICED[0]):
    """y = conv1x1(x1) (the head), z = concat(x2, x2) (the rest); returns y and z."""
    _, c, h, width = SLICED
    g = Graph()
    x1 = g.add_input("x1", f32(batch, c, h, width))
    x2 = g.add_input("x2", f32(batch, c, h, width))
    w = g.add_node("param", [], [f32(16, 16, 1, 1)], {"name": "w"}).output
    y = g.add_node("conv2d", [x1, w], [f32(batch, c, h, width)], {}).output
    z = g.add_node("concat", [x2, x2], [f32(batch, 2 * c, h, width)], {"dim": 1}).output
    g.set_outputs([y, z])
    return module_of(g, {"w": rand(16, 16, 1, 1, seed=1)})


def _sliced_handle(batch: int = SLICED[0]):
    handle = _handle(_head_and_rest(batch), threads=2)
    if handle.batch_slices is None or handle.head != 1:
        pytest.skip("this program does not run as batch slices with a head here")
    return handle


def test_batch_slices_read_and_write_large_maps_in_place_in_the_head_and_the_rest():
    handle = _sliced_handle()
    program = handle.program
    x1, x2 = program.inputs
    y, z = program.outputs
    module = _head_and_rest()
    a, b = rand(*SLICED, seed=3), rand(*SLICED, seed=4)
    kept = a.copy(), b.copy()
    handle.run([a, b])  # binds this thread's slices
    state = handle._state()
    for part in state.slices:  # the convolution's buffers an image at a time, the concatenation's a slice
        assert part.head.direct.inputs == ((0, x1),) and part.head.direct.outputs == ((0, y),)
        assert part.direct.inputs == ((1, x2),) and part.direct.outputs == ((1, z),)
    planned = [array for part in state.slices for array in (part.head.inputs[0], part.inputs[1], *part.outputs)]
    for array in planned:  # the planned buffers: a copy into or out of them would show
        array.fill(np.nan)
    first = handle.run([a, b])
    for got, expected in zip(first, reference(module, a, b)):
        np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)
    assert all(np.isnan(array).all() for array in planned)
    np.testing.assert_array_equal(a, kept[0])
    np.testing.assert_array_equal(b, kept[1])
    second = handle.run([a * 2, b * 2])
    assert not any(np.shares_memory(s, f) for s in second for f in first)
    for got, expected in zip(second, reference(module, a * 2, b * 2)):
        np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)


def test_batch_slices_copy_inputs_that_are_not_c_contiguous():
    handle = _sliced_handle()
    a, b = rand(*SLICED, seed=5), rand(*SLICED, seed=6)
    strided = [np.ascontiguousarray(v.transpose(0, 1, 3, 2)).transpose(0, 1, 3, 2) for v in (a, b)]
    expected = handle.run([a, b])
    for got, want in zip(handle.run(strided), expected):
        np.testing.assert_array_equal(got, want)
    for got, want in zip(handle.run([strided[0], b]), expected):  # one of each
        np.testing.assert_array_equal(got, want)


def test_eight_threads_running_batch_slices_in_place():
    handle = _sliced_handle()
    module = _head_and_rest()
    inputs = [(rand(*SLICED, seed=20 + i), rand(*SLICED, seed=40 + i)) for i in range(8)]
    expected = [reference(module, *pair) for pair in inputs]
    results = from_threads(lambda i: [handle.run(list(inputs[i])) for _ in range(2)])
    for i in range(8):
        for got in results[i]:
            for g, e in zip(got, expected[i]):
                np.testing.assert_allclose(g, e, rtol=1e-4, atol=1e-4)


def test_a_slice_of_one_image_reads_and_writes_in_place_without_a_head():
    handle = _sliced_handle(batch=3)  # a slice of two images (with its head) and one of one
    assert sorted(rows.stop - rows.start for rows in handle.batch_slices) == [1, 2]
    module = _head_and_rest(batch=3)
    a, b = rand(3, *SLICED[1:], seed=7), rand(3, *SLICED[1:], seed=8)
    for _ in range(2):  # the first call binds; the second runs bound
        for got, expected in zip(handle.run([a, b]), reference(module, a, b)):
            np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)
