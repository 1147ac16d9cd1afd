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


def test_demo_runs_any_zoo_model_in_its_small_configuration(tmp_path):
    from lowerkit.cli.demo import run_demo

    stream = io.StringIO()
    assert run_demo(tmp_path, stream, model="shufflenet_v2", repeats=1, small=True) in (0, 1)
    text = stream.getvalue()
    assert "lowerkit.models.get('shufflenet_v2') (small configuration) traced on input [1, 3, 32, 32]" in text
    # every plan either matches reference or says why it cannot run this model
    assert "MISMATCH" not in text
    assert "reference (whole)" in text


def test_demo_rejects_an_unknown_model(cli):
    out = cli("demo", "--model", "vgg")
    assert out.returncode != 0 and "invalid choice: 'vgg'" in out.stderr
