"""`meshsim bench`'s own roofline: the bytes of state a PE-cycle touches are counted from the state's
dtypes and the run's events (docs/design.md, "Performance"). Figures of speed are never tested."""

import pytest
from mesh_compare import small_scenario

from kernels import mesh as K
from meshsim.bench import task_path_bytes, traffic_path_bytes
from meshsim.mesh.sim import MeshSim, build_inputs


def _run(sc, cycles=60):
    sim = MeshSim(build_inputs(sc), cycles)
    sim.advance(cycles)
    return sim


def test_the_task_path_counts_every_pes_fields_and_each_event_it_ran():
    busy = task_path_bytes(_run(small_scenario(6, 8)), 60)
    # uint8 counts in 4 directions, read and written; uint8 queue length, uint16 server (read and
    # written), uint32 threshold, uint8 depth written and, with migration on, a neighbour's read.
    assert busy["every PE: send and receive counts (read, written)"] == 16
    assert busy["every PE: queue length, server, threshold, depth"] == 11
    assert busy["offered tasks"] > 0 and busy["started tasks"] > 0 and busy["completed tasks"] > 0
    assert busy["migrated tasks"] > 0
    assert busy["total"] == pytest.approx(sum(v for k, v in busy.items() if k != "total"))
    idle = task_path_bytes(_run(small_scenario(6, 8, workload__injection_rate=0.0, migration__policy="none")), 60)
    assert idle["total"] == 16 + 10  # nothing happens: only every PE's own fields, no neighbour's depth


def test_routed_traffic_counts_each_message_on_a_link():
    sim = _run(small_scenario(6, 8, workload="traffic"))
    b = traffic_path_bytes(sim, 60)
    assert b["every PE: queue length, server, threshold, depth, router and source queues"] == 1 + 4 + 4 + 1 + 8 + 4
    sent = float(sim.series[:60, K.S_LINK_SENT].sum()) / (48 * 60)
    assert sent > 0 and b["messages sent"] == pytest.approx(sent * (8 + 16))
    assert b["total"] == pytest.approx(sum(v for k, v in b.items() if k != "total"))
