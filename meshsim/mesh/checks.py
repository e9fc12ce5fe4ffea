"""What only the mesh asks of a scenario, beyond each key's own range (meshsim.scenario calls it
through meshsim.machine.Machine.check_scenario; the layer pipeline's rules, which follow from the
workload, are meshsim.scenario's)."""

from __future__ import annotations


def check_scenario(ok, get, add, shown) -> None:
    """Problems of a mesh scenario that involve several keys, each reported through `add`."""
    mtype, wtype = "machine.type", "workload.type"
    if ok(wtype) and get(wtype) == "transformer":
        add(wtype, [mtype], 'applies only when machine.type is "rdu" or "ipu"; the mesh runs a transformer as '
                            '"layer_pipeline"')
