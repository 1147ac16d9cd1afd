"""Layer by layer: glow_like's instructions against ONNX Runtime's per-node profile, one process.

Where a model's time goes against the peer: both engines run the same traced zoo model on the
same threads (one by default: a worker's slice of a batch), in alternating calls (on several
threads with a pause between engines, whose workers spin after a call); glow_like's
bound kernels are timed one by one inside whole runs (bound as ``model.py --instructions``
binds them), ONNX Runtime's nodes by its profiler (which adds a little to each node, so its
whole-call time is taken from a second, unprofiled session). Convolutions are paired by output
and weight shape, the i-th of each in one schedule with the i-th in the other (ONNX Runtime may
fuse a residual add into its convolution where glow_like lists its adds apart, or the other
way round; an activation glow_like fuses may be a node of its own there) and printed by
excess, the largest first. Medians over the rounds (or the best, ``--statistic min``); ms.

    python benchmarks/per_node.py --model mobilenet_v2 --batch 4
    python benchmarks/per_node.py --model efficientnet_b0 --batch 1 --threads 2 --top 20
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
import warnings

import lowerkit as lk
from lowerkit import models
from model import bound_glow_like
from peers import blas_lines, settle

_PEER_CONVS = ("Conv", "FusedConv")  # ONNX Runtime's convolution kernels (FusedConv: with its activation)


def _convolution(op: str) -> bool:
    """glow_like's convolution instructions (``glow.depthwise_mean``: one with its pool fused)."""
    return "conv" in op or op == "glow.depthwise_mean"


def ort_sessions(module: lk.Module, threads: int, profile_dir: str):
    """Two ONNX Runtime sessions on the exported model: one profiling every node, one plain."""
    import onnxruntime as ort

    import lowerkit.onnx

    proto = lowerkit.onnx.export(module).SerializeToString()
    sessions = []
    for profiling in (True, False):
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        if profiling:
            options.enable_profiling = True
            options.profile_file_prefix = os.path.join(profile_dir, "ort")
        sessions.append(ort.InferenceSession(proto, options, providers=["CPUExecutionProvider"]))
    return sessions


def ort_node_times(profile_path: str, skip: int, statistic=statistics.median) -> list[tuple[str, str, tuple, float]]:
    """(node, op, output shape, ms) per node in run order from ONNX Runtime's profile: the
    ``statistic`` (median, or min) of its runs, the first ``skip`` dropped."""
    with open(profile_path, encoding="utf-8") as f:
        events = json.load(f)
    per_node: dict[str, tuple[str, tuple, list[float]]] = {}
    for event in events:
        if event.get("cat") == "Node" and event["name"].endswith("_kernel_time"):
            name = event["name"][: -len("_kernel_time")]
            outputs = event["args"].get("output_type_shape") or [{}]
            inputs = event["args"].get("input_type_shape") or []
            shape = tuple(next(iter(outputs[0].values()), ()))
            weight = tuple(next(iter(inputs[1].values()), ())) if len(inputs) > 1 else ()
            key = (shape, weight)
            per_node.setdefault(name, (event["args"].get("op_name", "?"), key, []))[2].append(event["dur"] / 1e3)
    return [(name, op, key, statistic(times[skip:] or times)) for name, (op, key, times) in per_node.items()]


