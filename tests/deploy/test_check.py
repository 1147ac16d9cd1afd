"""Pre-flight (lowerkit.check / lowerkit check) and requirements, against described targets."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import lowerkit as lk
from lowerkit import models
from tests.mixed_cnn import mixed_cnn
from lowerkit.deploy import requirements
from lowerkit.errors import InputError

ROOT = Path(__file__).resolve().parents[2]
PLAN = ["nnpack", "glow_like", "reference"]


def _pin(name: str) -> str:
    backend = lk.backend.get_backend(name)
    return f"{backend.distribution}=={backend.version}"


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "lowerkit.cli", *args], capture_output=True, text=True)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    have = {b.name for b in lk.backends(check=False) if not b.broken}
    if set(PLAN) - have:
        pytest.skip(f"backends {sorted(set(PLAN) - have)} not installed")
    d = tmp_path_factory.mktemp("check")
    module = lk.trace(mixed_cnn(), models.example_input("small_cnn", 1), dynamic_batch=True)
    lk.save(lk.to_backend(module, "glow_like"), d / "glow.lkm")
    lk.save(lk.to_backend(module, "glow_like", keep_source=True), d / "glow_kept.lkm")
    with pytest.MonkeyPatch.context() as mp:  # keep nnpack's small regions (tests.mixed_cnn.small_regions)
        mp.setenv("LOWERKIT_NNPACK_REGION_MACS", "0")
        lk.save(lk.to_backend(module, PLAN, keep_source=True), d / "parts.lkm")
    lk.save(module, d / "plain.lkm")
    return d


def _here() -> list[dict]:
    return json.loads(_cli("backends", "--json").stdout)


def _target(tmp_path: Path, edit) -> Path:
    entries = [e for e in (edit(dict(e)) for e in _here()) if e is not None]
    path = tmp_path / "target.json"
    path.write_text(json.dumps(entries))
    return path


def test_every_plugin_declares_its_payload_versions_and_files_record_them(files) -> None:
    for name in PLAN:
        versions = lk.backend.get_backend(name).payload_versions()
        assert versions and all(isinstance(v, str) for v in versions)
    record = lk.load(files / "glow.lkm").record
    assert record.payload_version == lk.backend.get_backend("glow_like").payload_versions()[0]
    listed = {e["name"]: e for e in _here()}
    assert listed["glow_like"]["payload_versions"] == list(lk.backend.get_backend("glow_like").payload_versions())


def test_check_here_passes_for_every_kind_of_file(files) -> None:
    for name in ("glow.lkm", "parts.lkm", "plain.lkm"):
        report = lk.check(files / name)
        assert report.ok, str(report)
    regions = lk.check(files / "parts.lkm").regions
    assert {r.need.backend for r in regions} <= set(PLAN) and len(regions) >= 2
    assert [r.need.backend for r in lk.check(files / "plain.lkm").regions] == ["reference"]


def test_target_lacking_the_backend(files, tmp_path) -> None:
    target = _target(tmp_path, lambda e: None if e["name"] == "glow_like" else e)
    report = lk.check(files / "glow.lkm", target)
    assert not report.ok
    (region,) = report.regions
    assert region.status == "missing" and f"install {_pin('glow_like')}" in region.detail
    assert "keeps no original" in region.fallback_note
    done = _cli("check", str(files / "glow.lkm"), "--target", str(target))
    assert done.returncode == 1
    assert f"missing: install {_pin('glow_like')}" in done.stdout and "NOT OK" in done.stdout


def test_target_with_the_backend_unavailable(files, tmp_path) -> None:
    def off(e):
        if e["name"] == "nnpack":
            e.update(available=False, note="self-test failed: no AVX2")
        return e

    target = _target(tmp_path, off)
    report = lk.check(files / "parts.lkm", target)
    assert not report.ok
    bad = [r for r in report.regions if not r.ok]
    assert bad and all(r.need.backend == "nnpack" and r.status == "unavailable" for r in bad)
    assert all("no AVX2" in r.detail for r in bad)
    assert all(r.ok for r in report.regions if r.need.backend != "nnpack")


def test_target_reading_another_payload_version(files, tmp_path) -> None:
    def old(e):
        if e["name"] == "glow_like":
            e.update(version="0.0.9", payload_versions=["1"])
        return e

    target = _target(tmp_path, old)
    (region,) = lk.check(files / "glow.lkm", target).regions
    assert region.status == "incompatible payload"
    assert "lowerkit-glow-like 0.0.9 on the target reads ['1']" in region.detail
    done = _cli("check", str(files / "glow.lkm"), "--target", str(target), "--json")
    assert done.returncode == 1
    data = json.loads(done.stdout)
    assert data["ok"] is False and data["regions"][0]["status"] == "incompatible payload"


def test_fallback_covers_regions_only_when_the_file_kept_originals(files, tmp_path) -> None:
    target = _target(tmp_path, lambda e: None if e["name"] in ("glow_like", "nnpack") else e)
    kept = lk.check(files / "parts.lkm", target, fallback="reference")
    assert kept.ok and not any(r.ok for r in kept.regions)
    assert all(r.fallback == "reference (kept original)" for r in kept.regions)
    assert not lk.check(files / "parts.lkm", target).ok  # not asked for
    assert not lk.check(files / "glow.lkm", target, fallback="reference").ok  # nothing kept
    assert _cli("check", str(files / "glow_kept.lkm"), "--target", str(target), "--fallback", "reference").returncode == 0
    no_ref = _target(tmp_path, lambda e: None if e["name"] in ("glow_like", "reference") else e)
    (region,) = lk.check(files / "glow_kept.lkm", no_ref, fallback="reference").regions
    assert not region.covered and "reference is missing" in region.fallback_note


def test_manifests_are_read_defensively(files, tmp_path) -> None:
    # Fields a newer `backends --json` may add are ignored; missing optional ones are "not reported".
    richer = [dict(e, broken=False, hooks=["lowerkit_compile"], options={}, ops=["relu"]) for e in _here()]
    (tmp_path / "rich.json").write_text(json.dumps(richer))
    assert lk.check(files / "glow.lkm", tmp_path / "rich.json").ok
    assert lk.check(files / "glow.lkm", [{"name": "glow_like"}]).ok  # nothing else reported
    (region,) = lk.check(files / "glow.lkm", [{"name": "glow_like", "broken": True}]).regions
    assert region.status == "broken"
    for bad, message in [
        ("{not json", "not JSON"),
        ('{"a": 1}', "expected a JSON list of backends"),
        ('[{"nom": "x"}]', "entry 0 should be an object"),
        ('[{"name": "x", "payload_versions": 3}]', "payload_versions should be a list"),
    ]:
        (tmp_path / "bad.json").write_text(bad)
        with pytest.raises(InputError, match=message):
            lk.check(files / "glow.lkm", tmp_path / "bad.json")
    done = _cli("check", str(files / "glow.lkm"), "--target", str(tmp_path / "missing.json"))
    assert done.returncode == 1 and "cannot read it" in done.stderr and "Traceback" not in done.stderr


def test_requirements_lines_and_diff(files) -> None:
    assert requirements(files / "parts.lkm") == [_pin("glow_like"), _pin("nnpack")]
    assert requirements(files / "plain.lkm") == ["lowerkit-reference"]
    assert requirements(files / "parts.lkm", diff=True) == []  # all installed here
    done = _cli("requirements", str(files / "glow.lkm"))
    assert done.returncode == 0 and done.stdout.split() == [_pin("glow_like")]


def test_requirements_output_installs_from_the_repository_plugins(files, tmp_path) -> None:
    done = _cli("requirements", str(files / "parts.lkm"), "--source-dir", str(ROOT / "plugins"))
    assert done.returncode == 0, done.stderr
    req = tmp_path / "requirements.txt"
    req.write_text(done.stdout)
    pip = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--dry-run", "--no-deps", "--no-index",
         "--no-build-isolation", "--disable-pip-version-check", "-r", str(req)],
        capture_output=True, text=True,
    )
    assert pip.returncode == 0, pip.stderr
    wanted = " ".join(_pin(n).replace("==", "-") for n in ("glow_like", "nnpack"))
    assert f"Would install {wanted}" in pip.stdout
