"""One training step as one graph: forward in training mode, loss, backward, optimizer update.

``training_step(module, loss=..., optimizer=...)`` returns a :class:`TrainStep` whose module has
one method, ``train_step``, and no parameters. Its inputs are the forward method's inputs
(an ``i64[]`` input feeds ``dropout`` seeds), the target, every parameter of the module in
``module.parameters`` order, then the optimizer state; its outputs are the loss (before the
update), the new value of every parameter, then the new optimizer state. Batch norm runs in
training mode: ``batch_norm`` becomes ``batch_norm_train`` (batch statistics) and its running
statistics are updated as torch does (``momentum``, unbiased variance). Parameters other than
running statistics are trained.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import InputError
from ..ir.graph import Graph
from ..ir.module import GraphMethod, Module, graph_of
from ..ir.node import Value
from ..ir.types import TensorType
from ..ir.verify import verify_module
from ..opset import FLOAT_DTYPES
from .builder import Emitter, OpBuilder
from .inline import inline_calls
from .losses import get_loss
from .reverse import append_backward, decompose_undifferentiable


@dataclass(frozen=True)
class TrainStep:
    """The step module and how its inputs and outputs are laid out."""

    module: Module
    parameters: tuple[str, ...]  # every parameter, in order (inputs and outputs)
    trained: tuple[str, ...]  # the ones the optimizer updates
    state: tuple[tuple[str, np.ndarray], ...]  # optimizer state names and initial values
    data_inputs: tuple[tuple[str, TensorType], ...]  # the forward inputs, then the target
    seed_input: bool  # whether the forward's last data input is a dropout seed


def training_step(module: Module, *, loss: object, optimizer: object, method: str = "forward",
                  batch_norm_momentum: float = 0.1) -> TrainStep:
    """Build the training step of ``module.method`` (see the module docstring)."""
    loss_fn = get_loss(loss)
    graph = inline_calls(graph_of(module, method).copy(), module, method)
    decompose_undifferentiable(graph)
    if not graph.outputs:
        raise InputError(f"method {method!r} returns nothing to compute a loss of")
    data = list(graph.inputs)
    seed = bool(data) and data[-1].type == TensorType("i64", ()) and _feeds_dropout(graph, data[-1])
    emitter = Emitter(graph, 0)
    b = OpBuilder(emitter, None, "step")
    params = _parameters_as_inputs(graph, module)
    running = _train_batch_norms(graph, emitter, params, batch_norm_momentum)
    if seed:
        for salt, node in enumerate(n for n in graph.nodes if n.op == "dropout"):
            node.attrs["salt"] = salt
    prediction = graph.outputs[0]
    target = graph.add_input("target", loss_fn.target_type(prediction.type))
    value = loss_fn.build(b, prediction, target)
    trained = [n for n, v in params.items() if v not in running.values_in and v.type.dtype in FLOAT_DTYPES]
    graph.set_outputs([value])
    one = b.const(1.0, value)
    _, grads = append_backward(graph, [(params[n].type, [params[n]]) for n in trained], method=method,
                               first_handle=emitter.next_handle, cotangents=[one])
    emitter.next_handle = max((n.debug_handle for n in graph.nodes), default=-1) + 1
    shared = [(name, array) for name, array in optimizer.shared_state()]
    shared_inputs = [graph.add_input(name, TensorType.of(array)) for name, array in shared]
    new_shared, context = optimizer.begin(b, shared_inputs)
    new_values = {n: running.updated.get(v, v) for n, v in params.items()}
    state, state_inputs, new_state = list(shared), list(shared_inputs), list(new_shared)
    for name, g in zip(trained, grads):
        per = optimizer.state(params[name].type)
        inputs = [graph.add_input(f"{name}.{s}", TensorType.of(a)) for s, a in per]
        new_values[name], updated = optimizer.update(b, params[name], g, inputs, context)
        state += [(f"{name}.{s}", a) for s, a in per]
        state_inputs += inputs
        new_state += updated
    graph.inputs = data + [target] + list(params.values()) + state_inputs
    graph.set_outputs([value] + [new_values[n] for n in params] + new_state)
    for i, node in enumerate(graph.nodes):
        node.debug_handle = i
    step = Module(methods={"train_step": GraphMethod(graph, returns_tuple=True)}, name=f"{module.name}TrainStep")
    verify_module(step)
    return TrainStep(step, tuple(params), tuple(trained), tuple(state),
                     tuple((v.name, v.type) for v in data + [target]), seed)


def _feeds_dropout(graph: Graph, value: Value) -> bool:
    return any(n.op == "dropout" and n.inputs[1] is value for n in graph.nodes)


def _parameters_as_inputs(graph: Graph, module: Module) -> dict[str, Value]:
    """Replace every ``param`` node by a graph input per parameter (in module order)."""
    inputs = {name: Value(graph.namespace.create(name), TensorType.of(array))
              for name, array in module.parameters.items()}
    for node in [n for n in graph.nodes if n.op == "param"]:
        graph.replace_all_uses(node.outputs[0], inputs[str(node.attrs["name"])])
        graph.nodes.remove(node)
    return inputs


@dataclass
class _Running:
    values_in: set[Value]
    updated: dict[Value, Value]


def _train_batch_norms(graph: Graph, emitter: Emitter, params: dict[str, Value], momentum: float) -> _Running:
    """``batch_norm`` -> ``batch_norm_train``; running statistics updated from the batch's."""
    running = _Running(set(), {})
    parameter_values = set(params.values())
    for node in [n for n in graph.nodes if n.op == "batch_norm"]:
        x, mean_in, var_in, weight, bias = node.inputs
        at = graph.nodes.index(node)
        graph.nodes.remove(node)
        new = graph.add_node("batch_norm_train", [x, weight, bias], [x.type, mean_in.type, var_in.type],
                             {"eps": node.attrs["eps"]}, output_hints=[node.outputs[0].name + "_train", "batch_mean",
                                                                        "batch_var"],
                             scope=node.scope, source=node.source, index=at)
        graph.replace_all_uses(node.outputs[0], new.outputs[0])
        b = OpBuilder(emitter, new, "running")
        count = x.type.numel // x.type.shape[1]
        for stat, batch, factor in ((mean_in, new.outputs[1], 1.0), (var_in, new.outputs[2], count / max(count - 1, 1))):
            if stat not in parameter_values:
                continue
            running.values_in.add(stat)
            running.updated[stat] = b.add(b.scale(stat, 1 - momentum), b.scale(batch, momentum * factor))
    return running


__all__ = ["TrainStep", "training_step"]
