"""The profiler: a pluggy wrapper in every backend's manager, per backend and method."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np

import lowerkit as lk
from tests.contract.contract_modules import accum_module
from lowerkit.backend import get_backend


def test_profile_counts_calls_per_backend_and_method(toy, xh):
    module = accum_module()
    with lk.profile() as report:
        lowered = lk.to_backend(module, "toy")
        lowered(*xh)
        lowered(*xh)
        lowered.accum(*xh)
    assert report.calls("toy", "forward") == 2
    assert report.calls("toy", "accum") == 1
    assert report.calls("toy", "(preprocess)") == 1
    assert report.calls("toy", "(compile)") == 1
    row = {(r.backend, r.method): r for r in report.rows}[("toy", "forward")]
    assert row.total_s >= 0 and row.mean_s == row.total_s / 2
    text = str(report)
    assert text.splitlines()[0].split() == ["BACKEND", "METHOD", "CALLS", "TOTAL", "ms", "MEAN", "ms"]
    assert any(line.split()[:3] == ["toy", "forward", "2"] for line in text.splitlines())
    assert report.as_dict()["toy"]["accum"]["calls"] == 1


def test_profile_wrapper_is_removed_afterwards(toy, xh):
    lowered = lk.to_backend(accum_module(), "toy")
    with lk.profile() as outer:
        with lk.profile() as inner:
            lowered.accum(*xh)
        lowered.accum(*xh)
    lowered.accum(*xh)
    assert (inner.calls("toy", "accum"), outer.calls("toy", "accum")) == (1, 2)
    hooks = get_backend("toy").pm.hook.lowerkit_execute.get_hookimpls()
    assert [i.plugin_name for i in hooks] == ["toy"]


def test_empty_report_says_so():
    with lk.profile() as report:
        pass
    assert str(report) == "lowerkit profile: no backend calls"


def test_lowerkit_profile_env_prints_the_report_at_exit(dists):
    code = textwrap.dedent(
        """
        import numpy as np, lowerkit as lk
        from lowerkit.ir import Graph, GraphMethod, Module, TensorType
        t = TensorType("f32", (2,))
        g = Graph(); x = g.add_input("x", t)
        g.set_outputs([g.add_node("neg", [x], [t], debug_handle=1).output])
        m = lk.to_backend(Module({}, {"forward": GraphMethod(g)}), "toy")
        m(np.ones(2, np.float32)); m(np.ones(2, np.float32))
        """
    )
    env = dict(os.environ, LOWERKIT_PROFILE="1", PYTHONPATH=str(dists))
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    lines = out.stderr.splitlines()
    assert lines[0].startswith("BACKEND")
    assert any(line.split()[:3] == ["toy", "forward", "2"] for line in lines)
