"""Counter-based random draws (docs/mesh.md, "Workloads"; docs/design.md, "Cycle semantics").

A draw is a pure function of (seed, stream, cycle, unit, index): SplitMix64's finaliser applied to
a key built from them, so no thread ever holds random state and results do not depend on the
order in which units are visited.

    draw(seed, stream, t, u, i) = mix64(cycle_key(seed, stream, t) ^ u*G_UNIT ^ i*G_INDEX)

The kernels compute cycle_key once per cycle and one mix64 per unit and draw.
"""

import numpy as np
from numba import njit

from .config import JIT

M1 = np.uint64(0xBF58476D1CE4E5B9)
M2 = np.uint64(0x94D049BB133111EB)
G_STREAM = np.uint64(0x9E3779B97F4A7C15)
G_CYCLE = np.uint64(0xD1B54A32D192ED03)
G_UNIT = np.uint64(0xC2B2AE3D27D4EB4F)
G_INDEX = np.uint64(0x165667B19E3779F9)
S30 = np.uint64(30)
S27 = np.uint64(27)
S31 = np.uint64(31)
S32 = np.uint64(32)
S11 = np.uint64(11)

STREAM_SETUP = 0
STREAM_INJECT = 1
STREAM_MIGRATE = 3


@njit(**JIT)
def mix64(z):
    """SplitMix64 finaliser of a uint64 (wraps modulo 2**64)."""
    z = (z ^ (z >> S30)) * M1
    z = (z ^ (z >> S27)) * M2
    return z ^ (z >> S31)


@njit(**JIT)
def cycle_key(seed, stream, t):
    """Key shared by every draw of one (seed, stream, cycle): uint64."""
    k = mix64(np.uint64(seed) ^ (np.uint64(stream) * G_STREAM))
    return mix64(k ^ (np.uint64(t) * G_CYCLE))


@njit(**JIT)
def unit_draw(key, u, i):
    """draw(...) given the cycle key: uint64."""
    return mix64(key ^ (np.uint64(u) * G_UNIT) ^ (np.uint64(i) * G_INDEX))


@njit(**JIT)
def draw(seed, stream, t, u, i):
    """The counter-based draw of docs/mesh.md: uint64."""
    return unit_draw(cycle_key(seed, stream, t), u, i)


@njit(**JIT)
def unit_interval_open0(h):
    """Map a draw to (0, 1]: ((h >> 11) + 1) * 2**-53."""
    return (np.float64(h >> S11) + 1.0) * (1.0 / 9007199254740992.0)


@njit(**JIT)
def unit_interval(h):
    """Map a draw to [0, 1): (h >> 11) * 2**-53."""
    return np.float64(h >> S11) * (1.0 / 9007199254740992.0)
