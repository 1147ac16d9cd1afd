"""``lowerkit demo`` traces, runs, saves, loads and lowers the small CNN."""

from __future__ import annotations

import io


def test_demo_runs_and_everything_matches(tmp_path):
    from lowerkit.demo import run_demo

    stream = io.StringIO()
    assert run_demo(tmp_path, stream) == 0
    text = stream.getvalue()
    assert "all results match" in text
    assert text.count(" ok") == 3
    assert (tmp_path / "small_cnn.lkm").exists() and (tmp_path / "small_cnn.reference.lkm").exists()


def test_demo_command(cli):
    out = cli("demo")
    assert out.returncode == 0, out.stderr
    assert "all results match" in out.stdout
