"""Where a lowered zoo model's time goes, kernel by kernel: perf samples, the compiled kernels named.

perf cannot name numba's machine code (it is made at run time, outside any file). This script
writes the map perf reads for such code (``/tmp/perf-PID.map``): every loaded kernel's entry
address (``lowerkit.backend.cpu.jit`` and glow_like's chain kernels), each running to the next
entry (at most 256 KB) — a numba library's code is one block, so a kernel's inlined helpers
and the loops ``parallel=True`` outlines count as that kernel. Then, engine by engine in this
process, ``perf record -p`` over steady calls (after warm-up), and a table of each symbol's
CPU time a call — summed over threads, so two busy threads give twice the call's wall time.
OpenBLAS's and libc's symbols come from their libraries, CPython's from ``libpython``.

    python benchmarks/kernel_profile.py --model resnet18 --batch 8
    python benchmarks/kernel_profile.py --model mobilenet_v2 --engines glow_like --calls 300

Needs ``perf`` on PATH and permission to record this process (``kernel.perf_event_paranoid``
at most 2 for one's own processes). Engines run one after the other, not interleaved: on a
noisy machine compare rows within one engine's column, or rerun. Never asserts a timing.
"""

from __future__ import annotations

import argparse
import importlib
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import warnings


import lowerkit as lk
from lowerkit import models

ENGINES = {"glow_like": "glow_like", "nnpack+glow_like": ["nnpack", "glow_like"], "nnpack": "nnpack"}
FREQUENCY = 1999  # samples a second per thread
MAX_SYMBOL_BYTES = 256 * 1024


def kernel_entries() -> list[tuple[int, str]]:
    """(address, module.kernel) of every overload of every loaded compiled kernel, sorted."""
    from numba.core.dispatcher import Dispatcher

    from lowerkit.backend.cpu import jit

    entries = set()
    for name in jit.load_seconds():
        module = importlib.import_module(name)
        for attr in dir(module):
            kernel = getattr(module, attr)
            if not isinstance(kernel, Dispatcher):
                continue
            for result in kernel.overloads.values():
                address = result.library.get_pointer_to_function(result.fndesc.llvm_func_name)
                if address:
                    entries.add((address, f"{name.rsplit('.', 1)[-1]}.{attr}"))
    return sorted(entries)


def write_perf_map(entries: list[tuple[int, str]]) -> str:
    """The perf map of this process: each kernel from its entry to the next (capped)."""
    path = f"/tmp/perf-{os.getpid()}.map"
    with open(path, "w") as f:
        for i, (address, name) in enumerate(entries):
            following = entries[i + 1][0] if i + 1 < len(entries) else address + MAX_SYMBOL_BYTES
            f.write(f"{address:x} {min(following - address, MAX_SYMBOL_BYTES):x} {name}\n")
    return path


def record(call, calls: int, out_path: str) -> float:
    """``calls`` calls of ``call`` under ``perf record`` of this process; the seconds they took."""
    perf = subprocess.Popen(["perf", "record", "-F", str(FREQUENCY), "-p", str(os.getpid()), "-o", out_path],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    time.sleep(0.5)  # perf attaches to every thread
    start = time.perf_counter()
    for _ in range(calls):
        call()
    seconds = time.perf_counter() - start
    perf.send_signal(signal.SIGINT)
    _, err = perf.communicate(timeout=60)
    if perf.returncode not in (0, -signal.SIGINT) and not os.path.exists(out_path):
        raise RuntimeError(f"perf record failed: {err.decode(errors='replace').strip()}")
    return seconds


_ROW = re.compile(r"^\s*([\d.]+)%\s+(\d+)\s+\[[.k]\]\s+(.+?)\s*$")


def symbol_samples(data_path: str) -> dict[str, int]:
    """Samples by symbol (``perf report --sort sym``); unnamed addresses pooled as ``[unknown]``."""
    report = subprocess.run(["perf", "report", "-i", data_path, "--no-children", "--sort", "sym", "--stdio", "-n"],
                            capture_output=True, text=True, check=True).stdout
    samples: dict[str, int] = {}
    for line in report.splitlines():
        match = _ROW.match(line)
        if match:
            name = match.group(3)
            name = "[unknown]" if name.startswith("0x") else name
            samples[name] = samples.get(name, 0) + int(match.group(2))
    return samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="resnet18", help="a zoo model (lowerkit.models.names())")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--engines", default="glow_like,nnpack+glow_like", help=f"comma-separated: {', '.join(ENGINES)}")
    parser.add_argument("--calls", type=int, default=0, help="calls recorded per engine (default: about 4 s worth)")
    parser.add_argument("--top", type=int, default=15, help="symbols listed")
    args = parser.parse_args()
    if shutil.which("perf") is None:
        sys.exit("kernel_profile.py needs perf (linux-tools) on PATH")
    engines = [e.strip() for e in args.engines.split(",")]
    unknown = [e for e in engines if e not in ENGINES]
    if unknown:
        sys.exit(f"--engines: unknown {unknown}; choose from {', '.join(ENGINES)}")
    warnings.simplefilter("ignore")
    x = models.example_input(args.model, batch=args.batch)
    module = lk.trace(models.get(args.model), x)
    handles = {name: lk.to_backend(module, ENGINES[name]) for name in engines}
    for handle in handles.values():
        for _ in range(20):
            handle(x)
    write_perf_map(kernel_entries())  # after warm-up: every kernel the calls use is loaded
    per_call: dict[str, dict[str, float]] = {}
    wall: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, handle in handles.items():
            start = time.perf_counter()
            handle(x)
            calls = args.calls or max(10, int(4.0 / max(time.perf_counter() - start, 1e-4)))
            data = os.path.join(tmp, f"{name}.data")
            seconds = record(lambda: handle(x), calls, data)
            wall[name] = seconds / calls * 1e3
            per_call[name] = {sym: n / FREQUENCY / calls * 1e3 for sym, n in symbol_samples(data).items()}
    print(f"{args.model}, batch {args.batch}: CPU ms a call by symbol, summed over threads "
          f"(perf at {FREQUENCY} Hz a thread)")
    print("wall ms a call: " + ", ".join(f"{name} {ms:.2f}" for name, ms in wall.items()))
    first = engines[0]
    ranked = sorted({s for table in per_call.values() for s in table}, key=lambda s: -per_call[first].get(s, 0.0))
    ranked = sorted(ranked[:args.top * 2], key=lambda s: -max(t.get(s, 0.0) for t in per_call.values()))[:args.top]
    width = max(len(s) for s in ranked) if ranked else 10
    print(f"{'symbol':<{width}}  " + "  ".join(f"{name:>17}" for name in engines))
    for sym in ranked:
        print(f"{sym:<{width}}  " + "  ".join(f"{per_call[name].get(sym, 0.0):17.2f}" for name in engines))
    print(f"{'all samples':<{width}}  " + "  ".join(f"{sum(per_call[name].values()):17.2f}" for name in engines))
    os.remove(f"/tmp/perf-{os.getpid()}.map")


if __name__ == "__main__":
    main()
