"""A compiled kernel against its own version at a git revision, in one process, calls alternating.

A change to compiled code cannot be paired the way ``paired.py`` pairs a switch: numba freezes
a kernel's globals when it compiles it. So this copies the compiled-kernel package
(``lowerkit.backend.cpu.jit``) as it was at ``--rev`` into a temporary package of another
name, which compiles into a cache of its own (``jit.cache_dir`` names it after its sources'
digest), and runs both versions' kernels on the same arrays, packed by this tree's Python
(``panels.PackedWeight``, ``channel_direct.StripWeight``): the two versions must agree on
those layouts and on the kernels' signatures, and every pair's outputs are compared before
it is timed. Prints each version's best call and the median (and quartiles) of the per-pair
ratios, this tree / ``--rev``: on a shared machine whose speed drifts, the pairs see the same
drift.

    python benchmarks/kernel_pair.py --rev HEAD~1 --kernel channel_direct
    python benchmarks/kernel_pair.py --rev ba81e0b --kernel panel --threads 1 2 --shapes 96x576x196

Kernels: ``panel`` (``gemm`` on one thread, ``team_gemm`` on a team; shapes MxKxN, the zoo's
1x1 and im2col GEMMs by default, ReLU6) and ``channel_direct`` (``conv`` on one thread,
``team_pad`` + ``team_conv`` on a team; shapes CxOCxHxS — input channels, output channels,
input size, stride — ResNet's 3x3 layers by default, ReLU). The first run at a revision
compiles its kernels (a few minutes); later runs load them.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from types import ModuleType

import numpy as np

from lowerkit.backend.cpu import blas_limit, make_team, panels
from lowerkit.backend.cpu.channel_direct import ChannelDirectConv, StripWeight, partial_sums
from panel import RELU6
from panel import SHAPES as PANEL_SHAPES
from peers import blas_lines

JIT_PATH = "core/lowerkit/backend/cpu/jit"
DIRECT_SHAPES = [(64, 128, 56, 2), (128, 128, 56, 2), (256, 256, 28, 2), (512, 512, 14, 2), (512, 512, 7, 1),
                 (256, 256, 14, 1)]
RELU = (1, 0.0, 0.0)  # jit.activation_code's code and parameters


def kernels_at(rev: str, kernel: str) -> ModuleType:
    """``kernel``'s module of the jit package as it was at git revision ``rev``, imported from a
    copy under a name of its own beside it (``lowerkit.backend.cpu.lowerkit_jit_<sha>``, in a
    temporary directory kept per revision, so a second run finds its kernels in the cache)."""
    root = subprocess.run(["git", "rev-parse", "--show-toplevel"], capture_output=True, text=True,
                          check=True, cwd=os.path.dirname(os.path.abspath(__file__))).stdout.strip()
    sha = subprocess.run(["git", "rev-parse", rev], capture_output=True, text=True, check=True, cwd=root).stdout.strip()
    name = f"lowerkit_jit_{sha[:12]}"
    base = os.path.join(tempfile.gettempdir(), "lowerkit-kernel-pair")
    package = os.path.join(base, name)
    files = subprocess.run(["git", "ls-tree", "--name-only", sha, f"{JIT_PATH}/"], capture_output=True, text=True,
                           check=True, cwd=root).stdout.split()
    os.makedirs(package, exist_ok=True)
    for path in files:
        if not path.endswith(".py"):
            continue
        source = subprocess.run(["git", "show", f"{sha}:{path}"], capture_output=True, check=True, cwd=root).stdout
        target = os.path.join(package, os.path.basename(path))
        old = open(target, "rb").read() if os.path.exists(target) else None
        if old != source:  # leave an unchanged file's timestamp alone: numba's cache checks it
            with open(target, "wb") as f:
                f.write(source)
    # A subpackage of lowerkit.backend.cpu, as the jit package is (it imports from ``..``).
    cpu = importlib.import_module("lowerkit.backend.cpu")
    if base not in cpu.__path__:
        cpu.__path__.append(base)
    return importlib.import_module(f"lowerkit.backend.cpu.{name}").load(kernel)


def panel_calls(kernels: ModuleType, shape: tuple[int, ...], ways: int) -> tuple[Callable[[], None], np.ndarray]:
    """``kernels``' panel GEMM on one shape as ``(call, output)`` (the inputs seeded: the same
    for either version)."""
    m, k, n = shape
    rng = np.random.default_rng(0)
    w, x, bias = (rng.standard_normal(s).astype(np.float32) for s in ((m, k), (k, n), (m,)))
    packed = panels.PackedWeight.of(w, bias)
    none = np.empty((0, 0), np.float32)
    out = np.empty((m, n), np.float32)
    strips = np.empty(ways * kernels.STRIP_FLOATS, np.float32) if kernels.PACKS else np.empty(0, np.float32)
    head = (packed.panels, packed.bias, x, out, strips, packed.k, packed.m, packed.columns, *RELU6)
    if ways == 1:
        return (lambda: kernels.gemm(*head, 0, packed.count, 0, n, none)), out
    by_columns = packed.by_columns(n)
    return (lambda: kernels.team_gemm(*head, ways, by_columns, none)), out


def direct_calls(kernels: ModuleType, shape: tuple[int, ...], ways: int) -> tuple[Callable[[], None], np.ndarray]:
    """The same for ``kernels``' channel-direct convolution, 3x3 with padding 1, one image."""
    c, oc, h, s = shape
    oh = (h + 2 - 3) // s + 1
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, c, h, h)).astype(np.float32)
    w = (rng.standard_normal((oc, c, 3, 3)) / np.sqrt(9 * c)).astype(np.float32)
    weight = StripWeight.of(w, rng.standard_normal(oc).astype(np.float32))
    form = ChannelDirectConv.of((c, h, h), (3, 3), (s, s), (1, 1, 1, 1), (1, 1), (oh, oh))
    out = np.empty((1, oc, oh * oh), np.float32)
    padded = np.empty(form.padded_shape, np.float32)
    sums = partial_sums(ways, kernels.GROUP * kernels.PIXELS * kernels.STRIP).copy()
    tables = (form.taps, form.offs, form.pix, weight.m)
    if ways == 1:
        none = np.empty((0, 0, 0), np.float32)
        return (lambda: kernels.conv(weight.strips, weight.bias, x, padded, out, none, *tables, True, 1, 1, *RELU,
                                     sums[0])), out
    none = np.empty((0, 0), np.float32)

    def call() -> None:
        kernels.team_pad(x[0], padded, 1, 1, ways)
        kernels.team_conv(weight.strips, weight.bias, padded, out[0], none, *tables, *RELU, sums, ways)
    return call, out


