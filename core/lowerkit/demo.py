"""``lowerkit demo``: the quick start end to end, printed as a short table.

Traces :func:`lowerkit.models.small_cnn`, runs it on ``reference``, saves and loads it,
lowers it to ``reference`` and does the same, checking every result against the first.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path
from typing import TextIO

import numpy as np

__all__ = ["run_demo"]


def run_demo(out_dir: str | Path | None = None, stream: TextIO | None = None) -> int:
    """Run the demo; files go to ``out_dir`` (a temporary directory if ``None``).

    Returns 0 when every step matches the first run, 1 otherwise.
    """
    stream = stream or sys.stdout
    if out_dir is None:
        with tempfile.TemporaryDirectory(prefix="lowerkit-demo-") as tmp:
            return _demo(Path(tmp), stream)
    path = Path(out_dir)
    path.mkdir(parents=True, exist_ok=True)
    return _demo(path, stream)


def _demo(out: Path, stream: TextIO) -> int:
    import lowerkit as lk
    from lowerkit import models

    rows: list[tuple[str, str, str, float]] = []
    x = models.example_input("small_cnn")

    def step(name: str, detail, fn):
        started = time.perf_counter()
        result = fn()
        elapsed = (time.perf_counter() - started) * 1e3
        rows.append((name, detail(result) if callable(detail) else detail, "", elapsed))
        return result

    module = step("trace small_cnn", lambda m: f"forward{m.signature('forward')}", lambda: lk.trace(models.small_cnn(), x))
    expected = step("run on reference", lambda y: f"output {list(y.shape)}", lambda: module(x))

    plain_path = out / "small_cnn.lkm"
    step("save module", lambda _: f"{plain_path.name}, {plain_path.stat().st_size} bytes", lambda: lk.save(module, plain_path))
    loaded = step("load module", "", lambda: lk.load(plain_path))
    checks = [("loaded module", loaded(x))]

    lowered = step("to_backend(reference)", lambda m: f"payload {len(m.record.payload)} bytes", lambda: lk.to_backend(module, "reference"))
    checks.append(("lowered module", lowered(x)))
    lowered_path = out / "small_cnn.reference.lkm"
    step("save lowered", lambda _: f"{lowered_path.name}, {lowered_path.stat().st_size} bytes", lambda: lk.save(lowered, lowered_path))
    reloaded = step("load lowered", lambda m: f"backend {m.backend}", lambda: lk.load(lowered_path))
    checks.append(("loaded lowered module", reloaded(x)))

    ok = True
    for name, got in checks:
        diff = float(np.max(np.abs(got - expected)))
        same = diff == 0.0
        ok &= same
        rows.append((f"compare {name}", f"max |diff| = {diff:.3g}", "ok" if same else "MISMATCH", 0.0))

    width = max(len(r[0]) for r in rows)
    detail_width = max(len(r[1]) for r in rows)
    print(f"lowerkit demo (files in {out})", file=stream)
    for name, detail, status, ms in rows:
        timing = f"{ms:8.1f} ms" if ms else " " * 11
        print(f"  {name.ljust(width)}  {detail.ljust(detail_width)}  {timing}  {status}".rstrip(), file=stream)
    print("all results match" if ok else "results differ!", file=stream)
    return 0 if ok else 1
