"""Type inference over symbolic dims, for every op, without each op knowing about them.

An op's inference function works on int shapes. When an input names symbolic dims
(``"N"``), inference runs twice, with each symbol replaced by a different large probe
size each time. An output dim equal in both runs is static; one that follows a symbol's
probes exactly is that symbol; anything else (``2 * N`` after a concat along the batch,
``N * 64`` after flattening the batch away) cannot be expressed and is a ``ShapeError``
naming the symbol. Error messages speak of the symbol, not the probe size.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from ..ir.types import TensorType
from .registry import ShapeError, TypeInference

# Two probe sizes per symbol: large primes unlikely to equal a real dim or a product of them.
_PROBES = ((1000003, 1000033), (1000037, 1000039), (1000081, 1000099), (1000117, 1000121))


def symbolic_inference(op: str, infer: TypeInference) -> TypeInference:
    """Wrap ``infer`` so that it accepts types with symbolic dims."""

    def wrapped(types: Sequence[TensorType], attrs: dict) -> list[TensorType]:
        if all(t.is_static for t in types):
            return infer(types, attrs)
        symbols = list(dict.fromkeys(s for t in types for s in t.symbols))
        if len(symbols) > len(_PROBES):
            raise ShapeError(f"{op}: at most {len(_PROBES)} distinct symbolic dims, got {symbols}")
        runs = []
        for k in (0, 1):
            sizes = {s: _PROBES[i][k] for i, s in enumerate(symbols)}
            try:
                runs.append(infer([t.bind(sizes) for t in types], attrs))
            except ShapeError as err:
                raise ShapeError(_unprobe(str(err), symbols, k)) from None
        first, second = runs
        back = {(_PROBES[i][0], _PROBES[i][1]): s for i, s in enumerate(symbols)}
        out = []
        for a, b in zip(first, second):
            dims: list[int | str] = []
            for d, (x, y) in enumerate(zip(a.shape, b.shape)):
                if x == y:
                    dims.append(x)
                elif (x, y) in back:
                    dims.append(back[(x, y)])
                else:
                    raise ShapeError(
                        f"{op}: output dim {d} depends on symbolic dim(s) {', '.join(symbols)} in a "
                        f"way a type cannot express (only a dim passed through unchanged can stay "
                        f"symbolic); inputs {', '.join(str(t) for t in types)}"
                    )
            out.append(TensorType(a.dtype, tuple(dims)))
        return out

    return wrapped


def _unprobe(message: str, symbols: list[str], k: int) -> str:
    for i, s in enumerate(symbols):
        message = re.sub(rf"\b{_PROBES[i][k]}\b", s, message)
    return message
