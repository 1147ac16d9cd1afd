"""Layer by layer: glow_like's instructions against ONNX Runtime's per-node profile, one process.

Where a model's time goes against the peer: both engines run the same traced zoo model on the
same threads (one by default: a worker's slice of a batch), in alternating calls; glow_like's
bound kernels are timed one by one inside whole runs (``model.py --instructions`` does the
same), ONNX Runtime's nodes by its profiler (which adds a little to each node, so its
whole-call time is taken from a second, unprofiled session). Convolutions are paired in
schedule order (ONNX Runtime fuses a residual add into its convolution; glow_like's adds are
listed apart) and printed by excess, the largest first. Medians over the rounds; ms.

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

import numpy as np

import lowerkit as lk
from lowerkit import models
from peers import blas_lines


def glow_like_calls(module: lk.Module, x: np.ndarray, threads: int):
    """glow_like's compiled program bound for this thread: (program, executable, kernel calls)."""
    from lowerkit_glow_like._compiler import compile_method
    from lowerkit_glow_like._options import Options
    from lowerkit_glow_like.runtime import Executable

    program = compile_method(module, "forward", Options(threads=threads))
    executable = Executable(program)
    executable.run([x])  # binds this thread's arena, scratch and kernels
    state = executable._state()
    calls = state.calls if state.slices is None else state.slices[0].calls
    return program, executable, calls


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


def ort_node_medians(profile_path: str, skip: int) -> list[tuple[str, str, float]]:
    """(node, op, median ms) per node in run order from ONNX Runtime's profile, the first
    ``skip`` runs dropped."""
    with open(profile_path, encoding="utf-8") as f:
        events = json.load(f)
    per_node: dict[str, tuple[str, list[float]]] = {}
    for event in events:
        if event.get("cat") == "Node" and event["name"].endswith("_kernel_time"):
            name = event["name"][: -len("_kernel_time")]
            per_node.setdefault(name, (event["args"].get("op_name", "?"), []))[1].append(event["dur"] / 1e3)
    return [(name, op, statistics.median(times[skip:] or times)) for name, (op, times) in per_node.items()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="mobilenet_v2", help="a zoo model (lowerkit.models.names())")
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--threads", type=int, default=1, help="both engines' threads (default 1)")
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--top", type=int, default=15, help="layers listed, by excess")
    args = parser.parse_args()

    from lowerkit.backend.cpu import blas_limit

    for line in blas_lines():
        print(line)
    x = models.example_input(args.model, batch=args.batch)
    module = lk.trace(models.get(args.model), x)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        program, executable, calls = glow_like_calls(module, x, args.threads)
    feed_name = None
    with tempfile.TemporaryDirectory() as profile_dir:
        profiled, plain = ort_sessions(module, args.threads, profile_dir)
        feed_name = profiled.get_inputs()[0].name
        feed = {feed_name: x}
        kernel_times: list[list[float]] = [[] for _ in calls]
        whole_glow, whole_ort = [], []
        warmup = 2
        try:
            with blas_limit(executable.blas_threads or 1):  # as a call sets it
                for _ in range(warmup + args.rounds):
                    profiled.run(None, feed)
                    start = time.perf_counter()
                    plain.run(None, feed)
                    whole_ort.append(time.perf_counter() - start)
                    for call, kept in zip(calls, kernel_times):
                        start = time.perf_counter()
                        call()
                        kept.append(time.perf_counter() - start)
                    start = time.perf_counter()
                    executable.run([x])
                    whole_glow.append(time.perf_counter() - start)
        finally:
            executable.close()
        peer_nodes = ort_node_medians(profiled.end_profiling(), warmup)

    mine = [(statistics.median(t[warmup:]) * 1e3, ins) for t, ins in zip(kernel_times, program.instructions)]
    glow_convs = [(ms, ins) for ms, ins in mine if "conv" in ins.op]
    peer_convs = [(ms, name) for name, op, ms in peer_nodes if op == "Conv"]
    print(f"\n{args.model}, batch {args.batch}, {args.threads} thread(s), {args.rounds} rounds: whole call "
          f"glow_like best {min(whole_glow) * 1e3:.2f} / median {statistics.median(whole_glow) * 1e3:.2f} ms, "
          f"ONNX Runtime {min(whole_ort) * 1e3:.2f} / {statistics.median(whole_ort) * 1e3:.2f} ms "
          f"(median ratio {statistics.median(whole_glow) / statistics.median(whole_ort):.2f})")
    print(f"sums of the medians: glow_like's instructions {sum(ms for ms, _ in mine):.2f} ms, "
          f"ONNX Runtime's nodes {sum(ms for _, _, ms in peer_nodes):.2f} ms (profiled)")
    if len(glow_convs) != len(peer_convs):
        print(f"(convolutions differ in number: glow_like {len(glow_convs)}, ONNX Runtime {len(peer_convs)}; "
              "pairs below follow schedule order as far as both go)")
    pairs = [(mine_ms - peer_ms, mine_ms, peer_ms, ins) for (mine_ms, ins), (peer_ms, _) in zip(glow_convs, peer_convs)]
    print(f"\nconvolutions, paired in order ({len(pairs)}): glow_like - ONNX Runtime = "
          f"{sum(p[0] for p in pairs):+.2f} ms; the {args.top} largest excesses:")
    print(f"  {'excess':>7} {'glow_like':>9} {'ORT':>7}  layer")
    for excess, mine_ms, peer_ms, ins in sorted(pairs, key=lambda p: -p[0])[: args.top]:
        shape = list(program.buffers[ins.outputs[0]].shape)
        print(f"  {excess:+7.3f} {mine_ms:9.3f} {peer_ms:7.3f}  {ins.op} -> {shape}  {ins.scope}")
    others = [(ms, ins) for ms, ins in mine if "conv" not in ins.op]
    print("\nglow_like's other instructions: " + ", ".join(
        f"{op} {sum(ms for ms, ins in others if ins.op == op):.3f}" for op in sorted({ins.op for _, ins in others})))
    print("ONNX Runtime's other nodes: " + ", ".join(
        f"{op} {sum(ms for _, o, ms in peer_nodes if o == op):.3f}" for op in sorted({o for _, o, _ in peer_nodes if o != "Conv"})))


if __name__ == "__main__":
    main()
