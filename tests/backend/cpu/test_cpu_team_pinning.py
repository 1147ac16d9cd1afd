"""pin_team_workers: the first call on a thread pins the team workers of that thread's regions
(worker j to the j-th CPU of the thread's mask), never the calling thread itself; once per
thread; off with LOWERKIT_TEAM_PINNING=0 or OpenMP's own binding; the first Team.usable()
that says True on a thread does it (before that thread's first team region).

Each test runs on a new thread: OpenMP keeps one set of workers per thread that starts
regions, so a new thread's first region starts workers of its own, which end with it."""

from __future__ import annotations

import os
import threading

import numpy as np
import pytest

from lowerkit.backend.cpu import PINNING_ENV, StallGuard, make_team, pin_team_workers

pytestmark = pytest.mark.skipif(
    not hasattr(os, "sched_getaffinity") or len(os.sched_getaffinity(0)) < 2 or make_team(2) is None,
    reason="needs two CPUs, sched_getaffinity and team kernels",
)


def _tasks() -> set[int]:
    return {int(t) for t in os.listdir("/proc/self/task")}


def _on_new_thread(work):
    """``work()`` on a new thread; returns (its result, the calling thread's id, the threads
    that appeared while it ran and were still there at its end, their affinities)."""
    before = _tasks()
    box = {}

    def target():
        box["result"] = work()
        box["me"] = threading.get_native_id()
        box["mask"] = os.sched_getaffinity(0)
        new = _tasks() - before - {box["me"]}
        box["new"] = {tid: os.sched_getaffinity(tid) for tid in new}

    thread = threading.Thread(target=target)
    thread.start()
    thread.join()
    return box


def _clean_env(monkeypatch):
    for name in (PINNING_ENV, "OMP_PROC_BIND", "GOMP_CPU_AFFINITY"):
        monkeypatch.delenv(name, raising=False)


def test_the_worker_of_a_new_thread_is_pinned_and_the_thread_is_not(monkeypatch):
    _clean_env(monkeypatch)
    cpus = sorted(os.sched_getaffinity(0))
    box = _on_new_thread(lambda: (pin_team_workers(2), pin_team_workers(2)))
    assert box["result"] == (1, 0)  # one worker pinned; the second call on the thread does nothing
    assert box["mask"] == set(cpus)  # the calling thread keeps every CPU
    assert {cpus[1]} in box["new"].values()  # its team worker, started by the pinning region


@pytest.mark.parametrize("env", [(PINNING_ENV, "0"), (PINNING_ENV, "off"), ("OMP_PROC_BIND", "close"),
                                 ("GOMP_CPU_AFFINITY", "0-1")])
def test_pinning_is_off_where_asked_or_where_openmp_binds(monkeypatch, env):
    _clean_env(monkeypatch)
    monkeypatch.setenv(*env)
    box = _on_new_thread(lambda: pin_team_workers(2))
    assert box["result"] == 0
    assert all(len(mask) > 1 for mask in box["new"].values())


def test_more_ways_than_cpus_pins_nothing(monkeypatch):
    _clean_env(monkeypatch)
    box = _on_new_thread(lambda: pin_team_workers(len(os.sched_getaffinity(0)) + 1))
    assert box["result"] == 0


def test_a_team_pins_before_its_first_region_on_each_thread(monkeypatch):
    """Team.usable() pins on the first True on a thread (a team region is about to start),
    not while the guard holds the team off, and once per thread."""
    from lowerkit.backend.cpu import Team, team

    calls = []
    real = team.pin_team_workers

    def recording(ways):
        calls.append((threading.get_native_id(), ways))
        return real(ways)

    _clean_env(monkeypatch)
    monkeypatch.setattr(team, "pin_team_workers", recording)
    off = Team(2, None, StallGuard())
    off.guard.on, off.guard._serial_left = False, 5
    on = Team(2, None, StallGuard())

    def calls_on_a_thread():
        assert not off.usable()  # no region follows: nothing pinned
        return [on.usable() for _ in range(3)]

    first, second = _on_new_thread(calls_on_a_thread), _on_new_thread(calls_on_a_thread)
    assert first["result"] == second["result"] == [True] * 3
    assert calls == [(first["me"], 2), (second["me"], 2)]


def test_a_compiled_model_pins_its_team_worker_on_a_new_thread(monkeypatch):
    """glow_like at batch 1 on two threads (team regions): called from a new thread, that
    thread's first call pins the worker its regions start, and the outputs are unchanged."""
    glow = pytest.importorskip("lowerkit_glow_like")
    from tests.team_calls import team_on_small_layers

    import lowerkit as lk
    from lowerkit import nn

    _clean_env(monkeypatch)
    team_on_small_layers(monkeypatch)
    cpus = sorted(os.sched_getaffinity(0))
    net = nn.Sequential(nn.Conv2d(16, 64, 1), nn.ReLU(), nn.Conv2d(64, 64, 3, padding=1, groups=64), nn.ReLU(),
                        nn.Conv2d(64, 16, 1))
    x = np.random.default_rng(0).standard_normal((1, 16, 28, 28)).astype(np.float32)
    module = lk.trace(net, x)
    spec = {"forward": {"threads": 2}}
    handle = glow.lowerkit_compile(processed=glow.lowerkit_preprocess(module=module, compile_spec=spec),
                                   compile_spec=spec)["forward"]
    assert handle.team is not None
    box = _on_new_thread(lambda: handle.run([x])[0])
    np.testing.assert_allclose(box["result"], module(x), rtol=1e-4, atol=1e-5)
    assert {cpus[1]} in box["new"].values()
