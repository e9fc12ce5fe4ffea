"""Tests of the plain mesh reference's ``layer_pipeline`` workload (docs/mesh.md, "Dataflow").

The oracle alone: every expected number below was worked out by hand from docs/mesh.md; the
docstrings show the working.  Unless a test says otherwise: L = B = Lc = 1, K = 8, Q = 8, Qo = 4,
so a packet that never waits moves one hop per cycle and is delivered the cycle it arrives.
"""

import pathlib
import sys

import pytest

_ROOT = str(pathlib.Path(__file__).resolve().parents[1])
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

from kernels.reference.mesh_ref import MeshReference  # noqa: E402

N, E, S, W = 0, 1, 2, 3
EJECT = 4
POLICIES = ("least_loaded", "random_lower", "diffusion", "gradient", "work_stealing")


def region(row0, col0, row1, col1, work, next=-1, replica=0, flow=1, input="row",  # noqa: A002
           output="side", wavelets=None):
    """A region dict; the optional key "wavelets" only when given (absent means 1)."""
    spec = {"row0": row0, "col0": col0, "row1": row1, "col1": col1, "work": work, "next": next,
            "replica": replica, "flow": flow, "input": input, "output": output}
    if wavelets is not None:
        spec["wavelets"] = wavelets
    return spec


def make(rows, cols, regions, chunks_in_flight, **overrides):
    """A pipeline reference with small explicit defaults (L = B = Lc = 1, K = 8, Q = 8, Qo = 4)."""
    params = dict(rows=rows, cols=cols, queue_capacity=8, hop_latency_cycles=1,
                  link_messages_per_cycle=1, link_buffer_messages=8, credit_delay_cycles=1,
                  policy="none", threshold=0, info_delay_cycles=1, max_per_cycle=1, seed=1,
                  rates=None, work_distribution="fixed", work_cycles=1, work_min_cycles=1,
                  work_max_cycles=100, trace_events=None, router_queue_packets=4,
                  pipeline={"regions": regions, "chunks_in_flight": chunks_in_flight})
    params.update(overrides)
    return MeshReference(**params)


def make_streaming(rows, cols, regions, chunks_in_flight, chunks_per_pass, load_cycles,
                   **overrides):
    """``make`` with weight streaming: N = chunks_per_pass, Lw = load_cycles."""
    pipeline = {"regions": regions, "chunks_in_flight": chunks_in_flight,
                "streaming": {"chunks_per_pass": chunks_per_pass, "load_cycles": load_cycles}}
    return make(rows, cols, regions, chunks_in_flight, pipeline=pipeline, **overrides)


def finishes(observables):
    """(cycle, chunks finished, sum of their latencies) for every cycle that finished a chunk."""
    return [(t, o["chunks_finished"], o["chunk_latency_sum"])
            for t, o in enumerate(observables) if o["chunks_finished"]]


def per_cycle(observables, *keys):
    return [tuple(o[key] for key in keys) for o in observables]


# ------------------------------------------------------------------------------------------------
# A single region: first and last at once.
# ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("queue_capacity, chunks_in_flight, admissions, finish_list, task_latencies, "
                         "end_pending, end_took", [
    (8, 2, [0, 1, 3, 6, 9], [(2, 1, 3), (5, 1, 5), (8, 1, 6), (11, 1, 6)], [3, 5, 6, 6],
     [(4, 9, 0)], 6),
    (1, 4, [0, 1, 2, 5, 8, 11], [(2, 1, 3), (5, 1, 5), (8, 1, 7), (11, 1, 7)], [3, 5, 5, 5],
     [(4, 8, 0), (5, 11, 0)], 0),
    (8, 8, list(range(11)), [(2, 1, 3), (5, 1, 5), (8, 1, 7), (11, 1, 9)], [3, 5, 7, 9],
     [(c, c, 0) for c in range(4, 11)], 6),
])
def test_single_region_admits_one_chunk_a_cycle_once_every_pe_took_them_all(
        queue_capacity, chunks_in_flight, admissions, finish_list, task_latencies, end_pending,
        end_took):
    """One region (first = last), rows 0-1 x cols 0-2, work 3, input row, output side, flow +1:
    the output edge is column 2, (0, 2) and (1, 2).  Every PE takes chunks itself (no packets);
    all six behave alike, a chunk finishes when its tasks complete at (0, 2) and (1, 2).

    Admit at t needs A < D + W and took = 6 at the end of t - 1; at most one chunk a cycle.
    Each PE's server runs back to back when it has work; chunk j's task runs 3 cycles.

    Q = 8, W = 2.  c0: admit 0 (took starts at 6 for A = 0), taken, runs 0..2.  c1: admit 1
    (taken at 1, queued).  c2: A = 2 = D + W, no admission; chunk 0 completes: finish (2, lat 3).
    c3: admit 2 (taken at 3; chunk 1 runs 3..5).  c5: chunk 1 done, latency 5 + 1 - 1 = 5 (task
    born 1: 5).  c6: admit 3; chunk 2 runs 6..8: latency 8 + 1 - 3 = 6 (task born 3: 6).  c9:
    admit 4, taken at once (took 6); chunk 3 (admitted 6) finishes at 11: latency 6.
    End of c11: A = 5, D = 4, pending [(4, 9, 0)].

    Q = 1, W = 4.  c0: admit 0, taken, started (queue empty again).  c1: admit 1, taken (queue
    full).  c2: admit 2 (took was 6), but the queue is full: not taken, took 0; chunk 0 finishes
    (lat 3).  c3: no admission (took 0); still full at step 2; Start moves chunk 1 (runs 3..5).
    c4: chunk 2 taken (born 4), took 6.  c5: admit 3, not taken (full); chunk 1 finishes, latency
    5 + 1 - 1 = 5 (task 5).  c6: Start chunk 2 (6..8).  c7: chunk 3 taken (born 7).  c8: admit 4
    (A = 4 < 2 + 4), not taken; chunk 2 finishes: latency 8 + 1 - 2 = 7 (task 8 + 1 - 4 = 5).
    c9: Start chunk 3; c10: chunk 4 taken; c11: admit 5, not taken; chunk 3 finishes: 11 + 1 - 5
    = 7 (task 11 + 1 - 7 = 5).  W never binds: the first region's queue sets the pace.
    End of c11: A = 6, D = 4, pending [(4, 8, 0), (5, 11, 0)], took 0.

    Q = 8, W = 8: chunk k is admitted at k while k < D(k) + 8, D(k) = floor(k / 3) chunks
    finished by the end of k - 1 (chunk j finishes at 3j + 2): k = 0..10; at 11, 11 < 3 + 8 fails.
    The queue never fills (at step 2 of cycle k it holds k - floor((k - 1) / 3) - 1 <= 6).  Chunk j
    runs 3j..3j+2: latency 3j + 3 - j = 2j + 3 (its task was born at j too).
    End of c11: A = 11, D = 4, chunks 4..10 pending with admission cycles 4..10, took 6.
    """
    ref = make(2, 3, [region(0, 0, 2, 3, 3)], chunks_in_flight, queue_capacity=queue_capacity)
    obs = [ref.step()]
    pipe = ref.snapshot()["pipeline"]
    assert pipe["admitted"] == [1] and pipe["finished"] == [0]     # one chunk, not W
    assert pipe["pending"] == [[(0, 0, 0)]] and pipe["took"] == [6] and pipe["taken"] == [1] * 6
    assert ref.snapshot()["server"] == [(2, 0, 0)] * 6

    admitted_at = [0]
    for _ in range(11):
        obs.append(ref.step())
        pending = ref.snapshot()["pipeline"]["pending"][0]
        admitted_at += [a for (c, a, _n) in pending if c == len(admitted_at)]
    assert admitted_at == admissions
    assert finishes(obs) == finish_list
    completions = [(t, o["completed"], o["latency_sum"]) for t, o in enumerate(obs)
                   if o["completed"]]
    assert completions == [(3 * j + 2, 6, 6 * lat) for j, lat in enumerate(task_latencies)]
    assert all(o["refused"] == 0 and o["packets_offered"] == 0 for o in obs)
    pipe = ref.snapshot()["pipeline"]
    assert pipe["admitted"] == [len(admissions)] and pipe["finished"] == [4]
    assert pipe["pending"] == [end_pending] and pipe["took"] == [end_took]


# ------------------------------------------------------------------------------------------------
# Multicast along a row.
# ------------------------------------------------------------------------------------------------

def two_region_row(W, flow=1):
    """1 x 5 grid: region 0 = columns 0-1, work 2 -> region 1 = columns 2-4, work 1, both input
    row and output side; flow -1 mirrors it (region 0 = columns 3-4, region 1 = columns 0-2)."""
    if flow == 1:
        regions = [region(0, 0, 1, 2, 2, next=1), region(0, 2, 1, 5, 1)]
    else:
        regions = [region(0, 3, 1, 5, 2, next=1, flow=-1), region(0, 0, 1, 3, 1, flow=-1)]
    return make(1, 5, regions, W)


