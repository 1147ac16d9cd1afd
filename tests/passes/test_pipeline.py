"""The pipeline runner: once, to a fixed point, verification and trace."""

from __future__ import annotations

import pytest

from lowerkit.errors import VerificationError
from lowerkit.ir import Graph
from lowerkit.passes import PassEvent, eliminate_common_subexpressions, eliminate_dead_code, run_passes


def _duplicated(tiny) -> Graph:
    g = Graph()
    x = g.add_input("x", tiny.f32(4))
    a = tiny.node(g, "exp", [x], tiny.f32(4)).output
    b = tiny.node(g, "exp", [x], tiny.f32(4)).output
    g.set_outputs([tiny.node(g, "add", [a, b], tiny.f32(4)).output])
    return g


def test_runs_once_and_names_passes_that_fired(tiny):
    g = _duplicated(tiny)
    events: list[PassEvent] = []
    fired = run_passes(g, [eliminate_dead_code, eliminate_common_subexpressions], trace=events.append)
    assert fired == ["eliminate_common_subexpressions"]
    assert [(e.name, e.round, e.nodes_before, e.nodes_after) for e in events] == [
        ("eliminate_common_subexpressions", 1, 3, 2)
    ]
    assert "eliminate_common_subexpressions (3 -> 2 nodes)" in str(events[0])


def test_fixed_point_reruns_until_nothing_changes(tiny):
    g = _duplicated(tiny)
    calls = []

    def counting(graph: Graph) -> bool:
        calls.append(len(graph.nodes))
        return False

    fired = run_passes(g, [counting, eliminate_common_subexpressions], fixed_point=True)
    assert fired == ["eliminate_common_subexpressions"]
    assert calls == [3, 2]  # round 1 changed something, round 2 did not


def test_passes_undoing_each_other_are_reported(tiny):
    g = _duplicated(tiny)

    def flip(graph: Graph) -> bool:
        graph.nodes[0], graph.nodes[1] = graph.nodes[1], graph.nodes[0]
        return True

    with pytest.raises(VerificationError, match=r"still changed after 3 rounds of \[flip\]"):
        run_passes(g, [flip], fixed_point=True, max_rounds=3)


def test_a_pass_that_breaks_the_graph_is_caught(tiny):
    g = _duplicated(tiny)

    def drop_first(graph: Graph) -> bool:
        del graph.nodes[0]
        return True

    with pytest.raises(VerificationError, match=r"which no input or node of this graph binds"):
        run_passes(g, [drop_first])
    run_passes(_duplicated(tiny), [drop_first], verify=False)  # the caller may opt out
