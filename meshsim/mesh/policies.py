"""The migration policies, a row each (docs/mesh.md, "Migration", step 4): the name a scenario gives
(`migration.policy`), the kernel's id for it (`kernels.mesh.POLICY_<NAME>`), its clause of the
key's description, the state the kernel keeps for it alone, and the runs `meshsim bench` times for
it. The key's choices and description (meshsim/mesh/keys.py), the state's allocation
(meshsim/mesh/state.py) and the bench (meshsim/mesh/bench.py) all read this table.

Reading a scenario imports this module: it imports neither the kernels nor Numba.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass(frozen=True)
class Policy:
    """One migration policy.

    name: the value of migration.policy; the kernel's id for it is `kernels.mesh.POLICY_<NAME>`.
    summary: its clause of migration.policy's description.
    state: the arrays of the kernel's state (MeshState fields) it alone uses: field -> (its shape
        from (rows, cols, history slots), dtype). Under any other policy each is a placeholder of
        ones in every dimension.
    bench: the runs `meshsim bench` times for it: (label, migration keys besides the policy).
    """

    name: str
    summary: str
    state: dict = field(default_factory=dict)
    bench: tuple = ()

    @property
    def kernel_id(self) -> int:
        from kernels import mesh as K

        return int(getattr(K, f"POLICY_{self.name.upper()}"))

    def layout(self, rows: int, cols: int, history: int) -> dict:
        """Its own state: field -> (shape, dtype)."""
        return {name: (shape(rows, cols, history), dtype) for name, (shape, dtype) in self.state.items()}


def _pressures(rows: int, cols: int, history: int) -> tuple:
    return history, rows, cols


def _per_pe(rows: int, cols: int, history: int) -> tuple:
    return rows, cols


POLICIES: tuple[Policy, ...] = (
    Policy("none", "none disables migration", bench=(("none", {}),)),
    Policy("least_loaded", "least_loaded moves a task to the least loaded neighbour",
           bench=(("least_loaded", {}), ("least_loaded, hysteresis 2", {"hysteresis": 2}))),
    Policy("random_lower", "random_lower to one at random among those less loaded", bench=(("random_lower", {}),)),
    Policy("diffusion", "diffusion a share of the depth difference to each less loaded neighbour "
                        "(migration.diffusion_rate)", bench=(("diffusion", {}),)),
    Policy("gradient", "gradient towards the nearest light PE, down a pressure surface",
           state={"press_h": (_pressures, np.uint8)}, bench=(("gradient", {}),)),
    Policy("work_stealing", "work_stealing has an idle PE ask a random neighbour for a task (requests and "
                            "refusals are messages on the links)",
           state={"steal": (_per_pe, np.uint8)}, bench=(("work_stealing", {}),)),
)

BY_NAME: dict[str, Policy] = {p.name: p for p in POLICIES}


def names() -> tuple[str, ...]:
    """The policies' names, in table order: migration.policy's choices."""
    return tuple(BY_NAME)


def by_kernel_id(kernel_id: int) -> Policy:
    """The policy whose kernel id is `kernel_id`."""
    return next(p for p in POLICIES if p.kernel_id == kernel_id)


def state_layout(policy: str, rows: int, cols: int, history: int) -> dict:
    """Every policy's state fields: `policy`'s at their size, every other's as a placeholder."""
    out = {}
    for p in POLICIES:
        for name, (shape, dtype) in p.state.items():
            real = shape(rows, cols, history)
            out[name] = (real if p.name == policy else (1,) * len(real), dtype)
    return out


def description() -> str:
    """migration.policy's description, from the policies' summaries."""
    clauses = [p.summary for p in POLICIES]
    return ("How tasks move between neighbouring PEs (docs/mesh.md, step 4): " + "; ".join(clauses[:-1])
            + "; and " + clauses[-1] + ".")


def bench_runs() -> tuple:
    """The runs `meshsim bench` times, every policy's in table order: (label, migration keys)."""
    return tuple((label, {"policy": p.name, **keys}) for p in POLICIES for label, keys in p.bench)