@pytest.mark.parametrize("flow", [1, -1])
def test_two_region_row_multicasts_copies_one_hop_at_a_time(flow):
    """Written for flow +1; with flow -1 everything is mirrored: column c below is column 4 - c,
    E is W (the upstream column is col0 + w - 1, the next PE of (r, c) is (r, c - 1)).

    Region 0: upstream col 0, output side at col 1 (n_out = 1, index 0); region 1: input edge
    col 2 (n_in = 1), next PEs (0, 2) -> (0, 3) -> (0, 4), output edge (0, 4).  W = 1.

    c0: chunk 0 admitted; (0, 0) and (0, 1) take it (no packets) and run it 0..1.
    c1: both complete (latency 2); only (0, 1), the output edge, fills its stage: [(0, 2, 2)]
        (offered 1).  (0, 0) is not an output-edge PE: nothing.
    c2: the stage packet leaves (injected 1, wait 0, hops 1) and is sent on E at 2.
    c3: (0, 2) receives it: for itself, so ejection AND a copy (0, 3, 2) to its E queue (offered
        1, injected 1, measured, wait 0, hops 1); the copy is sent at 3; the packet is delivered
        (latency 3 - 2 = 1), its task (1, 3, 0) completes at 3.
    c4: (0, 3) does the same: delivered (latency 2), copy (0, 4, 2) sent at 4, task done at 4.
    c5: (0, 4) has no next PE: delivered (latency 3), no copy; its task completes at 5 and it is
        the only output-edge PE of the last region: chunk 0 finishes, latency 5 + 1 - 0 = 6.
    c6: chunk 1 admitted; the same six cycles repeat.
    """
    def u(c):
        return c if flow == 1 else 4 - c

    def by_u(values):       # a per-PE list written for flow +1, in unit order for this flow
        return [values[u(v)] for v in range(5)]

    east, west = (E, W) if flow == 1 else (W, E)
    ref = two_region_row(1, flow)
    assert ref.next_pe == by_u([u(1), None, u(3), u(4), None])
    assert ref.feeds == by_u([[], [(0, u(2))], [], [], []])
    obs = ref.run(2)
    snap = ref.snapshot()
    assert snap["source"] == by_u([[], [(0, u(2), 2)], [], [], []])
    obs.append(ref.step())
    snap = ref.snapshot()
    assert snap["source"][u(1)] == [] and snap["links"][u(1)][east] == [("p", 0, u(2), 2)]
    obs.append(ref.step())
    snap = ref.snapshot()          # end of cycle 3
    assert snap["links"][u(2)][east] == [("p", 0, u(3), 2)]
    assert snap["router"][u(2)] == [[], [], [], [], []]
    assert snap["queue"][u(2)] == [] and snap["server"][u(2)] is None
    assert snap["totals"]["completed"] == by_u([1, 1, 1, 0, 0])
    # The original counts once as received, on the port facing upstream.
    assert snap["received"][u(2)] == [1 if d == west else 0 for d in range(4)]
    obs += ref.run(14)
    one_chunk = [(0, 0, 0), (1, 0, 0), (0, 1, 0), (1, 1, 1), (1, 1, 1), (0, 0, 1)]
    assert per_cycle(obs, "packets_offered", "packets_injected", "packets_delivered") == (
        one_chunk * 3)
    assert per_cycle(obs[:6], "measured_injected", "measured_hops_sum",
                     "measured_source_wait_sum") == [(0, 0, 0), (0, 0, 0), (1, 1, 0), (1, 1, 0),
                                                     (1, 1, 0), (0, 0, 0)]
    assert [o["measured_latency_sum"] for o in obs[:6]] == [0, 0, 0, 1, 2, 3]
    assert [o["completed"] for o in obs[:6]] == [0, 2, 0, 1, 1, 1]
    assert finishes(obs) == [(5, 1, 6), (11, 1, 6), (17, 1, 6)]
    totals = ref.snapshot()["totals"]
    assert totals["packets_offered"] == by_u([0, 3, 3, 3, 0])   # stage at col 1, copies at 2, 3
    assert totals["packets_delivered"] == by_u([0, 0, 3, 3, 3])
    assert totals["injected"] == [3] * 5
    assert ref.snapshot()["pipeline"]["taken"] == by_u([3, 3, 0, 0, 0])


def test_two_region_row_with_three_chunks_in_flight():
    """The same chain with W = 3.  Region 0 runs chunk j in 2j..2j+1 while it has chunks; the stage
    of a task completed at t leaves at t + 1, before Start, so it never delays region 0.  Chunk j
    completed at t reaches (0, 4) at t + 4.

    c0, c1, c2: chunks 0, 1, 2 admitted (each cycle took = 2 from the cycle before); at c3
    A = 3 = D + W.  Region 0 completes chunks 0, 1, 2 at 1, 3, 5, so (0, 4) completes them at 5,
    7, 9: latencies 6, 7 - 1 + 1 = 7, 9 + 1 - 2 = 8.  c6: admit 3 (D = 1); region 0 idle since 5,
    runs it 6..7; finish at 11: 11 + 1 - 6 = 6.  c8: admit 4 (D = 2), finish 13 (6).  c10: admit
    5 (D = 3), finish 15 (6).  c12: admit 6 (D = 4); c13: A = 7 = 4 + 3, none; c14: admit 7 (D =
    5); c15: none (A = 8 = 5 + 3).  End of c15: A = 8, D = 6; chunk 6 was completed by region 0 at
    13, its packet is at (0, 2) at 15 and (0, 3) at 16, (0, 4) not yet: pending [(6, 12, 0),
    (7, 14, 0)].
    """
    ref = two_region_row(3)
    obs = ref.run(16)
    assert finishes(obs) == [(5, 1, 6), (7, 1, 7), (9, 1, 8), (11, 1, 6), (13, 1, 6), (15, 1, 6)]
    pipe = ref.snapshot()["pipeline"]
    assert pipe["admitted"] == [8] and pipe["finished"] == [6]
    assert pipe["pending"] == [[(6, 12, 0), (7, 14, 0)]]


# ------------------------------------------------------------------------------------------------
# A band's turn.
# ------------------------------------------------------------------------------------------------

TURN = [region(0, 0, 2, 3, 2, next=1, flow=1, input="row", output="bottom"),
        region(2, 0, 4, 3, 1, flow=-1, input="col", output="side")]


def test_band_turn_feeds_index_for_index_one_hop_down():
    """4 x 3 grid.  Band 0: region 0 = rows 0-1, flow +1, input row, output bottom, work 2: its
    output edge is row 1 with index k = |c - 2| (downstream column 2): (1, 2) k 0, (1, 1) k 1,
    (1, 0) k 2; n_out = 3.  Band 1: region 1 = rows 2-3, flow -1 (upstream column 2), input col:
    input edge row 2 with k = |c - 2|: (2, 2) k 0, (2, 1) k 1, (2, 0) k 2; n_in = 3; next PE of
    (2, c) is (3, c); output side = downstream column 0: (2, 0) and (3, 0).  Output k feeds input
    k only (k + 3 >= 3): (1, c) -> (2, c), one hop S.  W = 1.

    c0: admit; the six PEs of region 0 take chunk 0 directly and run it 0..1.
    c1: six tasks complete; the three of row 1 fill their stages with one packet each, born 2.
    c2: the three leave (hops 1 each, wait 0) and are sent S at 2.
    c3: each (2, c) receives its own: delivered (latency 1), copy to (3, c) via S (3 copies
        offered/injected, 1 hop each); three tasks complete at 3 ((2, 0): 1 of 2 output PEs).
    c4: (3, c) receive the copies: delivered (latency 2); tasks complete at 4; (3, 0) is the
        second output-edge PE: chunk 0 finishes, latency 4 + 1 - 0 = 5.  c5: chunk 1 admitted.
    """
    ref = make(4, 3, TURN, 1)
    assert ref.regions[0]["output_edge"] == [5, 4, 3]
    assert ref.regions[1]["input_edge"] == [8, 7, 6]
    assert ref.regions[1]["output_edge"] == [6, 9]
    assert ref.feeds[3:6] == [[(2, 0)], [(2, 1)], [(2, 2)]]
    assert ref.feeds[:3] == [[], [], []] and ref.feeds[6:] == [[]] * 6
    assert ref.next_pe == [1, 2, None, 4, 5, None, 9, 10, 11, None, None, None]
    obs = ref.run(3)
    snap = ref.snapshot()          # end of cycle 2
    assert [snap["links"][u][S] for u in (3, 4, 5)] == [[("p", 2, c, 2)] for c in range(3)]
    obs.append(ref.step())
    snap = ref.snapshot()          # end of cycle 3
    assert [snap["links"][u][S] for u in (6, 7, 8)] == [[("p", 3, c, 2)] for c in range(3)]
    assert snap["pipeline"]["pending"] == [[(0, 0, 1)]]
    obs += ref.run(11)
    one_chunk = [(0, 0, 0, 0), (3, 0, 0, 6), (0, 3, 0, 0), (3, 3, 3, 3), (0, 0, 3, 3)]
    assert per_cycle(obs, "packets_offered", "packets_injected", "packets_delivered",
                     "completed") == one_chunk * 3
    assert [o["measured_hops_sum"] for o in obs[:5]] == [0, 0, 3, 3, 0]
    assert [o["measured_latency_sum"] for o in obs[:5]] == [0, 0, 0, 3, 6]
    assert finishes(obs) == [(4, 1, 5), (9, 1, 5), (14, 1, 5)]


# ------------------------------------------------------------------------------------------------
# Fan-out (n_in > n_out) and outputs that feed nothing (k >= n_in).
# ------------------------------------------------------------------------------------------------

def test_fan_out_two_outputs_to_three_inputs():
    """3 x 3 grid.  Region 0 = rows 0-1 of column 0, work 1, output side: (0, 0) k 0, (1, 0) k 1,
    n_out = 2.  Region 1 = rows 0-2 x cols 1-2, work 1, flow +1, input row: (0, 1) k 0,
    (1, 1) k 1, (2, 1) k 2 (n_in = 3), output side column 2.  Input k' takes output k' mod 2:
    (0, 0) feeds inputs 0 and 2, in that order; (1, 0) feeds input 1.  W = 1, B = 1.

    c0: both complete chunk 0 at once: stages [(0, 1, 1), (2, 1, 1)] and [(1, 1, 1)] (offered 3).
    c1: (0, 1, 1) and (1, 1, 1) leave (hops 1 + 1) and are sent E at 1; (2, 1, 1) waits (B = 1).
    c2: (2, 1, 1) leaves (E: column first; wait 1, hops 1 + 2 = 3), sent at 2.  (0, 1) and (1, 1)
        each receive their own: delivered (latency 1), copies to (0, 2) and (1, 2).
    c3: copies delivered (latency 2).  (0, 1) routes (2, 1, 1) S (transit through region 1).
    c4: (1, 1) routes it S.
    c5: (2, 1) receives it: delivered (latency 4), copy to (2, 2).
    c6: (2, 2) delivered (latency 5); with (0, 2), (1, 2) done at 3, chunk 0 finishes: 7.
    c7: chunk 1 admitted; all repeats every 7 cycles.
    """
    ref = make(3, 3, [region(0, 0, 2, 1, 1, next=1), region(0, 1, 3, 3, 1)], 1)
    assert ref.feeds[0] == [(0, 1), (2, 1)] and ref.feeds[3] == [(1, 1)]
    obs = ref.run(2)
    snap = ref.snapshot()           # end of cycle 1
    assert snap["source"][0] == [(2, 1, 1)] and snap["source"][3] == []
    assert snap["links"][0][E] == [("p", 0, 1, 1)] and snap["links"][3][E] == [("p", 1, 1, 1)]
    obs += ref.run(12)
    assert [o["packets_offered"] for o in obs[:7]] == [3, 0, 2, 0, 0, 1, 0]
    assert per_cycle(obs[:7], "measured_injected", "measured_hops_sum",
                     "measured_source_wait_sum") == [(0, 0, 0), (2, 2, 0), (3, 5, 1), (0, 0, 0),
                                                     (0, 0, 0), (1, 1, 0), (0, 0, 0)]
    assert per_cycle(obs[:7], "packets_delivered", "measured_latency_sum") == [
        (0, 0), (0, 0), (2, 2), (2, 4), (0, 0), (1, 4), (1, 5)]
    assert max(o["measured_latency_max"] for o in obs) == 5
    assert [o["completed"] for o in obs[:7]] == [2, 0, 2, 2, 0, 1, 1]
    assert finishes(obs) == [(6, 1, 7), (13, 1, 7)]
    totals = ref.snapshot()["totals"]
    assert totals["packets_offered"] == [4, 2, 0, 2, 2, 0, 0, 2, 0]
    assert totals["packets_delivered"] == [0, 2, 2, 0, 2, 2, 0, 2, 2]


