"""The fast mesh kernel against the plain reference, cycle by cycle (docs/design.md, "Correctness": a
slow oracle for every kernel; docs/mesh.md is the contract both are written from)."""

import numpy as np
import pytest
from mesh_compare import compare_cycle_by_cycle, small_scenario

from kernels import mesh as K
from kernels.reference.mesh_ref import draw as ref_draw
from kernels.reference.mesh_ref import rate_map
from kernels.rng import draw
from meshsim.mesh import policies
from meshsim.mesh.sim import MeshSim, build_inputs, injection_rates

GRIDS = [(1, 1), (1, 5), (2, 2), (3, 5), (4, 6)]
#: Every policy of the table (meshsim/mesh/policies.py): a policy added there is tested here.
POLICIES = list(policies.names())


def test_counter_based_draws_match_the_reference():
    for args in [(0, 0, 0, 0, 0), (1, 1, 5, 17, 0), (123456789, 3, 999, 850000, 3), (2**63 - 1, 1, 2**31, 7, 1)]:
        seed, stream, t, u, i = args
        assert int(draw(seed=np.uint64(seed), stream=stream, t=t, u=u, i=i)) == ref_draw(*args)


@pytest.mark.parametrize("workload", ["uniform", "hotspot", "skewed"])
def test_rate_maps_match_the_reference(workload):
    sc = small_scenario(7, 9, workload=workload, workload__sigma=1.5) if workload == "skewed" else \
        small_scenario(7, 9, workload=workload)
    wl = sc.values["workload"]
    expected = rate_map(7, 9, workload, wl["injection_rate"], hot_rate=wl["hot_rate"], hot_regions=sc.hot_regions(),
                        sigma=wl["sigma"], seed=sc.get("run", "seed"))
    assert injection_rates(sc).ravel().tolist() == expected


@pytest.mark.parametrize("grid", GRIDS, ids=lambda g: f"{g[0]}x{g[1]}")
@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("hop_latency", [1, 2])
def test_kernel_equals_reference_uniform_work(grid, policy, hop_latency):
    sc = small_scenario(*grid, migration__policy=policy, machine__hop_latency_cycles=hop_latency,
                        machine__link_buffer_messages=3)
    totals = compare_cycle_by_cycle(sc, 120)
    assert totals["completed"] > 0
    if policy != "none" and grid[0] * grid[1] > 1:
        assert totals["migrated"] > 0


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("hop_latency", [1, 2])
def test_kernel_equals_reference_hotspot_fixed_work(policy, hop_latency):
    sc = small_scenario(5, 6, workload="hotspot", migration__policy=policy, machine__hop_latency_cycles=hop_latency,
                        workload__hot_rate=0.5, workload__injection_rate=0.02, workload__work_distribution="fixed",
                        workload__work_cycles=4, workload__hot_regions=[[1, 1, 3, 4]])
    compare_cycle_by_cycle(sc, 150)


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("hop_latency", [1, 2])
def test_kernel_equals_reference_skewed_geometric_work(policy, hop_latency):
    sc = small_scenario(4, 5, workload="skewed", migration__policy=policy, machine__hop_latency_cycles=hop_latency,
                        workload__sigma=1.2, workload__injection_rate=0.15, workload__work_distribution="geometric",
                        workload__work_cycles=6, workload__work_max_cycles=40)
    compare_cycle_by_cycle(sc, 150)


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("hop_latency", [1, 2])
def test_kernel_equals_reference_trace(tmp_path, policy, hop_latency):
    rng = np.random.default_rng(3)
    rows, cols, n = 3, 4, 400
    events = [(int(rng.integers(0, 100)), int(rng.integers(0, rows)), int(rng.integers(0, 2)),
               int(rng.integers(1, 12))) for _ in range(n)]
    events.append((500, 0, 0, 3))  # beyond the run: never offered
    path = tmp_path / "t.csv"
    path.write_text("cycle,row,col,work_cycles\n" + "".join(f"{a},{b},{c},{d}\n" for a, b, c, d in events))
    sc = small_scenario(rows, cols, workload="trace", trace_file=str(path), migration__policy=policy,
                        machine__hop_latency_cycles=hop_latency, migration__max_per_cycle=2)
    totals = compare_cycle_by_cycle(sc, 150, trace_events=events)
    assert totals["injected"] == n
    assert totals["refused"] > 0


