"""The Numba threads a run uses: as many as asked, never more than the cores this process may run
on (docs/mesh.md, "Threads"; a machine whose kernels are serial asks for one)."""

from __future__ import annotations

import os

import numba


def available_cores() -> int:
    """The cores this process may run on (its affinity mask; at most Numba's thread pool)."""
    try:
        n = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        n = os.cpu_count() or 1
    return max(1, min(n, numba.config.NUMBA_NUM_THREADS))


def set_threads(threads: int, default: int = 1) -> int:
    """Use `threads` Numba threads, at most the cores this process may run on; 0: `default` (the
    machine's choice for its inputs, at most the cores). Returns the number in use."""
    n = max(1, min(default, available_cores())) if threads == 0 else min(threads, available_cores())
    numba.set_num_threads(n)
    return n
