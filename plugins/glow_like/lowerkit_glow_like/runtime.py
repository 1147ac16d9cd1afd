"""Executing a program: compile binds, execute runs the flat instruction list.

Binding makes read-only constant arrays once (shared by all threads). Each thread that
executes gets, on its first call, its own arena and scratch and its own bound kernel
calls, so concurrent calls never share writable memory. A call copies the inputs into
their planned buffers, runs every instruction, and copies the outputs out — large ones
apart, which it reads and writes in place (``direct_io``). A batch run as
slices (one per worker, see ``Executable._split_batch``) binds an arena, scratch and call
list per slice instead; each worker copies its rows in, runs, and copies them out — the
first instructions (on large maps) image by image, on an arena of their own (``_Head``);
maps of at least ``DIRECT_BYTES`` an image are read and written in place here too. A batch
run image by image (``Executable._image_by_image``) binds the calls to the first image's
rows and runs every image through them in turn, on the team. Where a batch can run either
way, both are bound and the first calls time them (``lowerkit.backend.cpu.FormTrial``).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from lowerkit.backend.cpu import (FormTrial, Parallel, Team, aligned_empty, blas_limit, cpu_count, make_team,
                                  recycled_copy, recycled_empty, split)
from lowerkit.errors import InputError
from lowerkit.ir import DTYPES

from .direct_io import DIRECT_BYTES, DirectIO
from .kernels import KERNELS, mbconv
from .lir import ALIGNMENT, Program
from .lir.batch import batch_size, batch_sliceable, head_length


def _aligned_bytes(nbytes: int) -> np.ndarray:
    """Arena or scratch bytes on a cache line (the memory plan's offsets keep buffers aligned)."""
    return aligned_empty(nbytes, np.uint8)


# Kernel modules whose kernels call no BLAS routine (numpy ufuncs, copies, compiled chains).
_BLAS_FREE_KERNELS = frozenset({"elementwise", "shape", "activation", "chain"})
# Kernel modules whose kernels multiply matrices on BLAS.
_GEMM_KERNELS = frozenset({"attention", "backward", "conv", "conv_transpose", "grad", "linalg", "quant", "winograd"})
# The float convolution instructions (a depthwise one with its planes' means among them).
_CONVOLUTIONS = ("conv2d", "glow.conv2d", "glow.gated_conv2d", "glow.depthwise_mean")


@dataclass
class _Slice:
    """Rows ``rows`` of the batch: where they go in, come out, and the calls in between."""

    rows: slice
    inputs: list[np.ndarray]
    outputs: list[np.ndarray]
    calls: list
    head: _Head | None = None  # where the slice's first instructions run image by image
    direct: DirectIO | None = None  # what ``calls`` read and write in place, at the slice's rows,
    views: list[np.ndarray] | None = None  # with every buffer's array and the scratch (to bind
    scratch: np.ndarray | None = None  # those calls again)
    in_place: frozenset[int] = frozenset()  # the outputs (positions) ``calls`` or the head write in place


@dataclass
class _Head:
    """A batch slice's first instructions (``lir.batch.head_length``), bound to one image's
    rows of an arena of their own: each image of the slice goes through them in turn, then
    the buffers the rest reads (``crossing``: head view, slice view) are copied into its row
    of the slice's arena. ``copied`` are the positions of the inputs copied in an image at a
    time (the others the rest alone reads, and the slice reads them in place or copies them
    in whole); ``direct`` what the calls read and write in place, at each image's row, with
    ``views``, every buffer's one-image array (to bind those calls again)."""

    inputs: list[np.ndarray]
    calls: list
    crossing: list[tuple[np.ndarray, np.ndarray]]
    copied: list[int]
    direct: DirectIO | None
    views: list[np.ndarray]


@dataclass
class _ThreadState:
    inputs: list[np.ndarray]  # the program's input buffers (whole-program mode)
    outputs: list[np.ndarray]
    calls: list
    slices: list[_Slice] | None = None  # batch-slice mode instead
    image: _Slice | None = None  # image-by-image mode (or both forms, while they are on trial)
    views: list[np.ndarray] | None = None  # whole-program mode: every buffer's array, and the scratch
    scratch: np.ndarray | None = None  # (to bind again the instructions of direct inputs and outputs)


def _nothing() -> None:
    """An instruction bound into the call of an instruction before it (``kernels.mbconv``)."""


def _module(op: str) -> str:
    """The kernel module (``conv``, ``linalg``, ...) of ``op``."""
    return KERNELS[op].prepare.__module__.rsplit(".", 1)[-1]


# A fully-connected layer or matrix product of this many multiply-adds is a GEMM worth BLAS's
# threads (OpenBLAS threads sgemm from about this size on its own).
_THREADED_MATMUL_MACS = 1 << 20
_MATMULS = ("glow.fc", "matmul")


def _matmul_macs(program: Program, ins) -> int:
    """The multiply-adds of a ``glow.fc`` or ``matmul`` instruction (0 for other ops): output
    elements x the inner dimension."""
    if ins.op not in _MATMULS:
        return 0
    out = program.buffers[ins.outputs[0]].shape
    inner = program.buffers[ins.inputs[0]].shape[-1]  # x [..., K], a [..., K] (or [K])
    return int(np.prod(out, dtype=np.int64)) * int(inner)


def _threaded_matmuls(program: Program) -> bool:
    """Whether a ``glow.fc`` or ``matmul`` of the program reaches ``_THREADED_MATMUL_MACS``."""
    return any(_matmul_macs(program, ins) >= _THREADED_MATMUL_MACS for ins in program.instructions)


def _uses_blas(op: str) -> bool:
    """Whether the kernel of ``op`` may call BLAS (its module is not a BLAS-free one)."""
    return _module(op) not in _BLAS_FREE_KERNELS


class Executable:
    """A bound program: call :meth:`run` from any thread."""

    def __init__(self, program: Program) -> None:
        self.program = program
        self.constants = [np.asarray(c, order="C") for c in program.constants]  # keeps 0-d arrays 0-d
        for c in self.constants:
            c.flags.writeable = False
        # Derived constants (widened or transformed weights), computed once, shared by threads.
        self.derived: dict[tuple, np.ndarray] = {}
        for ins in program.instructions:
            for pos, fn in KERNELS[ins.op].derive:
                buf = program.buffers[ins.inputs[pos]]
                key = self._derived_key(buf, fn, ins)
                if key is not None and key not in self.derived:
                    array = fn(self.constants[buf.constant].reshape(buf.shape), ins.attrs)
                    if array.flags.writeable and array.base is None:
                        array.flags.writeable = False
                    self.derived[key] = array
        self.threads = program.options.get("threads")
        # Decided here, on the machine that runs, for n threads: intra-op workers (the
        # process-wide pool of lowerkit.backend.cpu) with single-threaded BLAS, or — for
        # programs whose GEMMs do the work — no workers and BLAS's own n threads (see
        # _gemms_on_blas); "blas" asks for BLAS's threading as configured.
        # A batch-sliceable program with depthwise layers runs image by image, each on the
        # team (see _image_by_image); other batch-sliceable programs run whole on each worker,
        # each on its own slice of the batch, with single-threaded BLAS (see _split_batch);
        # otherwise a program of convolutions runs each as a team region where it can (see
        # _team_mode).
        self.parallel: Parallel | None = None
        self.team: Team | None = None
        self.batch_slices: list[slice] | None = None
        self.per_image = False  # team mode one image at a time (see _image_by_image)
        # Image by image (form 0) or batch slices (form 1), where a batch can run both ways
        # and LOWERKIT_GLOW_PER_IMAGE does not say: timed on the first calls (_per_image_trial).
        self.form_trial: FormTrial | None = None
        if self.threads == "blas":
            self.ways, self.blas_threads = 1, None
        else:
            self.ways = int(self.threads) if self.threads else max(1, min(cpu_count(), 8))
            if self.ways > 1 and batch_size(program) >= 2 and self._image_by_image(program):
                self.blas_threads, self.team, self.per_image = 1, make_team(self.ways), True
                if self._per_image_trial(program):
                    self.batch_slices = split(batch_size(program), self.ways)
                    self.parallel, self.form_trial = Parallel(self.ways), FormTrial()
            elif self.ways > 1 and batch_size(program) >= self.ways and self._split_batch(program):
                self.batch_slices = split(batch_size(program), self.ways)
                self.blas_threads, self.parallel = 1, Parallel(self.ways)
            elif self.ways > 1 and self._team_mode(program):
                self.blas_threads, self.team = 1, make_team(self.ways)
            elif self.ways > 1 and self._gemms_on_blas(program):
                self.blas_threads = self.ways
            else:
                self.blas_threads = 1
                self.parallel = Parallel(self.ways) if self.ways > 1 else None
        # Batch slices run their first instructions image by image (see _slice_head).
        self.head = self._slice_head(program) if self.batch_slices is not None else 0
        # Runs of instructions every binding without the pool binds as one call (kernels.mbconv).
        self.blocks = mbconv.blocks(program)
        self._local = threading.local()
        # Programs of element-wise and data-movement kernels only never reach BLAS: they skip
        # the BLAS thread limit (two library calls a run, most of a tiny program's cost).
        self.uses_blas = any(_uses_blas(ins.op) for ins in program.instructions)
        # Large inputs read in place and large outputs written into the returned arrays
        # (whole-program mode; see direct_io).
        self.direct = DirectIO.of(program) if self.batch_slices is None and not self.per_image else None
        # Batch slices: those of at least DIRECT_BYTES an image, a slice at a time — a slice
        # with a head, those of its head an image at a time (image-by-image mode copies).
        self.slices_direct = (DirectIO.of(program, DIRECT_BYTES * batch_size(program))
                              if self.batch_slices is not None else None)

    @staticmethod
    def _gemms_on_blas(program: Program) -> bool:
        """True for programs with dense convolutions and no Winograd one: their GEMMs run
        as one BLAS call each on BLAS's own threads, and everything else serially.

        Why: a pool hand-off costs ~100 us on a 2-core VM, while one GEMM on OpenBLAS's 2
        threads beats the same GEMM in pool bands on every convolution GEMM of the zoo; and
        after a threaded call OpenBLAS's worker spins for ~0.1 s, so a pool worker running
        the next compiled kernel would fight it for the core (the depthwise layers of
        MobileNetV2 ran slower on two threads than on one). Same run, batch 1 / 8:
        MobileNetV2 7.3 / 65.8 ms this way, 7.6 / 70.7 with the pool beside BLAS's threads,
        9.9 / 73.5 with GEMM bands on the pool; EfficientNet-B0 12.9 / 110.9, 13.6 / 119.1,
        17.7 / 126.4. Programs with Winograd keep the pool: its 36 small channel GEMMs per
        layer are each too small for BLAS to thread, while two pool bands split all 36
        (ResNet-18 22.8 vs 24.1 ms, batch 8 129 vs 164). Fully-connected layers and matrix
        products of at least ``_THREADED_MATMUL_MACS`` multiply-adds count as such GEMMs too:
        a transformer's program without its patch-embedding convolution (a region of a
        partition) had its layers on one BLAS thread, DeiT-Tiny 39 ms against 27 for the
        whole model (AMD EPYC Zen 3 VM). Programs with neither keep the pool: nothing there
        gains from BLAS's threads.
        ``LOWERKIT_GLOW_GEMM_ON_POOL=1`` (read at compile) keeps the pool for every program.
        """
        if os.environ.get("LOWERKIT_GLOW_GEMM_ON_POOL"):
            return False
        convolutions = [ins for ins in program.instructions
                        if ins.op in _CONVOLUTIONS and int(ins.attrs.get("groups", 1)) == 1]
        if any(ins.attrs.get("algo") == "winograd" for ins in convolutions):
            return False
        return bool(convolutions) or _threaded_matmuls(program)

    @staticmethod
    def _team_mode(program: Program) -> bool:
        """True for programs with convolutions, or fully-connected layers of at least
        ``_THREADED_MATMUL_MACS`` multiply-adds, whose every GEMM kernel has a team form
        (Winograd and attention included; not matmul, int8 or gradient kernels), where team
        kernels can run (``lowerkit.backend.cpu.make_team``: numba's OpenMP layer, a
        ``cblas_sgemm``). (A transformer's program without its patch embedding — the region
        of a partition whose other backend took that convolution — had kept BLAS's threads:
        DeiT-Tiny at batch 8, `[nnpack, glow_like]` / glow_like 1.18, paired.)

        Team mode runs each convolution as one compiled parallel region (numba on OpenMP,
        whose threads spin between regions: ~3.5 us a region instead of a pool hand-off's
        ~90 us), BLAS at one thread: every GEMM in bands of output channels with the band's
        epilogue on the core that computed it, every depthwise layer in bands of planes.
        Everything else runs on the calling thread. Same run, batch 1, ms, BLAS's threads vs
        team: see docs/glow_like.md (Threads).
        ``LOWERKIT_GLOW_TEAM=0`` (read at compile) keeps the previous forms.
        """
        if os.environ.get("LOWERKIT_GLOW_TEAM") == "0" or os.environ.get("LOWERKIT_GLOW_GEMM_ON_POOL"):
            return False
        has_work = any(ins.op in _CONVOLUTIONS for ins in program.instructions) or _threaded_matmuls(program)
        # BLAS runs at one thread in team mode: a GEMM kernel without a team form would lose
        # its second core (a matmul, int8 convolutions).
        lone_gemm = any(_module(ins.op) in _GEMM_KERNELS and not KERNELS[ins.op].team for ins in program.instructions)
        return has_work and not lone_gemm and make_team(2) is not None

    @staticmethod
    def _image_by_image(program: Program) -> bool:
        """True for batch-sliceable programs of depthwise convolutions in team mode: they run
        the batch one image at a time through the whole program, each image on the team
        (every layer on both cores), in one image's worth of arena — rather than as slices
        (each worker a share of the images, every layer on one core) or layer by layer over
        the whole batch (each layer's activations for every image: out of cache).
        """
        if os.environ.get("LOWERKIT_GLOW_PER_IMAGE", "1") == "0" or not batch_sliceable(program):
            return False
        depthwise = any(ins.op in _CONVOLUTIONS and int(ins.attrs.get("groups", 1)) > 1 for ins in program.instructions)
        return depthwise and Executable._team_mode(program)

    def _per_image_trial(self, program: Program) -> bool:
        """True where a batch that runs image by image could run as slices too (at least one
        image per worker, :meth:`_split_batch`) and ``LOWERKIT_GLOW_PER_IMAGE`` is unset: both
        forms are bound and the first calls decide (``FormTrial``: the forms in pairs of calls,
        the median of three timed calls each). Which wins depends on the machine: MobileNetV2,
        batch 8, image by image vs slices: 32.0 vs 35.8 ms on a Xeon (AVX-512), 78-99 vs
        54-71 ms on an AMD EPYC VM (AVX2; three alternating processes each).
        ``LOWERKIT_GLOW_PER_IMAGE=1`` keeps image by image, ``=0`` slices (read at compile).
        """
        return (os.environ.get("LOWERKIT_GLOW_PER_IMAGE") != "1" and batch_size(program) >= self.ways
                and self._split_batch(program))

    @staticmethod
    def _split_batch(program: Program) -> bool:
        """True for batch-sliceable programs (:mod:`.lir.batch`) — the caller checks the batch
        has at least one image per worker (a smaller one would leave workers idle): each
        worker then runs every instruction on its own slice of the batch, with single-threaded
        BLAS — one pool hand-off per call instead of one or more per instruction, and no
        kernel left on one core (depthwise convolutions, epilogues and pools ran on the
        calling thread beside BLAS's threads). Same run, ms, batch 8, whole program vs
        slices: MobileNetV2 80.1 vs 54.8, EfficientNet-B0 137.8 vs 84.2, ResNet-18 134.8 vs
        117.1, ResNet-50 402.4 vs 309.4; MobileNetV2 batch 2 20.5 vs 12.7.
        ``LOWERKIT_GLOW_SPLIT_BATCH=0`` (read at compile) keeps programs whole.
        """
        return os.environ.get("LOWERKIT_GLOW_SPLIT_BATCH") != "0" and batch_sliceable(program)

    @staticmethod
    def _slice_head(program: Program) -> int:
        """How many leading instructions a batch slice of two or more images runs image by
        image (``lir.batch.head_length``: those through the last convolution or pooling on a
        map of at least 1024 pixels; ``lowerkit.backend.cpu.head_length`` says why, with numbers), the rest layer
        by layer over the slice. ``LOWERKIT_GLOW_SLICE_HEAD=0`` (read at compile) runs slices
        layer by layer throughout.
        """
        if os.environ.get("LOWERKIT_GLOW_SLICE_HEAD") == "0":
            return 0
        return head_length(program)

    @staticmethod
    def _derived_key(buf, fn, ins) -> tuple | None:
        if buf.kind != "constant":
            return None
        return (buf.constant, buf.shape, fn.__module__, fn.__qualname__, ins.attrs.get("algo", ""))

    def dry_run(self) -> None:
        """Bind this thread now and run once on zeros (compile-time validation and warm-up)."""
        self.run([np.zeros(self.program.buffers[b].shape, DTYPES[self.program.buffers[b].dtype])
                  for b in self.program.inputs])

    def _state(self) -> _ThreadState:
        state = getattr(self._local, "state", None)
        if state is None:
            state = self._local.state = self._bind()
        return state

    def _bind(self) -> _ThreadState:
        program = self.program
        if self.batch_slices is not None:
            state = self._bind_slices()
            if self.per_image:  # both forms, on trial
                state.image = self._bind_one_image().image
            return state
        if self.per_image:
            return self._bind_one_image()
        views = self._views(_aligned_bytes(max(program.plan.peak_bytes, ALIGNMENT)))
        scratch = _aligned_bytes(max(program.plan.scratch_bytes, ALIGNMENT))
        return _ThreadState([views[b] for b in program.inputs], [views[b] for b in program.outputs],
                            self._prepare(views, scratch, self.parallel, self.team), views=views, scratch=scratch)

    def _views(self, arena: np.ndarray) -> list[np.ndarray]:
        """One array per buffer: constants as they are, the others at their arena offsets."""
        views: list[np.ndarray] = []
        for buf in self.program.buffers:
            if buf.kind == "constant":
                views.append(self.constants[buf.constant].reshape(buf.shape))
            else:
                raw = arena[buf.offset : buf.offset + buf.nbytes]
                views.append(raw.view(DTYPES[buf.dtype]).reshape(buf.shape))
        return views

    def _bind_slices(self) -> _ThreadState:
        """Kernel calls per slice of the batch, each slice on its own arena and scratch.

        Own arenas, not row views of one: the memory plan reuses bytes between buffers whose
        lives do not overlap, and workers running ahead of each other would otherwise write
        one buffer's rows over another's. A slice touches only its rows of its arena (pages
        never touched are never backed by memory). A slice of at least two images runs its
        first ``head_length`` instructions image by image (:class:`_Head`), on a further
        arena of which it touches one image's rows.
        """
        program, direct = self.program, self.slices_direct
        slices = []
        for rows in self.batch_slices:
            views = self._views(_aligned_bytes(max(program.plan.peak_bytes, ALIGNMENT)))
            sliced = [v[rows] if buf.in_arena else v for buf, v in zip(program.buffers, views)]
            scratch = _aligned_bytes(max(program.plan.scratch_bytes, ALIGNMENT))
            head = self.head if rows.stop - rows.start > 1 else 0
            head_direct, rest_direct = direct.split(head) if head and direct is not None else (None, direct)
            in_place = frozenset(p for d in (head_direct, rest_direct) if d is not None for p, _ in d.outputs)
            slices.append(_Slice(rows, [sliced[b] for b in program.inputs], [sliced[b] for b in program.outputs],
                                 self._prepare(sliced, scratch, None, first=head),
                                 self._bind_head(sliced, scratch, head, head_direct, rest_direct) if head else None,
                                 rest_direct, sliced, scratch, in_place))
        return _ThreadState([], [], [], slices)

    def _bind_head(self, sliced: list[np.ndarray], scratch: np.ndarray, head: int, direct: DirectIO | None,
                   rest_direct: DirectIO | None) -> _Head:
        """The first ``head`` instructions on one image's rows of a new arena (the slice's
        scratch: they run before the rest), and the buffers they hand to the slice's arena
        ``sliced``: every arena buffer they or the inputs define that a later instruction or
        the outputs read — but the direct outputs they write (``direct``'s: into the returned
        arrays) and the direct inputs only the rest reads (``rest_direct``'s)."""
        program = self.program
        one = [v[:1] if buf.in_arena else v
               for buf, v in zip(program.buffers, self._views(_aligned_bytes(max(program.plan.peak_bytes, ALIGNMENT))))]
        instructions = program.instructions
        defined = {*program.inputs, *(b for ins in instructions[:head] for b in ins.outputs)}
        read = {*program.outputs, *(b for ins in instructions[head:] for b in ins.inputs)}
        written = {b for _, b in direct.outputs} if direct is not None else set()
        later = {b for _, b in rest_direct.inputs} if rest_direct is not None else set()
        crossing = [(one[b], sliced[b]) for b in sorted(defined & read - written - later) if program.buffers[b].in_arena]
        copied = [p for p, b in enumerate(program.inputs) if b not in later]
        return _Head([one[b] for b in program.inputs], self._prepare(one, scratch, None, last=head), crossing, copied,
                     direct, one)

    def _bind_one_image(self) -> _ThreadState:
        """Kernel calls on the first image's rows of the arena, with the team: the batch runs
        through them one image at a time (:meth:`_run_images`)."""
        program = self.program
        views = self._views(_aligned_bytes(max(program.plan.peak_bytes, ALIGNMENT)))
        first = slice(0, 1)
        sliced = [v[first] if buf.in_arena else v for buf, v in zip(program.buffers, views)]
        scratch = _aligned_bytes(max(program.plan.scratch_bytes, ALIGNMENT))
        image = _Slice(first, [sliced[b] for b in program.inputs], [sliced[b] for b in program.outputs],
                       self._prepare(sliced, scratch, None, self.team))
        return _ThreadState([], [], [], image=image)

    def _prepare(self, views: list[np.ndarray], scratch: np.ndarray, parallel: Parallel | None,
                 team: Team | None = None, first: int = 0, last: int | None = None) -> list:
        """The kernels of instructions [first, last) (all by default) bound to ``views`` (one
        per buffer) and ``scratch``: one call per instruction, but an inverted-residual block's
        three instructions bound as one call (``kernels.mbconv``: the first of the three makes
        it, the other two do nothing) where there is no pool (``parallel``)."""
        instructions = self.program.instructions
        last = len(instructions) if last is None else last
        blocks = dict(self._blocks(views, first, last, team)) if parallel is None else {}
        calls: list = []
        i = first
        while i < last:
            if i in blocks:
                calls += [blocks[i], _nothing, _nothing]
                i += 3
            else:
                calls.append(self._prepare_one(instructions[i], views, scratch, parallel, team))
                i += 1
        return calls

    def _blocks(self, views: list[np.ndarray], first: int, last: int, team: Team | None) -> list:
        """``(i, call)`` for each inverted-residual block of :attr:`blocks` among instructions
        [first, last) bound to ``views``, with scratch of their own (one buffer for them all,
        per binding)."""
        program = self.program
        made = [(i, block) for i in self.blocks
                if first <= i and i + 3 <= last and (block := mbconv.block_of(program, i, views)) is not None]
        if not made:
            return []
        ways = team.ways if team is not None else 1
        scratch = np.empty(ways * max(block.scratch_floats() for _, block in made), np.float32)
        return [(i, mbconv.bind_block(program, i, block, views, scratch, team)) for i, block in made]

    def _prepare_one(self, ins, views: list[np.ndarray], scratch: np.ndarray, parallel: Parallel | None,
                     team: Team | None):
        """Instruction ``ins``'s kernel bound to ``views`` (one per buffer) and ``scratch``."""
        spec = KERNELS[ins.op]
        inputs = [views[b] for b in ins.inputs]
        for pos, fn in spec.derive:
            key = self._derived_key(self.program.buffers[ins.inputs[pos]], fn, ins)
            if key is not None:
                inputs[pos] = self.derived[key]
        outputs = [views[b] for b in ins.outputs]
        if spec.team and team is not None:
            return spec.prepare(inputs, outputs, ins.attrs, scratch, team=team)
        if spec.parallel and parallel is not None:
            return spec.prepare(inputs, outputs, ins.attrs, scratch, parallel=parallel)
        return spec.prepare(inputs, outputs, ins.attrs, scratch)

    def _bound_again(self, direct: DirectIO, calls: list, views: list[np.ndarray], scratch: np.ndarray,
                     placed: dict[int, np.ndarray], first: int = 0, parallel: Parallel | None = None,
                     team: Team | None = None) -> list:
        """``calls`` (those of instructions ``first`` on, bound to ``views`` and ``scratch``)
        with the instructions that touch the buffers ``placed`` (buffer -> the caller's input
        or a new output array, or their rows) bound to those arrays for this call."""
        views = list(views)
        for b, array in placed.items():
            views[b] = array
        calls = list(calls)
        instructions = self.program.instructions
        for i in direct.instructions(placed):
            calls[i - first] = self._prepare_one(instructions[i], views, scratch, parallel, team)
        return calls

    def run(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        """Run on ``inputs``; returns fresh output arrays."""
        state = self._state()
        if state.slices is not None or state.image is not None:
            arrays, results = self._batch_io(inputs)
            trial = self.form_trial
            form = 0 if state.slices is None else 1 if state.image is None else trial.form()
            start = time.perf_counter()
            if form == 0:
                self._run_images(state.image, arrays, results)
            else:
                self._run_slices(state.slices, arrays, results)
            if trial is not None and state.slices is not None and state.image is not None:
                trial.record(form, time.perf_counter() - start)
                if trial.choice is not None:  # decided: this thread lets the other form's memory go
                    state.image, state.slices = (state.image, None) if trial.choice == 0 else (None, state.slices)
            return results
        if len(inputs) != len(state.inputs):
            raise InputError(
                f"glow_like method {self.program.method!r} takes {len(state.inputs)} inputs, got {len(inputs)}"
            )
        direct, buffers = self.direct, self.program.buffers
        placed: dict[int, np.ndarray] = {}
        if direct is not None:
            fresh = {p: recycled_empty(buffers[b].shape, DTYPES[buffers[b].dtype]) for p, b in direct.outputs}
            placed = direct.placed(inputs, state.inputs, fresh)
        for dst, src, b in zip(state.inputs, inputs, self.program.inputs):
            if type(src) is not np.ndarray:
                src = np.asarray(src)
            if src.shape != dst.shape:
                raise InputError(
                    f"glow_like method {self.program.method!r}: expected input shape {list(dst.shape)}, "
                    f"got {list(src.shape)}"
                )
            if placed.get(b) is src:
                continue  # read where the caller holds it
            if src.dtype == dst.dtype:
                dst[...] = src  # a quarter of np.copyto's cost on tiny inputs
            else:
                np.copyto(dst, src, casting="same_kind")
        calls = (self._bound_again(direct, state.calls, state.views, state.scratch, placed, 0, self.parallel, self.team)
                 if placed else state.calls)
        guard = self.team.guard if self.team is not None else None
        start = guard.begin() if guard is not None else 0.0
        if self.blas_threads is not None and self.uses_blas:
            with blas_limit(self.blas_threads):
                for call in calls:
                    call()
        else:
            for call in calls:
                call()
        if guard is not None:
            guard.end(start)
        return [placed[b] if b in placed else recycled_copy(out) for b, out in zip(self.program.outputs, state.outputs)]

    def _batch_io(self, inputs: Sequence[np.ndarray]) -> tuple[list[np.ndarray], list[np.ndarray]]:
        """The checked inputs and fresh output arrays of a call that runs in parts of the batch."""
        program = self.program
        if len(inputs) != len(program.inputs):
            raise InputError(f"glow_like method {program.method!r} takes {len(program.inputs)} inputs, got {len(inputs)}")
        arrays = []
        for b, src in zip(program.inputs, inputs):
            src = np.asarray(src)
            if src.shape != program.buffers[b].shape:
                raise InputError(f"glow_like method {program.method!r}: expected input shape "
                                 f"{list(program.buffers[b].shape)}, got {list(src.shape)}")
            arrays.append(src)
        results = [recycled_empty(program.buffers[b].shape, DTYPES[program.buffers[b].dtype]) for b in program.outputs]
        return arrays, results

    def _run_slices(self, slices: list[_Slice], arrays: list[np.ndarray], results: list[np.ndarray]) -> None:
        """Batch-slice mode: each worker copies its rows in, runs every call, copies them out
        (the direct inputs and outputs read and written in place)."""
        program = self.program

        def run_slice(j: int) -> None:
            part = slices[j]
            rows, calls, direct, head = part.rows, part.calls, part.direct, part.head
            placed = direct.placed(arrays, part.inputs, results, rows) if direct is not None else {}
            if head is not None:
                self._run_head(part, arrays, results)
            for p, (dst, src) in enumerate(zip(part.inputs, arrays)):
                if program.inputs[p] not in placed and (head is None or p not in head.copied):
                    np.copyto(dst, src[rows], casting="same_kind")
            if placed:
                calls = self._bound_again(direct, calls, part.views, part.scratch, placed, self.head if head else 0)
            for call in calls:
                call()
            for p, (result, out) in enumerate(zip(results, part.outputs)):
                if p not in part.in_place:
                    result[rows] = out

        with blas_limit(1):
            self.parallel(run_slice)

    def _run_head(self, part: _Slice, arrays: list[np.ndarray], results: list[np.ndarray]) -> None:
        """Each image of the slice through its head, then into the slice's rows."""
        head, inputs = part.head, self.program.inputs
        direct = head.direct
        for i in range(part.rows.start, part.rows.stop):
            image = slice(i, i + 1)
            placed = direct.placed(arrays, head.inputs, results, image) if direct is not None else {}
            for p in head.copied:
                if inputs[p] not in placed:
                    np.copyto(head.inputs[p], arrays[p][image], casting="same_kind")
            calls = self._bound_again(direct, head.calls, head.views, part.scratch, placed) if placed else head.calls
            for call in calls:
                call()
            row = i - part.rows.start
            for one, rows in head.crossing:
                rows[row:row + 1] = one

    def _run_images(self, image: _Slice, arrays: list[np.ndarray], results: list[np.ndarray]) -> None:
        """One image at a time through the team-bound calls, on the calling thread."""
        guard = self.team.guard if self.team is not None else None
        start = guard.begin() if guard is not None else 0.0
        with blas_limit(1):
            for i in range(len(arrays[0]) if arrays else 0):
                for dst, src in zip(image.inputs, arrays):
                    np.copyto(dst, src[i:i + 1], casting="same_kind")
                for call in image.calls:
                    call()
                for result, out in zip(results, image.outputs):
                    result[i:i + 1] = out
        if guard is not None:
            guard.end(start)

    def close(self) -> None:
        """Release the handle (nothing to stop: the worker threads are not the handle's but
        the process-wide pool's of ``lowerkit.backend.cpu``, shared by every handle and backend)."""
