"""Numba JIT flags, in one place (docs/design.md, "Layout").

- cache=True: compiled machine code is kept on disk, so a second run starts in about a second.
- no fastmath anywhere: cycle state is integer and floats must round the same as the reference.
- parallel only on the drivers that split rows over threads, and there only their prange loops.
- no reference counting in the row stepper, which allocates nothing.

Threads spin only briefly at barriers: OpenMP's workers meet at a barrier every simulated cycle,
and libgomp's default is to spin there for about 3 ms before sleeping. A spinning thread holds a
core that another process (a second run, a sweep, a notebook) or this run's other thread needs,
and the barrier then waits for the OS to schedule the descheduled one: two 256 x 256 runs at once
took 8.5 times as long as with one thread each. Sleeping at once (OMP_WAIT_POLICY=PASSIVE) costs
the wake-up at every barrier instead, 10-15% of the layer pipeline's speed on a quiet host.
GOMP_SPINCOUNT=3000 (about 30 microseconds by libgomp's reckoning) keeps the two runs within 1.3
times of one thread each and the quiet speed where it was. It is set here, before any parallel
kernel starts the thread pool, unless the environment sets GOMP_SPINCOUNT or OMP_WAIT_POLICY
itself (docs/mesh.md, "Threads").
"""

import os

if "GOMP_SPINCOUNT" not in os.environ and "OMP_WAIT_POLICY" not in os.environ:
    os.environ["GOMP_SPINCOUNT"] = "3000"

JIT = dict(cache=True, nogil=True, boundscheck=False, error_model="numpy")


def _prange_only():
    """Only the explicit prange loops run on threads: Numba would otherwise turn every array
    allocation, slice assignment and reduction in a driver into a parallel region of its own, each
    compiled apart (about 5 s of the cold compile) and each a fork and barrier of the thread pool
    every cycle. An instance, not a dict: Numba consumes a dict's keys when it reads it. Plain
    parallel=True where this Numba lacks the class (the same results, compiled more slowly)."""
    try:
        from numba.core.cpu_options import ParallelOptions
    except ImportError:
        return True
    return ParallelOptions(dict(prange=True, comprehension=False, reduction=False, inplace_binop=False,
                                setitem=False, numpy=False, stencil=False, fusion=False))


def _without_refcounts():
    """JIT flags without Numba's reference counting, for a kernel that allocates nothing (its
    arrays belong to its caller, which keeps them alive): Numba's `_nrt` option, where this Numba
    has it; the plain flags where it does not (the same results, somewhat slower)."""
    try:
        from numba.core.options import DefaultOptions
    except ImportError:
        return JIT
    return dict(JIT, _nrt=False) if hasattr(DefaultOptions, "_nrt") else JIT


JIT_PARALLEL = dict(JIT, parallel=_prange_only())
JIT_NO_REFCOUNT = _without_refcounts()
