"""The tutorial's example backend: the docs quote it verbatim, and installed (as a
dist-info directory, the way pip records it) it passes the conformance kit."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

import lowerkit as lk
from lowerkit.testing import BackendConformance

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "minimal_backend"
TUTORIAL = ROOT / "docs" / "writing-a-backend.md"


@pytest.fixture
def minimal_installed(tmp_path, monkeypatch):
    """lowerkit-minimal on sys.path with a dist-info declaring its entry point."""
    info = tmp_path / "lowerkit_minimal-0.1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: lowerkit-minimal\nVersion: 0.1.0\n")
    (info / "entry_points.txt").write_text('[lowerkit.backends]\nminimal = lowerkit_minimal\n')
    monkeypatch.syspath_prepend(str(EXAMPLE))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delenv("LOWERKIT_MINIMAL_OFF", raising=False)


def _quoted_blocks():
    text = TUTORIAL.read_text()
    for lang, body in re.findall(r"```(\w*)\n(.*?)```", text, flags=re.S):
        first, _, rest = body.partition("\n")
        if first.startswith("# examples/"):
            yield first[2:].strip(), rest


def test_tutorial_code_is_quoted_verbatim_from_the_example():
    blocks = list(_quoted_blocks())
    assert len(blocks) >= 7
    for path, code in blocks:
        assert code.strip() in (ROOT / path).read_text(), f"docs quote {path} inaccurately:\n{code}"


def test_pyproject_declares_the_entry_point_the_test_installs():
    text = (EXAMPLE / "pyproject.toml").read_text()
    assert '[project.entry-points."lowerkit.backends"]\nminimal = "lowerkit_minimal"' in text


def test_minimal_backend_end_to_end(minimal_installed, tmp_path):
    from tests.contract.contract_modules import accum_module

    info = {b.name: b for b in lk.backends()}["minimal"]
    assert (info.distribution, info.version, info.available) == ("lowerkit-minimal", "0.1.0", True)
    module = accum_module()
    x, h = np.ones((2, 3), np.float32), np.arange(6, dtype=np.float32).reshape(2, 3)
    lowered = lk.to_backend(module, "minimal")
    lk.save(lowered, tmp_path / "m.lkm")
    loaded = lk.load(tmp_path / "m.lkm")
    for got in (lowered(x, h), loaded(x, h)):
        np.testing.assert_array_equal(got[0], x + h)
        np.testing.assert_array_equal(got[1], x - h)


def test_minimal_backend_rejects_foreign_payloads_and_ops(minimal_installed):
    import dataclasses

    from tests.contract.contract_modules import accum_module
    from lowerkit.ir import Graph, GraphMethod, Module, TensorType

    record = lk.to_backend(accum_module(), "minimal").record
    with pytest.raises(lk.FormatError, match="backend 'minimal' rejected its payload: not a lowerkit-minimal payload"):
        lk.LoweredModule.from_record(dataclasses.replace(record, payload=b"other"))
    t = TensorType("f32", (2,))
    g = Graph()
    x = g.add_input("x", t)
    g.set_outputs([g.add_node("exp", [x], [t], debug_handle=1).output])
    with pytest.raises(lk.UnsupportedOperatorError, match="backend minimal cannot run node exp #1"):
        lk.to_backend(Module({}, {"forward": GraphMethod(g)}), "minimal")


class TestMinimalConformance(BackendConformance):
    backend_name = "minimal"
    supported_ops = frozenset({"add", "sub", "mul", "neg", "relu"})

    @pytest.fixture(autouse=True)
    def _installed(self, minimal_installed):
        pass