def test_outputs_beyond_the_successors_inputs_feed_nothing():
    """3 x 3 grid.  Region 0 = column 0, rows 0-2, work 1, output side: n_out = 3, (r, 0) has
    index r.  Region 1 = row 0 x cols 1-2, input row: n_in = 1.  Only output 0 feeds (input 0 =
    (0, 1)); (1, 0) and (2, 0) have k >= n_in: empty stages, so Start never waits for them.
    W = 2.

    c0: admit 0; region 0 runs it; (0, 0)'s stage gets (0, 1, 1).  c1: admit 1 (took 3), taken
    and run by all three (the stage left before Start); (0, 0)'s stage gets (0, 1, 2).  Chunk 0:
    (0, 1) at 2, (0, 2) at 3: finish (3, latency 4).  Chunk 1: (0, 1) at 3, (0, 2) at 4: finish
    (4, 4 + 1 - 1 = 4).  c2, c3: A = 2 = D + W.  c4: admit 2 (D = 1): finish at 7 (4).  c5: admit
    3: finish at 8 (4).  c8, c9: admit 4, 5: finish at 11, 12.  c12: admit 6 (A = 6 < D + W =
    5 + 2): region 0 completes it at 12, so (0, 0) has offered 7 packets (one per completed
    task, counted at completion), (0, 1) 6 copies; (0, 2) received 6.
    """
    ref = make(3, 3, [region(0, 0, 3, 1, 1, next=1), region(0, 1, 1, 3, 1)], 2)
    assert ref.feeds == [[(0, 1)], [], [], [], [], [], [], [], []]
    obs = ref.run(13)
    assert finishes(obs) == [(3, 1, 4), (4, 1, 4), (7, 1, 4), (8, 1, 4), (11, 1, 4), (12, 1, 4)]
    totals = ref.snapshot()["totals"]
    assert totals["packets_offered"] == [7, 6, 0, 0, 0, 0, 0, 0, 0]
    assert totals["packets_delivered"] == [0, 6, 6, 0, 0, 0, 0, 0, 0]
    assert totals["completed"] == [7, 6, 6, 7, 0, 0, 7, 0, 0]


def test_finish_waits_for_the_output_edge_only():
    """3 x 3 grid, L = 2.  Region 0 = (2, 0) alone (n_out = 1), work 1.  Region 1 = rows 0-1 x
    cols 1-2, flow +1, input row ((0, 1) k 0, (1, 1) k 1), output bottom: row 1, (1, 2) k 0 and
    (1, 1) k 1.  (2, 0) feeds (0, 1) then (1, 1).  W = 1.

    c0: (2, 0) completes chunk 0: stage [(0, 1, 1), (1, 1, 1)].
    c1: (0, 1, 1) sent E (to idle (2, 1)); c2: (1, 1, 1) sent E (wait 1).
    c3: (2, 1) receives (0, 1, 1) (sent 1 = 3 - L), sends it N at 3; c4: the same for (1, 1, 1).
    c5: (1, 1) receives (0, 1, 1) from S, passes it N at 5.
    c6: (1, 1) receives (1, 1, 1): delivered (latency 5), copy E; task done: output k 1.
    c7: (0, 1) receives (0, 1, 1): delivered (latency 6), copy E; task done (not an output PE).
    c8: (1, 2) gets its copy (latency 7), done: both output-edge PEs have completed chunk 0:
        it finishes at 8, latency 9, although (0, 2), whose copy arrives at 9, is still to come.
    c9: chunk 1 admitted; the same 9 cycles repeat.
    """
    ref = make(3, 3, [region(2, 0, 3, 1, 1, next=1), region(0, 1, 2, 3, 1, output="bottom")], 1,
               hop_latency_cycles=2)
    assert ref.feeds[6] == [(0, 1), (1, 1)]
    assert ref.regions[1]["output_edge"] == [5, 4]
    obs = ref.run(8)
    assert ref.snapshot()["pipeline"]["pending"] == [[(0, 0, 1)]]
    obs += ref.run(10)
    assert finishes(obs) == [(8, 1, 9), (17, 1, 9)]
    assert [(t, o["measured_latency_sum"]) for t, o in enumerate(obs[:10])
            if o["packets_delivered"]] == [(6, 5), (7, 6), (8, 7), (9, 8)]


def test_a_packet_for_this_pe_waits_while_its_copys_queue_is_full():
    """1 x 5 grid, Q = 1, Qo = 1, K = 1 (one message per L + Lc = 2 cycles on a link), W = 64
    (so that enough chunks are in flight to fill every buffer down the line).
    Region 0 = (0, 0), work 1 -> region 1 = (0, 1)-(0, 3), work 1 -> region 2 = (0, 4), work 9.

    The slow last region backs the line up: (0, 4)'s queue fills, then its ejection queue, the
    link (0, 3) -> (0, 4), (0, 3)'s E queue, so (0, 3)'s stage cannot drain, it cannot Start, its
    queue and ejection queue fill, the link (0, 2) -> (0, 3) fills, and (0, 2)'s E queue, where its
    copies go, stays full.  From then on a packet for (0, 2) waits at the head of its link although
    (0, 2)'s ejection queue has room: the copy needs room too.  (Without that rule the E queue
    would exceed Qo.)  Checked: it happens, and every time a packet for (0, 2) available on the
    link at cycle t is still there after t while the ejection queue was empty at the end of t - 1,
    the E queue held Qo packets at the end of t - 1.
    """
    regions = [region(0, 0, 1, 1, 1, next=1), region(0, 1, 1, 4, 1, next=2),
               region(0, 4, 1, 5, 9)]
    ref = make(1, 5, regions, 64, queue_capacity=1, router_queue_packets=1,
               link_buffer_messages=1)
    blocked_by_copy = 0
    before = ref.snapshot()
    obs = []
    for t in range(120):
        obs.append(ref.step())
        after = ref.snapshot()
        head_before = before["links"][1][E][:1]
        if (head_before and head_before[0][1:3] == (0, 2) and not before["router"][2][EJECT]
                and after["links"][1][E][:1] == head_before
                and after["received"][2][W] == before["received"][2][W]):
            # Sent at <= t - 1 (it was on the link at the end of t - 1), so available at t.
            assert len(before["router"][2][E]) == 1, t
            blocked_by_copy += 1
        before = after
    assert blocked_by_copy > 0
    assert sum(o["chunks_finished"] for o in obs) >= 10


# ------------------------------------------------------------------------------------------------
# Wavelets: a chunk's input is wavelets_g packets per PE.
# ------------------------------------------------------------------------------------------------

def test_two_region_row_with_three_wavelets_makes_a_task_per_third_packet():
    """test_two_region_row_multicasts_copies_one_hop_at_a_time (flow +1, W = 1) with wavelets 3 on
    region 1 (columns 2-4): each of its PEs gets 3 packets per chunk and makes the chunk's task
    (work 1) with the 3rd; region 0's output stage at (0, 1) takes 3 packets per fed PE.

    c0: chunk 0 admitted; (0, 0) and (0, 1) take it and run it 0..1.
    c1: both complete; (0, 1)'s stage takes 3 packets (0, 2, 2) (offered 3).
    c2: one leaves (B = 1; injected 1, wait 0), sent E at 2.
    c3: the 2nd leaves (wait 1), sent at 3.  (0, 2) receives the 1st: ejection and a copy
        (0, 3, 2) (offered, injected, sent at 3); delivered (latency 1), got 0 -> 1, no task.
    c4: the 3rd leaves (wait 2).  (0, 2) gets the 2nd (got 2, latency 2, copy); (0, 3) its 1st
        copy (got 1, latency 2, copy to (0, 4)).
    c5: (0, 2) gets the 3rd: got + 1 = 3 is not < 3, the chunk's last; the queue has room: task
        (1, 5, 0) joins (injected), got 0; it starts and completes at 5.  (0, 3) 2nd (got 2),
        (0, 4) 1st (got 1, no copy: no next PE).  Latencies 3, 3, 3.
    c6: (0, 3) its 3rd: task, done at 6; (0, 4) its 2nd (got 2).  Latencies 4, 4.
    c7: (0, 4) its 3rd (latency 5): task done at 7, the last region's only output-edge PE:
        chunk 0 finishes, latency 7 + 1 - 0 = 8.
    c8: chunk 1 admitted; the same 8 cycles repeat.
    """
    ref = make(1, 5, [region(0, 0, 1, 2, 2, next=1), region(0, 2, 1, 5, 1, wavelets=3)], 1)
    assert ref.feeds == [[], [(0, 2)], [], [], []]          # one entry per fed PE, as before
    obs = ref.run(2)
    snap = ref.snapshot()           # end of cycle 1
    assert snap["source"] == [[], [(0, 2, 2)] * 3, [], [], []]
    assert snap["pipeline"]["got"] == [0] * 5
    gots = []
    for _ in range(6):
        obs.append(ref.step())
        gots.append(ref.snapshot()["pipeline"]["got"])
    assert gots == [[0, 0, 0, 0, 0], [0, 0, 1, 0, 0], [0, 0, 2, 1, 0], [0, 0, 0, 2, 1],
                    [0, 0, 0, 0, 2], [0, 0, 0, 0, 0]]
    obs += ref.run(16)
    one_chunk = [(0, 0, 0), (3, 0, 0), (0, 1, 0), (1, 2, 1), (2, 3, 2), (2, 2, 3), (1, 1, 2),
                 (0, 0, 1)]
    assert per_cycle(obs, "packets_offered", "packets_injected", "packets_delivered") == (
        one_chunk * 3)
    # Only the last wavelet of a chunk makes a task (injected); region 0 takes its chunk at 0.
    assert [o["injected"] for o in obs[:8]] == [2, 0, 0, 0, 0, 1, 1, 1]
    assert [o["completed"] for o in obs[:8]] == [0, 2, 0, 0, 0, 1, 1, 1]
    assert [o["measured_latency_sum"] for o in obs[:8]] == [0, 0, 0, 1, 4, 9, 8, 5]
    assert [o["measured_source_wait_sum"] for o in obs[:8]] == [0, 0, 0, 1, 2, 0, 0, 0]
    assert max(o["measured_latency_max"] for o in obs) == 5
    assert finishes(obs) == [(7, 1, 8), (15, 1, 8), (23, 1, 8)]
    snap = ref.snapshot()
    totals = snap["totals"]
    assert totals["packets_offered"] == [0, 9, 9, 9, 0]     # 3 stage, 3 + 3 copies a chunk
    assert totals["packets_delivered"] == [0, 0, 9, 9, 9]
    assert totals["injected"] == [3] * 5 and totals["completed"] == [3] * 5
    assert snap["pipeline"]["got"] == [0] * 5
    assert snap["pipeline"]["taken"] == [3, 3, 0, 0, 0]


