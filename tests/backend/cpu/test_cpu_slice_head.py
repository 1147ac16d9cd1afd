"""head_length: a batch slice runs image by image through the last step on a large map — or
on a middling one, where the step's maps hold many more values than its weights."""

from __future__ import annotations

from lowerkit.backend.cpu import HEAD_MID_PIXELS, HEAD_MIN_PIXELS, head_length
from lowerkit.backend.cpu.slice_head import MAP_WEIGHT_RATIO


def test_the_head_ends_after_the_last_step_touching_a_large_map():
    steps = [
        ([(4, 3, 64, 64), (4, 8, 32, 32)], 216),  # reads a large map
        ([(4, 8, 32, 32), (4, 8, 16, 16)], 576),  # reads one (32x32 = HEAD_MIN_PIXELS)
        ([(4, 8, 16, 16), (4, 8, 16, 16)], 576),
        ([(4, 8, 16, 16), (4, 8)], 64),
    ]
    assert HEAD_MIN_PIXELS == 32 * 32
    assert head_length(steps) == 2
    assert head_length(steps, min_pixels=256) == 4  # the last step reads a 16x16 map
    assert head_length(steps, min_pixels=64 * 64 + 1, mid_pixels=64 * 64 + 1) == 0


def test_a_middling_map_counts_where_its_values_outnumber_the_weights():
    assert HEAD_MID_PIXELS == 28 * 28
    maps = [(4, 32, 28, 28), (4, 32, 28, 28)]  # 50176 values an image
    light = 50176 // MAP_WEIGHT_RATIO
    steps = [([(4, 3, 56, 56), (4, 32, 28, 28)], 864), (maps, light), (maps, light + 1),
             ([(4, 32, 27, 28), (4, 32, 27, 28)], 0)]
    assert head_length(steps) == 2  # a depthwise or thin 1x1 layer, not one of heavy weights
    assert head_length(steps[:1] + steps[2:]) == 1
    assert head_length(steps, mid_pixels=27 * 28) == 4  # the last one's maps, weightless (a pooling)
    assert head_length(steps, mid_pixels=HEAD_MIN_PIXELS) == 1
    strided = ([(4, 32, 28, 28), (4, 64, 14, 14)], 0)  # into a smaller map: not in the head for that
    assert head_length([steps[0], strided]) == 1


def test_only_static_four_dimensional_maps_count():
    assert head_length([([(4, 4096)], 0), ([(4, 8, 1024)], 0), ([(4, 8, "h", 64)], 0)]) == 0
    assert head_length([([(4, 8, 8, 8)], 0), ([(4, 8, 40, 40)], 9), ([(4, 8, 8, 8)], 0)]) == 2
    assert head_length([]) == 0
