"""The graph optimizer: small passes, each ``pass_name(graph) -> bool`` (changed or not),
run in a fixed order chosen by ``opt_level``.

Level 0 is a straight translation (parameters become constants, nothing else). Level 1
runs the cleanup passes; level 2 adds batch-norm folding, lowering and fusion. The general
passes come from :mod:`lowerkit.passes`; glow_like's own are lowering, fusion and algorithm
choice. Constant folding evaluates with glow_like's kernels.
"""

from __future__ import annotations

from lowerkit.ir import Graph
from lowerkit.passes import (
    Pass,
    constant_folder,
    eliminate_common_subexpressions,
    eliminate_dead_code,
    eliminate_noop_reshapes,
    fold_batch_norm,
    run_passes,
)

from .._evaluator import GlowInterpreter
from .algorithm import select_conv_algorithm
from .attention import fuse_packed_attention
from .gather import fuse_row_moves
from .scale import fold_scales
from .fuse import fuse_activations, fuse_bias
from .fuse_chains import fuse_elementwise_chains
from .gate import fold_gates
from .lower import lower_high_level

fold_constants = constant_folder(GlowInterpreter().run_node)

CLEANUP: tuple[Pass, ...] = (
    eliminate_dead_code,
    eliminate_common_subexpressions,
    eliminate_noop_reshapes,
    fold_constants,
    eliminate_dead_code,
)

FULL: tuple[Pass, ...] = (
    eliminate_dead_code,
    eliminate_common_subexpressions,
    eliminate_noop_reshapes,
    fold_batch_norm,
    lower_high_level,
    fold_constants,
    fuse_bias,
    fold_scales,
    fuse_activations,
    fold_gates,
    fuse_elementwise_chains,
    fuse_packed_attention,
    fuse_row_moves,
    eliminate_noop_reshapes,
    eliminate_common_subexpressions,
    eliminate_dead_code,
    select_conv_algorithm,
)

PIPELINES: dict[int, tuple[Pass, ...]] = {0: (), 1: CLEANUP, 2: FULL}


def optimize(graph: Graph, opt_level: int) -> list[str]:
    """Run the passes of ``opt_level`` in order on ``graph``; the names of those that changed it."""
    # Not verified: fused and lowered nodes carry attributes the core schemas do not know.
    return run_passes(graph, PIPELINES[opt_level], verify=False)


__all__ = [
    "CLEANUP", "FULL", "PIPELINES", "eliminate_common_subexpressions", "eliminate_dead_code",
    "eliminate_noop_reshapes", "fold_batch_norm", "fold_constants", "fold_gates", "fold_scales", "fuse_activations",
    "fuse_bias",
    "fuse_elementwise_chains", "fuse_packed_attention", "fuse_row_moves", "lower_high_level", "optimize",
    "select_conv_algorithm",
]
