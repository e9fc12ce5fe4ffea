"""meshsim: a Numba-accelerated, cycle-approximate simulator of spatial AI accelerators.

See docs/design.md for the design, and docs/mesh.md, docs/rdu.md and docs/ipu.md for the machines'
semantics. Library entry point: `run_scenario`.
"""

__version__ = "0.1.0"
