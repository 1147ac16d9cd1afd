"""``fuse_residual_adds``: a convolution whose only reader is a residual add ->
``glow.conv2d(x, w, bias, other)`` with ``residual=True``, carrying the add's activation (a
gated one, ``glow.gated_conv2d(x, w, bias, gate)``, takes ``other`` as its fifth input).

ResNet's blocks end in ``relu(conv(x) + shortcut)`` and MobileNet's in ``conv(x) + x``: as two
instructions the add reads the convolution's output back from memory and writes the sum.
Fused, the convolution adds the other operand to each output tile while it is in registers
(``lowerkit.backend.cpu.jit.panel``), then the activation; kernels without that epilogue run
the convolution and then the sum with its activation in one compiled pass, as the add did.

A fully-connected ``glow.fc`` read only by a residual add fuses the same way (a
transformer's attention projection and second MLP layer, ``x + fc(...)``):
``glow.fc(x, w, bias, other)`` with ``residual=True``; on a team, the many-row kernel's tiles
add it (``PackedBands.run_rows_team``), elsewhere ``glow.add``'s kernel runs after the product.

The convolution fused is the add's operand computed last (ResNet's downsampling blocks: the
shortcut convolution after ``conv3``), so the other operand exists when it runs. Float
programs only: it runs after the optimizer (``_compiler.compile_method``), where an int8
program quantizes the add instead.
"""

from __future__ import annotations

import numpy as np

from lowerkit.ir import Graph, Node, Value
from lowerkit.passes import make_constant

from ._util import single_user

_ADDS = ("add", "glow.add")
_CONVOLUTIONS = ("conv2d", "glow.conv2d", "glow.gated_conv2d")
_FUSING = (*_CONVOLUTIONS, "glow.fc")


def _fusable(conv: Node | None, value: Value, add: Node, graph: Graph, users: dict) -> bool:
    return (conv is not None and conv.op in _FUSING and len(conv.outputs) == 1
            and conv.attrs.get("act", "none") == "none" and not conv.attrs.get("residual")
            and int(conv.attrs.get("groups", 1)) == 1 and single_user(graph, value, users) is add)


def fuse_residual_adds(graph: Graph) -> bool:
    """Fuse every float ``add`` of two same-typed operands, one of them an ungrouped
    convolution without an activation read only there, into that convolution."""
    changed = False
    for add in list(graph.nodes):
        if add.op not in _ADDS or add not in graph.nodes or len(add.inputs) != 2:
            continue
        out_type = add.output.type
        if out_type.dtype != "f32" or any(v.type != out_type for v in add.inputs):
            continue
        producers, users = graph.producers(), graph.users()
        order = {node: i for i, node in enumerate(graph.nodes)}
        chosen = None
        for mine, other in ((add.inputs[0], add.inputs[1]), (add.inputs[1], add.inputs[0])):
            conv = producers.get(mine)
            source = producers.get(other)
            if not _fusable(conv, mine, add, graph, users) or (source is not None and order[source] > order[conv]):
                continue
            if chosen is None or order[conv] > order[chosen[0]]:
                chosen = (conv, other)
        if chosen is None:
            continue
        conv, other = chosen
        # The residual is the last input: glow.conv2d's fourth (a zero bias keeps the places),
        # glow.gated_conv2d's fifth (after its bias and gate).
        if conv.op != "glow.gated_conv2d":
            if len(conv.inputs) < 3:
                channels = conv.output.type.shape[-1 if conv.op == "glow.fc" else 1]
                zeros = make_constant(graph, np.zeros(channels, np.float32), f"{conv.output.name}_bias",
                                      graph.nodes.index(conv), conv)
                conv.inputs = conv.inputs + [zeros]
            if conv.op != "glow.fc":
                conv.op = "glow.conv2d"
        act = {k: v for k, v in add.attrs.items() if k.startswith("act")}
        conv.inputs = conv.inputs + [other]
        conv.attrs = {**conv.attrs, **act, "residual": True}
        conv.outputs = list(add.outputs)
        graph.nodes.remove(add)
        changed = True
    return changed