def test_fan_out_stage_holds_all_wavelets_of_one_input_before_the_next():
    """test_fan_out_two_outputs_to_three_inputs with wavelets 2 on region 1 (rows 0-2 x cols 1-2).
    (0, 0) feeds inputs 0 ((0, 1)) and 2 ((2, 1)): its stage is both of input 0's packets, then
    both of input 2's; (1, 0) feeds input 1 ((1, 1)) twice.  All born 1 (completed at 0).

    B = 1: (0, 0) sends (0, 1) at 1 and 2, then (2, 1) at 3 and 4; (1, 0) sends (1, 1) at 1, 2.
    (0, 1) gets its two at 2, 3: task done at 3; its copies reach (0, 2) at 3, 4: done at 4.
    Likewise (1, 1) at 3, (1, 2) at 4.  The (2, 1) packets turn S at (0, 1) (4, 5), pass (1, 1)
    (5, 6) and arrive at 6, 7: (2, 1) done at 7, its copies reach (2, 2) at 7, 8: done at 8, the
    last output-edge PE of region 1 (column 2): chunk 0 finishes at 8, latency 9.  c9: chunk 1.
    """
    ref = make(3, 3, [region(0, 0, 2, 1, 1, next=1), region(0, 1, 3, 3, 1, wavelets=2)], 1)
    assert ref.feeds[0] == [(0, 1), (2, 1)] and ref.feeds[3] == [(1, 1)]
    obs = [ref.step()]
    snap = ref.snapshot()           # end of cycle 0
    assert snap["source"][0] == [(0, 1, 1), (0, 1, 1), (2, 1, 1), (2, 1, 1)]
    assert snap["source"][3] == [(1, 1, 1), (1, 1, 1)]
    assert obs[0]["packets_offered"] == 6
    obs.append(ref.step())
    snap = ref.snapshot()           # end of cycle 1
    assert snap["source"][0] == [(0, 1, 1), (2, 1, 1), (2, 1, 1)]
    assert snap["links"][0][E] == [("p", 0, 1, 1)]
    obs.append(ref.step())
    assert ref.snapshot()["pipeline"]["got"] == [0, 1, 0, 0, 1, 0, 0, 0, 0]
    obs += ref.run(15)
    assert finishes(obs) == [(8, 1, 9), (17, 1, 9)]
    totals = ref.snapshot()["totals"]
    assert totals["packets_delivered"] == [0, 4, 4, 0, 4, 4, 0, 4, 4]
    assert totals["injected"] == [2, 2, 2, 2, 2, 2, 0, 2, 2]      # (2, 0) is idle
    assert totals["packets_offered"] == [8, 4, 0, 4, 4, 0, 0, 4, 0]


def test_with_the_task_queue_full_wavelets_are_delivered_but_the_last_waits():
    """1 x 2 grid, Q = 1, W = 8.  Region 0 = (0, 0), work 1 -> region 1 = (0, 1), work 20,
    wavelets 3.  (0, 0) completes a chunk at 0, 3, 6, 9, ... (its stage of 3 packets drains one a
    cycle and Start waits for it), so chunk j's packets (born 3j + 1) are sent at 3j + 1, 3j + 2,
    3j + 3 and reach (0, 1) at 3j + 2, 3j + 3, 3j + 4.

    (0, 1): chunk 0's wavelets at 2, 3, 4: task (20, 4, 0) made at 4, starts at once, runs 4..23.
    Chunk 1's at 5, 6, 7: the last finds the queue empty: task (20, 7, 0) waits in the queue
    (now full, Q = 1).  Chunk 2's 1st and 2nd at 8, 9 are delivered although the queue is full
    (got 1, 2); its last, at 10, is not: it stays at the head of the ejection queue, got stays
    2, and the packets behind it (chunk 3's, born 10, at 11, 12, 13) queue up behind it until the
    ejection queue holds Qo = 4.  Nothing is delivered from 10 to 24: at 23 the server completes
    chunk 0 (finish, latency 24); at 24 Send still sees the full queue (Start comes after Send)
    and Start takes task (20, 7, 0).  c25: the last wavelet leaves: task (20, 25, 0), got 0.
    c26, c27: chunk 3's 1st and 2nd are delivered into a full queue again (got 1, 2); c28: its
    last waits at the head.
    """
    ref = make(1, 2, [region(0, 0, 1, 1, 1, next=1), region(0, 1, 1, 2, 20, wavelets=3)], 8,
               queue_capacity=1)
    rows = []
    obs = []
    for _ in range(29):
        obs.append(ref.step())
        snap = ref.snapshot()
        rows.append((snap["pipeline"]["got"][1], snap["totals"]["packets_delivered"][1],
                     snap["totals"]["injected"][1], len(snap["router"][1][EJECT]),
                     snap["queue"][1]))
    full = [(20, 7, 0)]
    assert rows[:10] == [(0, 0, 0, 0, []), (0, 0, 0, 0, []), (1, 1, 0, 0, []), (2, 2, 0, 0, []),
                         (0, 3, 1, 0, []), (1, 4, 1, 0, []), (2, 5, 1, 0, []),
                         (0, 6, 2, 0, full), (1, 7, 2, 0, full), (2, 8, 2, 0, full)]
    # From 10 on the last wavelet of chunk 2 (born 7) waits at the head.
    assert [r[:4] for r in rows[10:14]] == [(2, 8, 2, 1), (2, 8, 2, 2), (2, 8, 2, 3),
                                            (2, 8, 2, 4)]
    assert all(r == (2, 8, 2, 4, full) for r in rows[13:24])
    assert [o["packets_delivered"] for o in obs[10:25]] == [0] * 15
    assert finishes(obs) == [(23, 1, 24)]
    assert rows[24] == (2, 8, 2, 4, [])
    # Step 1 of c25 found the ejection queue full; Send delivered one: 3 left.
    assert rows[25] == (0, 9, 3, 3, [(20, 25, 0)])
    assert [r[:3] for r in rows[26:29]] == [(1, 10, 3), (2, 11, 3), (2, 11, 3)]
    assert all(r[4] == [(20, 25, 0)] for r in rows[26:29])
    assert ref.snapshot()["router"][1][EJECT][0] == (0, 1, 10)   # chunk 3's last, born 10
    assert all(o["refused"] == 0 for o in obs)


def test_missing_wavelets_key_is_wavelets_one():
    """The same table with no "wavelets" key and with "wavelets": 1 on every region gives the same
    observables and snapshots, cycle by cycle (the tight two-replica machine, 200 cycles)."""
    explicit = [dict(spec, wavelets=1) for spec in TWO_REPLICAS]
    assert all("wavelets" not in spec for spec in TWO_REPLICAS)
    a = make(5, 5, TWO_REPLICAS, 3, **TIGHT)
    b = make(5, 5, explicit, 3, **TIGHT)
    for t in range(200):
        assert a.step() == b.step(), t
        assert a.snapshot() == b.snapshot(), t
    assert a.snapshot()["pipeline"]["got"] == [0] * 25
    assert sum(a.snapshot()["pipeline"]["finished"]) > 0


def test_two_replicas_with_wavelets_conserve_and_do_not_depend_on_pe_order():
    """TWO_REPLICAS on the tight machine with wavelets 2, 3, 1, 4, 5 on regions 0..4 (a first
    region's wavelets are never used: it receives nothing).  The oracle checks conservation and
    its invariants each cycle; here, at the end: every PE of a region that is not first has
    packets_delivered = wavelets_g * injected + got with got < wavelets_g, a first-region PE has
    got 0; an output-edge PE offered wavelets_s packets per fed PE and completed task, plus one
    copy per packet that entered its ejection queue if it has a next PE; and visiting the PEs in
    reverse gives the same run."""
    wavelets = [2, 3, 1, 4, 5]
    table = [dict(spec, wavelets=w) for spec, w in zip(TWO_REPLICAS, wavelets, strict=True)]
    ref = make(5, 5, table, 3, **TIGHT)
    rev = make(5, 5, table, 3, **TIGHT)
    rev._visit_reversed = True
    for t in range(400):
        assert ref.step() == rev.step(), t
    snap = ref.snapshot()
    assert snap == rev.snapshot()
    pipe, totals = snap["pipeline"], snap["totals"]
    assert all(f >= 3 for f in pipe["finished"])
    for u in range(25):
        g = ref.region_of[u]
        if g is None:
            assert pipe["got"][u] == 0 and not totals["packets_delivered"][u]
            continue
        if ref.regions[g]["first"]:
            assert pipe["got"][u] == 0 and not totals["packets_delivered"][u]
        else:
            assert 0 <= pipe["got"][u] < wavelets[g]
            assert totals["packets_delivered"][u] == (wavelets[g] * totals["injected"][u]
                                                      + pipe["got"][u])
        copies = 0 if ref.next_pe[u] is None else (totals["packets_delivered"][u]
                                                   + len(snap["router"][u][EJECT]))
        nxt = ref.regions[g]["next"]
        per_task = 0 if nxt < 0 else wavelets[nxt] * len(ref.feeds[u])
        assert totals["packets_offered"][u] == copies + per_task * totals["completed"][u]


# ------------------------------------------------------------------------------------------------
# Weight streaming.
# ------------------------------------------------------------------------------------------------

ONE_REGION_1X2 = [region(0, 0, 1, 2, 2)]


def stream_trace(ref, cycles):
    """Run ``cycles`` cycles and read off, from the snapshots and observables: the cycles at whose
    start a load began (load_end moved while loading), the cycles at whose start one ended (loaded
    grew), chunk admission cycles, finishes (cycle, latency), and the cycles with weight_wait."""
    starts, ends, admissions, done, waits = [], [], [], [], []
    prev = {"loaded": 0, "loading": False, "load_end": 0, "wait_cycles": 0}
    obs = []
    for t in range(cycles):
        o = ref.step()
        obs.append(o)
        pipe = ref.snapshot()["pipeline"]
        st = pipe["streaming"]
        if st["loaded"] > prev["loaded"]:
            assert st["loaded"] == prev["loaded"] + 1
            ends.append(t)
        if st["loading"] and st["load_end"] != prev["load_end"]:
            starts.append(t)
            assert st["load_end"] > t
        admissions += [a for (_c, a, _n) in pipe["pending"][0] if a == t]
        done += [(t, o["chunk_latency_sum"])] * o["chunks_finished"]
        if o["weight_wait"]:
            assert o["weight_wait"] == 1
            waits.append(t)
        assert st["wait_cycles"] == len(waits)
        prev = st
    return starts, ends, admissions, done, waits, obs


