"""Cold start: ``import lowerkit`` and ``lowerkit backends`` in fresh processes.

Each command runs ``--runs`` times in a new interpreter, interleaved with a bare
``python -c pass`` (the floor no package can go below); prints the best and the median
wall time of each, the best CPU time (user + system of the child: far less disturbed than
wall time on a shared machine), and what lowerkit adds over the bare interpreter.

The children run as a user's shell would after one earlier run: with bytecode caches. Where
the environment sets ``PYTHONDONTWRITEBYTECODE`` (some sandboxes do), every import would
compile its source again and the numbers would time the compiler, so the children run
without it, after one unmeasured run of each command that writes the caches.

    python benchmarks/startup.py
    python benchmarks/startup.py --runs 15
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import time

COMMANDS = {
    "python -c pass": [sys.executable, "-c", "pass"],
    "python -c 'import lowerkit'": [sys.executable, "-c", "import lowerkit"],
    "lowerkit backends": [sys.executable, "-m", "lowerkit.cli", "backends"],
}


def _child_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def measure(runs: int) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """Wall and CPU seconds per run of every command, run in interleaved rounds."""
    commands = dict(COMMANDS)
    script = shutil.which("lowerkit")
    if script and not os.path.islink(script) and "shims" not in script:
        commands["lowerkit backends (console script)"] = [script, "backends"]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    for argv in commands.values():  # writes the bytecode caches
        subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, env=env)
    times: dict[str, list[float]] = {name: [] for name in commands}
    cpu: dict[str, list[float]] = {name: [] for name in commands}
    for _ in range(runs):
        for name, argv in commands.items():
            start, cpu_start = time.perf_counter(), _child_cpu()
            subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, env=env)
            times[name].append(time.perf_counter() - start)
            cpu[name].append(_child_cpu() - cpu_start)
    return times, cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=9)
    args = parser.parse_args()
    times, cpu = measure(args.runs)
    floor, cpu_floor = min(times["python -c pass"]), min(cpu["python -c pass"])
    unset = " (PYTHONDONTWRITEBYTECODE unset for the children)" if "PYTHONDONTWRITEBYTECODE" in os.environ else ""
    print(f"load average {os.getloadavg()[0]:.2f}; {args.runs} runs each, interleaved, bytecode cached{unset}")
    print(f"| command | best wall s | median wall s | best CPU s | wall over bare python | CPU over bare python |")
    print("|---|---|---|---|---|---|")
    for name, ts in times.items():
        c = min(cpu[name])
        print(f"| {name} | {min(ts):.3f} | {statistics.median(ts):.3f} | {c:.3f} | {min(ts) - floor:.3f} "
              f"| {c - cpu_floor:.3f} |")


if __name__ == "__main__":
    main()
