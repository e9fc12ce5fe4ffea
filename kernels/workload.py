"""Per-PE injection fields built once before a run (docs/mesh.md, "Workloads").

Computed with Numba so that `math.log`, `math.cos` and `math.exp` are the platform's libm, exactly
as in the plain reference.
"""

import math

import numpy as np
from numba import njit

from .config import JIT
from .rng import STREAM_SETUP, cycle_key, unit_draw, unit_interval, unit_interval_open0


@njit(**JIT)
def lognormal_rates(n_units, injection_rate, sigma, seed):
    """Per-PE rates injection_rate * exp(sigma*z - sigma^2/2), clipped to [0, 1]: float64[n_units].

    z is standard normal by Box-Muller from the set-up stream (cycle 0, draw indices 0 and 1).
    """
    out = np.empty(n_units, np.float64)
    key = cycle_key(seed, STREAM_SETUP, 0)
    for u in range(n_units):
        u1 = unit_interval_open0(unit_draw(key, u, 0))
        u2 = unit_interval(unit_draw(key, u, 1))
        z = math.sqrt(-2.0 * math.log(u1)) * math.cos(2.0 * math.pi * u2)
        r = injection_rate * math.exp(sigma * z - sigma * sigma / 2.0)
        out[u] = min(max(r, 0.0), 1.0)
    return out


@njit(**JIT)
def rate_thresholds(rates):
    """Bernoulli thresholds min(floor(rate * 2**32), 2**32 - 1) as uint32, same shape as rates."""
    out = np.empty(rates.shape, np.uint32)
    flat_in = rates.reshape(-1)  # rates must be C-contiguous
    flat_out = out.reshape(-1)
    for i in range(flat_in.size):
        v = math.floor(flat_in[i] * 4294967296.0)
        if v > 4294967295.0:
            v = 4294967295.0
        flat_out[i] = np.uint32(v)
    return out
