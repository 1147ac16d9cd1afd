"""``fuse_row_moves``: a chain of copies that only moves whole rows becomes one gather.

Swin-T's shifted windows move every token's channel row twice a block: a cyclic shift of the
map (``torch.roll``: a split and a concat along each of two axes) and the partition into
7x7 windows (a reshape, a transpose of two axes, a reshape) before attention, the same
backwards after it. Each split, concat and transpose is a copy of the whole map: Swin-T at
batch 8 spent 25 of its 350 ms on them (Xeon, ``benchmarks/model.py --instructions``).
Composed, each chain is a permutation of the map's rows of C channels — one row gather.

The pass finds every maximal group of ``reshape``, ``transpose``, ``split`` and ``concat``
nodes that reads one value and whose other values no node outside reads, with at least two
copies among them (a lone transpose is one copy already), and works out where each output
row comes from by running the group on the input's element numbers. Where every output row
is a whole input row, the group becomes ``glow.gather_rows(x, rows)`` (``rows`` an int32
constant: the input row of each output row).
"""

from __future__ import annotations

import numpy as np

from lowerkit.ir import Graph, Node, Value
from lowerkit.passes import make_constant

_MOVES = frozenset({"reshape", "transpose", "split", "concat"})
_COPIES = frozenset({"transpose", "split", "concat"})  # reshapes are views


def fuse_row_moves(graph: Graph) -> bool:
    """Replace each row-moving group of copies (see the module) with one ``glow.gather_rows``;
    True if any changed."""
    changed = False
    for node in list(graph.nodes):
        if node not in graph.nodes or node.op not in _MOVES or len(node.outputs) != 1:
            continue
        producers, users = graph.producers(), graph.users()
        readers = users.get(node.output, [])
        if readers and all(r.op in _MOVES for r in readers) and not any(v is node.output for v in graph.outputs):
            continue  # not the end of a group
        group = _group(graph, node, producers, users)
        if group is None:
            continue
        source, members = group
        rows = _row_map(source, members, node.output)
        if rows is None or np.array_equal(rows, np.arange(rows.size)):
            continue
        _replace(graph, source, members, node, rows)
        changed = True
    return changed


def _group(graph: Graph, last: Node, producers: dict[Value, Node],
           users: dict[Value, list[Node]]) -> tuple[Value, list[Node]] | None:
    """(the value the group reads, its nodes in graph order) for the group ending at ``last``,
    or None where it reads more than one value, a value of it leaves the group before its
    end, or it copies fewer than twice."""
    members: set[int] = set()
    stack, sources = [last], set()
    while stack:
        node = stack.pop()
        if id(node) in members:
            continue
        members.add(id(node))
        for value in node.inputs:
            producer = producers.get(value)
            if producer is not None and producer.op in _MOVES:
                stack.append(producer)
            else:
                sources.add(id(value))
    ordered = [n for n in graph.nodes if id(n) in members]
    if len(sources) != 1 or sum(n.op in _COPIES for n in ordered) < 2:
        return None
    source = next(v for n in ordered for v in n.inputs if id(v) in sources)
    if producers.get(source) is not None and producers[source].op == "constant":
        return None
    outputs = {id(v) for v in graph.outputs}
    for node in ordered:
        for value in node.outputs:
            if node is last:
                continue
            if id(value) in outputs or any(id(r) not in members for r in users.get(value, [])):
                return None
    return source, ordered


def _row_map(source: Value, members: list[Node], result: Value) -> np.ndarray | None:
    """The input row of each output row, where the group moves whole rows of the input's last
    dimension; None where it does not (or changes that dimension)."""
    width = source.type.shape[-1] if source.type.shape else 0
    if width < 1 or not result.type.shape or result.type.shape[-1] != width:
        return None
    values = {id(source): np.arange(int(np.prod(source.type.shape)), dtype=np.int64).reshape(source.type.shape)}
    for node in members:
        args = [values[id(v)] for v in node.inputs]
        for value, array in zip(node.outputs, _move(node, args)):
            values[id(value)] = array
    numbers = values[id(result)].reshape(-1, width)
    starts = numbers[:, 0]
    if np.any(starts % width) or not np.array_equal(numbers, starts[:, None] + np.arange(width)):
        return None
    return (starts // width).astype(np.int32)


def _move(node: Node, args: list[np.ndarray]) -> list[np.ndarray]:
    """``node`` on element numbers (the ops of ``_MOVES``)."""
    x = args[0]
    if node.op == "reshape":
        return [x.reshape(node.output.type.shape)]
    if node.op == "transpose":
        return [x.transpose(tuple(node.attrs["perm"]))]
    if node.op == "concat":
        return [np.concatenate(args, axis=int(node.attrs.get("dim", 0)))]
    dim = int(node.attrs.get("dim", 0))
    cuts = np.cumsum([int(s) for s in node.attrs["sizes"]])[:-1]
    return np.split(x, cuts, axis=dim)


def _replace(graph: Graph, source: Value, members: list[Node], last: Node, rows: np.ndarray) -> None:
    """``glow.gather_rows(source, rows)`` in place of ``last``, writing its value; the other
    members removed."""
    index = make_constant(graph, rows, f"{last.output.name}_rows", graph.nodes.index(last), last)
    last.op = "glow.gather_rows"
    last.inputs = [source, index]
    last.attrs = {}
    for node in members:
        if node is not last:
            graph.nodes.remove(node)
