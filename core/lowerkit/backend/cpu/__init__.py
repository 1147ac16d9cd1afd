"""CPU support that backend plugins compose instead of writing their own.

- :func:`cpu_count` — the cores this process may use (its affinity, not the machine's count).
- :func:`run_parallel`, :class:`Parallel`, :func:`pool` — one process-wide worker pool per
  thread count; the calling thread runs one share.
- :func:`aligned_empty` — arrays whose data starts on a cache line (numpy's large arrays do not);
  :func:`aligned_buffer` — the byte buffer beneath one, and that line's offset in it.
- :func:`recycled_empty`, :func:`recycled_copy`, :func:`recycled_buffer` — large arrays a
  call returns, on buffers that earlier calls' arrays gave back (no fresh pages to zero at
  every call).
- :func:`pack_lifetimes` — offsets in one arena for buffers of known lifetimes (a static memory plan).
- :func:`split` — a range of work cut into contiguous, nearly equal parts.
- :class:`Team`, :func:`make_team`, :class:`StallGuard`, :func:`team_off`,
  :func:`pin_team_workers` — one image on several cores as compiled parallel regions
  (``jit.team``), the guard that turns them off while another process holds a core, and the
  pinning of their worker threads; :mod:`.team_layers` — how each kind of layer runs on a team.
- :class:`FormTrial` — two forms of the same work, timed alternately on the first calls;
  the faster one runs from then on.
- :func:`head_length` — how many leading steps a batch slice runs image by image (those on
  large maps, or on middling maps with small weights).
- :func:`blas_limit`, :func:`blas_threads_beside` — one process-wide, reference-counted
  BLAS thread limit (threadpoolctl, imported on first use).
- :func:`winograd_matrices`, :func:`interpolation_points` — Winograd/Toom-Cook F(m, r)
  transform matrices; :func:`input_scratch_floats`, :func:`output_group_tiles` — the
  compiled F(4x4, 3x3) transforms' scratch.
- :func:`pad_into`, :func:`im2col_view`, :func:`tile_view`, :func:`merge_last` — im2col
  columns and transform tiles as strided views of padded images.

Only backends import this package; the rest of the core never does. It imports only
numpy and the standard library (threadpoolctl lazily). See docs/cpu-support.md.
"""

from __future__ import annotations

from .aligned import ALIGNMENT, aligned_buffer, aligned_empty
from .arena import pack_lifetimes
from .blas import BlasLimiter, blas_limit, blas_threads_beside
from .cores import PINNING_ENV, cpu_count
from .im2col import im2col_view, merge_last, pad_into, tile_view
from .pool import Parallel, pool, run_parallel
from .recycle import recycled_buffer, recycled_copy, recycled_empty
from .slice_head import HEAD_MID_PIXELS, HEAD_MIN_PIXELS, head_length
from .split import split
from .team import StallGuard, Team, make_team, pin_team_workers, team_off
from .trial import FormTrial
from .winograd import input_scratch_floats, interpolation_points, output_group_tiles, winograd_matrices

__all__ = [
    "ALIGNMENT",
    "BlasLimiter",
    "FormTrial",
    "HEAD_MID_PIXELS",
    "HEAD_MIN_PIXELS",
    "PINNING_ENV",
    "Parallel",
    "StallGuard",
    "Team",
    "aligned_buffer",
    "aligned_empty",
    "blas_limit",
    "blas_threads_beside",
    "cpu_count",
    "head_length",
    "im2col_view",
    "input_scratch_floats",
    "make_team",
    "interpolation_points",
    "merge_last",
    "output_group_tiles",
    "pack_lifetimes",
    "pad_into",
    "pin_team_workers",
    "pool",
    "recycled_buffer",
    "recycled_copy",
    "recycled_empty",
    "run_parallel",
    "split",
    "team_off",
    "tile_view",
    "winograd_matrices",
]
