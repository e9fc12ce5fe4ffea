"""JIT-compiled kernels of meshsim and nothing else: they import numpy, numba (and llvmlite through
it, for the prefetch intrinsic) and the standard library, never meshsim (docs/design.md, "Layout";
tests/test_layering.py holds them to it).

`kernels.reference` holds the slow plain-Python oracles the kernels are tested against.
"""
