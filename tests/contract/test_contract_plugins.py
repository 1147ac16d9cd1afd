"""Discovery and the registry, with real entry points from dist-info directories."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import types

import pytest

import lowerkit as lk
from lowerkit import hookimpl
from lowerkit.backend import backend_names, get_backend, register_backend, unregister_backend
from lowerkit.errors import BackendNotFoundError, PluginError


def _info(name):
    return {b.name: b for b in lk.backends()}[name]


def test_names_are_listed_without_importing_anything(dists):
    code = textwrap.dedent(
        """
        import json, sys
        from lowerkit.backend import backend_names, backends
        names = backend_names()
        unchecked = backends(check=False)
        imported = sorted(m for m in sys.modules if m.startswith("lowerkit_test") or m.startswith("lowerkit_reference"))
        print(json.dumps({"names": names, "available": [b.available for b in unchecked], "imported": imported}))
        """
    )
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(dists), os.environ.get("PYTHONPATH", "")]))
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    result = json.loads(out.stdout)
    assert {"toy", "noavail", "broken_import", "dup", "reference"} <= set(result["names"])
    assert set(result["available"]) == {None, False}  # False only for the duplicate
    assert result["imported"] == []


def test_backends_lists_distribution_version_and_availability(dists):
    toy = _info("toy")
    assert (toy.distribution, toy.version, toy.available, toy.error) == ("lowerkit-test-toy", "1.0.0", True, None)
    ref = _info("reference")
    assert ref.distribution == "lowerkit-reference" and ref.version and ref.available


def test_unavailable_backend_is_listed_with_its_reason(dists, monkeypatch):
    monkeypatch.setenv("LOWERKIT_TOY_UNAVAILABLE", "1")
    toy = _info("toy")
    assert toy.available is False and toy.error is None
    assert toy.note == "toy is switched off by LOWERKIT_TOY_UNAVAILABLE"


def test_class_plugin_without_is_available_is_available(dists):
    info = _info("noavail")
    assert info.available is True and info.error is None
    backend = get_backend("noavail")
    assert type(backend.plugin).__name__ == "ClassBackend"
    assert backend.availability() == (True, "")


@pytest.mark.parametrize(
    "name, message",
    [
        ("broken_import", r"failed to load: ModuleNotFoundError: No module named 'lowerkit_test_broken.missing_module'"),
        ("broken_hook", r"lowerkit_is_available raised RuntimeError: probing the accelerator crashed"),
        ("misspelled", r"unknown hook lowerkit_exeucte; did you mean lowerkit_execute\?"),
        ("bad_args", r"'stream'"),
    ],
)
def test_broken_plugins_are_listed_while_the_others_work(dists, name, message):
    infos = {b.name: b for b in lk.backends()}
    assert infos[name].broken and infos[name].available is False
    assert infos[name].error is not None
    import re

    assert re.search(message, infos[name].error)
    assert infos["toy"].available and not infos["toy"].broken
    assert infos["reference"].available


def test_using_a_broken_plugin_raises_plugin_error_naming_it(dists):
    with pytest.raises(PluginError, match=r"backend 'misspelled' \(distribution lowerkit-test-broken 0.0.1"):
        get_backend("misspelled")
    with pytest.raises(PluginError, match="lowerkit_is_available raised"):
        get_backend("broken_hook").availability()


def test_duplicate_names_are_an_error_naming_both_distributions(dists):
    info = _info("dup")
    assert info.broken
    assert "lowerkit-test-dup-a 1.0" in info.error and "lowerkit-test-dup-b 2.0" in info.error
    with pytest.raises(PluginError, match=r"claimed by more than one distribution: lowerkit-test-dup-a 1.0 .* and lowerkit-test-dup-b 2.0"):
        get_backend("dup")


def test_disabled_plugins_are_blocked_before_import(dists, monkeypatch):
    monkeypatch.setenv("LOWERKIT_DISABLE_PLUGINS", "broken_import, dup")
    sys.modules.pop("lowerkit_test_broken", None)
    info = _info("broken_import")
    assert info.note == "disabled by LOWERKIT_DISABLE_PLUGINS" and info.error is None
    assert _info("dup").error is None
    assert "lowerkit_test_broken.missing_module" not in sys.modules
    with pytest.raises(BackendNotFoundError, match="disabled by LOWERKIT_DISABLE_PLUGINS=broken_import, dup"):
        get_backend("broken_import")


def test_unknown_backend_names_what_is_installed(dists):
    with pytest.raises(BackendNotFoundError, match=r"no backend named 'nope' is installed; installed backends: \[.*'toy'"):
        get_backend("nope")


def _plugin(**hooks):
    return types.SimpleNamespace(**hooks)


@hookimpl
def _pre(module, compile_spec):
    return b""


@hookimpl
def _comp(processed, compile_spec):
    return {}


@hookimpl
def _exe(handle, inputs):
    return []


def test_register_backend_in_process_validates_and_shadows():
    plugin = _plugin(lowerkit_preprocess=_pre, lowerkit_compile=_comp, lowerkit_execute=_exe)
    register_backend(plugin, "inproc", version="9")
    try:
        assert "inproc" in backend_names()
        info = _info("inproc")
        assert info.available and info.version == "9"
        with pytest.raises(PluginError, match="already registered in-process"):
            register_backend(plugin, "inproc")
        register_backend(plugin, "inproc", replace=True)
    finally:
        unregister_backend("inproc")
    assert "inproc" not in backend_names()


def test_register_backend_rejects_malformed_plugins():
    with pytest.raises(PluginError, match=r"'half' \(registered in-process\) does not implement required hook\(s\) lowerkit_execute"):
        register_backend(_plugin(lowerkit_preprocess=_pre, lowerkit_compile=_comp), "half")

    def lowerkit_execute(handle, inputs):
        return []

    with pytest.raises(PluginError, match="lowerkit_execute is not marked with @lowerkit.hookimpl"):
        register_backend(_plugin(lowerkit_preprocess=_pre, lowerkit_compile=_comp, lowerkit_execute=lowerkit_execute), "unmarked")

    @hookimpl
    def wrong(handle, inputs, extra):
        return []

    with pytest.raises(PluginError, match=r"'wrongargs'.*\{'extra'\} are declared in the hookimpl"):
        register_backend(_plugin(lowerkit_preprocess=_pre, lowerkit_compile=_comp, lowerkit_execute=wrong), "wrongargs")
    assert "wrongargs" not in backend_names()


def test_register_backend_accepts_a_class():
    class Plugin:
        @hookimpl
        def lowerkit_preprocess(self, module, compile_spec):
            return b"x"

        @hookimpl
        def lowerkit_compile(self, processed):
            return {}

        @hookimpl
        def lowerkit_execute(self, handle, inputs):
            return []

        @hookimpl
        def lowerkit_is_available(self):
            return lk.Unsupported("no device")

    register_backend(Plugin, "klass")
    try:
        info = _info("klass")
        assert (info.available, info.note) == (False, "no device")
    finally:
        unregister_backend("klass")


def test_each_backend_has_its_own_manager_and_wrappers_reach_all(dists, monkeypatch):
    import numpy as np

    from tests.contract.contract_modules import scaled_module
    from lowerkit.backend import add_wrapper

    toy, noavail = get_backend("toy"), get_backend("noavail")
    assert toy.pm is not noavail.pm
    assert [i.plugin_name for i in toy.pm.hook.lowerkit_execute.get_hookimpls()] == ["toy"]
    seen = []

    class Tracer:
        def __init__(self, backend):
            self.backend = backend

        @hookimpl(wrapper=True)
        def lowerkit_execute(self, method):
            seen.append((self.backend, method))
            return (yield)

    remove = add_wrapper(Tracer)
    try:
        x = np.ones((2, 3), np.float32)
        lk.to_backend(scaled_module(1.0), "toy")(x)
        lk.to_backend(scaled_module(1.0), "noavail")(x)
    finally:
        remove()
    assert seen == [("toy", "forward"), ("noavail", "forward")]
    assert len(toy.pm.hook.lowerkit_execute.get_hookimpls()) == 1