# Migration on in the default run (its quiet segments are the harder case; one policy, the others and the
# runs without it under -m slow), and
# in the default run through tests/test_pipeline_kernel.py's wide case, which skips quiet segments with
# no policy.
@pytest.mark.parametrize("policy, hop_latency", [
    pytest.param("none", 1, marks=pytest.mark.slow), pytest.param("none", 2, marks=pytest.mark.slow),
    pytest.param("least_loaded", 1, marks=pytest.mark.slow), ("least_loaded", 2),
    pytest.param("gradient", 2, marks=pytest.mark.slow)])
def test_kernel_equals_reference_where_quiet_segments_are_skipped(policy, hop_latency):
    """A grid of three segments of columns, work offered only in a hot spot: tasks migrate out and
    back, so segments go quiet, are skipped, and wake again as tasks reach them."""
    sc = small_scenario(4, 150, workload="hotspot", migration__policy=policy, migration__threshold=1,
                        machine__hop_latency_cycles=hop_latency, workload__injection_rate=0.0,
                        workload__hot_rate=0.6, workload__hot_regions=[[1, 60, 3, 66]],
                        workload__work_distribution="fixed", workload__work_cycles=5)
    totals = compare_cycle_by_cycle(sc, 260)
    assert totals["quiet_segments"] > 0 and totals["completed"] > 0
    if policy != "none":
        assert totals["migrated"] > 0


@pytest.mark.parametrize("policy, hop_latency", [("least_loaded", 1),
                                                 pytest.param("random_lower", 2, marks=pytest.mark.slow)])
def test_kernel_equals_reference_with_hysteresis(policy, hop_latency):
    """A PE that starts shedding above the threshold goes on down to threshold - hysteresis
    (docs/mesh.md, step 4): a hot spot on a grid of three segments, its shedding PEs beside quiet
    ones that are skipped. With hysteresis more tasks move than without (the kernel alone: the plain
    rule is compared with the reference elsewhere), and PEs go on shedding with queues the plain
    threshold rule would leave alone."""
    over = dict(workload="hotspot", migration__policy=policy, migration__threshold=3,
                machine__hop_latency_cycles=hop_latency, machine__queue_capacity=8, workload__injection_rate=0.0,
                workload__hot_rate=0.7, workload__hot_regions=[[1, 60, 3, 66]],
                workload__work_distribution="fixed", workload__work_cycles=4)
    sticky = compare_cycle_by_cycle(small_scenario(4, 150, migration__hysteresis=2, **over), 200)
    plain = MeshSim(build_inputs(small_scenario(4, 150, **over)), 200)
    plain.advance(200)
    assert sticky["migrated"] > int(plain.series[:200, K.S_MIGRATED].sum()) > 0
    assert sticky["shedding_within_threshold"] > 0 and sticky["quiet_segments"] > 0


@pytest.mark.parametrize("hysteresis, hop_latency, bw", [(0, 1, 2), (2, 2, 1)])
def test_kernel_equals_reference_with_work_stealing(hysteresis, hop_latency, bw):
    """work_stealing on a hot spot: idle PEs around it ask, the hot PEs answer with tasks while above
    the threshold (down to threshold - hysteresis once they shed) and with refusals below it, and
    requests wait on links that are full (docs/mesh.md, steps 1 and 4)."""
    sc = small_scenario(6, 7, workload="hotspot", migration__policy="work_stealing", migration__threshold=3,
                        migration__hysteresis=hysteresis, migration__max_per_cycle=2,
                        machine__hop_latency_cycles=hop_latency, machine__link_messages_per_cycle=bw,
                        machine__link_buffer_messages=bw, machine__queue_capacity=8, workload__injection_rate=0.03,
                        workload__hot_rate=0.9, workload__hot_regions=[[2, 2, 4, 5]])
    totals = compare_cycle_by_cycle(sc, 300)
    assert totals["migrated"] > 20 and totals["control_sent"] > totals["migrated"] and totals["refused"] > 0


