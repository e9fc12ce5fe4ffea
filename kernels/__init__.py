"""JIT-compiled kernels of meshsim and nothing else: imports numpy, numba and math only.

`kernels.reference` holds the slow plain-Python oracles the kernels are tested against.
"""
