"""A small deterministic mutator, for bounded fuzz runs inside the test suite (no atheris)."""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable, Iterator

_INTERESTING = (0, 1, 2, 0x7F, 0x80, 0xFF)
_BIG = (b"\xff\xff\xff\xff\x0f", b"\x80\x94\xeb\xdc\x03", b"\xc0\x84\x3d", b"\x00")


def mutations(seeds: Iterable[bytes], count: int, seed: int = 0) -> Iterator[bytes]:
    """``count`` inputs, each a seed with 1-4 random edits (flip, set, insert, delete,
    truncate, splice a big varint): the same ``seed`` always gives the same inputs."""
    rng = random.Random(seed)
    pool = [bytes(s) for s in seeds]
    for _ in range(count):
        data = bytearray(rng.choice(pool))
        for _ in range(rng.randint(1, 4)):
            _edit(rng, data)
        yield bytes(data)


def _edit(rng: random.Random, data: bytearray) -> None:
    if not data:
        data.extend(rng.randbytes(rng.randint(1, 8)))
        return
    i = rng.randrange(len(data))
    kind = rng.randrange(6)
    if kind == 0:
        data[i] ^= 1 << rng.randrange(8)
    elif kind == 1:
        data[i] = rng.choice(_INTERESTING)
    elif kind == 2:
        data[i:i] = rng.randbytes(rng.randint(1, 4))
    elif kind == 3:
        del data[i : i + rng.randint(1, 8)]
    elif kind == 4:
        del data[rng.randrange(len(data)) :]
    else:
        data[i : i + 1] = rng.choice(_BIG)


def run(target: Callable[[bytes], None], seeds: Iterable[bytes], count: int, seed: int = 0) -> int:
    """Feed the seeds and ``count`` mutations to ``target``; returns the inputs run."""
    seeds = list(seeds)
    for data in seeds:
        target(data)
    for data in mutations(seeds, count, seed):
        target(data)
    return len(seeds) + count
