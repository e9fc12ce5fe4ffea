"""meshsim: a Numba-accelerated, cycle-approximate simulator of spatial AI accelerators.

See DESIGN.md and docs/mesh.md for the machines' semantics. Library entry point: `run_scenario`.
"""

__version__ = "0.1.0"
