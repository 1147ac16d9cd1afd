"""compile_spec options of the glow_like backend, checked with messages that name them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from lowerkit.errors import InputError

KNOWN = ("opt_level", "threads", "precision", "profile")


@dataclass(frozen=True, slots=True)
class Options:
    opt_level: int = 2  # 0 straight translation, 1 cleanup, 2 everything
    # None: one intra-op worker per CPU of the machine that runs it; n: n workers; each
    # with single-threaded BLAS. "blas": no workers, BLAS's own threading as configured.
    threads: int | str | None = None
    precision: str = "fp32"  # or "int8" (needs a profile)
    profile: Any = None  # a Profile or a path to one (int8 only)

    def stored(self) -> dict[str, Any]:
        """What the payload keeps (the profile itself is consumed at preprocess)."""
        return {"opt_level": self.opt_level, "threads": self.threads, "precision": self.precision}


def parse_options(method: str, spec: dict[str, Any] | None) -> Options:
    """Validate one method's options from ``compile_spec``."""
    spec = dict(spec or {})
    unknown = sorted(set(spec) - set(KNOWN))
    if unknown:
        # An error, as in every shipped backend: a misspelled option must not be ignored.
        raise InputError(
            f"glow_like compile_spec for method {method!r}: unknown option(s) {unknown}; "
            f"known options are {list(KNOWN)}"
        )
    opt = spec.get("opt_level", 2)
    if isinstance(opt, bool) or not isinstance(opt, int) or opt not in (0, 1, 2):
        raise InputError(f"glow_like compile_spec for method {method!r}: opt_level must be 0, 1 or 2, got {opt!r}")
    threads = spec.get("threads")
    if threads is not None and threads != "blas" and (
        isinstance(threads, bool) or not isinstance(threads, int) or threads < 1
    ):
        raise InputError(
            f"glow_like compile_spec for method {method!r}: threads must be a positive int, 'blas' or None, "
            f"got {threads!r}"
        )
    precision = spec.get("precision", "fp32")
    if precision not in ("fp32", "int8"):
        raise InputError(
            f"glow_like compile_spec for method {method!r}: precision must be 'fp32' or 'int8', got {precision!r}"
        )
    profile = spec.get("profile")
    if precision == "int8" and profile is None:
        raise InputError(
            f"glow_like compile_spec for method {method!r}: precision 'int8' needs a 'profile' "
            "(from lowerkit_glow_like.calibrate, or the path it was saved to)"
        )
    if precision == "int8" and opt != 2:
        raise InputError(
            f"glow_like compile_spec for method {method!r}: precision 'int8' needs opt_level 2, got "
            f"{opt} (calibration profiles name the values of the fully optimized graph)"
        )
    return Options(opt, threads, precision, profile)
