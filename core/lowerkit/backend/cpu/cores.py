"""How many cores this process may run on, and whether its worker threads get one each."""

from __future__ import annotations

import os


def cpu_count() -> int:
    """Cores this process may use: its CPU affinity, not the machine's CPU count.

    ``os.cpu_count()`` counts every CPU of the machine, also those a container, ``taskset``
    or a batch scheduler keeps this process off; sizing pools by it oversubscribes the
    cores the process really has. Python 3.13's ``os.process_cpu_count()`` is that answer
    (and honours ``PYTHON_CPU_COUNT``); before it, the affinity mask (Linux) is.
    """
    process_cpu_count = getattr(os, "process_cpu_count", None)
    if process_cpu_count is not None:  # pragma: no cover - Python 3.13+
        return process_cpu_count() or 1
    try:
        return len(os.sched_getaffinity(0)) or 1
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


PINNING_ENV = "LOWERKIT_TEAM_PINNING"
"""Environment variable: ``0`` leaves the team threads and the worker pool's threads (and
the threads calling the pool) where the scheduler puts them."""


def pinning_on() -> bool:
    """Whether worker threads may be pinned to CPUs here: ``sched_setaffinity`` exists (Linux)
    and :data:`PINNING_ENV` does not turn pinning off."""
    return (hasattr(os, "sched_setaffinity")
            and os.environ.get(PINNING_ENV, "1").strip().lower() not in ("0", "off", "false", "no"))
