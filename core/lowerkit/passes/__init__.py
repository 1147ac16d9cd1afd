"""General graph passes, each ``pass_name(graph) -> bool`` (changed or not), and a runner.

They rewrite a :class:`lowerkit.ir.Graph` in place and keep what it computes: dead-code and
common-subexpression elimination, no-op reshape removal, constant folding (with an injected
evaluator) and batch-norm folding. A backend runs the ones it wants with :func:`run_passes`
and adds its own passes (fusion, lowering, algorithm choice) to the same list.

Layering: this package imports only :mod:`lowerkit.errors`, :mod:`lowerkit.ir` and
:mod:`lowerkit.opset`.
"""

from __future__ import annotations

from .constant_fold import NodeEvaluator, constant_folder, fold_constants, kernel_evaluator
from .cse import eliminate_common_subexpressions
from .dce import eliminate_dead_code
from .fold_batch_norm import fold_batch_norm
from .helpers import const_value, make_constant, single_user
from .noop import eliminate_noop_reshapes
from .pipeline import Pass, PassEvent, pass_name, run_passes

__all__ = [
    "NodeEvaluator", "Pass", "PassEvent", "const_value", "constant_folder",
    "eliminate_common_subexpressions", "eliminate_dead_code", "eliminate_noop_reshapes",
    "fold_batch_norm", "fold_constants", "kernel_evaluator", "make_constant", "pass_name",
    "run_passes", "single_user",
]