def test_work_stealing_wakes_idle_segments_that_are_offered_nothing():
    """A hot spot on a grid of two segments of columns with no background: the idle PEs far from it
    ask all the same (no segment is skipped as quiet under work_stealing, docs/mesh.md)."""
    sc = small_scenario(3, 70, workload="hotspot", migration__policy="work_stealing", migration__threshold=0,
                        workload__injection_rate=0.0, workload__hot_rate=0.8, workload__hot_regions=[[0, 30, 3, 33]])
    totals = compare_cycle_by_cycle(sc, 80)
    assert totals["migrated"] > 0 and totals["control_sent"] > 2 * 3 * 70


def test_kernel_equals_reference_trace_on_quiet_segments(tmp_path):
    """Sparse trace events on a wide grid: a quiet segment with an event in it runs its cycle."""
    rng = np.random.default_rng(11)
    rows, cols, n = 3, 140, 120
    events = sorted((int(rng.integers(0, 200)), int(rng.integers(0, rows)), int(rng.integers(0, cols)),
                     int(rng.integers(1, 9))) for _ in range(n))
    path = tmp_path / "t.csv"
    path.write_text("cycle,row,col,work_cycles\n" + "".join(f"{a},{b},{c},{d}\n" for a, b, c, d in events))
    sc = small_scenario(rows, cols, workload="trace", trace_file=str(path), migration__threshold=0)
    totals = compare_cycle_by_cycle(sc, 220, trace_events=events)
    assert totals["injected"] == n and totals["quiet_segments"] > 0


@pytest.mark.parametrize("case, cycles, expect", [
    (dict(machine__link_messages_per_cycle=2, machine__link_buffer_messages=5, migration__max_per_cycle=3), 120,
     "migrated"),
    (dict(machine__credit_delay_cycles=3, machine__link_buffer_messages=1, migration__info_delay_cycles=4), 120,
     "migrated"),
    (dict(machine__hop_latency_cycles=8, machine__credit_delay_cycles=8, migration__info_delay_cycles=8,
          machine__link_buffer_messages=64, machine__link_messages_per_cycle=4, migration__max_per_cycle=4), 120,
     "migrated"),
    (dict(machine__queue_capacity=1, migration__threshold=0, migration__policy="none"), 120, "refused"),
    (dict(machine__queue_capacity=2, migration__threshold=0, migration__policy="random_lower"), 120, "migrated"),
], ids=["wide-links", "slow-credits", "longest-delays", "capacity-1", "capacity-2-random"])
def test_kernel_equals_reference_at_parameter_edges(case, cycles, expect):
    totals = compare_cycle_by_cycle(small_scenario(3, 4, **case), cycles)
    assert totals[expect] > 0


def test_kernel_equals_reference_with_a_full_255_task_queue():
    """Every offer accepted until the queue holds 255 tasks, then refusals: the uint8 depth at its
    top, with migration to a neighbour that fills too."""
    sc = small_scenario(1, 2, workload="hotspot", machine__queue_capacity=255, migration__threshold=250,
                        workload__injection_rate=0.0, workload__hot_rate=1.0, workload__hot_regions=[[0, 0, 1, 1]],
                        workload__work_distribution="fixed", workload__work_cycles=50)
    totals = compare_cycle_by_cycle(sc, 600)
    assert totals["refused"] > 0 and totals["migrated"] > 0


