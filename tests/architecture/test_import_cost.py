"""Start-up stays cheap: ``import lowerkit`` and ``lowerkit backends`` import only what they use.

The public names of the packages they skip still resolve on first use. Each check runs in a
fresh interpreter, where ``sys.modules`` shows what was imported.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

# Packages `import lowerkit` leaves for first use (docs/performance.md, "Cold start").
DEFERRED = ("lowerkit.nn", "lowerkit.training", "lowerkit.deploy", "lowerkit.autograd.api",
            "lowerkit.autograd.table", "numpy.random")


def _run(code: str) -> list[str]:
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return out.stdout.split()


def _modules_after(code: str) -> set[str]:
    return set(_run(code + "\nimport sys; print(' '.join(sys.modules))"))


def test_import_lowerkit_defers_autograd_nn_training_and_deploy():
    loaded = _modules_after("import lowerkit")
    assert "lowerkit.autograd" in loaded  # the package only: it holds the Trainer provider
    assert not loaded & set(DEFERRED)


def test_listing_backends_asks_no_ops_and_imports_no_kernels():
    loaded = _modules_after(
        "from lowerkit.cli import main\n"
        "import contextlib, io\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    try:\n        main(['backends'])\n    except SystemExit:\n        pass")
    assert "lowerkit_glow_like" in loaded and "lowerkit_glow_like.kernels" not in loaded
    assert not loaded & set(DEFERRED)


@pytest.mark.parametrize("code, expected", [
    ("import lowerkit; print(lowerkit.nn.Linear.__name__)", "Linear"),
    ("import lowerkit; print(lowerkit.check.__name__)", "check"),
    ("from lowerkit import nn, training; print(nn.Conv2d.__name__, training.Trainer.__name__)", "Conv2d Trainer"),
    # A submodule import skips the facade's __getattr__: autograd imports Trainer's provider.
    ("import lowerkit.autograd as ag; print(ag.Trainer.__name__)", "Trainer"),
    ("from lowerkit.autograd import Trainer; print(Trainer.__module__)", "lowerkit.training.trainer"),
    # The derivatives table is never seen before its rules are registered.
    ("from lowerkit.autograd import DERIVATIVES; print('conv2d' in DERIVATIVES, 'relu' in DERIVATIVES)",
     "True True"),
    ("from lowerkit.autograd import *; print(grad.__name__, SGD.__name__)", "grad SGD"),
])
def test_deferred_names_resolve_on_first_use(code, expected):
    assert " ".join(_run(code)) == expected


def test_backends_without_ops_leaves_ops_unasked():
    import lowerkit

    quick = {b.name: b for b in lowerkit.backends(ops=False)}
    full = {b.name: b for b in lowerkit.backends()}
    assert quick["reference"].ops is None and quick["reference"].available
    assert "conv2d" in full["reference"].ops
    assert quick["reference"].options == full["reference"].options
