"""Execution plans: one kernel closure per node, built once per method at compile time.

Weights that come from ``param``/``constant`` nodes are bound (and transformed) here, so a
call only moves activations. An activation (``relu``, or one of the extension activations
of ``support.ACTIVATION_OPS``) that is the only reader of a ``conv2d`` output is fused into
that convolution's output transform.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from functools import partial
from itertools import islice
from math import prod
from typing import Any

import numpy as np

from lowerkit.backend.cpu import (
    FormTrial,
    blas_limit,
    blas_threads_beside,
    head_length,
    make_team,
    recycled_copy,
    recycled_empty,
    run_parallel,
    split,
    team_layers,
    team_off,
)
from lowerkit.backend.cpu.jit.depthwise import MEAN_ALGORITHMS, means_fused
from lowerkit.backend.cpu.jit.select import depthwise_algorithm
from lowerkit.errors import LowerkitError, NodeExecutionError, UnsupportedOperatorError
from lowerkit.ir.graph import Graph
from lowerkit.ir.interpreter import last_uses
from lowerkit.ir.node import Node, Value

from .conv import Conv2d, RunOptions
from .depthwise import DepthwiseConv2d
from .geometry import GeometryError
from .grad import Conv2dInputGrad, Conv2dWeightGrad
from .activations import NONE, activation_of, apply
from .blocks import Block, BlockLayer, find_blocks
from .layers import GlobalAvgPool, Linear, MaxPool2d, PooledPointwise, softmax
from .linear_step import LinearStep
from .selection import select_algorithm
from .chains import MIN_STEPS, build_chains
from .spares import Bound, Spares
from .team import ALGORITHMS as TEAM_ALGORITHMS, TeamConv, TeamDepthwise, scale_planes
from .support import (
    ACTIVATION_OPS,
    RESIDUAL_OPS,
    SQUEEZE_OPS,
    STRUCTURAL_OPS,
    VIEW_OPS,
    attrs_of,
    conv_geometry,
    is_depthwise,
    support_reason,
)
from .workspace import SHARED

# A step's kernel takes the arrays of its runtime inputs and returns its outputs; a step that
# ``fills`` also takes the call's spare arrays (see :class:`Spares`) to write its output into.
StepKernel = Callable[..., list[np.ndarray]]


@dataclass(frozen=True, slots=True)
class Step:
    """One node to run: where its inputs come from and where its outputs go."""

    node: Node
    kernel: StepKernel
    inputs: tuple[Value, ...]  # values read at run time
    outputs: tuple[Value, ...]
    dying: tuple[Value, ...]  # values no later step reads
    fills: bool = False  # the kernel takes the call's Spares too
    # The same as slots of a call's value list (see Plan._number_values): the loop indexes a
    # list, not a dict keyed by values.
    reads: tuple[int, ...] = ()
    writes: tuple[int, ...] = ()
    frees: tuple[int, ...] = ()  # the dying values a step wrote or the call was given
    key: int | None = None  # its bound call's key in Spares.bound (see _bound_step), if it may bind


class Plan:
    """A compiled method: constants, steps, and the graph's input and output values."""

    def __init__(self, graph: Graph, parameters: dict[str, np.ndarray], options: dict[str, Any]) -> None:
        self.options = options
        requested = RunOptions(int(options["threads"]), int(options["batch_threshold"]))
        # A batch of at least one image per worker whose images never meet runs as slices:
        # each worker runs every layer, single-threaded, on its own images (see
        # :func:`batch_sliceable`). Otherwise
        # either every layer runs on the calling thread with BLAS on all the workers' cores
        # (plans whose GEMMs do the work), or layers split over the pool with BLAS at
        # cores // workers; see :func:`_gemm_on_blas`.
        self.workers = requested.workers
        sliceable = requested.workers > 1 and batch_sliceable(graph, requested.workers)
        # Team regions (see team.py) where every convolution has a team form and team
        # kernels can run here; a sliceable batch of a plan with depthwise layers then runs
        # one image at a time through every step, each on the team (as glow_like's
        # image-by-image form: each image's activations stay in cache between layers, and
        # every layer has every core).
        team_plan = os.environ.get("LOWERKIT_NNPACK_TEAM") != "0" and _team_plan(graph, options, requested)
        self.team = make_team(requested.workers) if team_plan else None
        self.per_image = (sliceable and self.team is not None and os.environ.get("LOWERKIT_NNPACK_PER_IMAGE") != "0"
                          and any(is_depthwise(node) for node in graph.nodes))
        self.sliced = sliceable and not self.per_image
        # Such a batch could run as slices too: the first calls time both forms and keep the
        # faster (image by image 0, slices 1; glow_like does the same, see docs/nnpack.md).
        # LOWERKIT_NNPACK_PER_IMAGE=1 keeps image by image, =0 slices.
        trial = self.per_image and os.environ.get("LOWERKIT_NNPACK_PER_IMAGE") != "1"
        self.form_trial: FormTrial | None = FormTrial() if trial else None
        if self.sliced:
            self.team = None
        self.gemm_on_blas = not self.sliced and _gemm_on_blas(graph, options, requested)
        serial = self.sliced or self.gemm_on_blas or self.team is not None
        self.run_options = RunOptions(1, requested.batch_threshold) if serial else requested
        if self.sliced or self.team is not None:
            self.blas_threads = 1
        else:
            self.blas_threads = requested.workers if self.gemm_on_blas else blas_threads_beside(requested.workers)
        # A plan none of whose kernels calls BLAS (depthwise layers, pooling, element-wise
        # steps) leaves BLAS's threads alone: setting and restoring them cost ~6.5 us a call,
        # a lowered 3x3/2 depthwise layer's whole call was 77 us around a 20 us kernel.
        self.uses_blas = any(_calls_blas(node) for node in graph.nodes)
        self.inputs = tuple(v for v in graph.inputs)
        self.outputs = tuple(v for v in graph.outputs)
        self.constants: dict[Value, np.ndarray] = {}
        self.algorithms: dict[int, str] = {}  # debug handle -> chosen conv algorithm (docs, tests)
        self.steps: list[Step] = []
        # Nodes run one after another on a thread, so every kernel of every plan can share
        # one per-thread workspace: it holds the largest layer's scratch, not the sum.
        self.workspace = SHARED
        self._local = threading.local()  # per thread: the spare arrays (see Spares)
        self._build(graph, parameters)
        # A slice of two or more images runs its first steps image by image (_run_with_head).
        self.head, self._crossing = self._slice_head() if sliceable else (0, ())
        # The steps before and after the head, one list each: the chains built on them index them
        self._head, self._rest = self.steps[:self.head], self.steps[self.head:]

    # -- building -------------------------------------------------------------------
    def _build(self, graph: Graph, parameters: dict[str, np.ndarray]) -> None:
        users = graph.users()
        graph_outputs = set(self.outputs)
        call_inputs = set(self.inputs)
        fused: set[Node] = set()  # residual adds and activations folded into their convolution
        dead = last_uses(graph)
        position: dict[Any, int] = {}  # node, and each value it produces -> its index
        for i, n in enumerate(graph.nodes):
            position[n] = i
            position.update((v, i) for v in n.outputs)
        # Team plans fold a squeeze-excitation gate into the 1x1 convolution it feeds: conv
        # -> mul (see _gated_convolutions). The mul's step is dropped; its dying values die
        # at the convolution.
        gates = _gated_convolutions(graph, users, graph_outputs) if self.team is not None else {}
        producers = graph.producers()
        # Global pools read only by convolutions (squeeze-excitation) write into the spares:
        # the same array every call, so those layers can bind (see _bound_step). (Not where a
        # view such as flatten's reads the pool: the spares never see that view die.)
        # A linear layer on constant weights reads a flatten that only it reads straight from
        # the flatten's input (the same elements in the same order): no view to hold a pool's
        # buffer, so the pool writes into the spares and the layer binds (linear_step).
        flattened = _folded_flattens(graph, users, graph_outputs)
        squeezes = {node for node in graph.nodes if node.op == "global_avg_pool2d" and users.get(node.output)
                    and node.output not in graph_outputs
                    and all(u.op == "conv2d" or u in flattened.values() for u in users[node.output])}
        # Inverted-residual blocks (expansion, depthwise, projection) become one step each, made
        # at the expansion; their other nodes make none (see .blocks). Not where layers split
        # over the pool: a block runs on its team or on the calling thread.
        banded = self.team is not None or self.sliced or self.workers == 1
        blocks = find_blocks(graph, users, graph_outputs, position,
                             lambda v: v in producers and producers[v].op in ("param", "constant"),
                             lambda conv: _epilogue_of(conv, users, graph_outputs, position),
                             {*gates, *gates.values()}) if banded else {}
        in_blocks = {n for block in blocks.values() for n in block.nodes[1:]}
        folded = {mul: conv for conv, mul in gates.items()}
        folded.update({flatten: linear for linear, flatten in flattened.items()})
        late_dying: dict[Node, list] = {}
        filled: set[Value] = set()  # values a step wrote into a buffer from the spares
        maps_in_place: set[Node] = set()  # gated convolutions whose map dies at them
        for node, dying in zip(graph.nodes, dead):
            if node in folded:
                late_dying.setdefault(folded[node], []).extend(dying)
                if node.op == "mul" and _scales_in_place(node, dying, filled, users, graph_outputs):
                    maps_in_place.add(folded[node])
                continue
            if node.op == "param":
                self.constants[node.output] = parameters[node.attrs["name"]]  # type: ignore[index]
                continue
            if node.op == "constant":
                self.constants[node.output] = np.asarray(node.attrs["value"])
                continue
            if node in fused or node in in_blocks:
                continue
            if node in blocks:
                self._block_step(blocks[node], dead, position, call_inputs, graph_outputs, filled,
                                 partial(_constant_value, producers, parameters))
                continue
            reason = support_reason(node)
            if reason is not None:
                raise UnsupportedOperatorError(f"nnpack cannot run {node.where()}: {reason}")
            add_node = act_node = residual = pool = None
            planned_linear = node.op == "linear" and _linear_step_fits(node, producers)
            if node.op == "conv2d":
                add_node, residual, act_node = _epilogue_of(node, users, graph_outputs, position)
                pool = self._pooled_by(node, act_node or add_node or node, residual, users, graph_outputs)
            elif planned_linear:
                act_node = _only_reader(node.output, ACTIVATION_OPS, users, graph_outputs)
            act = NONE if act_node is None else activation_of(act_node)
            # A step may bind its arrays unless they are the caller's: an input of the call,
            # or the value the call returns.
            last = act_node or add_node or node
            gate = gates.get(node)
            source = flattened[node].inputs[0] if node in flattened else node.inputs[0]
            reads_caller = (source in call_inputs or residual in call_inputs
                            or (gate is not None and any(v in call_inputs for v in gate.inputs))
                            or (node.op == "mul" and any(v in call_inputs for v in node.inputs)))
            bind_key = None if reads_caller or last.output in graph_outputs else len(self.steps)
            if node.op == "mul" and _scales_in_place(node, dying, filled, users, graph_outputs):
                kernel, runtime_inputs = _bound_in_place_multiply(bind_key), list(node.inputs)
            elif planned_linear:
                kernel, runtime_inputs = self._linear_step(node, act, bind_key, last.output in graph_outputs), [source]
            elif node in squeezes and isinstance(node.output.type.shape[1], int):  # into the spares: it binds
                pooled = GlobalAvgPool(node.output.type.shape[1])
                kernel, runtime_inputs = _bound_step(pooled, False, bind_key), [source]
            else:
                kernel, runtime_inputs = self._kernel(node, act, residual, gate, bind_key, pool is not None,
                                                      gate_in_place=node in maps_in_place)
            outputs = tuple(v for v in node.outputs)
            dying = list(dying) + late_dying.get(node, [])
            for extra in (add_node, act_node):
                if extra is not None:  # the convolution binds the last fused node's output
                    fused.add(extra)
                    outputs = (extra.output,)
                    dying += dead[position[extra]]
            if pool is not None:  # a depthwise layer's pool: its means come second
                fused.add(pool)
                outputs += (pool.output,)
                dying += dead[position[pool]]
            dying = [v for v in dying if v not in graph_outputs]  # the call returns those
            fills = (node.op in ("conv2d", "mul") or node in squeezes
                     or (planned_linear and last.output not in graph_outputs))
            if fills:
                filled.update(outputs)
            self.steps.append(Step(node, kernel, tuple(runtime_inputs), outputs, tuple(dying), fills=fills,
                                   key=bind_key))
        self._number_values()

    def _block_step(self, block: Block, dead: list, position: dict, call_inputs: set, graph_outputs: set,
                    filled: set, constant: Callable[[Value], np.ndarray]) -> None:
        """The step of an inverted-residual ``block`` (:mod:`.blocks`): reads its source (and
        residual), returns its last value; every value its nodes let die dies there."""
        reads_caller = block.source in call_inputs or block.residual in call_inputs
        bind_key = None if reads_caller or block.output in graph_outputs else len(self.steps)
        layer = BlockLayer(block, constant, self.team)
        for node in block.nodes:
            if node.op == "conv2d":
                self.algorithms[node.debug_handle] = "inverted_residual_block"
        runtime_inputs = (block.source,) if block.residual is None else (block.source, block.residual)
        dying = [v for node in block.nodes for v in dead[position[node]]
                 if v not in block.inner and v not in graph_outputs]
        filled.add(block.output)
        self.steps.append(Step(block.nodes[0], _bound_step(layer, block.residual is not None, bind_key),
                               runtime_inputs, (block.output,), tuple(dying), fills=True, key=bind_key))

    def _pooled_by(self, conv: Node, last: Node, residual: Value | None, users: dict,
                   graph_outputs: set) -> Node | None:
        """The ``global_avg_pool2d`` of depthwise convolution ``conv``'s output (``last``: the
        last node fused into it) that its step can compute as well — each plane's mean while
        the plane is in cache (the kernels of ``jit.depthwise.MEAN_ALGORITHMS``) — or None:
        squeeze-excitation blocks pool their depthwise layer's activated map (glow_like's
        ``fuse_plane_means``, the same kernels)."""
        if not means_fused() or not is_depthwise(conv) or residual is not None or self._const(conv, 1) is None:
            return None
        if len(conv.inputs) > 2 and self._const(conv, 2) is None:
            return None
        geom = conv_geometry(conv)
        algorithm = depthwise_algorithm(geom.out_hw, geom.kernel, geom.stride, tuple(attrs_of(conv)["dilation"]),
                                        geom.padding, geom.in_hw)
        if algorithm not in MEAN_ALGORITHMS or last.output in graph_outputs:
            return None
        pools = [u for u in users.get(last.output, []) if u.op == "global_avg_pool2d"]
        if len(pools) != 1 or pools[0].output in graph_outputs:
            return None
        return pools[0]

    def _number_values(self) -> None:
        """Give every value a slot of the call's value list: the constants first (their arrays
        in :attr:`_template`, which each call copies), then the inputs and the steps' outputs."""
        slot = {v: i for i, v in enumerate(self.constants)}
        self._first_runtime = len(slot)
        for v in self.inputs:
            slot.setdefault(v, len(slot))
        for step in self.steps:
            for v in step.outputs:
                slot.setdefault(v, len(slot))
        self._template: list[np.ndarray | None] = [None] * len(slot)
        for v, array in self.constants.items():
            self._template[slot[v]] = array
        self._input_slots = tuple(slot[v] for v in self.inputs)
        self._output_slots = tuple(slot[v] for v in self.outputs)
        # The outputs' shapes where every one is float32 of a static shape (the joined arrays of
        # a call run in parts are then made at its start: _joined), else None.
        shapes = [tuple(v.type.shape) for v in self.outputs]
        static = all(v.type.dtype == "f32" and shape and all(isinstance(d, int) for d in shape)
                     for v, shape in zip(self.outputs, shapes))
        self._output_shapes = shapes if static else None
        self.steps = [
            replace(step, reads=tuple(slot[v] for v in step.inputs), writes=tuple(slot[v] for v in step.outputs),
                    frees=tuple(slot[v] for v in step.dying if v in slot and v not in self.constants))
            for step in self.steps
        ]

    def _slice_head(self) -> tuple[int, tuple[int, ...]]:
        """How many leading steps a slice runs image by image (``lowerkit.backend.cpu.
        head_length``: through the last convolution or pooling on a map of at least 1024
        pixels, or of 784 where its maps hold many more values than its weights), and the slots of
        the values the head hands to the rest (its or the call's runtime values that a later
        step or the outputs read; not the call's inputs, which the rest reads whole).
        ``LOWERKIT_NNPACK_SLICE_HEAD=0`` (read at compile) runs slices layer by layer throughout."""
        if os.environ.get("LOWERKIT_NNPACK_SLICE_HEAD") == "0":
            return 0, ()
        head = head_length(self._head_step(step) for step in self.steps)
        if not head:
            return 0, ()
        defined = {i for step in self.steps[:head] for i in step.writes}
        read = {*self._output_slots, *(i for step in self.steps[head:] for i in step.reads)}
        return head, tuple(sorted(i for i in defined & read if i >= self._first_runtime))

    def _head_step(self, step: Step) -> tuple[list, int]:
        """``step`` as ``head_length`` reads it: a convolution's or pooling's maps (the
        values it reads at run time and writes) and weights (its node's constants), nothing
        for the others."""
        if step.node.op not in _SPATIAL_OPS:
            return [], 0
        maps = [v.type.shape for v in (*step.inputs, *step.outputs) if v not in self.constants]
        return maps, sum(self.constants[v].size for v in step.node.inputs if v in self.constants)

    def _const(self, node: Node, index: int) -> np.ndarray | None:
        if index >= len(node.inputs):
            return None
        return self.constants.get(node.inputs[index])

    def _linear_step(self, node: Node, act: tuple[int, float, float], bind_key: int | None,
                     returned: bool) -> StepKernel:
        """The step of a linear layer on constant weights (:func:`_linear_step_fits`) with its
        fused activation ``act``: output from the spares, bound as the convolutions are — or,
        where the call ``returned`` it, into a new array (the caller keeps it)."""
        layer = Linear(self._const(node, 1), self._const(node, 2), options=self.run_options)
        step = LinearStep(layer, act, tuple(node.output.type.shape[1:]), self.team)
        if not returned:
            return _bound_step(step, False, bind_key)

        def run_returned(args: list[np.ndarray]) -> list[np.ndarray]:
            # a new array every call, numpy's own (the caller keeps it)
            return [step.run_into(args[0], np.empty(step.output_shape(args[0].shape[0]), np.float32))]

        return run_returned

    def _kernel(
        self, node: Node, act: tuple[int, float, float], residual: Value | None = None, gate: Node | None = None,
        bind_key: int | None = None, means: bool = False, gate_in_place: bool = False,
    ) -> tuple[StepKernel, list[Value]]:
        """The closure for ``node`` and the inputs it reads at run time; a convolution with a
        fused ``residual`` add reads that value last; one fed by a folded gate multiply
        ``gate`` reads that multiply's map and gate instead of its own input. ``bind_key``:
        the step's key for its bound calls, None if it must not bind (see :func:`_bound_step`).
        ``means``: a depthwise layer (:meth:`_pooled_by`) returns its planes' means second.
        ``gate_in_place``: the gate's map dies at the layer (``TeamConv.gate_in_place``)."""
        opts, run = self.options, self.run_options
        ids = list(node.inputs)
        attrs = attrs_of(node)
        if node.op == "conv2d" and is_depthwise(node):
            weight, bias = self._const(node, 1), self._const(node, 2)
            conv = DepthwiseConv2d(conv_geometry(node), weight, bias, dilation=tuple(attrs["dilation"]),
                                   activation=act, options=run, workspace=self.workspace, team=False)
            self.algorithms[node.debug_handle] = f"depthwise ({conv.algorithm})"
            if self.team is not None and TeamDepthwise.fits(conv):
                conv = TeamDepthwise(conv, self.team)
        elif node.op == "conv2d":
            weight, bias = self._const(node, 1), self._const(node, 2)
            geom = conv_geometry(node)
            batch_hint = _batch_hint(node.inputs[0].type.shape[0])
            algorithm = opts["algorithm"]
            if algorithm == "auto" and self.team is not None and weight is not None:  # team plans' own rule
                algorithm = select_algorithm(geom, batch_hint, 1, run.batch_threshold, team=True)
            conv = Conv2d(
                geom, weight, bias, algorithm=algorithm, activation=act,
                transform_strategy=opts["transform_strategy"], options=run,
                batch_hint=batch_hint, workspace=self.workspace,
            )
            self.algorithms[node.debug_handle] = conv.algorithm
            if weight is not None and PooledPointwise.fits(tuple(node.inputs[0].type.shape), geom.kernel,
                                                             geom.stride, geom.padding, attrs.get("groups", 1)):
                conv = PooledPointwise(weight, bias, act, conv, self.team)
                self.algorithms[node.debug_handle] = "pooled_pointwise"
            elif self.team is not None and TeamConv.fits(conv):
                conv = TeamConv(conv, self.team)
        if node.op == "conv2d":
            live = [ids[0]] + [ids[i] for i in (1, 2) if i < len(ids) and ids[i] not in self.constants]
            has_bias = len(ids) > 2
            if residual is not None:
                live.append(residual)
            if gate is not None and isinstance(conv, TeamConv) and conv.pointwise:
                live[:1] = list(gate.inputs)  # the map and its gate
                conv.gate_in_place = gate_in_place
                return _bound_step(conv, residual is not None, bind_key, gated=True), live

            if weight is not None and (not has_bias or bias is not None) and isinstance(conv, BOUND_LAYERS):
                return _bound_step(conv, residual is not None, bind_key, means), live
            if weight is not None and (not has_bias or bias is not None):  # the usual case: both constant
                def run_conv(args: list[np.ndarray], spares: Spares) -> list[np.ndarray]:
                    x = args[0]
                    out = spares.take(conv.output_shape(x.shape[0]))
                    return [conv(x, residual=args[1] if len(args) > 1 else None, out=out)]

                return run_conv, live

            def run_conv_inputs(args: list[np.ndarray], spares: Spares) -> list[np.ndarray]:
                it = iter(args[1:])
                w = None if weight is not None else next(it)
                b = None if (not has_bias or bias is not None) else next(it)
                out = spares.take(conv.output_shape(args[0].shape[0]))
                return [conv(args[0], w, b, residual=next(it, None), out=out)]

            return run_conv_inputs, live
        if node.op == "conv2d_input_grad":
            weight = self._const(node, 0)
            grad = Conv2dInputGrad(
                conv_geometry(node), weight, algorithm=opts["algorithm"],
                transform_strategy=opts["transform_strategy"], options=run,
                batch_hint=_batch_hint(node.inputs[1].type.shape[0]), workspace=self.workspace,
            )
            self.algorithms[node.debug_handle] = grad.conv.algorithm
            if weight is not None:
                return (lambda args: [grad(args[0])]), [ids[1]]
            return (lambda args: [grad(args[1], args[0])]), ids
        if node.op == "conv2d_weight_grad":
            wgrad = Conv2dWeightGrad(conv_geometry(node), options=run, workspace=self.workspace)
            self.algorithms[node.debug_handle] = "implicit_gemm"
            return (lambda args: [wgrad(args[0], args[1])]), ids
        if node.op == "linear":
            weight, bias = self._const(node, 1), self._const(node, 2)
            layer = Linear(weight, bias, options=run)
            has_bias = len(ids) > 2
            if self.team is not None and weight is not None and (not has_bias or bias is not None):
                # constant weights, an output shape the planned step cannot pin: its paths, unbound
                step = LinearStep(layer, NONE, None, self.team)
                return (lambda args: [step(args[0])]), [ids[0]]
            live = [ids[0]] + [ids[i] for i in (1, 2) if i < len(ids) and ids[i] not in self.constants]

            def run_linear(args: list[np.ndarray]) -> list[np.ndarray]:
                it = iter(args[1:])
                w = None if weight is not None else next(it)
                b = None if (not has_bias or bias is not None) else next(it)
                return [layer(args[0], w, b)]

            return run_linear, live
        if node.op == "max_pool2d":
            pool = MaxPool2d(
                tuple(attrs["kernel_size"]), tuple(attrs["stride"]), tuple(attrs["padding"]), self.workspace,
                options=run, team=self.team,
            )
            return (lambda args: [pool(args[0])]), ids
        if node.op == "global_avg_pool2d":
            from lowerkit.backend.cpu import jit

            pool_kernels = jit.load("pool")  # compile (or load from the cache) now

            def run_global_pool(args: list[np.ndarray], spares: Spares | None = None) -> list[np.ndarray]:
                x = np.ascontiguousarray(args[0], dtype=np.float32)
                shape = (x.shape[0], x.shape[1], 1, 1)
                out = np.empty(shape, np.float32) if spares is None else spares.take(shape)
                pool_kernels.global_avg_pool2d(x, out, 0, x.shape[0] * x.shape[1])
                return [out]

            return run_global_pool, ids
        if node.op == "flatten":  # a view of its input where the input is contiguous (a copy otherwise)
            start, end = attrs["start_dim"], attrs["end_dim"]
            return (lambda args: [_flatten(args[0], start, end)]), ids
        if node.op == "mul":  # a feature map times a per-channel gate (or a map): one numpy pass
            return _multiply, ids
        if node.op in RESIDUAL_OPS:  # a sum no convolution fused: one numpy pass
            return (lambda args: [np.add(args[0], args[1], dtype=np.float32)]), ids
        if node.op in ACTIVATION_OPS:
            own = activation_of(node)
            if node.op != "relu":
                from lowerkit.backend.cpu import jit

                jit.load("conv")  # the compiled activation pass: load it now, not in the first call
            return (lambda args: [apply(args[0], own)]), ids
        if node.op == "softmax":
            from lowerkit.backend.cpu import jit

            jit.load("norm")  # compile (or load from the cache) now, not in the first call
            return (lambda args: [softmax(args[0])]), ids
        raise UnsupportedOperatorError(f"nnpack cannot run {node.where()}")  # pragma: no cover

    # -- running --------------------------------------------------------------------
    def run(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        """Run the method on ``inputs``; thread-safe (all per-call state is local or per-thread)."""
        if self.sliced:
            return self._run_slices(inputs, split(len(inputs[0]), self.workers))
        if self.per_image:
            trial = self.form_trial
            if trial is None or trial.choice == 0:
                return self._run_images(inputs)
            form, start = trial.form(), time.perf_counter()
            if form == 0:
                outputs = self._run_images(inputs)
            else:
                outputs = self._run_slices(inputs, split(len(inputs[0]), self.workers))
            trial.record(form, time.perf_counter() - start)
            return outputs
        # Every kernel of a plan asks BLAS for the same threads (cores // workers, from the
        # plan's one ``threads`` option), so the plan holds that limit over the whole call:
        # the kernels' own limits then nest at no cost (setting OpenBLAS's threads and
        # restoring them cost ~7 us a kernel).
        guard = self.team.guard if self.team is not None else None
        start = guard.begin() if guard is not None else 0.0
        if self.uses_blas:
            with blas_limit(self.blas_threads):
                outputs = self._run(inputs)
        else:
            outputs = self._run(inputs)
        if guard is not None:
            guard.end(start)
        return outputs

    def _run_slices(self, inputs: Sequence[np.ndarray], slices: list[slice]) -> list[np.ndarray]:
        """Every layer on each slice of the batch, one slice per worker (a team plan's steps in
        their serial forms), each worker's outputs into its rows of the joined ones
        (:meth:`_run_part`)."""
        arrays = [np.asarray(x) for x in inputs]
        joined = self._joined(len(arrays[0]))

        def run_slice(j: int) -> None:
            part = [x[slices[j]] for x in arrays]
            run = self._run_with_head if self.head and len(part[0]) > 1 else self._run
            if self.team is None:
                self._run_part(run, joined, slices[j], part)
                return
            # A team plan run as slices (on trial): each worker runs the serial forms, with
            # spares of their own on the calling thread (see _thread_spares)
            local = self._local
            local.in_slices = True
            try:
                with team_off():
                    self._run_part(run, joined, slices[j], part)
            finally:
                local.in_slices = False

        with blas_limit(1):
            run_parallel(len(slices), run_slice, range(len(slices)))
        return joined.arrays

    def _run_images(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        """Every step on one image at a time (team regions inside), each image's outputs into
        its row of the joined ones (:meth:`_run_part`)."""
        arrays = [np.asarray(x) for x in inputs]
        guard = self.team.guard if self.team is not None else None
        start = guard.begin() if guard is not None else 0.0
        joined = self._joined(len(arrays[0]))
        with blas_limit(1):
            for i in range(len(arrays[0])):
                rows = slice(i, i + 1)
                self._run_part(self._run, joined, rows, [x[rows] for x in arrays])
        if guard is not None:
            guard.end(start)
        return joined.arrays

    def _joined(self, total: int) -> _Joined:
        """The joined outputs of a call over ``total`` images run in parts: made now where every
        output's type is float32 of a static shape over this batch (else by the first part)."""
        shapes = self._output_shapes
        return _Joined(total, shapes if shapes and all(shape[0] == total for shape in shapes) else None)

    def _run_part(self, run: Callable[[Sequence[np.ndarray]], list[np.ndarray]], joined: _Joined, rows: slice,
                  part: list[np.ndarray]) -> None:
        """``run`` on the images ``part`` (at ``rows`` of the batch), on this thread, its
        outputs into ``joined``: a step that takes its output from the spares writes an output
        of the call straight into its place there (``Spares.destinations``, which the plan's
        loop turns into ``Spares.into`` for the step: a lowered 3x3 depthwise layer over 8 x 32
        x 112 x 112, whose output is as large as its input, copied ~80 us an image); the
        others are copied in (:meth:`_Joined.put`)."""
        spares = self._thread_spares()
        places, placed = joined.places(rows, self._output_slots)
        spares.destinations = places
        try:
            outputs = run(part)
        finally:
            spares.destinations = None
        joined.put(rows, outputs, placed)

    def _spares(self) -> Spares:
        """This thread's spare arrays (kept across calls; each thread has its own), for a new call."""
        spares = self._thread_spares()
        spares.start_call()
        return spares

    def _thread_spares(self) -> Spares:
        """This thread's spares — one set for a team plan's batch slices, another for its other
        calls. The two forms' steps see different shapes (a slice of several images, one image),
        so while a form trial alternates them, shared spares would plan their arena, bind and
        chain anew at every switch: EfficientNet-B0 at batch 8 took 4-5 slice calls to come
        back to its steady time, and the trial timed its slices 10-30% slow."""
        local = self._local
        name = "slice_spares" if getattr(local, "in_slices", False) else "spares"
        spares = getattr(local, name, None)
        if spares is None:
            spares = Spares()
            setattr(local, name, spares)
        return spares

    def _run(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        """Every step on ``inputs``. A call's values live in a list, one slot per value
        (:meth:`_number_values`); a dying value's slot is cleared, and its buffer goes back to
        the spares while only the call's runtime values (not the constants) can still share it."""
        spares = self._spares()
        values = self._template.copy()
        for i, x in zip(self._input_slots, inputs):
            values[i] = x
        self._run_chained(values, spares)
        return self._outputs_of(values)

    def _run_chained(self, values: list, spares: Spares) -> None:
        """Every step, each run of bound steps that replays as one :class:`~.chains.Chain`
        (this thread's, made after a call that replayed; dropped when one stops replaying)."""
        spares.chains = self._run_in_chains(self.steps, values, spares, spares.chains)

    def _run_in_chains(self, steps: Sequence[Step], values: list, spares: Spares,
                       chains: tuple | None) -> tuple | None:
        """``steps`` on the call's value list, the runs in ``chains`` (built on this thread
        for these very ``steps``) replayed where they hold; returns the chains for the next
        call: these while every run replayed, None after one did not, new ones where there
        were none and bound steps replayed."""
        if chains is None:
            if self._run_steps(steps, values, spares) >= MIN_STEPS and spares.arena_in_use() is not None:
                return build_chains(steps, spares.bound, spares.arena_in_use())
            return None
        kept: tuple | None = chains
        at = 0
        for chain in chains:
            if chain.start > at:
                self._run_steps(steps[at:chain.start], values, spares)
            if chain.holds(values, spares):
                done = 0
                try:
                    for call in chain.calls:
                        call()
                        done += 1
                except Exception as err:
                    raise _step_error(steps[chain.start + done], err) from err
                chain.finish(values, spares)
            else:
                self._run_steps(steps[chain.start:chain.stop], values, spares)
                kept = None
            at = chain.stop
        if at < len(steps):
            self._run_steps(steps[at:], values, spares)
        return kept

    def _outputs_of(self, values: list) -> list[np.ndarray]:
        """The call's outputs from its value list (a constant output copied)."""
        return [values[i] if i >= self._first_runtime else recycled_copy(values[i]) for i in self._output_slots]

    def _run_steps(self, steps: Sequence[Step], values: list, spares: Spares) -> int:
        """``steps`` on the call's value list ``values`` (see :meth:`_run`); returns how many
        replayed their bound calls."""
        first_runtime = self._first_runtime
        bound = spares.bound
        replayed = 0
        for step in steps:
            # A step bound to this call's very arrays: the loop runs its bound call itself —
            # what the step's kernel would do (the same call, the same arena views) without
            # the layers of Python around it (~3 us a step inside a model).
            entry = None if step.key is None else bound.get(step.key)
            replay = (entry is not None and entry.call is not None and spares.replays(entry)
                      and _holds(values, step.reads, entry.inputs))
            args = None if replay else [values[i] for i in step.reads]
            if spares.destinations is not None and step.fills and not replay:
                spares.into = [spares.destinations.get(i) for i in step.writes]
            try:
                if replay:
                    spares.taken += entry.takes  # the takes its kernel would have made
                    entry.call()
                    results = entry.outputs
                    replayed += 1
                else:
                    results = step.kernel(args, spares) if step.fills else step.kernel(args)
            except Exception as err:
                raise _step_error(step, err) from err
            finally:
                spares.into = None
            del args
            tracking = spares.tracking
            if tracking:
                spares.produced(results)
            if len(results) == 1:
                values[step.writes[0]] = results[0]
            else:
                for i, array in zip(step.writes, results):
                    values[i] = array
            for i in step.frees:  # never an output of the call (see _build)
                array, values[i] = values[i], None
                if tracking and array is not None:
                    spares.died(array, islice(values, first_runtime, None))
        return replayed

    def _run_with_head(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        """A slice of two or more images: each image through the first :attr:`head` steps in
        turn, the values the rest reads joined over the slice's images (into the spares),
        then the rest of the steps on the whole slice (:func:`head_length` says why). An
        output of the call among those values is joined in its place in the call's result
        where :meth:`_run_part` gave one (``Spares.destinations``), each image's written there
        by its step."""
        spares = self._spares()
        head, first_runtime = self._head, self._first_runtime
        n = len(inputs[0])
        # Each image's head steps bind their own arrays (``spares.bound``, keyed by step), and
        # replay in chains of their own, as the steps after the head do (:meth:`_run_in_chains`).
        local = self._local
        images_bound = getattr(local, "head_bound", None)
        if images_bound is None or len(images_bound) < n or local.head_spares is not spares:
            images_bound = local.head_bound = [{} for _ in range(n)]
            local.head_chains, local.rest_chains, local.head_spares = [None] * n, None, spares
        images_chains = local.head_chains
        slice_bound, places = spares.bound, spares.destinations
        joined: dict[int, np.ndarray] = {}
        try:
            for i in range(n):
                spares.bound = images_bound[i]
                # this image's rows of the outputs the head computes
                mine = None if places is None else {slot: places[slot][i:i + 1] for slot in self._crossing
                                                    if slot in places} or None
                spares.destinations = mine
                values = self._template.copy()
                for slot, x in zip(self._input_slots, inputs):
                    values[slot] = x[i:i + 1]
                images_chains[i] = self._run_in_chains(head, values, spares, images_chains[i])
                for slot in self._crossing:
                    one = values[slot]
                    if i == 0:
                        place = None if places is None else places.get(slot)
                        if place is not None and place.shape == (n, *one.shape[1:]) and place.dtype == one.dtype:
                            joined[slot] = place
                        else:
                            joined[slot] = spares.take((n, *one.shape[1:]))
                            if spares.tracking:
                                spares.produced([joined[slot]])
                    if not (mine and one is mine.get(slot) and joined[slot] is places.get(slot)):
                        joined[slot][i:i + 1] = one
                for slot in self._crossing:  # this image's copies are spare now
                    one, values[slot] = values[slot], None
                    if spares.tracking:
                        spares.died(one, islice(values, first_runtime, None))
        finally:
            spares.bound, spares.destinations = slice_bound, places
        values = self._template.copy()
        for slot, x in zip(self._input_slots, inputs):
            values[slot] = x
        for slot, array in joined.items():
            values[slot] = array
        local.rest_chains = self._run_in_chains(self._rest, values, spares, local.rest_chains)
        return self._outputs_of(values)


class _Joined:
    """A call's outputs over a batch of ``total`` run in parts (batch slices on the workers, or
    images one by one): made at once where their ``shapes`` are given (float32), else by the
    first part to finish. A part's outputs that a step did not write in place
    (:meth:`places`) are copied in as soon as it is done, while they are in the cache of the
    thread that computed them (concatenated by the calling thread after every part, a lowered
    3x3 depthwise layer over 8 x 32 x 112 x 112, whose output is as large as its input, took
    1.70 ms against 1.45)."""

    def __init__(self, total: int, shapes: Sequence[tuple[int, ...]] | None = None) -> None:
        self.total = total
        self.arrays: list[np.ndarray] = [recycled_empty(shape, np.float32) for shape in shapes] if shapes else []
        self._made = threading.Lock()

    def places(self, rows: slice, slots: Sequence[int]) -> tuple[dict[int, np.ndarray] | None, tuple]:
        """Where a part's outputs go, by their slots in the call's value list, once the joined
        arrays are made (else ``(None, ())``): ``(places, placed)`` — the first of an output
        returned twice gets the place (``placed`` has None for the others, which :meth:`put`
        copies)."""
        if not self.arrays:
            return None, ()
        places: dict[int, np.ndarray] = {}
        placed: list[np.ndarray | None] = []
        for slot, whole in zip(slots, self.arrays):
            placed.append(None if slot in places else places.setdefault(slot, whole[rows]))
        return places, tuple(placed)

    def put(self, rows: slice, outputs: Sequence[np.ndarray], placed: tuple = ()) -> None:
        """The part of the batch at ``rows``: its ``outputs``, one per output of the call;
        those that are the very arrays :meth:`places` gave (``placed``) are there already."""
        with self._made:
            if not self.arrays:
                self.arrays.extend(recycled_empty((self.total, *out.shape[1:]), out.dtype) for out in outputs)
        for i, (whole, out) in enumerate(zip(self.arrays, outputs)):
            if i >= len(placed) or out is not placed[i]:
                whole[rows] = out


# Layers with a ``run_into(x, out, residual)``: a plan's call of the layer's own weights into
# an output buffer, without the checks of their ``__call__`` for any caller.
BOUND_LAYERS = (TeamConv, TeamDepthwise, PooledPointwise, Conv2d, DepthwiseConv2d, LinearStep, GlobalAvgPool)


def _bound_step(layer: TeamConv | TeamDepthwise | PooledPointwise | Conv2d | DepthwiseConv2d | LinearStep
                | GlobalAvgPool | BlockLayer,
                with_residual: bool, key: int | None, means: bool = False, gated: bool = False) -> StepKernel:
    """The step of a layer of :data:`BOUND_LAYERS` with constant weights: its output buffer
    from the spares, then ``run_into`` — or, from the second call that hands the step the
    same arrays (its inputs and output buffers: arena views), the layer's bound call for them
    (:mod:`.bound`; ``run_into`` on those arrays where the layer cannot bind), kept per thread
    in ``spares.bound[key]`` (a :class:`~.spares.Bound`, which the plan's loop then calls
    itself: :meth:`Plan._run_steps`). ``key`` None: never bound (a step reading the call's
    inputs or writing its outputs, arrays the plan must not hold).

    The step reads ``[x]``, ``[x, residual]``, or with ``gated`` (a :class:`TeamConv` 1x1
    layer fed by a folded gate multiply) ``[x, gate]`` / ``[x, gate, residual]`` —
    ``run_gated_into`` and ``bind_gated`` then. ``means`` (a depthwise layer, no residual): a
    second output from the spares, [N, C, 1, 1], the planes' means (``run_into``'s and
    ``bind``'s ``means``)."""
    tail = layer.output_shape(1)[1:]
    pooled = (tail[0], 1, 1)
    run, bind = (layer.run_gated_into, layer.bind_gated) if gated else (layer.run_into, layer.bind)

    def arguments(args: list[np.ndarray], outputs: tuple[np.ndarray, ...]) -> tuple:
        """``run``'s and ``bind``'s arguments: the inputs and output buffers in their order."""
        if means:
            return args[0], outputs[0], None, outputs[1]
        residual = args[-1] if with_residual else None
        if gated:
            return args[0], args[1], outputs[0], residual
        return args[0], outputs[0], residual

    def take(args: list[np.ndarray], spares: Spares) -> tuple[np.ndarray, ...]:
        n = args[0].shape[0]
        out = spares.take((n, *tail))
        return (out, spares.take((n, *pooled))) if means else (out,)

    if key is None:
        def run_unbound(args: list[np.ndarray], spares: Spares) -> list[np.ndarray]:
            outputs = take(args, spares)
            run(*arguments(args, outputs))
            return list(outputs)

        return run_unbound

    def run_bound(args: list[np.ndarray], spares: Spares) -> list[np.ndarray]:
        first = spares.taken
        outputs = take(args, spares)
        entry = spares.bound.get(key)
        if entry is not None and _same(entry.inputs, args) and _same(entry.outputs, outputs):
            call = entry.call
            if call is None:  # the second time these arrays came: bind them
                call = bind(*arguments(args, outputs)) or partial(run, *arguments(args, outputs))
                spares.bound[key] = Bound(tuple(args), outputs, call, first, spares.arena_in_use(), len(outputs))
            call()
        else:
            run(*arguments(args, outputs))
            spares.bound[key] = Bound(tuple(args), outputs, None, first, None, len(outputs))
        return list(outputs)

    return run_bound


def _constant_value(producers: dict, parameters: dict[str, np.ndarray], value: Value) -> np.ndarray:
    """The array of a value a ``param`` or ``constant`` node produces (as ``Plan._build`` keeps it)."""
    node = producers[value]
    return parameters[node.attrs["name"]] if node.op == "param" else np.asarray(node.attrs["value"])


def _step_error(step: Step, err: Exception) -> NodeExecutionError:
    """``err``, raised by ``step``'s kernel or bound call, as the error that names the node."""
    if isinstance(err, (LowerkitError, GeometryError)):
        return NodeExecutionError(step.node.debug_handle, f"{step.node.where()}: {err}")
    return NodeExecutionError(step.node.debug_handle, f"{step.node.where()}: nnpack kernel failed: {err}")


def _holds(values: list, reads: tuple[int, ...], inputs: tuple[np.ndarray, ...]) -> bool:
    """Whether the call's ``values`` at slots ``reads`` are the very arrays ``inputs`` (a
    binding's, made for the same step: as many)."""
    for i, array in zip(reads, inputs):
        if values[i] is not array:
            return False
    return True


def _same(held: Sequence[np.ndarray | None], given: Sequence[np.ndarray | None]) -> bool:
    """Whether two sequences hold the very same objects, in order."""
    return len(held) == len(given) and all(a is b for a, b in zip(held, given))


def _gated_convolutions(graph: Graph, users: dict, graph_outputs: set) -> dict[Node, Node]:
    """1x1 convolution -> the gate multiply feeding it: ``conv1x1(x * gate)`` with ``gate``
    [N, C, 1, 1], the multiply's only reader the convolution (dense, stride 1, unpadded, a
    constant weight, at least ``team_layers.MIN_FLOPS``, fewer output channels than pixels). Its team
    form scales the [OC, C] weight by each image's gate and multiplies ``x`` — no pass over
    the map (glow_like's ``fold_gates``, with the same condition)."""
    producers = graph.producers()
    found: dict[Node, Node] = {}
    for node in graph.nodes:
        if node.op != "mul" or node.output in graph_outputs:
            continue
        x, gate = node.inputs[0].type.shape, node.inputs[1].type.shape
        readers = users.get(node.output, [])
        if len(x) != 4 or tuple(gate) != (x[0], x[1], 1, 1) or len(readers) != 1:
            continue
        conv = readers[0]
        if conv.op != "conv2d" or conv.inputs[0] is not node.output or is_depthwise(conv):
            continue
        weight = producers.get(conv.inputs[1])
        if weight is None or weight.op != "param" or support_reason(conv) is not None:
            continue
        geom = conv_geometry(conv)
        if (geom.kernel == (1, 1) and geom.stride == (1, 1) and not any(geom.padding)
                and attrs_of(conv).get("groups", 1) == 1 and geom.flops(1) >= team_layers.MIN_FLOPS
                and geom.out_channels < x[2] * x[3]):  # else scaling the weight costs more than the map
            found[conv] = node
    return found


def _flatten(x: np.ndarray, start: int, end: int) -> np.ndarray:
    """``x`` with dimensions ``start`` .. ``end`` merged (torch.flatten; a scalar becomes [1])."""
    shape = x.shape if x.ndim else (1,)
    start, end = start % len(shape), end % len(shape)
    return x.reshape(shape[:start] + (prod(shape[start:end + 1]),) + shape[end + 1:])


def _scales_in_place(mul: Node, dying: Sequence[Value], filled: set[Value], users: dict,
                     graph_outputs: set[Value]) -> bool:
    """Whether ``mul`` (a map times its gate) may write into the map's own buffer: the map is a
    step's output from the spares (never the caller's input or a constant), float32 of the
    product's shape, dies at the multiply, and no view of it (flatten's) outlives it."""
    a, b = mul.inputs
    return (a in filled and a in dying and a not in graph_outputs and a is not b and a.type.dtype == "f32"
            and tuple(a.type.shape) == tuple(mul.output.type.shape)
            and all(reader.op != "flatten" for reader in users.get(a, [])))


def _multiply_in_place(args: list[np.ndarray], spares: Spares) -> list[np.ndarray]:
    """``a *= b`` for a map that dies here (:func:`_scales_in_place`): the map's lines are in
    cache from the layer that wrote it, where a spare buffer's are not (EfficientNet-B0's
    1152x7x7 gate: 34 -> 16 us in the model, as glow_like's in-place multiply)."""
    call = _in_place_product(args[0], args[1])
    if call is None:
        return _multiply(args, spares)
    call()
    return [args[0]]


def _in_place_product(a: np.ndarray, b: np.ndarray) -> Callable[[], object] | None:
    """``a *= b`` as a zero-argument call for these arrays: ``b`` of ``a``'s shape or a gate
    [N, C, 1, 1] of a float32 C-contiguous map ``a`` (None for anything else)."""
    if not (a.dtype == np.float32 and a.flags.c_contiguous) or b.dtype != np.float32:
        return None
    if b.shape == a.shape:
        return partial(np.multiply, a, b, out=a)
    if a.ndim == 4 and b.shape == (a.shape[0], a.shape[1], 1, 1):
        return scale_planes(a, b)
    return None


def _bound_in_place_multiply(key: int | None) -> StepKernel:
    """:func:`_multiply_in_place` as a step that binds (see :func:`_bound_step`): from the
    second call that hands it the same arrays (arena views), the product bound to them, which
    the plan's loop then calls itself — so a squeeze-excitation gate that scales its map in
    place no longer breaks the run of bound steps around it (:mod:`.chains`)."""
    if key is None:
        return _multiply_in_place

    def multiply_in_place_bound(args: list[np.ndarray], spares: Spares) -> list[np.ndarray]:
        first = spares.taken
        entry = spares.bound.get(key)
        if entry is not None and _same(entry.inputs, args):
            call = entry.call
            if call is None:  # the second time these arrays came: bind them
                call = _in_place_product(args[0], args[1])
                if call is None:
                    return _multiply_in_place(args, spares)
                spares.bound[key] = Bound(tuple(args), (args[0],), call, first, spares.arena_in_use(), 0)
            call()
            return [args[0]]
        results = _multiply_in_place(args, spares)
        if results[0] is args[0]:
            spares.bound[key] = Bound(tuple(args), (args[0],), None, first, None, 0)
        return results

    return multiply_in_place_bound


def _multiply(args: list[np.ndarray], spares: Spares) -> list[np.ndarray]:
    """``a * b`` for a feature map ``a`` [N, C, H, W] and ``b`` of its shape or a gate
    [N, C, 1, 1] (one scalar per plane), into an array a dead value left (a fresh 1-5 MB
    output cost ~140 us of page faults per squeeze-excitation block of EfficientNet-B0)."""
    a, b = np.require(args[0], np.float32, "C"), np.asarray(args[1], dtype=np.float32)
    if b.shape == a.shape:
        out = spares.take(a.shape)
        np.multiply(a, b, out=out)
    elif a.ndim == 4 and b.shape == (a.shape[0], a.shape[1], 1, 1):
        out = spares.take(a.shape)
        rows = a.shape[0] * a.shape[1]
        np.multiply(a.reshape(rows, -1), b.reshape(rows, 1), out=out.reshape(rows, -1))
    else:  # shapes the graph's types did not pin down (free dimensions): numpy's broadcast
        return [np.multiply(a, b, dtype=np.float32)]
    return [out]


def _linear_step_fits(node: Node, producers: dict[Value, Node]) -> bool:
    """Whether a linear node runs as a :class:`.linear_step.LinearStep`: float32, its weight
    (and bias) constants, its output's shape static after the batch dimension."""
    constant = all(v in producers and producers[v].op in ("param", "constant") for v in node.inputs[1:])
    tail = node.output.type.shape[1:]
    return (constant and node.output.type.dtype == "f32" and len(node.output.type.shape) >= 2
            and all(isinstance(d, int) for d in tail))


def _folded_flattens(graph: Graph, users: dict, graph_outputs: set) -> dict[Node, Node]:
    """Linear node -> the flatten it reads, where the linear layer may read the flatten's
    input instead (see ``Plan._build``): the flatten's output is read by that layer alone (as
    its input, not a graph output), the layer runs as a :class:`.linear_step.LinearStep`,
    which reads any input as ``[rows, K]``, and the flatten's input is float32 and keeps its
    batch dimension (the layer's output then has the flatten input's leading dimension)."""
    producers = graph.producers()
    found: dict[Node, Node] = {}
    for node in graph.nodes:
        if node.op != "flatten" or node.output in graph_outputs or node.inputs[0].type.dtype != "f32":
            continue
        rank = node.inputs[0].type.rank
        if rank < 2 or attrs_of(node)["start_dim"] % rank == 0:
            continue  # merges the batch into another dimension
        readers = users.get(node.output, [])
        if (len(readers) == 1 and readers[0].op == "linear" and readers[0].inputs[0] is node.output
                and node.output not in readers[0].inputs[1:] and _linear_step_fits(readers[0], producers)):
            found[readers[0]] = node
    return found


def _only_reader(value: Value, ops: tuple[str, ...], users: dict[Value, list[Node]],
                 graph_outputs: set[Value]) -> Node | None:
    """The node of ``ops`` (one nnpack supports) that alone reads ``value``, else None; never
    for a graph output (a step binds only the last value it fuses)."""
    if value in graph_outputs:
        return None
    readers = users.get(value, [])
    if len(readers) == 1 and readers[0].op in ops and support_reason(readers[0]) is None:
        return readers[0]
    return None


def _epilogue_of(
    conv: Node, users: dict[Value, list[Node]], graph_outputs: set[Value], position: dict[Any, int]
) -> tuple[Node | None, Value | None, Node | None]:
    """What the convolution ``conv`` can fuse: ``(add, residual, activation)``.

    A residual ``add`` that is the only reader of the convolution's output, whose other
    operand is already computed when the convolution runs (in ResNet's blocks that is the
    later of the two convolutions feeding the add), then an activation that is the only
    reader of the sum; or, without an add, an activation that is the only reader of the
    convolution. Fused values must not be graph outputs (the step binds only the last one).
    ``position`` maps nodes, and the values they produce, to their place in the schedule
    (graph inputs are absent: always ready).
    """

    add = _only_reader(conv.output, RESIDUAL_OPS, users, graph_outputs)
    residual = None
    if add is not None:
        a, b = add.inputs
        residual = b if a is conv.output else a
        if residual is conv.output or position.get(residual, -1) > position[conv]:
            add, residual = None, None
    act = _only_reader(add.output if add is not None else conv.output, ACTIVATION_OPS, users, graph_outputs)
    return add, residual, act


# The steps whose 4-d values are maps [N, C, H, W] (a slice's head counts their pixels).
_SPATIAL_OPS = frozenset({"conv2d", "conv2d_input_grad", "max_pool2d", "global_avg_pool2d"})

# Ops that compute each image of a batch from that image alone (weights checked below).
_PER_SAMPLE_OPS = ("conv2d", "conv2d_input_grad", "linear", "max_pool2d", "softmax", "global_avg_pool2d", "mul",
                   "flatten", *ACTIVATION_OPS, *RESIDUAL_OPS)


def batch_sliceable(graph: Graph, workers: int = 2) -> bool:
    """True if the graph computes each image of its batch (static, at least ``workers`` and
    2 images) from that image alone, so slices of the batch may run separately: every value (but weights) has the
    batch as its leading dimension, every op is per-sample, weights and biases are constants.
    (docs/nnpack.md, "Batch slices", has what it changed inside ``[nnpack, glow_like]``.)
    """
    if not graph.inputs or not graph.inputs[0].type.shape:
        return False
    batch = graph.inputs[0].type.shape[0]
    if not isinstance(batch, int) or batch < max(2, workers):
        return False  # too few images, or a free batch size (the plan is built before it is known)
    constants = {n.output for n in graph.nodes if n.op in STRUCTURAL_OPS}
    if any(v in constants for v in graph.outputs):
        return False

    def batch_major(v: Value) -> bool:
        return bool(v.type.shape) and v.type.shape[0] == batch

    if not all(batch_major(v) for v in graph.inputs):
        return False
    for node in graph.nodes:
        if node.op in STRUCTURAL_OPS:
            continue
        if node.op not in _PER_SAMPLE_OPS or not all(batch_major(v) for v in node.outputs):
            return False
        if node.op == "softmax" and len(node.output.type.shape) < 2:
            return False  # over the batch itself
        if node.op == "flatten" and attrs_of(node)["start_dim"] % max(1, node.inputs[0].type.rank) == 0:
            return False  # merges the batch
        weights = node.inputs[:1] if node.op == "conv2d_input_grad" else node.inputs[1:]
        data = node.inputs[1:] if node.op == "conv2d_input_grad" else node.inputs[:1]
        if node.op in ("conv2d", "conv2d_input_grad", "linear"):
            if not all(w in constants for w in weights):
                return False
        else:
            data = node.inputs
        if not all(batch_major(v) and v not in constants for v in data):
            return False
    return True


# Ops whose nnpack kernels never call BLAS: compiled loops or numpy's element-wise passes.
_BLAS_FREE_OPS = frozenset({"max_pool2d", "softmax", *ACTIVATION_OPS, *RESIDUAL_OPS, *SQUEEZE_OPS, *VIEW_OPS,
                            *STRUCTURAL_OPS})


def _calls_blas(node: Node) -> bool:
    """Whether ``node``'s kernel may call BLAS: a dense convolution (or its gradients), a
    linear layer, anything not known to be free of it (``_BLAS_FREE_OPS``, depthwise layers)."""
    if node.op == "conv2d" and is_depthwise(node):
        return False
    return node.op not in _BLAS_FREE_OPS


_POOL_ALGORITHMS = ("wt", "ft")  # Winograd and FFT: many small products, split on the pool


def _gemm_on_blas(graph: Graph, options: dict[str, Any], run: RunOptions) -> bool:
    """True when this plan runs every layer on the calling thread, each GEMM one BLAS call on
    BLAS's own threads (no pool: after a threaded call OpenBLAS's worker spins ~0.1 s, and a
    pool worker would fight it for the core).

    With several workers, one GEMM on OpenBLAS's threads beats the same GEMM in bands on the
    pool (a hand-off costs ~0.1 ms; MobileNetV2 10.4 vs 13.4 ms, glow_like made the same
    choice). Winograd and FFT layers are the exception: their many small channel products
    are each too small for BLAS to thread, and pool bands split them all at once (ResNet-18
    25.3 vs 27.0 ms), so a plan with any such convolution keeps the pool.
    """
    if run.workers <= 1:
        return False
    dense = [node for node in graph.nodes if node.op == "conv2d" and not is_depthwise(node)]
    if not dense:
        # Nothing large enough to gain (a lone linear layer), while OpenBLAS's threads would
        # spin for ~0.1 s after it, taking a core from whatever runs next.
        return False
    for node in dense:
        choices = {options["algorithm"]}
        if "auto" in choices:  # as chosen for either way of running the layer
            geom, batch = conv_geometry(node), _batch_hint(node.inputs[0].type.shape[0])
            choices = {select_algorithm(geom, batch, workers, run.batch_threshold) for workers in (1, run.workers)}
        if any(algorithm.startswith(_POOL_ALGORITHMS) for algorithm in choices):
            return False
    return True


def _team_plan(graph: Graph, options: dict[str, Any], run: RunOptions) -> bool:
    """Several workers, a convolution or linear layer, and every dense convolution an
    algorithm with a team form (``team.ALGORITHMS``, as ``auto`` picks it for a team plan)."""
    convolutions = [node for node in graph.nodes if node.op == "conv2d"]
    if run.workers <= 1 or not (convolutions or any(node.op == "linear" for node in graph.nodes)):
        return False
    for node in convolutions:
        if is_depthwise(node):
            continue
        algorithm = options["algorithm"]
        if algorithm == "auto":
            algorithm = select_algorithm(conv_geometry(node), _batch_hint(node.inputs[0].type.shape[0]), 1,
                                         run.batch_threshold, team=True)
        if algorithm not in TEAM_ALGORITHMS:
            return False
    return True


def _batch_hint(dim: int | str) -> int:
    """A free (symbolic) batch dim gives no hint: plan for one image; kernels read the real size."""
    return dim if isinstance(dim, int) else 1
