"""``lowerkit backends`` tells the truth and survives misbehaving plugins (real entry points
in tests/fixtures/dists: lowerkit-test-unruly, lowerkit-test-broken, ...)."""

from __future__ import annotations

import json
import time

import pytest

import lowerkit as lk

UNRULY = {"unruly_array", "unruly_exit", "unruly_hang"}


def test_json_gives_every_detail(cli):
    out = cli("backends", "--json")
    assert out.returncode == 0, out.stderr
    listed = {b["name"]: b for b in json.loads(out.stdout)}
    ref = listed["reference"]
    assert set(ref) >= {"name", "distribution", "version", "module", "available", "broken", "error",
                        "hooks", "options", "ops", "note"}
    assert ref["broken"] is False and ref["module"] == "lowerkit_reference"
    assert "lowerkit_preprocess" in ref["hooks"] and "lowerkit_options" in ref["hooks"]
    assert ref["options"] == []
    from lowerkit.opset import all_schemas

    assert set(ref["ops"]) == {s.name for s in all_schemas()}  # the registry is the oracle
    if "nnpack" in listed:
        from lowerkit_nnpack import CLAIMED_OPS, DEFAULTS

        nn = listed["nnpack"]
        assert {o["name"]: o["default"] for o in nn["options"]} == DEFAULTS
        assert all(o["type"] and o["doc"] for o in nn["options"])
        assert set(nn["ops"]) == set(CLAIMED_OPS)
    if "glow_like" in listed:
        assert {o["name"] for o in listed["glow_like"]["options"]} == {"opt_level", "threads", "precision", "profile", "max_specializations"}


def test_verbose_text_shows_hooks_options_and_ops(cli):
    out = cli("backends", "-v")
    assert out.returncode == 0, out.stderr
    assert "reference:\n  module: lowerkit_reference" in out.stdout
    assert "  options: none" in out.stdout and "  ops (" in out.stdout


def test_misbehaving_plugins_are_listed_and_the_others_still_work(cli):
    started = time.monotonic()
    out = cli("backends", "--json", dists=True, env={"LOWERKIT_TEST_HANG": "1", "LOWERKIT_PROBE_TIMEOUT": "1"},
              timeout=60)
    assert out.returncode == 0, out.stderr  # listing never fails because of a plugin
    assert time.monotonic() - started < 30
    listed = {b["name"]: b for b in json.loads(out.stdout)}
    assert UNRULY <= set(listed)
    # hostile's answer check names the bad return type (a plain bool() of it raised ValueError)
    assert listed["unruly_array"]["broken"] and "must return a bool" in listed["unruly_array"]["error"]
    assert listed["unruly_exit"]["broken"] and "SystemExit: 3" in listed["unruly_exit"]["error"]
    hang = listed["unruly_hang"]
    assert hang["available"] is False and "did not answer within 1 s" in hang["note"]
    assert listed["reference"]["available"] is True and listed["toy"]["available"] is True
    # ... and the healthy backends still lower and run in the same environment.
    run = cli("demo", "--model", "small_cnn", "--repeats", "1", dists=True,
              env={"LOWERKIT_TEST_HANG": "1", "LOWERKIT_PROBE_TIMEOUT": "1"}, timeout=120)
    assert run.returncode == 0, run.stderr
    assert "all plans match reference" in run.stdout


def test_check_exits_non_zero_only_when_asked(cli):
    out = cli("backends", dists=True)
    assert out.returncode == 0, out.stderr
    out = cli("backends", "--check", dists=True)
    assert out.returncode == 1
    assert "--check: broken or unavailable backend(s):" in out.stderr and "unruly_exit" in out.stderr
    out = cli("backends", "--check")
    assert out.returncode == 0, out.stderr


def test_listing_in_process_never_raises_and_honours_the_timeout(monkeypatch):
    from pathlib import Path

    dists = Path(__file__).resolve().parents[1] / "fixtures" / "dists"
    monkeypatch.syspath_prepend(str(dists))
    monkeypatch.setenv("LOWERKIT_TEST_HANG", "1")
    started = time.monotonic()
    infos = {b.name: b for b in lk.backends(timeout=0.5)}
    assert time.monotonic() - started < 10
    assert infos["unruly_hang"].note.startswith("did not answer within 0.5 s")
    assert infos["unruly_exit"].broken and infos["reference"].available


def test_unknown_backend_names_suggest_the_close_one():
    with pytest.raises(lk.BackendNotFoundError, match=r"no backend named 'referense' .*did you mean 'reference'"):
        lk.backend.get_backend("referense")
    with pytest.raises(lk.BackendNotFoundError, match="did you mean 'reference'"):
        lk.to_backend(lk.trace(lambda x: x + 1, __import__("numpy").ones(2, "float32")), "Reference")