def paired(mine: list[tuple[tuple, object]], theirs: list[tuple[tuple, object]]) -> list[tuple[int, int]]:
    """Index pairs of two schedules' convolutions with the same key (output shape, weight
    shape): the i-th of a key in one schedule with the i-th in the other, so a layer the two
    engines run in another order (ResNet's downsampling shortcut and ``conv3``) still pairs
    with itself; a layer one engine fuses or splits differently is left out."""
    seen: dict[tuple, list[int]] = {}
    for j, (key, _) in enumerate(theirs):
        seen.setdefault(key, []).append(j)
    taken: dict[tuple, int] = {}
    pairs = []
    for i, (key, _) in enumerate(mine):
        k = taken.get(key, 0)
        if k < len(seen.get(key, ())):
            pairs.append((i, seen[key][k]))
            taken[key] = k + 1
    return pairs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="mobilenet_v2", help="a zoo model (lowerkit.models.names())")
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--threads", type=int, default=1, help="both engines' threads (default 1)")
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--top", type=int, default=15, help="layers listed, by excess")
    parser.add_argument("--statistic", choices=("median", "min"), default="median",
                        help="per layer over the rounds: the median (default), or the best (min: on a "
                             "noisy shared machine, what each layer takes when nothing interferes)")
    args = parser.parse_args()
    statistic = statistics.median if args.statistic == "median" else min

    from lowerkit.backend.cpu import blas_limit

    for line in blas_lines():
        print(line)
    x = models.example_input(args.model, batch=args.batch)
    module = lk.trace(models.get(args.model), x)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        program, executable, calls = bound_glow_like(module, x, args.threads)
    with tempfile.TemporaryDirectory() as profile_dir:
        profiled, plain = ort_sessions(module, args.threads, profile_dir)
        feed_name = profiled.get_inputs()[0].name
        feed = {feed_name: x}
        kernel_times: list[list[float]] = [[] for _ in calls]
        # On several threads each engine's workers spin after its call and would take the
        # other's cores: let them go idle first (peers.settle).
        pause = settle if args.threads > 1 else (lambda: None)
        whole_glow, whole_ort = [], []
        warmup = 2
        try:
            with blas_limit(executable.blas_threads or 1):  # as a call sets it
                for _ in range(warmup + args.rounds):
                    pause()
                    profiled.run(None, feed)
                    # Each whole call is timed right after an untimed one, as calls follow each
                    # other in a busy service: the first after a pause pays for waking threads
                    # (and ran right after the profiled session, whose threads still spun).
                    pause()
                    plain.run(None, feed)
                    start = time.perf_counter()
                    plain.run(None, feed)
                    whole_ort.append(time.perf_counter() - start)
                    pause()
                    executable.run([x])
                    start = time.perf_counter()
                    executable.run([x])
                    whole_glow.append(time.perf_counter() - start)
                    # Instruction by instruction right after a whole call, as calls follow each
                    # other: after the pause alone the first instruction would also pay for
                    # waking the team's sleeping threads (MobileNetV2's stem 0.94 ms, 0.22 here).
                    # (A whole call after every pause, slow, would also have made the handle's
                    # stall guard switch it to its serial forms now and then.)
                    for call, kept in zip(calls, kernel_times):
                        start = time.perf_counter()
                        call()
                        kept.append(time.perf_counter() - start)
        finally:
            executable.close()
        peer_nodes = ort_node_times(profiled.end_profiling(), warmup, statistic)

    mine = [(statistic(t[warmup:]) * 1e3, ins) for t, ins in zip(kernel_times, program.instructions)]
    glow_convs = [((tuple(program.buffers[ins.outputs[0]].shape), tuple(program.buffers[ins.inputs[1]].shape)), (ms, ins))
                  for ms, ins in mine if _convolution(ins.op)]
    peer_convs = [(shape, ms) for _, op, shape, ms in peer_nodes if op in _PEER_CONVS]
    print(f"\n{args.model}, batch {args.batch}, {args.threads} thread(s), {args.rounds} rounds: whole call "
          f"glow_like best {min(whole_glow) * 1e3:.2f} / median {statistics.median(whole_glow) * 1e3:.2f} ms, "
          f"ONNX Runtime {min(whole_ort) * 1e3:.2f} / {statistics.median(whole_ort) * 1e3:.2f} ms "
          f"(median ratio {statistics.median(whole_glow) / statistics.median(whole_ort):.2f})")
    print(f"sums of the {args.statistic}s: glow_like's instructions {sum(ms for ms, _ in mine):.2f} ms, "
          f"ONNX Runtime's nodes {sum(node[3] for node in peer_nodes):.2f} ms (profiled)")
    pairs = []
    for i, j in paired(glow_convs, peer_convs):
        (mine_ms, ins), peer_ms = glow_convs[i][1], peer_convs[j][1]
        pairs.append((mine_ms - peer_ms, mine_ms, peer_ms, ins))
    print(f"\nconvolutions paired by output and weight shape: {len(pairs)} of glow_like's {len(glow_convs)} "
          f"and ONNX Runtime's {len(peer_convs)}; glow_like - ONNX Runtime = {sum(p[0] for p in pairs):+.2f} ms "
          f"(an activation glow_like fuses may be a node of its own there: see the other nodes); the "
          f"{args.top} largest excesses:")
    print(f"  {'excess':>7} {'glow_like':>9} {'ORT':>7}  layer")
    for excess, mine_ms, peer_ms, ins in sorted(pairs, key=lambda p: -p[0])[: args.top]:
        shape = list(program.buffers[ins.outputs[0]].shape)
        print(f"  {excess:+7.3f} {mine_ms:9.3f} {peer_ms:7.3f}  {ins.op} -> {shape}  {ins.scope}")
    others = [(ms, ins) for ms, ins in mine if not _convolution(ins.op)]
    print("\nglow_like's other instructions: " + ", ".join(
        f"{op} {sum(ms for ms, ins in others if ins.op == op):.3f}" for op in sorted({ins.op for _, ins in others})))
    print("ONNX Runtime's other nodes: " + ", ".join(
        f"{op} {sum(node[3] for node in peer_nodes if node[1] == op):.3f}"
        for op in sorted({node[1] for node in peer_nodes if node[1] not in _PEER_CONVS})))


if __name__ == "__main__":
    main()