def test_streaming_load_bound_one_region():
    """1 x 2 grid, one region (both PEs, work 2; output edge (0, 1)), W = 8, Q = 8: without
    streaming chunk k would be admitted at k, both PEs take it at once, and chunk j of a run of
    back-to-back admissions s, s + 1, s + 2 runs s + 2j .. s + 2j + 1 (one server each), so it
    finishes at s + 2j + 1 with latency j + 2.  Streaming: N = 3 chunks a pass, Lw = 8.

    c0: no load under way, loaded 0 < D div N + 2 = 2: load of pass 0 starts, E = 8.  Admit:
        A = 0 is a pass's first chunk, D = A but A div N = 0 >= loaded 0: not admitted; the cycle
        waits (D = A, A mod N = 0, 0 >= 0).  c1..c7: the same (load under way, t < E): 8 waits.
    c8: the load ends (loaded 1); none under way and 1 < 0 + 2: pass 1's load starts, E = 16.
        Chunk 0 admitted (0 < 1).  c9, c10: chunks 1, 2 admitted (not a pass's first).
        Finishes: 9 (lat 2), 11 (3), 13 (4); D = 3 at the end of 13.
    c11..c13: A = 3 is pass 1's first chunk, D < A: not admitted and not waiting (the pipeline
        is still busy with pass 0).
    c14, c15: D = A = 3, 3 div 3 = 1 >= loaded 1: wait.
    c16: load ends (loaded 2); 2 < 3 div 3 + 2 = 3: pass 2's load starts, E = 24 (its buffer
        was freed when pass 0 finished at 13, so it does not hold anything up).  Chunk 3
        admitted; chunks 4, 5 at 17, 18; finishes 17, 19, 21.  c22, c23 wait.
    c24: loaded 3, pass 3's load (3 < 6 div 3 + 2) starts, E = 32, chunk 6 admitted...
    So the loads run back to back (ends 8, 16, 24), a pass every Lw = 8 cycles, waiting 8 cycles
    first and then Lw - 6 = 2 a pass.  End of c27: loaded 3, loading (E = 32), 12 waits.
    """
    ref = make_streaming(1, 2, ONE_REGION_1X2, 8, 3, 8)
    o = ref.step()
    pipe = ref.snapshot()["pipeline"]
    assert pipe["streaming"] == {"loaded": 0, "loading": True, "load_end": 8, "wait_cycles": 1}
    assert pipe["admitted"] == [0] and o["injected"] == 0 and o["weight_wait"] == 1

    ref = make_streaming(1, 2, ONE_REGION_1X2, 8, 3, 8)
    starts, ends, admissions, done, waits, obs = stream_trace(ref, 28)
    assert starts == [0, 8, 16, 24] and ends == [8, 16, 24]
    assert admissions == [8, 9, 10, 16, 17, 18, 24, 25, 26]
    assert done == [(9, 2), (11, 3), (13, 4), (17, 2), (19, 3), (21, 4), (25, 2), (27, 3)]
    assert waits == [0, 1, 2, 3, 4, 5, 6, 7, 14, 15, 22, 23]
    pipe = ref.snapshot()["pipeline"]
    assert pipe["streaming"] == {"loaded": 3, "loading": True, "load_end": 32, "wait_cycles": 12}
    assert pipe["admitted"] == [9] and pipe["finished"] == [8]


@pytest.mark.parametrize("load_cycles, starts, ends, admissions, waits", [
    # Lw = 2: pass 0's load 0..1, pass 1's 2..3; pass 2's waits (no load under way, loaded 2 =
    # D div N + 2) until pass 0 finishes at 7: starts at 8, ends 10; pass 3's starts at 14.
    (2, [0, 2, 8, 14, 20], [2, 4, 10, 16, 22], [2, 3, 4, 8, 9, 10, 14, 15, 16, 20, 21, 22],
     [0, 1]),
    # Lw = 5: loads 0..4 and 5..9; pass 2's load must wait for pass 0 (finished at 10): starts
    # at 11, not 10, ends 16, before pass 1 finishes (16): pass 2 admitted at 17 with no wait.
    (5, [0, 5, 11, 17, 23], [5, 10, 16, 22], [5, 6, 7, 11, 12, 13, 17, 18, 19, 23],
     [0, 1, 2, 3, 4]),
    # Lw = 6, the limit: pass 1 finishes at 15 (admitted 10, 11, 12); pass 2's load starts at 12
    # (pass 0 finished at 11) and ends at 18 = the cycle pass 2 could start anyway: no wait.
    (6, [0, 6, 12, 18], [6, 12, 18], [6, 7, 8, 12, 13, 14, 18, 19, 20], [0, 1, 2, 3, 4, 5]),
])
def test_streaming_compute_bound_waits_only_for_the_first_load(load_cycles, starts, ends,
                                                               admissions, waits):
    """The 1 x 2 region of the test above, now with Lw <= 6, 24 cycles.  A pass whose chunks
    are admitted at s, s + 1, s + 2 finishes at s + 5, so the next could be admitted at s + 6.

    The first pass waits Lw cycles (0 .. Lw - 1) for its load and is admitted from s_0 = Lw;
    pass 1's load starts the cycle pass 0's ends (loaded 1 < 0 div 3 + 2) and is in at 2 Lw <=
    Lw + 6, so s_1 = s_0 + 6.  From pass 2 on, the load for pass q waits, not for a load, but for
    its buffer: pass q - 2 finishes at s_(q-2) + 5, so the load starts at s_(q-2) + 6 = s_(q-1)
    (the previous load has ended by then) and ends at s_(q-1) + Lw <= s_(q-1) + 6: compute
    dominates and nothing waits after the first load; s_q = Lw + 6 q.  Lw = 2: s = 2, 8, 14, 20,
    loads start 0, 2 (back to back) then 8, 14, 20.  Lw = 5: s = 5, 11, 17, 23, loads 0, 5, then
    11, 17, 23 (pass 2's not at 10, when pass 1's ended: pass 0 finishes only at 10).  Lw = 6:
    each load ends exactly when its pass can start.  (With one buffer, the step-2 formula as
    printed, each pass q >= 1 would instead wait Lw cycles after pass q - 1 finished.)
    """
    ref = make_streaming(1, 2, ONE_REGION_1X2, 8, 3, load_cycles)
    got_starts, got_ends, got_admissions, done, got_waits, obs = stream_trace(ref, 24)
    assert got_starts == starts
    assert got_ends == ends
    assert got_admissions == admissions
    assert got_waits == waits
    # Chunk k of a pass finishes 2k + 1 cycles after the pass's first admission, latency k + 2.
    firsts = admissions[::3]
    assert done == [(s + 2 * k + 1, k + 2) for s in firsts for k in range(3) if s + 2 * k + 1 < 24]


def test_streaming_two_layer_buffer_holds_the_third_load():
    """The 1 x 2 region, N = 3, Lw = 2 (W = 8).  Snapshots at the end of each cycle:
    c0: pass 0's load starts (E = 2): loaded 0, loading, load_end 2, 1 wait.
    c1: still loading; 2 waits.
    c2: it ends (loaded 1) and pass 1's load starts at once (1 < 0 div 3 + 2), E = 4; chunk 0
        admitted.  Chunks 0, 1, 2 admitted 2, 3, 4, finish 3, 5, 7.
    c4: pass 1's load ends: loaded 2.  Pass 2's load may not start: 2 < D div N + 2 needs D >= 3
        (pass 0 finished); D = 1 (end of c3), then 1, 2, 2 (ends of c4..c6), 3 at the end of c7.
        So at the end of c4..c7: loaded 2, not loading, load_end 4.
    c8: 2 < 3 div 3 + 2: pass 2's load starts, E = 10.  Chunk 3 (pass 1) admitted at 8.
    With one buffer (load q after pass q - 1) pass 1's load would have had to wait until 7.
    """
    ref = make_streaming(1, 2, ONE_REGION_1X2, 8, 3, 2)
    states = []
    for _ in range(11):
        ref.step()
        st = ref.snapshot()["pipeline"]["streaming"]
        states.append((st["loaded"], st["loading"], st["load_end"], st["wait_cycles"]))
    assert states == [(0, True, 2, 1), (0, True, 2, 2), (1, True, 4, 2), (1, True, 4, 2),
                      (2, False, 4, 2), (2, False, 4, 2), (2, False, 4, 2), (2, False, 4, 2),
                      (2, True, 10, 2), (2, True, 10, 2), (3, False, 10, 2)]
    # c10: pass 2's load ended (loaded 3) and pass 3's may not start: pass 1 (chunks 3..5,
    # admitted 8, 9, 10) has not finished (D = 4 at the end of c9).
    pipe = ref.snapshot()["pipeline"]
    assert pipe["admitted"] == [6] and pipe["finished"] == [4]


def test_streaming_next_pass_waits_for_the_pipeline_to_drain():
    """1 x 5 grid, region 0 = columns 0-1 (work 2) -> region 1 = columns 2-4 (work 1), W = 3,
    N = 2, Lw = 4.  Without streaming (test_two_region_row_with_three_chunks_in_flight) a chunk
    admitted at s with region 0 free runs there s, s + 1 and finishes at s + 5 (latency 6); one
    admitted at s + 1 waits for region 0 (s + 2, s + 3) and finishes at s + 7 (latency 7).

    c0: pass 0's load starts (E = 4); c0..c3 wait.  c4: loaded 1, pass 1's load starts (E = 8);
    chunk 0 admitted; c5: chunk 1.  Finishes 9 (6) and 11 (7).  c6..c11: A = 2 is pass 1's first
    chunk and D < A: no admission although W = 3 allows one and, from c8 (loaded 2), its weights
    are in; no wait is counted (D != A).  c8: pass 1's load ended; pass 2's needs pass 0 finished
    (D >= 2, end of c11).  c12: pass 2's load starts (E = 16) and chunk 2 is admitted (D = A = 2,
    1 < 2); chunk 3 at 13; finishes 17 (6), 19 (7).  c16: loaded 3.  c20: pass 3's load starts
    (pass 1 finished at 19) and chunk 4 is admitted.  The pipeline is empty between passes.
    """
    regions = [region(0, 0, 1, 2, 2, next=1), region(0, 2, 1, 5, 1)]
    ref = make_streaming(1, 5, regions, 3, 2, 4)
    starts, ends, admissions, done, waits, obs = stream_trace(ref, 28)
    assert starts == [0, 4, 12, 20] and ends == [4, 8, 16, 24]
    assert admissions == [4, 5, 12, 13, 20, 21]
    assert done == [(9, 6), (11, 7), (17, 6), (19, 7), (25, 6), (27, 7)]
    assert waits == [0, 1, 2, 3]
    # Between passes nothing is in the machine.
    assert all(o["queued"] == o["in_service"] == o["in_flight"] == o["packets_in_router"] == 0
               for o in obs[11:12] + obs[19:20])


