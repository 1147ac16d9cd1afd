"""Coverage-guided fuzzing of one target with atheris (libFuzzer), from its seed corpus.

    python -m fuzz.run container -runs=1000000 -timeout=5 -rss_limit_mb=2048
    python -m fuzz.run glow_like -max_total_time=600
    python -m fuzz.run nnpack -runs=1000000

The first argument names the target (``container``, ``glow_like``, ``nnpack``); the rest go
to libFuzzer. The corpus lives in ``fuzz/corpus/<target>/`` (seeded on first use from
:mod:`fuzz.seeds`); crashing inputs are written to ``fuzz/crashes/<target>/``. Every input
that raises anything but ``FormatError`` (or, for files naming a backend not installed
here, ``BackendNotFoundError``/``BackendNotAvailableError``) is a crash.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main(argv: list[str]) -> None:
    if len(argv) < 2 or argv[1] not in ("container", "glow_like", "nnpack"):
        raise SystemExit(f"usage: python -m fuzz.run {{container,glow_like,nnpack}} [libFuzzer flags]")
    import atheris

    name = argv[1]
    # Compile bounds what it allocates per input (see docs/fuzzing.md).
    os.environ.setdefault("LOWERKIT_GLOW_LIKE_MAX_ARENA", str(64 * 2**20))
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    with atheris.instrument_imports(include=["lowerkit", "lowerkit_glow_like", "lowerkit_nnpack",
                                             "lowerkit_reference", "fuzz"]):
        import lowerkit  # noqa: F401
        import lowerkit_glow_like  # noqa: F401
        import lowerkit_nnpack  # noqa: F401
        import lowerkit_reference  # noqa: F401
        from fuzz import targets
    corpus = HERE / "corpus" / name
    if not corpus.is_dir() or not any(corpus.iterdir()):
        corpus.mkdir(parents=True, exist_ok=True)
        for seed_name, data in targets.seeds_for(name).items():
            (corpus / seed_name).write_bytes(data)
    crashes = HERE / "crashes" / name
    crashes.mkdir(parents=True, exist_ok=True)
    target = targets.TARGETS()[name]
    args = [argv[0], *argv[2:], f"-artifact_prefix={crashes}/", str(corpus)]
    atheris.Setup(args, target)
    atheris.Fuzz()


if __name__ == "__main__":
    main(sys.argv)
