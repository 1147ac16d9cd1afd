"""numba loads only when a backend compiles: not at import of the CPU support or the plugins,
and not for ``lowerkit backends``."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytest.importorskip("numba")


def _modules_after(code: str) -> set[str]:
    out = subprocess.run([sys.executable, "-c", code + "\nimport sys; print(' '.join(sys.modules))"],
                         capture_output=True, text=True, check=True, timeout=120)
    return set(out.stdout.split())


def test_importing_the_support_and_plugins_does_not_import_numba():
    loaded = _modules_after("import lowerkit.backend.cpu, lowerkit.backend.cpu.jit, lowerkit_glow_like, lowerkit_nnpack")
    assert "numba" not in loaded


def test_listing_backends_does_not_import_numba():
    loaded = _modules_after("import lowerkit; lowerkit.backends()\n"
                            "from lowerkit.cli import main\n"
                            "import contextlib, io\n"
                            "with contextlib.redirect_stdout(io.StringIO()):\n"
                            "    try:\n        main(['backends'])\n    except SystemExit:\n        pass")
    assert "numba" not in loaded


def test_load_compiles_or_reads_the_cache_and_records_the_time():
    from lowerkit.backend.cpu import jit

    module = jit.load("pool")
    assert jit.load("pool") is module
    assert jit.load_seconds()["lowerkit.backend.cpu.jit.pool"] >= 0
    assert callable(module.global_avg_pool2d)


def test_the_compiled_kernels_page_examples_run():
    import re
    from pathlib import Path

    doc = Path(__file__).resolve().parents[3] / "docs" / "compiled-kernels.md"
    blocks = re.findall(r"```python\n(.*?)```", doc.read_text(encoding="utf-8"), re.S)
    assert blocks
    for i, block in enumerate(blocks):
        exec(compile(block, f"{doc.name}[{i}]", "exec"), {"__name__": "compiled_kernels_example"})


def test_the_cache_directory_follows_the_kernel_sources(tmp_path, monkeypatch):
    """numba keys its cache by the kernel file's timestamp only; lowerkit adds a digest of
    every source the kernels inline, so a changed helper means a fresh cache directory."""
    from lowerkit.backend.cpu import jit

    import sys

    package = tmp_path / "lk_fake_kernels"
    package.mkdir()
    (package / "__init__.py").write_text('CACHE_SOURCES = ("lk_fake_codes",)\n')
    (package / "helpers.py").write_text("K = 1\n")
    (tmp_path / "lk_fake_codes.py").write_text("CODE = 1\n")  # outside the package, named by it
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "lk_fake_kernels", raising=False)
    monkeypatch.setenv(jit.CACHE_ENV, str(tmp_path / "cache"))
    monkeypatch.setattr(jit, "_digests", {})
    before = jit.cache_dir("lk_fake_kernels")
    assert before.startswith(str(tmp_path / "cache"))
    assert jit.cache_dir("lk_fake_kernels") == before  # stable while nothing changes
    (package / "helpers.py").write_text("K = 2\n")
    jit._digests.clear()
    after_helper = jit.cache_dir("lk_fake_kernels")
    assert after_helper != before
    (tmp_path / "lk_fake_codes.py").write_text("CODE = 2\n")
    jit._digests.clear()
    assert jit.cache_dir("lk_fake_kernels") not in (before, after_helper)
    assert jit.cache_dir() != jit.cache_dir("lk_fake_kernels")  # the core's own sources differ