def test_streaming_with_one_chunk_in_flight():
    """W = 1 limits admissions inside a pass as usual.  1 x 2 region (work 2), N = 2, Lw = 3.
    c0..c2 wait; c3: loaded 1, pass 1's load starts (E = 6); chunk 0 admitted, runs 3, 4,
    finishes 4 (latency 2).  c5: chunk 1 (A = 1 < D + W = 2), finishes 6.  c6: pass 1's load ends
    (loaded 2); pass 2's needs pass 0 done (D = 2 at the end of c6): no.  c7: it starts (E = 10);
    chunk 2 admitted (loaded 2 > 1), finishes 8; chunk 3 at 9, finishes 10.  c10: loaded 3; c11:
    pass 3's load starts (E = 14), chunk 4 admitted...  Only c0..c2 wait.
    """
    ref = make_streaming(1, 2, ONE_REGION_1X2, 1, 2, 3)
    starts, ends, admissions, done, waits, obs = stream_trace(ref, 16)
    assert starts == [0, 3, 7, 11, 15] and ends == [3, 6, 10, 14]
    assert admissions == [3, 5, 7, 9, 11, 13, 15]
    assert done == [(4, 2), (6, 2), (8, 2), (10, 2), (12, 2), (14, 2)]
    assert waits == [0, 1, 2]


def test_streaming_absent_or_none_changes_nothing():
    plain = make(1, 5, [region(0, 0, 1, 2, 2, next=1), region(0, 2, 1, 5, 1)], 3)
    none = make(1, 5, [region(0, 0, 1, 2, 2, next=1), region(0, 2, 1, 5, 1)], 3,
                pipeline={"regions": [region(0, 0, 1, 2, 2, next=1), region(0, 2, 1, 5, 1)],
                          "chunks_in_flight": 3, "streaming": None})
    a, b = plain.run(40), none.run(40)
    assert a == b and plain.snapshot() == none.snapshot()
    assert all(o["weight_wait"] == 0 for o in a)
    assert plain.snapshot()["pipeline"]["streaming"] is None


