"""A short, fixed fuzz run of every target (the long one is ``python -m fuzz.run``)."""

from __future__ import annotations

import pytest

from fuzz import mutate, targets

# Per target: the seeds plus this many mutations, a second or two in all.
EXECUTIONS = 150


@pytest.mark.parametrize("name", ["container", "glow_like", "nnpack"])
def test_target_survives_a_bounded_run(name):
    target = targets.TARGETS()[name]
    seeds = list(targets.seeds_for(name).values())
    assert seeds
    assert mutate.run(target, seeds, EXECUTIONS, seed=12) == len(seeds) + EXECUTIONS


def test_seeds_are_real_files_that_load():
    import lowerkit

    for name, data in targets._seed_files().items():
        assert lowerkit.loads(data) is not None, name


def test_mutations_are_deterministic():
    seeds = [b"abcdef", b"\x00\x01\x02"]
    assert list(mutate.mutations(seeds, 20, seed=5)) == list(mutate.mutations(seeds, 20, seed=5))
