"""``lowerkit demo`` lowers a CNN to every installed backend plan and compares with reference."""

from __future__ import annotations

import io

import pytest

from lowerkit import backends


def _installed():
    return {b.name for b in backends() if b.available}


def test_demo_lowers_saves_loads_and_matches(tmp_path):
    from lowerkit.cli.demo import PLANS, run_demo

    stream = io.StringIO()
    assert run_demo(tmp_path, stream, model="small_cnn", repeats=1) == 0
    text = stream.getvalue()
    assert "all plans match reference" in text
    assert "installed backends:" in text and "reference" in text
    ran = [plan for plan in PLANS if set(plan) <= _installed()]
    assert ran, "at least the reference plan runs"
    for plan in ran:
        name = "+".join(plan)
        assert (tmp_path / f"smallcnn.{name}.lkm").exists()
        table = text.split("lowering plans", 1)[1]
        row = next(line for line in table.splitlines() if line.strip().startswith(name + " "))
        assert row.rstrip().endswith("ok")
    assert f"in {tmp_path}" in text


def test_demo_reports_a_mismatch(tmp_path, monkeypatch):
    from lowerkit.cli import demo

    monkeypatch.setattr(demo, "RELATIVE_TOLERANCE", -1.0)  # nothing can be that close
    stream = io.StringIO()
    assert demo.run_demo(tmp_path, stream, model="small_cnn", repeats=1) == 1
    assert "MISMATCH" in stream.getvalue() and "some plans differ" in stream.getvalue()


@pytest.mark.parametrize("model", ["small_cnn"])
def test_demo_command(cli, model):
    out = cli("demo", "--model", model, "--repeats", "1")
    assert out.returncode == 0, out.stderr
    assert "all plans match reference" in out.stdout
