"""Slow, plain-Python reference implementations ("oracles") of the meshsim kernels."""