def test_streaming_turn_conserves_and_keeps_passes_apart():
    """A band turn (TURN, one replica) on the tight machine, N = 4, Lw = 7, W = 3, 300 cycles.
    Checked from outside each cycle: the chunks in flight (pending) all belong to one pass;
    every admitted chunk's pass is loaded; at most two layers are held (loaded minus passes
    finished, plus one while loading); weight_wait is exactly the rule D = A, A mod N = 0,
    A div N >= loaded as at the start of the cycle after the load steps (reconstructed: the load
    state before the cycle plus this cycle's end-of-load, if t >= E); and wait_cycles sums it.
    The oracle's own conservation checks run every cycle too.  Visiting the PEs in reverse gives
    the same run.
    """
    n_pass, lw = 4, 7
    ref = make_streaming(4, 3, TURN, 3, n_pass, lw, **TIGHT)
    rev = make_streaming(4, 3, TURN, 3, n_pass, lw, **TIGHT)
    rev._visit_reversed = True
    before = ref.snapshot()["pipeline"]
    prev = {"loaded": 0, "loading": False, "load_end": 0}
    total_wait = 0
    for t in range(300):
        o = ref.step()
        assert o == rev.step()
        pipe = ref.snapshot()["pipeline"]
        st = pipe["streaming"]
        A, D = pipe["admitted"][0], pipe["finished"][0]
        assert all(c // n_pass == D // n_pass for (c, _a, _n) in pipe["pending"][0])
        assert A == 0 or (A - 1) // n_pass < st["loaded"]
        assert st["loaded"] - D // n_pass + (1 if st["loading"] else 0) <= 2
        loaded = prev["loaded"] + (1 if prev["loading"] and t >= prev["load_end"] else 0)
        A0, D0 = before["admitted"][0], before["finished"][0]
        expect = int(D0 == A0 and A0 % n_pass == 0 and A0 // n_pass >= loaded)
        assert o["weight_wait"] == expect, t
        total_wait += o["weight_wait"]
        assert st["wait_cycles"] == total_wait
        before, prev = pipe, st
    assert ref.snapshot() == rev.snapshot()
    assert ref.snapshot()["pipeline"]["finished"][0] >= 3 * n_pass
    assert lw <= total_wait < 300


# ------------------------------------------------------------------------------------------------
# Validation.
# ------------------------------------------------------------------------------------------------

GOOD_1X4 = [region(0, 0, 1, 1, 2, next=1), region(0, 1, 1, 4, 1)]


def _with(index, **changes):
    table = [dict(r) for r in GOOD_1X4]
    table[index].update(changes)
    return table


@pytest.mark.parametrize("regions, message", [
    # Overlapping rectangles: (0, 1) is in both.
    ([region(0, 0, 1, 2, 1, next=1), region(0, 1, 1, 4, 1)], "overlap"),
    # Two chains in one replica: regions 0 and 1 are both first (and both last).
    ([region(0, 0, 1, 1, 1), region(0, 1, 1, 2, 1)], "one chain"),
    # A cycle beside a chain: 0 -> 1 is a chain, 2 -> 3 -> 2 loops; one first and one last.
    ([region(0, 0, 1, 1, 1, next=1), region(0, 1, 1, 2, 1), region(0, 2, 1, 3, 1, next=3),
      region(0, 3, 1, 4, 1, next=2)], "cycle"),
    # Successor in another replica.
    (_with(1, replica=1), "successor"),
    # A region naming itself.
    ([region(0, 0, 1, 1, 1, next=0)], "itself"),
    # Successor index out of range.
    (_with(0, next=5), "next"),
    # Outside the grid, and empty.
    ([region(0, 2, 1, 5, 1)], "inside"),
    ([region(0, 2, 1, 2, 1)], "inside"),
    # Work out of 1..65535.
    (_with(1, work=0), "work"),
    (_with(1, work=65536), "work"),
    ([], "at least one region"),
    # The new keys.
    (_with(0, flow=0), "flow"),
    (_with(0, flow=2), "flow"),
    (_with(0, flow=True), "flow"),
    (_with(0, flow=1.0), "flow"),
    (_with(1, input="column"), "input"),
    (_with(1, output="top"), "output"),
    (_with(1, output=None), "output"),
    ([{k: v for k, v in GOOD_1X4[0].items() if k != "flow"}, GOOD_1X4[1]], "keys"),
    (_with(0, name="embed"), "keys"),
    ([(0, 0, 1, 1, 2, 1, 0), GOOD_1X4[1]], "keys"),
    # wavelets, optional, an integer in 1..65535.
    (_with(1, wavelets=0), "wavelets"),
    (_with(1, wavelets=65536), "wavelets"),
    (_with(1, wavelets=3.0), "wavelets"),
    (_with(1, wavelets=True), "wavelets"),
    (_with(1, wavelets="3"), "wavelets"),
    (_with(0, wavelets=-1), "wavelets"),
    (_with(1, wavelet=3), "keys"),
])
def test_invalid_region_tables_are_rejected(regions, message):
    with pytest.raises(ValueError, match=message):
        make(1, 4, regions, 1)


def test_invalid_pipeline_settings_are_rejected():
    make(1, 4, GOOD_1X4, 1_048_576)     # the good table itself is accepted, W = 2^20 included
    for w in (1, 65535):                # wavelets' bounds are accepted, on any region
        make(1, 4, _with(1, wavelets=w), 1)
        make(1, 4, _with(0, wavelets=w), 1)
    # Edges need not touch: a region fed from afar, or flowing "west" from the east end, is fine.
    make(1, 4, [region(0, 3, 1, 4, 1, next=1, flow=-1, output="bottom"),
                region(0, 0, 1, 2, 1, flow=1, input="col")], 1)
    for w in (0, 1_048_577):
        with pytest.raises(ValueError, match="chunks_in_flight"):
            make(1, 4, GOOD_1X4, w)
    # Every policy runs with a pipeline (docs/mesh.md, "Migration in the pipeline").
    for policy in ("none",) + POLICIES:
        make(1, 4, GOOD_1X4, 1, policy=policy)
    with pytest.raises(ValueError, match="policy"):
        make(1, 4, GOOD_1X4, 1, policy="nearest")
    with pytest.raises(ValueError, match="no rates"):
        make(1, 4, GOOD_1X4, 1, rates=[0.1] * 4)
    with pytest.raises(ValueError, match="no rates"):
        make(1, 4, GOOD_1X4, 1, trace_events=[(0, 0, 0, 1)])
    with pytest.raises(ValueError, match="no rates"):
        make(1, 4, GOOD_1X4, 1, rates=[0.1] * 4, pattern="uniform")
    with pytest.raises(ValueError, match="exactly one of rates"):
        make(1, 4, GOOD_1X4, 1, pipeline=None)
    with pytest.raises(ValueError, match="exactly the keys"):
        make(1, 4, GOOD_1X4, 1, pipeline={"regions": GOOD_1X4})


@pytest.mark.parametrize("streaming, message", [
    ({"chunks_per_pass": 0, "load_cycles": 1}, "chunks_per_pass"),
    ({"chunks_per_pass": 1, "load_cycles": 0}, "load_cycles"),
    ({"chunks_per_pass": True, "load_cycles": 1}, "chunks_per_pass"),
    ({"chunks_per_pass": 2, "load_cycles": 1.5}, "load_cycles"),
    ({"chunks_per_pass": 2}, "exactly the keys"),
    ({"chunks_per_pass": 2, "load_cycles": 1, "bytes": 9}, "exactly the keys"),
    ((2, 1), "exactly the keys"),
])
def test_invalid_streaming_settings_are_rejected(streaming, message):
    make_streaming(1, 4, GOOD_1X4, 1, 1, 1)        # the smallest good values are accepted
    with pytest.raises(ValueError, match=message):
        make(1, 4, GOOD_1X4, 1, pipeline={"regions": GOOD_1X4, "chunks_in_flight": 1,
                                           "streaming": streaming})


def test_streaming_needs_exactly_one_replica():
    """Two one-region replicas (ids 0 and 1) on a 1 x 4 grid: valid without streaming, refused
    with it; likewise TWO_REPLICAS."""
    two = [region(0, 0, 1, 2, 1, replica=0), region(0, 2, 1, 4, 1, replica=1)]
    make(1, 4, two, 2)
    with pytest.raises(ValueError, match="exactly one replica"):
        make_streaming(1, 4, two, 2, 3, 5)
    make(5, 5, TWO_REPLICAS, 2)
    with pytest.raises(ValueError, match="exactly one replica"):
        make_streaming(5, 5, TWO_REPLICAS, 2, 3, 5)


# ------------------------------------------------------------------------------------------------
# Longer runs: conservation, identities, order independence.
# ------------------------------------------------------------------------------------------------

# Two replicas on a 5 x 5 grid, listed out of order, replica ids 7 and 3:
#   replica 7: a band turn: rows 0-1 x cols 0-2 (flow +1, row, bottom, work 2, index 0) ->
#              rows 2-3 x cols 0-2 (flow -1, col, side, work 1, index 3);
#   replica 3: row 0 x cols 3-4 (flow -1, row, side, n_out = 1, work 1, index 1) ->
#              rows 1-3 x cols 3-4 (flow -1, col, bottom, n_in = 2: fan-out 2, work 3, index 4)
#              -> row 4 x cols 0-4 (flow +1, row, side, n_in = 1, work 2, index 2); its feed
#              travels from (3, 3) or (3, 4) to (4, 0) through idle and busy PEs alike.
TWO_REPLICAS = [region(0, 0, 2, 3, 2, next=3, replica=7, output="bottom"),
                region(0, 3, 1, 5, 1, next=4, replica=3, flow=-1),
                region(4, 0, 5, 5, 2, replica=3),
                region(2, 0, 4, 3, 1, replica=7, flow=-1, input="col"),
                region(1, 3, 4, 5, 3, next=2, replica=3, flow=-1, input="col", output="bottom")]
TIGHT = dict(queue_capacity=2, router_queue_packets=1, hop_latency_cycles=2,
             link_buffer_messages=2, credit_delay_cycles=2)


def test_two_replicas_conserve_and_make_progress_over_300_cycles():
    """Conservation (docs/mesh.md) recomputed here from the cumulative per-cycle observables,
    independent of the oracle's own check, on a tight machine (Q = 2, Qo = 1, K = 2, L = Lc = 2).

    Plus identities of the dataflow rules, per PE at the end: a first-region PE injected exactly
    the chunks it took and received nothing; any other region PE injected one task per delivered
    packet; packets offered = one copy per packet that entered its ejection queue (delivered, or
    still there) if it has a next PE, plus len(feeds) per completed task at an output-edge PE;
    and the last regions' output-edge PEs completed at least D chunks.
    """
    ref = make(5, 5, TWO_REPLICAS, 3, **TIGHT)
    assert [ref.feeds[u] for u in (5, 6, 7)] == [[(2, 0)], [(2, 1)], [(2, 2)]]   # turn
    assert ref.feeds[3] == [(1, 4), (1, 3)] and ref.feeds[4] == []    # fan-out 2, in order
    assert ref.feeds[3 * 5 + 3] == [(4, 0)] and ref.feeds[3 * 5 + 4] == []    # n_in = 1
    cum = {}
    for t in range(300):
        o = ref.step()
        for key, value in o.items():
            if key != "depth_hist":
                cum[key] = cum.get(key, 0) + value
        lhs = cum["injected"] + cum["packets_offered"]
        rhs = (cum["refused"] + o["queued"] + o["in_service"] + o["packets_in_source"]
               + o["packets_in_router"] + o["in_flight"] + cum["completed"]
               + cum["packets_delivered"])
        assert lhs == rhs, "cycle %d" % t
        assert cum["measured_delivered"] == cum["packets_delivered"]
        assert cum["measured_injected"] == cum["packets_injected"]
    snap = ref.snapshot()
    pipe, totals = snap["pipeline"], snap["totals"]
    assert cum["refused"] == 0
    # Per-replica lists follow increasing replica id: [replica 3, replica 7].
    assert all(f >= 5 for f in pipe["finished"])
    assert cum["chunks_finished"] == sum(pipe["finished"])
    for i in range(2):
        assert [c for (c, _a, _n) in pipe["pending"][i]] == list(
            range(pipe["finished"][i], pipe["admitted"][i]))
    firsts = {u for g in (0, 1) for u in ref.regions[g]["pes"]}
    for u in range(25):
        if u in firsts:
            assert totals["injected"][u] == pipe["taken"][u] and not totals["packets_delivered"][u]
        elif ref.region_of[u] is not None:
            assert totals["injected"][u] == totals["packets_delivered"][u] and not pipe["taken"][u]
        copies = 0 if ref.next_pe[u] is None else (totals["packets_delivered"][u]
                                                   + len(snap["router"][u][EJECT]))
        assert totals["packets_offered"][u] == copies + len(ref.feeds[u]) * totals["completed"][u]
    for i, last in enumerate((2, 3)):
        assert all(totals["completed"][u] >= pipe["finished"][i]
                   for u in ref.regions[last]["output_edge"])
    # Output stages count as source queues and hold (dest_row, dest_col, birth).
    for u, stage in enumerate(snap["source"]):
        assert all(len(p) == 3 for p in stage) and len(stage) <= len(ref.feeds[u])


def test_pipeline_result_does_not_depend_on_pe_order():
    a = make(5, 5, TWO_REPLICAS, 2, **TIGHT)
    b = make(5, 5, TWO_REPLICAS, 2, **TIGHT)
    b._visit_reversed = True
    assert a.run(200) == b.run(200)
    assert a.snapshot() == b.snapshot()
    assert sum(a.snapshot()["pipeline"]["finished"]) > 0


def test_other_workloads_report_zero_chunks_and_no_pipeline_snapshot():
    ref = MeshReference(rows=2, cols=2, queue_capacity=4, hop_latency_cycles=1,
                        link_messages_per_cycle=1, link_buffer_messages=4, credit_delay_cycles=1,
                        policy="none", threshold=0, info_delay_cycles=1, max_per_cycle=1, seed=3,
                        rates=[0.5] * 4, work_distribution="fixed", work_cycles=2,
                        work_min_cycles=1, work_max_cycles=9, trace_events=None)
    obs = ref.run(20)
    assert sum(o["injected"] for o in obs) > 0
    assert all(o["chunks_finished"] == 0 and o["chunk_latency_sum"] == 0 for o in obs)
    assert all(o["weight_wait"] == 0 for o in obs)
    assert ref.snapshot()["pipeline"] is None


# ------------------------------------------------------------------------------------------------
# Migration in the pipeline (docs/mesh.md, "Migration in the pipeline").
# ------------------------------------------------------------------------------------------------
# 4 x 5 grid.  Region 0 = rows 0-1 x column 0 (first, work 1, output side: w = 1, so both PEs are
# its output edge, n_out = 2) -> region 1 = rows 0-2 x columns 1-4 (last, work 5, flow +1, input
# row: n_in = 3, so (0, 0) feeds inputs 0 and 2 and line 2 gets its chunks late; output edge
# column 4).  (2, 0) and row 3 are idle.  Only rows 0-2 x columns 1-3 have migration neighbours:
# each other, in region 1 and off its output edge.
FAN = [region(0, 0, 2, 1, 1, next=1), region(0, 1, 3, 5, 5)]
FAN_MIGRATING = {(r, c) for r in range(3) for c in range(1, 4)}
FAN_OUTPUT_EDGE = {(0, 0), (1, 0), (0, 4), (1, 4), (2, 4)}
FAN_IDLE = {(2, 0)} | {(3, c) for c in range(5)}


def _neighbour(rows, cols, u, d):
    r, c = divmod(u, cols)
    r, c = (r - 1, c) if d == N else (r, c + 1) if d == E else (r + 1, c) if d == S else (r, c - 1)
    return r * cols + c if 0 <= r < rows and 0 <= c < cols else None


@pytest.mark.parametrize("policy", POLICIES)
def test_migration_stays_inside_a_region_and_off_its_output_edge(policy):
    """FAN with threshold 0, D = 2, Q = 4, W = 8, 300 cycles.  Tasks migrate (the fan-out and the
    one-cycle hops along a line make queues differ inside region 1), the oracle checks its own
    conservation and pipeline invariants every cycle, and from outside, every cycle: no task and
    no control message is on a link unless both its ends are in FAN_MIGRATING (hand-listed from the
    geometry above); at the end, output-edge and idle PEs never sent or received a task, every PE
    has injected + migrated in = queued + in service + completed + migrated out, chunks finished,
    migrated tasks completed with their hops, and visiting the PEs in reverse gives the same run.
    """
    ref = make(4, 5, FAN, 8, policy=policy, queue_capacity=4, info_delay_cycles=2)
    rev = make(4, 5, FAN, 8, policy=policy, queue_capacity=4, info_delay_cycles=2)
    rev._visit_reversed = True
    migrated = hops = control = 0
    for t in range(300):
        o = ref.step()
        assert o == rev.step(), t
        migrated += o["migrated"]
        hops += o["hops_sum"]
        control += o["control_sent"]
        links = ref.snapshot()["links"]
        for u in range(20):
            for d in range(4):
                if any(msg[0] != "p" for msg in links[u][d]):
                    n = _neighbour(4, 5, u, d)
                    assert divmod(u, 5) in FAN_MIGRATING and divmod(n, 5) in FAN_MIGRATING, (t, u, d)
    snap = ref.snapshot()
    assert snap == rev.snapshot()
    totals = snap["totals"]
    on_links = sum(1 for links in snap["links"] for link in links for msg in link
                   if msg[0] not in ("p", "request", "refusal"))
    assert migrated > 0 and migrated == sum(totals["migrated_out"])
    assert migrated == sum(totals["migrated_in"]) + on_links
    assert 0 < hops and (policy == "work_stealing") == (control > 0)
    assert snap["pipeline"]["finished"][0] >= 40
    for u in range(20):
        if divmod(u, 5) in FAN_OUTPUT_EDGE | FAN_IDLE:
            assert totals["migrated_out"][u] == totals["migrated_in"][u] == 0, u
            assert totals["migrated_dir"][u] == [0, 0, 0, 0], u
        if divmod(u, 5) in FAN_IDLE:
            assert totals["injected"][u] == totals["completed"][u] == totals["busy"][u] == 0
        in_service = 0 if snap["server"][u] is None else 1
        assert (totals["injected"][u] + totals["migrated_in"][u]
                == len(snap["queue"][u]) + in_service + totals["completed"][u]
                + totals["migrated_out"][u]), u
    # The output edge completes its own chunks in order: at least every finished chunk.
    assert all(totals["completed"][r * 5 + 4] >= snap["pipeline"]["finished"][0]
               for r in range(3))


@pytest.mark.parametrize("policy", POLICIES)
def test_two_replicas_with_migration_conserve_and_do_not_depend_on_pe_order(policy):
    """TWO_REPLICAS on the tight machine with each policy (threshold 0, D = 2), 300 cycles: the
    oracle's own checks hold every cycle, chunks finish in both replicas, and visiting the PEs in
    reverse gives the same run."""
    a = make(5, 5, TWO_REPLICAS, 3, policy=policy, info_delay_cycles=2, **TIGHT)
    b = make(5, 5, TWO_REPLICAS, 3, policy=policy, info_delay_cycles=2, **TIGHT)
    b._visit_reversed = True
    assert a.run(300) == b.run(300)
    assert a.snapshot() == b.snapshot()
    assert all(f >= 20 for f in a.snapshot()["pipeline"]["finished"])


# 3 x 2 grid, two one-region replicas.  Replica 0: rows 0-1 (work 20, flow +1, input row, output
# side: its output edge is column 1, (0, 1) and (1, 1)); replica 1: row 2 (work 1, output edge
# (2, 1)).  The only migration neighbours are (0, 0) and (1, 0), of each other: (1, 0)'s S
# neighbour (2, 0) is in the other region, its E neighbour (1, 1) on the output edge.
SIDE = [region(0, 0, 2, 2, 20, replica=0), region(2, 0, 3, 2, 1, replica=1)]


def test_migration_neighbours_of_a_small_table():
    """Hand-listed from SIDE's comment; without a pipeline (a Bernoulli run on the same grid)
    every neighbour is a migration neighbour."""
    ref = make(3, 2, SIDE, 8, policy="least_loaded")
    assert ref.mig_nbr == [[None, None, 2, None], [None] * 4, [0, None, None, None],
                           [None] * 4, [None] * 4, [None] * 4]
    plain = MeshReference(rows=3, cols=2, queue_capacity=8, hop_latency_cycles=1,
                          link_messages_per_cycle=1, link_buffer_messages=8, credit_delay_cycles=1,
                          policy="least_loaded", threshold=0, info_delay_cycles=1, max_per_cycle=1,
                          seed=1, rates=[0.5] * 6, work_distribution="fixed", work_cycles=1,
                          work_min_cycles=1, work_max_cycles=100, trace_events=None)
    assert plain.mig_nbr == [[_neighbour(3, 2, u, d) for d in range(4)] for u in range(6)]


def test_least_loaded_never_picks_the_lighter_neighbour_across_a_region_boundary():
    """SIDE, least_loaded, threshold 0, M = 1, D = 2, W = 8, Q = 8.  Write a = (0, 0), c = (1, 0),
    b = (0, 1), d = (1, 1); a and c behave alike (a towards S, c towards N).  Replica 1 admits a
    chunk every cycle and completes it at once (work 1): (2, 0) and (2, 1) end every cycle with
    depth 0.  Replica 0 admits chunks 0..7 at cycles 0..7 (then A = D + W until chunk 0 finishes
    at 19), and each of its PEs takes each at once; every server runs its first task 0..19.
    Depths at the end of a cycle (the known depth kd is the neighbour's at the end of t - 2):

    c0: taken and started: 0.  b and d (output edge, no migration neighbour) just take: depth
        min(t, 7) at the end of t, up to 39 (at 20 they take chunk 8 and start a task).
    c1: taken: 1; a's kd of c = 0 (end of -1): 0 + 1 < 1 fails.
    c2: taken: 2; kd = 0 (end of 0): 1 < 2: a sends its tail task (chunk 2's) S, c its own N: 1.
    c3: each receives the other's task (L = 1) and takes chunk 3: 3; kd = 1 (end of 1): 2 < 3,
        sends: 2.  Here c knows (2, 0) at depth 0, below its kd of a (1), and still sends N: the
        S neighbour is in another region, not a migration neighbour.
    ct, 3 <= t <= 7: receive, take: t; kd = t - 2 (end of t - 2); send: t - 1.
    c8: receive: 7 (nothing left to take); kd = 5 (end of 6): 6 < 7, sends: 6.
    c9: receive: 7; kd = 6 (end of 7): 7 < 7 fails.  Nothing moves from then on (c20: take chunk
        8, Start: 7 again; no other chunk until 39).  So migrated is 2 a cycle at 2..8: 7 tasks
        each way, all on the link a <-> c, none towards (2, 0) although it stays at depth 0.
    c19: b and d complete chunk 0, which finishes whatever a and c hold; c39: chunk 1 (b and d
        serve their own chunk 1 at 20..39).
    """
    ref = make(3, 2, SIDE, 8, policy="least_loaded", info_delay_cycles=2)
    depths, migrated, finished = [], [], []
    for _ in range(40):
        o = ref.step()
        snap = ref.snapshot()
        depths.append([len(q) for q in snap["queue"]])
        migrated.append(o["migrated"])
        finished.append(snap["pipeline"]["finished"][0])
        # Never a task on a link between the two replicas' PEs (rows 1 and 2).
        assert not any(msg[0] != "p" for msg in snap["links"][2][S] + snap["links"][3][S]
                       + snap["links"][4][N] + snap["links"][5][N])
    ac = [0, 1, 1, 2, 3, 4, 5, 6, 6] + [7] * 31
    bd = [min(t, 7) for t in range(40)]
    assert depths == [[x, y, x, y, 0, 0] for x, y in zip(ac, bd, strict=True)]
    assert migrated == [0, 0] + [2] * 7 + [0] * 31
    totals = ref.snapshot()["totals"]
    assert totals["migrated_dir"] == [[0, 0, 7, 0], [0] * 4, [7, 0, 0, 0], [0] * 4, [0] * 4,
                                      [0] * 4]
    assert totals["migrated_in"] == [7, 0, 7, 0, 0, 0]
    assert finished[18:20] == [0, 1] and finished[38:40] == [1, 2]


def test_gradient_pressure_counts_migration_neighbours_only():
    """SIDE with gradient, threshold 0 (S = 0: light means an empty queue), M = 1, D = 1, W = 8.
    (2, 0) and (2, 1) are always light: pressure 0.  c = (1, 0)'s only lighter neighbour from c2
    on is (2, 0), in the other region: its pressure is taken over a = (0, 0) alone.

    c0: every PE takes chunk 0 and starts it: all light, pressures 0.
    c1: replica 0 takes chunk 1: depth 1, not light.  a: kp[S] = p_c(0) = 0 = pmin < 255, the
        link has room: it sends its tail task S (depth 0); c likewise N.  End: a, c light (0);
        b, d depth 1 with no migration neighbour: 255.
    c2: each receives the other's task and takes chunk 2: 2; kp = p(1) = 0: sends: 1.  End:
        p_a = 1 + p_c(1) = 1, p_c = 1 + p_a(1) = 1.
    c3: receive, take: 3; kp = 1 = pmin: sends: 2.  p_a = p_c = 1 + 1 = 2, while (2, 0) had 0 at
        the end of 2: counted over every neighbour, c would have 1 (and d 1).
    ct: p_a = p_c = t - 1 (one more than the other's at t - 1, both count up: nothing light is
        known in their region), until 255; a and c swap a task each way every cycle from c1 on.
    """
    ref = make(3, 2, SIDE, 8, policy="gradient")
    pressures, migrated = [], []
    for _ in range(12):
        migrated.append(ref.step()["migrated"])
        pressures.append(ref.snapshot()["pressure"])
    assert pressures[:2] == [[0] * 6, [0, 255, 0, 255, 0, 0]]
    assert pressures[2:] == [[t - 1, 255, t - 1, 255, 0, 0] for t in range(2, 12)]
    assert migrated == [0] + [2] * 11
    totals = ref.snapshot()["totals"]
    assert totals["migrated_dir"][2] == [11, 0, 0, 0] and totals["migrated_dir"][0] == [0, 0, 11, 0]
    assert totals["migrated_in"][4] == totals["migrated_in"][5] == 0


def test_work_stealing_pe_without_migration_neighbours_never_asks():
    """1 x 3 grid: region 0 = (0, 0) (work 1) -> region 1 = (0, 1)-(0, 2) (work 1, flow +1, input
    row, output edge (0, 2)).  (0, 0) is region 0's output edge, (0, 2) region 1's, and (0, 1)'s
    neighbours are one in another region and one on the output edge: no PE has a migration
    neighbour.  W = 1: chunk j is admitted at 4j and (0, 0) completes it at once; its stage packet
    leaves and is sent at 4j + 1, (0, 1) gets it at 4j + 2 (task done at once, copy sent), (0, 2)
    the copy at 4j + 3: chunk j finishes at 4j + 3, latency 4, and chunk j + 1 is admitted at
    4j + 4.  (0, 1) is idle (server and queue empty) at step 4 of every cycle but 4j + 2, so
    without the pipeline it would ask; here nothing asks, ever.
    """
    ref = make(1, 3, [region(0, 0, 1, 1, 1, next=1), region(0, 1, 1, 3, 1)], 1,
               policy="work_stealing")
    assert ref.mig_nbr == [[None] * 4] * 3
    obs = ref.run(20)
    assert all(o["control_sent"] == o["migrated"] == 0 for o in obs)
    assert ref.snapshot()["stealing"] == [(-1, (0, 0, 0, 0))] * 3
    assert finishes(obs) == [(3, 1, 4), (7, 1, 4), (11, 1, 4), (15, 1, 4), (19, 1, 4)]


def test_a_task_sent_across_a_region_boundary_is_caught():
    """SIDE, least_loaded: moving a task from c = (1, 0) to (2, 0) (another region) behind the
    simulator's back, counted as a migration on S, fails the end-of-cycle check.  The task is put
    on the link with the next cycle as its send cycle, as if c sent it in that cycle's step 4, so
    that every count agrees and only the region rule is broken."""
    ref = make(3, 2, SIDE, 8, policy="least_loaded")
    ref.run(3)
    pe = ref.pes[2]
    task = pe.queue.pop()
    pe.links[S].append((ref.cycle, task))
    pe.sent_total[S] += 1
    pe.migrated_out += 1
    pe.migrated_dir[S] += 1
    with pytest.raises(AssertionError, match="not a migration neighbour"):
        ref.step()
