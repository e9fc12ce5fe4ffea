"""Numba JIT flags, in one place (STYLE: "JIT flags in one module").

- cache=True: compiled machine code is kept on disk, so a second run starts in about a second.
- no fastmath anywhere: cycle state is integer and floats must round the same as the reference.
- parallel=True only on the drivers that split rows over threads.
"""

JIT = dict(cache=True, nogil=True, boundscheck=False, error_model="numpy")
JIT_PARALLEL = dict(JIT, parallel=True)
