"""head_length: a batch slice runs image by image through the last step on a large map."""

from __future__ import annotations

from lowerkit.backend.cpu import HEAD_MIN_PIXELS, head_length


def test_the_head_ends_after_the_last_step_touching_a_large_map():
    steps = [
        [(4, 3, 64, 64), (4, 8, 32, 32)],  # reads a large map
        [(4, 8, 32, 32), (4, 8, 16, 16)],  # reads one (32x32 = HEAD_MIN_PIXELS)
        [(4, 8, 16, 16), (4, 8, 16, 16)],
        [(4, 8, 16, 16), (4, 8)],
    ]
    assert HEAD_MIN_PIXELS == 32 * 32
    assert head_length(steps) == 2
    assert head_length(steps, min_pixels=256) == 4  # the last step reads a 16x16 map
    assert head_length(steps, min_pixels=64 * 64 + 1) == 0


def test_only_static_four_dimensional_maps_count():
    assert head_length([[(4, 4096)], [(4, 8, 1024)], [(4, 8, "h", 64)]]) == 0
    assert head_length([[(4, 8, 8, 8)], [(4, 8, 40, 40)], [(4, 8, 8, 8)]]) == 2
    assert head_length([]) == 0