@pytest.mark.parametrize("seed", range(6))
def test_kernel_equals_reference_on_random_small_scenarios(seed):
    rng = np.random.default_rng(100 + seed)
    rows, cols = int(rng.integers(1, 6)), int(rng.integers(1, 7))
    cap = int(rng.integers(2, 10))
    bw = int(rng.integers(1, 3))
    sc = small_scenario(
        rows, cols, run__seed=int(rng.integers(0, 2**40)), machine__queue_capacity=cap,
        machine__hop_latency_cycles=int(rng.integers(1, 4)), machine__link_messages_per_cycle=bw,
        machine__link_buffer_messages=int(rng.integers(bw, 6)), machine__credit_delay_cycles=int(rng.integers(1, 4)),
        migration__policy=str(rng.choice(POLICIES)), migration__threshold=int(rng.integers(0, cap)),
        migration__info_delay_cycles=int(rng.integers(1, 4)), migration__max_per_cycle=int(rng.integers(1, 4)),
        workload__injection_rate=float(rng.uniform(0.05, 0.5)))
    compare_cycle_by_cycle(sc, 100)


def test_the_kernel_reports_a_broken_conservation_and_the_audit_a_lost_message():
    """The run's own checks can fail: corrupt the state and they say so."""

    sc = small_scenario(3, 4)
    sim = MeshSim(build_inputs(sc), max_chunk=10)
    sim.advance(10)
    sim.state.q_len[1, 1] += 1  # a task out of nowhere
    with pytest.raises(RuntimeError, match="conservation of tasks violated at cycle 10"):
        sim.advance(1)
    sim = MeshSim(build_inputs(sc), max_chunk=10)
    sim.advance(10)
    sim.audit()
    slot = (sim.cycle - 1) % sim.inputs.history
    sim.state.sent_h[slot, 0, 0, 1] += 1  # a message the running count never saw
    with pytest.raises(RuntimeError, match="in-flight messages: links hold"):
        sim.audit()


@pytest.mark.parametrize("grid", [(1, 1), (1, 5), (2, 2), (3, 5), (4, 4)], ids=lambda g: f"{g[0]}x{g[1]}")
@pytest.mark.parametrize("pattern", ["uniform", "bit_complement", "neighbor", "hotspot"])
@pytest.mark.parametrize("hop_latency", [1, 2])
def test_kernel_equals_reference_routed_traffic(grid, pattern, hop_latency):
    sc = small_scenario(*grid, workload="traffic", workload__pattern=pattern, machine__hop_latency_cycles=hop_latency,
                        workload__injection_rate=0.35, machine__link_buffer_messages=2)
    totals = compare_cycle_by_cycle(sc, 100)
    if grid != (1, 1):
        assert totals["packets_delivered"] > 0 and totals["measured_delivered"] > 0


@pytest.mark.parametrize("case", [
    dict(machine__link_messages_per_cycle=2, machine__link_buffer_messages=3),
    dict(machine__credit_delay_cycles=3, machine__link_buffer_messages=1),
    dict(workload__pattern="transpose"),
    dict(workload__pattern="hotspot", workload__hot_fraction=1.0, workload__injection_rate=0.9),
    dict(machine__router_queue_packets=1, workload__injection_rate=0.6),
    dict(machine__router_queue_packets=48, machine__link_messages_per_cycle=3, machine__link_buffer_messages=6,
         workload__injection_rate=1.0),
], ids=["wide-links", "slow-credits", "transpose", "all-to-the-hot-pe", "router-queues-1", "router-queues-48"])
def test_kernel_equals_reference_routed_traffic_edges(case):
    sc = small_scenario(4, 4, workload="traffic", **case)
    compare_cycle_by_cycle(sc, 120)


def test_a_hot_fraction_of_1_sends_every_packet_to_the_hot_pe_even_at_the_top_draw():
    from kernels.mesh import PATTERN_HOTSPOT, packet_destination

    top = np.uint64(0xFFFFFFFF) << np.uint64(32)
    where = dict(h=top, r=0, c=0, rows=3, cols=3, pattern=PATTERN_HOTSPOT, hot_r=1, hot_c=1)
    assert packet_destination(**where, hot_thr=2**32) == (1, 1)
    assert packet_destination(**where, hot_thr=2**32 - 1) != (1, 1)