def pair(now: Callable, then: Callable, pairs: int) -> tuple[float, float, list[float]]:
    """Best seconds of each and the per-pair ratios now / then, the order flipping each pair."""
    for call in (now, then):
        call()
    times: dict[Callable, list[float]] = {now: [], then: []}
    for i in range(pairs):
        for call in ((now, then) if i % 2 else (then, now)):
            start = time.perf_counter()
            call()
            times[call].append(time.perf_counter() - start)
    return min(times[now]), min(times[then]), [a / b for a, b in zip(times[now], times[then])]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rev", required=True, help="the git revision to compare this tree's kernels with")
    parser.add_argument("--kernel", choices=("panel", "channel_direct"), default="panel")
    parser.add_argument("--threads", type=int, nargs="*", default=[1, 2])
    parser.add_argument("--shapes", help="panel: MxKxN,...; channel_direct: CxOCxHxS,... (default: the zoo's)")
    parser.add_argument("--pairs", type=int, default=100)
    args = parser.parse_args()

    from lowerkit.backend.cpu import jit

    for line in blas_lines():
        print(line)
    now = jit.load(args.kernel)
    started = time.perf_counter()
    then = kernels_at(args.rev, args.kernel)
    print(f"the kernels at {args.rev}: ready in {time.perf_counter() - started:.1f} s "
          f"({os.path.basename(then.__file__)} sha1 {hashlib.sha1(open(then.__file__, 'rb').read()).hexdigest()[:8]})")
    default = PANEL_SHAPES if args.kernel == "panel" else DIRECT_SHAPES
    shapes = default if not args.shapes else [tuple(int(v) for v in s.split("x")) for s in args.shapes.split(",")]
    calls = panel_calls if args.kernel == "panel" else direct_calls
    team = make_team(max(args.threads)) if max(args.threads) > 1 else None
    if team is not None:
        team.usable()  # pins the team's threads, as a model's first region does
    print(f"{'shape':>16} {'threads':>7}  {'now ms':>8} {'then ms':>8}  now / then, median of {args.pairs} (quartiles)")
    with blas_limit(1):
        for shape in shapes:
            for ways in args.threads:
                if ways > 1 and team is None:
                    continue
                try:
                    (now_call, now_out), (then_call, then_out) = (calls(mod, shape, ways) for mod in (now, then))
                    now_call()
                    then_call()
                except TypeError as err:
                    sys.exit(f"the kernel's signature differs at {args.rev}: {err}")
                label = "x".join(map(str, shape))
                if not np.array_equal(now_out, then_out):
                    differ = float(np.abs(now_out - then_out).max())
                    print(f"{label:>16} {ways:>7}  outputs differ by up to {differ:.1e}: not timed")
                    continue
                best_now, best_then, ratios = pair(now_call, then_call, args.pairs)
                q = statistics.quantiles(ratios, n=4)
                print(f"{label:>16} {ways:>7}  {best_now * 1e3:8.3f} {best_then * 1e3:8.3f}  "
                      f"{statistics.median(ratios):.3f} ({q[0]:.3f}-{q[2]:.3f})", flush=True)


if __name__ == "__main__":
    main()
