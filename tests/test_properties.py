"""Property tests over random small scenarios (hypothesis): conservation, agreement with the plain
reference, and the migration rule (docs/mesh.md)."""

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mesh_compare import compare_cycle_by_cycle, small_scenario

from kernels import mesh as K
from meshsim.mesh.sim import MeshSim, build_inputs, diffusion_units

SETTINGS = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def scenarios(draw):
    cap = draw(st.integers(1, 12))
    bw = draw(st.integers(1, 3))
    over = dict(
        run__seed=draw(st.integers(0, 2**63 - 1)),
        machine__queue_capacity=cap,
        machine__hop_latency_cycles=draw(st.integers(1, 4)),
        machine__link_messages_per_cycle=bw,
        machine__link_buffer_messages=draw(st.integers(bw, 8)),
        machine__credit_delay_cycles=draw(st.integers(1, 4)),
        migration__policy=draw(st.sampled_from(["none", "least_loaded", "random_lower", "diffusion", "gradient",
                                                  "work_stealing"])),
        migration__diffusion_rate=draw(st.floats(0.001, 0.5)),
        migration__threshold=(threshold := draw(st.integers(0, cap - 1))),
        migration__hysteresis=draw(st.integers(0, threshold)),
        migration__info_delay_cycles=draw(st.integers(1, 5)),
        migration__max_per_cycle=draw(st.integers(1, 4)),
        workload__injection_rate=draw(st.floats(0.0, 1.0)),
    )
    return small_scenario(draw(st.integers(1, 5)), draw(st.integers(1, 5)), **over)


@SETTINGS
@given(scenarios())
def test_kernel_equals_reference_and_conserves_tasks_on_random_scenarios(sc):
    # compare_cycle_by_cycle checks every state array and series each cycle; the kernel checks
    # conservation each cycle and the audit checks in-flight messages against the links.
    compare_cycle_by_cycle(sc, 40)


def check_migration_rule(sc, cycles=60) -> int:
    """Run `sc` cycle by cycle, checking every move against the rule; return the number of moves.

    For each link a PE sent k > 0 tasks on in cycle t, the neighbour's depth as known (at the end
    of t - D) plus k must stay below the PE's depth before its last send on that link, which is at
    most the PE's end-of-cycle depth plus all it sent in the cycle. With diffusion, k is also at most
    alpha x (the depth as step 4 started - the known depth), rounded up (docs/mesh.md, step 4)."""
    sim = MeshSim(build_inputs(sc), max_chunk=1)
    inp, state = sim.inputs, sim.state
    rows, cols, h = inp.rows, inp.cols, inp.history
    wrap = 2 * inp.link_buffer_messages
    delay = sc.get("migration", "info_delay_cycles")
    moves = 0
    diffusion = sc.get("migration", "policy") == "diffusion"
    gradient = sc.get("migration", "policy") == "gradient"
    alpha = diffusion_units(sc.get("migration", "diffusion_rate"))
    if sc.get("migration", "policy") == "work_stealing":
        return check_stealing_rule(sc, sim, cycles)
    for t in range(cycles):
        sent_before = state.sent_h[(t - 1) % h].astype(np.int64) if t > 0 else np.zeros((rows, cols, 4), np.int64)
        sim.advance(1)
        sent = (state.sent_h[t % h].astype(np.int64) - sent_before) % wrap
        total = sent.sum(axis=2)
        depth_end = state.depth_h[t % h].astype(np.int64)
        known = state.depth_h[(t - delay) % h].astype(np.int64) if t >= delay else np.zeros((rows, cols), np.int64)
        for r, c, d in zip(*np.nonzero(sent), strict=True):
            nr, nc = r + (d == 2) - (d == 0), c + (d == 1) - (d == 3)
            assert 0 <= nr < rows and 0 <= nc < cols, "sent off the grid"
            k = sent[r, c, d]
            if gradient:
                # Down the pressure surface: to a neighbour of the least pressure known, below 255.
                pressure = state.press_h[(t - delay) % h].astype(np.int64) if t >= delay else np.zeros((rows, cols))
                around = [pressure[r + dr, c + dc] for dr, dc in ((-1, 0), (0, 1), (1, 0), (0, -1))
                          if 0 <= r + dr < rows and 0 <= c + dc < cols]
                assert pressure[nr, nc] == min(around) < 255, (t, r, c, d)
                moves += int(k)
                continue
            assert known[nr, nc] + k < depth_end[r, c] + total[r, c], (t, r, c, d)
            if diffusion:
                share = alpha * max(0, depth_end[r, c] + total[r, c] - known[nr, nc])
                assert k <= -(-share // K.DIFFUSION_ONE), (t, r, c, d, k)
            moves += int(k)
    return moves


def check_stealing_rule(sc, sim, cycles) -> int:
    """work_stealing's rule, cycle by cycle (docs/mesh.md, step 4): a PE gives at most M tasks a cycle,
    at most one on each link (it answers one request a link, and a thief has one outstanding), each
    from a queue above its low water mark, so that its queue ends the cycle at threshold - hysteresis
    or more; the requests and refusals are all the other messages. Returns the number of tasks given."""
    state, h = sim.state, sim.inputs.history
    wrap = 2 * sim.inputs.link_buffer_messages
    low = sc.get("migration", "threshold") - sc.get("migration", "hysteresis")
    most = sc.get("migration", "max_per_cycle")
    moves = 0
    out_before = state.tot_migrated_out.copy()
    for t in range(cycles):
        sent_before = state.sent_h[(t - 1) % h].astype(np.int64) if t > 0 else \
            np.zeros(state.sent_h.shape[1:], np.int64)
        sim.advance(1)
        sent = (state.sent_h[t % h].astype(np.int64) - sent_before) % wrap
        given = state.tot_migrated_out.astype(np.int64) - out_before
        out_before = state.tot_migrated_out.copy()
        depth_end = state.depth_h[t % h].astype(np.int64)
        for r, c in zip(*np.nonzero(given), strict=True):
            assert given[r, c] <= min(most, int(np.count_nonzero(sent[r, c]))), (t, r, c)
            assert depth_end[r, c] >= low, (t, r, c, depth_end[r, c])
        assert int(sim.series[0, K.S_CONTROL_SENT]) + int(given.sum()) == int(sent.sum()), t
        moves += int(given.sum())
    return moves


@SETTINGS
@given(scenarios())
def test_migration_never_moves_a_task_to_a_neighbour_known_to_be_at_least_as_full(sc):
    moves = check_migration_rule(sc)
    if sc.get("migration", "policy") == "none":
        assert moves == 0


def test_the_migration_rule_check_sees_moves_under_heavy_load():
    for policy in ("least_loaded", "random_lower", "diffusion", "gradient"):
        sc = small_scenario(4, 5, migration__policy=policy, migration__threshold=0, workload__injection_rate=0.4)
        assert check_migration_rule(sc) > 50
    # Stealing needs idle PEs to ask: a hot spot on an idle grid.
    sc = small_scenario(4, 5, workload="hotspot", migration__policy="work_stealing", migration__threshold=0,
                        workload__injection_rate=0.0, workload__hot_rate=0.9, workload__hot_regions=[[1, 1, 3, 3]])
    assert check_migration_rule(sc) > 20
