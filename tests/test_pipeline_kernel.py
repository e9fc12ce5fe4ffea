"""The layer_pipeline workload in the fast kernel against the plain reference, cycle by cycle
(docs/mesh.md, "Dataflow"), and its set-up (meshsim/mesh/pipeline.py)."""

import h5py
import numpy as np
import pytest
from mesh_compare import compare_cycle_by_cycle

from kernels import mesh as K
from meshsim.errors import InputError
from meshsim.mesh import policies
from meshsim.mesh.pipeline import BOUNDS, build, model_of
from meshsim.mesh.sim import MeshSim, build_inputs
from meshsim.scenario import scenario_from_dict
from meshsim.transformer import operators


def cdiv(a, b):
    """ceil(a / b) for integers."""
    return -(-a // b)


def pipeline_scenario(rows=10, cols=14, **over):
    """A small transformer on a small grid. The PEs are fast and the wavelets wide (16 bytes), so that
    tasks take a few cycles and a chunk's input is a few wavelets."""
    d = {
        "run": {"cycles": 200, "seed": 5},
        "machine": {"rows": rows, "cols": cols, "queue_capacity": 4, "pe_flops_per_cycle": 200.0,
                    "sram_read_bytes_per_cycle": 200, "sram_write_bytes_per_cycle": 100, "wavelet_bytes": 16},
        "migration": {"policy": "none", "threshold": 0},
        # the blocks alone unless a case gives a vocabulary (a GPT-2 head would dwarf this model), and
        # partial sums at the model's 16 bits, as the restatements below assume
        "workload": {"type": "layer_pipeline", "hidden_size": 32, "n_layers": 2, "n_heads": 2, "seq_len": 8,
                     "batch": 1, "chunks_in_flight": 16, "vocab_size": 0, "accumulate": "same"},
        "output": {"frame_every_cycles": 0},
    }
    for key, value in over.items():
        section, name = key.split("__")
        d.setdefault(section, {})[name] = value
    return scenario_from_dict(d)


CASES = {
    "two_layers": {},
    "unfused": dict(cols=24, workload__fuse_elementwise=False),
    "training": dict(rows=12, workload__training=True),
    "two_replicas": dict(cols=28, workload__replicas=2),
    "hop2_tight": dict(machine__hop_latency_cycles=2, machine__router_queue_packets=1, machine__queue_capacity=2,
                       machine__link_buffer_messages=1, workload__chunks_in_flight=3),
    # Slow links (a message per L + Lc = 6 cycles): output stages back up and hold their PE's next task.
    "slow_links": dict(machine__hop_latency_cycles=2, machine__credit_delay_cycles=4, machine__link_buffer_messages=1,
                       machine__router_queue_packets=2, machine__queue_capacity=6),
    # Weight streaming: loads longer than a pass (waits), and shorter with long tasks (buffer rule).
    "streaming_load_bound": dict(rows=6, cols=12, workload__weight_streaming=True, workload__n_layers=3,
                                 workload__weight_bandwidth_gbps=400.0),
    "streaming_compute_bound": dict(rows=6, cols=12, workload__weight_streaming=True, workload__n_layers=4,
                                    workload__tokens_per_chunk=4, workload__weight_bandwidth_gbps=3000.0,
                                    workload__chunks_in_flight=3),
    # Two messages a cycle into one-packet router queues and two-task queues: arrivals bunch up.
    "wide_links_tight": dict(machine__link_messages_per_cycle=2, machine__link_buffer_messages=4,
                             machine__router_queue_packets=1, machine__queue_capacity=2),
    # One-task queues: a chunk's last wavelet waits at the ejection queue's head while the ones before
    # it are delivered early into a full queue.
    "one_task_queues": dict(machine__queue_capacity=1, machine__router_queue_packets=2),
    "wide_links": dict(machine__link_messages_per_cycle=2, machine__link_buffer_messages=4,
                       machine__credit_delay_cycles=2),
    "three_layers_uneven": dict(rows=11, cols=13, workload__n_layers=3, workload__tokens_per_chunk=2),
    # Wider than a segment of columns (64; two segments): regions waiting for their first chunk, and
    # those done with the last, are skipped while quiet.
    "wide_quiet_segments": dict(rows=6, cols=100, workload__chunks_in_flight=2),
    # The whole step: the embedding first, the final norm, head and loss after the last layer, and
    # their backward kernels (a 48-token vocabulary).
    "whole_step": dict(rows=14, cols=16, workload__training=True, workload__vocab_size=48),
}
# Cycles compared, where the default 160 would finish no chunk.
CYCLES = {"three_layers_uneven": 320, "training": 340, "slow_links": 240, "wide_quiet_segments": 280,
          "whole_step": 400}


# Under -m slow alone: cases the default run largely covers otherwise (the unfused pipeline is every
# migration case's below; two replicas repeat one replica's placement side by side; quiet segments are
# skipped by the code the task path's quiet-segment case in tests/test_mesh_kernel.py checks).
# Three layers of uneven widths: the placement two_layers and whole_step check, one layer more; training:
# whole_step's backward without its embedding and head.
SLOW_CASES = {"unfused", "two_replicas", "wide_quiet_segments", "three_layers_uneven", "training"}


@pytest.mark.parametrize("case", [pytest.param(c, marks=pytest.mark.slow) if c in SLOW_CASES else c
                                  for c in sorted(CASES)])
def test_kernel_equals_reference_cycle_by_cycle(case):
    over = dict(CASES[case])
    rows, cols = over.pop("rows", 10), over.pop("cols", 14)
    sc = pipeline_scenario(rows, cols, **over)
    totals = compare_cycle_by_cycle(sc, CYCLES.get(case, 160))
    # The case must exercise the pipeline: chunks finish and packets (copies included) move.
    assert totals["chunks_finished"] > 0
    assert totals["packets_delivered"] > 0
    if case.startswith("wide"):
        assert totals["quiet_segments"] > 0


MIGRATION_POLICIES = [p for p in policies.names() if p != "none"]  # (every policy of the table)


#: In the default run: work stealing (requests between neighbours) and gradient (a field over the region);
#: the others, each a rule on the same neighbour depths, under -m slow (tests/test_mesh_kernel.py checks
#: every policy on the task path).
PIPELINE_DEFAULT_POLICIES = {"work_stealing", "gradient"}


@pytest.mark.parametrize("policy", [p if p in PIPELINE_DEFAULT_POLICIES else pytest.param(p, marks=pytest.mark.slow)
                                    for p in MIGRATION_POLICIES])
def test_kernel_equals_reference_with_migration_in_the_pipeline(policy):
    """Each policy inside the regions of an unfused pipeline (docs/mesh.md, "Migration in the
    pipeline"). A region's PEs get the same tasks, a hop apart along its lines; with depths known two
    cycles late, a PE ahead sees a neighbour behind it as lighter, and tasks move."""
    sc = pipeline_scenario(10, 24, migration__policy=policy, migration__threshold=0,
                           migration__info_delay_cycles=2, workload__fuse_elementwise=False)
    totals = compare_cycle_by_cycle(sc, 160)
    assert totals["chunks_finished"] > 0 and totals["migrated"] > 0


@pytest.mark.parametrize("policy", MIGRATION_POLICIES)
def test_output_edge_and_idle_pes_never_move_a_pipeline_task(policy):
    """Output-edge and idle PEs neither send nor receive a task; each region's tasks are accounted
    for (given = completed + queued + in service + sent less received by its PEs); chunks finish.
    (That a moved task stays in its region is the reference's rule, compared cycle by cycle above.)"""
    over = dict(rows=10, cols=24, machine__queue_capacity=6, migration__info_delay_cycles=2,
                workload__fuse_elementwise=False)
    rows, cols = over.pop("rows"), over.pop("cols")
    moved = MeshSim(build_inputs(pipeline_scenario(rows, cols, migration__policy=policy, migration__threshold=0,
                                                   **over)), 2000)
    moved.advance(2000)
    st, pipe = moved.state, moved.inputs.pipeline
    edge = np.zeros((rows, cols), bool)
    for r in range(rows):
        for c in range(cols):
            g = int(st.lp_g[r, c])
            edge[r, c] = g < 0 or K._out_index(st.lp_reg, g, r, c) >= 0
    assert st.tot_migrated_out[edge].sum() == 0 and st.tot_migrated_in[edge].sum() == 0
    assert st.tot_migrated_out.sum() > 0
    g = st.lp_g.ravel()
    for k in range(pipe.n_regions):
        inside = g == k
        held = (st.tot_injected.ravel()[inside].sum() - st.tot_completed.ravel()[inside].sum()
                - st.q_len.ravel()[inside].sum() - (st.s_rem.ravel()[inside] > 0).sum())
        on_links = st.tot_migrated_out.ravel()[inside].sum() - st.tot_migrated_in.ravel()[inside].sum()
        assert held == on_links >= 0, k
    assert moved.series[:2000, K.S_CHUNKS_FINISHED].sum() > 0


def test_pipeline_table_follows_the_placement():
    sc = pipeline_scenario()
    p = build(sc)
    t = p.table
    # One chain, first to last, bands alternating flow, the turn through bottom/col edges.
    assert p.n_replicas == 1 and t[0, K.REG_FIRST] == 1 and (t[1:, K.REG_FIRST] == 0).all()
    assert list(t[:-1, K.REG_NEXT]) == list(range(1, len(t))) and t[-1, K.REG_NEXT] == -1
    per_band = len(t) // 2
    assert set(t[:per_band, K.REG_FLOW]) == {1} and set(t[per_band:, K.REG_FLOW]) == {-1}
    assert t[per_band - 1, K.REG_OUTPUT] == K.OUTPUT_BOTTOM and t[per_band, K.REG_INPUT] == K.INPUT_COL
    assert (t[:per_band - 1, K.REG_OUTPUT] == K.OUTPUT_SIDE).all()
    # The band's last region and the next band's first share the east end of the grid.
    last, first = t[per_band - 1], t[per_band]
    assert last[K.REG_COL0] + last[K.REG_WIDTH] == first[K.REG_COL0] + first[K.REG_WIDTH] == 14
    assert first[K.REG_ROW0] == last[K.REG_ROW0] + last[K.REG_HEIGHT]
    # Work per task: each operator's FLOPs for one token of the 8 over the PEs at its rate, or the
    # partial sums' wavelets if more. ln1 (8 FLOPs per element read and written once) runs at the SIMD
    # rate, 200; qkv_proj (a multiply-add reads 2 x 2 bytes, writes 2) at 200 / 2 = 100 / 1 = 100.
    ops = {op.name: op for op in operators(model_of(sc.values["workload"]))}
    h0, w0 = int(t[0, K.REG_HEIGHT]), int(t[0, K.REG_WIDTH])
    compute = ops["layer0.ln1"].flops / 8 / (h0 * w0 * 200.0) + ops["layer0.qkv_proj"].flops / 8 / (h0 * w0 * 100.0)
    reduce = cdiv(cdiv(96, w0) * 2, 16)  # Q, K and V (96 elements) over the w0 columns, 2 bytes, 16-byte wavelets
    assert t[0, K.REG_WORK] == max(int(np.ceil(compute)), reduce)
    assert t[0, K.REG_WAVELETS] == 1  # the first region takes admitted chunks
    # Region 1 (the scores) gets Q, K and V over its input edge, its h rows.
    h1 = int(t[1, K.REG_HEIGHT])
    assert t[1, K.REG_WAVELETS] == cdiv(cdiv(96, h1) * 2, 16)
    assert (p.region_of >= 0).all() and p.idle_pes == 0


def test_fused_kernels_hold_the_elementwise_operators():
    p = build(pipeline_scenario())
    names = [k.name for k in p.kernels]
    assert names[:5] == ["layer0.ln1+qkv_proj", "layer0.attn_scores_softmax+attn_v", "layer0.out_proj+residual1",
                         "layer0.ln2+ffn_up+gelu", "layer0.ffn_down+residual2"]
    apart = build(pipeline_scenario(workload__fuse_attention=False))
    assert [k.name for k in apart.kernels][1:3] == ["layer0.attn_scores_softmax", "layer0.attn_v"]
    # apart, the scores (n_heads x seq_len = 16 elements a token) cross to attn_v as wavelets
    h = int(apart.table[2, K.REG_HEIGHT])
    assert apart.table[2, K.REG_WAVELETS] == cdiv(cdiv(16, h) * 2, 16)
    unfused = build(pipeline_scenario(cols=24, workload__fuse_elementwise=False, workload__fuse_attention=False))
    assert len(unfused.kernels) == 22
    assert sum(k.flops for k in unfused.kernels) == sum(k.flops for k in p.kernels)
    trained = build(pipeline_scenario(rows=12, workload__training=True))
    assert trained.kernels[-1].name == "layer0.ln1+qkv_proj.backward"


def test_weights_that_do_not_fit_fail_with_a_clear_message():
    sc = pipeline_scenario(workload__hidden_size=512, machine__sram_kib=1)
    with pytest.raises(InputError, match="do not fit the PEs' SRAM.*weight_streaming = true"):
        build_inputs(sc)


def test_a_task_longer_than_the_work_field_is_refused():
    sc = pipeline_scenario(machine__pe_flops_per_cycle=0.001)
    with pytest.raises(InputError, match="workload.tokens_per_chunk = 1: a task of region .* more than 65,535"):
        build_inputs(sc)


def test_a_chunk_whose_partial_sums_overflow_the_work_field_is_refused_by_name():
    sc = pipeline_scenario(workload__hidden_size=1024, workload__seq_len=64, workload__tokens_per_chunk=64,
                           machine__wavelet_bytes=1, machine__sram_kib=1_048_576, machine__pe_flops_per_cycle=1e6,
                           machine__sram_read_bytes_per_cycle=4096, machine__sram_write_bytes_per_cycle=4096)
    with pytest.raises(InputError, match="region layer0.ln1[+]qkv_proj would take 131,072 cycles to pass its partial "
                                         "sums on.*machine.wavelet_bytes"):
        build(sc)


def _run(sc, cycles, chunk, fast_forward=True):
    inputs = build_inputs(sc)
    inputs.cfg[K.CFG_FAST_FORWARD] = int(fast_forward)
    sim = MeshSim(inputs, chunk)
    series, depth = [], []
    for _ in range(cycles // chunk):
        sim.advance(chunk)
        series.append(sim.series[:chunk].copy())
        depth.append(sim.depth_series[:chunk].copy())
    return sim, np.concatenate(series), np.concatenate(depth)


@pytest.mark.parametrize("streaming", [False, True])
def test_fast_forward_gives_the_same_run_cycle_for_cycle(streaming):
    """Quiet stretches done at once equal the same cycles run one by one: every series row, depth
    histogram and state array (docs/mesh.md, implementation notes). Long tasks make the stretches."""
    over = dict(machine__pe_flops_per_cycle=5.0, workload__chunks_in_flight=6, workload__tokens_per_chunk=2)
    if streaming:
        over.update(workload__weight_streaming=True, workload__weight_bandwidth_gbps=70.0)
    sc = pipeline_scenario(12, 14, **over)
    slow, s_series, s_depth = _run(sc, 3000, 1000, fast_forward=False)
    fast, f_series, f_depth = _run(sc, 3000, 1000)
    assert s_series[:, K.S_CHUNKS_FINISHED].sum() > 0
    if streaming:
        assert 0 < s_series[:, K.S_WEIGHT_WAIT].sum() < 3000
    assert np.array_equal(s_series, f_series)
    assert np.array_equal(s_depth, f_depth)
    for name in slow.state._fields:
        a, b = getattr(slow.state, name), getattr(fast.state, name)
        if isinstance(a, np.ndarray):
            assert np.array_equal(a, b), name


def test_a_run_writes_regions_layers_and_the_pipeline_figures(tmp_path):
    from meshsim.run import run_scenario

    sc = pipeline_scenario(10, 14, run__cycles=1500, run__window_cycles=500)
    res = run_scenario(sc, tmp_path / "p.h5", progress=False)
    s = res.summary
    with h5py.File(res.path) as f:
        finished = int(f["series/chunks_finished"][()].sum())
        busy = f["units/busy_cycles"][()]
        names = [n.decode() for n in f["regions/name"][()]]
        layers = [n.decode() for n in f["layers/name"][()]]
        util = f["regions/utilization"][()]
        table = {k: f["pipeline"][k][()] for k in ("row0", "row1", "col0", "col1", "work_cycles", "wavelets",
                                                    "reduce_wavelets", "compute_cycles", "bound")}
    assert s["chunks_finished"] == finished > 0
    assert s["samples_finished"] == finished // 8  # seq_len 8, one token a chunk
    assert names == [k.name for k in build(sc).kernels] and layers == ["layer0", "layer1"]
    # The bottleneck is the busiest region, recomputed from the per-PE busy cycles.
    per_region = [busy[r0:r1, c0:c1].sum() / ((r1 - r0) * (c1 - c0) * 1500)
                  for r0, r1, c0, c1 in zip(table["row0"], table["row1"], table["col0"], table["col1"], strict=True)]
    assert np.allclose(per_region, util)
    assert s["bottleneck_region"] == names[int(np.argmax(per_region))]
    assert s["active_pes"] == 140 and s["inactive_pes"] == 0
    # Steady state: after the first chunk, at most one chunk per cycle of the slowest region's work.
    assert 0 < s["chunks_per_cycle_steady"] <= 1 / table["work_cycles"].max() + 1e-9
    # Its load balance is taken from the first stop (a flush, 500 cycles here) after the first chunk.
    assert s["first_chunk_finish_cycle"] < s["steady_from_cycle"] == 500 * (s["first_chunk_finish_cycle"] // 500 + 1)
    assert 0 < s["li_active_steady"] <= 1 and 0 < s["utilization_active_steady"] <= 1
    # The file's table is the set-up's; the slowest stage by it (task, then its output sent) bounds the
    # steady rate, and here sets it.
    p = build(sc)
    assert list(table["wavelets"]) == list(p.table[:, K.REG_WAVELETS])
    assert list(table["reduce_wavelets"]) == p.reduce_wavelets and list(table["compute_cycles"]) == p.compute_cycles
    assert [BOUNDS[b] for b in table["bound"]] == p.bounds
    slow = p.slowest()
    assert s["slowest_region"] == slow["name"] and s["slowest_region_cycles_per_chunk"] == slow["cycles"]
    assert 0.9 <= s["chunks_per_cycle_steady"] * slow["cycles"] <= 1 + 1e-9


def test_weight_streaming_reports_the_time_spent_waiting(tmp_path):
    from meshsim.run import run_scenario

    sc = pipeline_scenario(12, 14, run__cycles=3000, machine__pe_flops_per_cycle=5.0,
                           workload__tokens_per_chunk=2, workload__weight_streaming=True,
                           workload__weight_bandwidth_gbps=70.0, workload__n_layers=4)
    res = run_scenario(sc, tmp_path / "w.h5", progress=False)
    s = res.summary
    with h5py.File(res.path) as f:
        wait = int(f["series/weight_wait"][()].sum())
    p = build(sc)
    assert s["weight_load_cycles"] == p.load_cycles == 400
    assert s["weight_wait_cycles"] == wait and s["weight_wait_fraction"] == wait / 3000
    assert wait >= p.load_cycles  # the first layer's weights, at least
    assert s["passes_finished"] == s["chunks_finished"] // p.chunks_per_pass >= 2
    assert s["steps_finished"] == s["passes_finished"] // 4


@pytest.mark.parametrize("over, message", [
    (dict(workload__seq_len=10, workload__tokens_per_chunk=4), "workload.tokens_per_chunk = 4: must divide"),
    (dict(workload__weight_streaming=True, workload__replicas=2), "workload.replicas = 2: must be 1"),
    (dict(workload__weight_streaming=True, workload__training=True), "workload.training = true: must be false"),
    (dict(workload__weight_bandwidth_gbps=10.0), "applies only when workload.weight_streaming is true (it is false)"),
])
def test_pipeline_scenarios_that_cannot_run_are_refused(over, message):
    with pytest.raises(InputError) as e:
        pipeline_scenario(**over)
    assert message in str(e.value)


def test_the_levers_move_gpt2_smalls_slowest_stage():
    """The table's slowest stage answers the levers in the direction the machine's rules say
    (docs/mesh.md, "The PE and the wavelets")."""
    from pathlib import Path

    from meshsim.scenario import load_scenario

    path = Path(__file__).resolve().parent.parent / "scenarios" / "wse2_gpt2_small.toml"

    def slowest(**over):
        return build(load_scenario(path, overrides=list(over.items()))).slowest()

    # The whole step: the head's projection over 50,257 tokens, the last region, is the slowest; fp32
    # partial sums: a multiply-add writes 4 bytes, and one 64-bit write a cycle allows two.
    whole = slowest()
    assert whole["name"] == "head.logits" and whole["bound"] == "sram_write" and whole["send"] == 0
    # The blocks alone (which the steady state follows: 94 cycles a token simulated)
    base = slowest(**{"workload.vocab_size": 0})
    assert base["cycles"] == 94 and base["bound"] == "sram_write" and base["send"] > 0
    assert base["cycles"] < whole["cycles"]

    def blocks(**over):
        return slowest(**{"workload.vocab_size": 0, **over})

    # the scores cross a link when attention is two kernels, and wait there
    apart = blocks(**{"workload.fuse_attention": False})
    assert apart["cycles"] > 1.5 * base["cycles"] and apart["name"].endswith("attn_scores_softmax")
    # 16-bit partial sums halve the bytes written; the SIMD then binds the GEMMs
    same = blocks(**{"workload.accumulate": "same"})
    assert same["task"] < 0.7 * base["task"] and same["bound"] == "simd"
    # fp32 halves the SIMD rate (to what the write port allows already) and doubles the wavelets
    fp32 = blocks(**{"workload.precision": "fp32"})
    assert fp32["cycles"] > 1.2 * base["cycles"] and fp32["send"] >= 1.9 * base["send"]
    # wider wavelets shorten the output's send
    assert blocks(**{"machine.wavelet_bytes": 8})["send"] < base["send"]


def test_the_whole_step_runs_the_embedding_and_the_head_around_the_layers():
    sc = pipeline_scenario(rows=14, cols=16, workload__training=True, workload__vocab_size=48)
    p = build(sc)
    names = [k.name for k in p.kernels]
    # the embedding opens the first layer's band; the head has bands of its own, the final norm first
    assert names[0] == "embedding.lookup" and names[-1] == "embedding.lookup.backward"
    assert names[names.index("head.final_norm") - 1] == "layer1.ffn_down+residual2"
    i = names.index("head.logits+loss")
    assert names[i:i + 4] == ["head.logits+loss", "head.logits+loss.backward", "head.final_norm.backward",
                              "layer1.ffn_down+residual2.backward"]
    # the head's projection: 2 H V FLOPs a token forward, the loss 5 V; their backward twice and once
    t = 8
    head = p.kernels[i]
    assert head.flops == 2 * t * 32 * 48 + 5 * t * 48 and p.kernels[i + 1].flops == 4 * t * 32 * 48 + 5 * t * 48
    # a token's logits stay in the head's PEs: what crosses to the backward head is the kept softmax,
    # split over the backward region's input row
    rows = {n: r for n, r in zip(p.names, p.table, strict=True)}
    bwd = rows["head.logits+loss.backward"]
    assert bwd[K.REG_INPUT] == K.INPUT_COL
    assert bwd[K.REG_WAVELETS] == cdiv(cdiv(48, int(bwd[K.REG_WIDTH])) * 2, 16)
    # at the turn into the head's band the final norm (no matrix) is as wide as the region above it,
    # and the backward head (the band after the forward head's) no wider than the forward head
    above, norm = rows["layer1.ffn_down+residual2"], rows["head.final_norm"]
    assert norm[K.REG_WIDTH] == above[K.REG_WIDTH]
    assert bwd[K.REG_WIDTH] <= rows["head.logits+loss"][K.REG_WIDTH]


def test_the_tied_token_table_is_held_by_the_head_not_the_embedding():
    from meshsim.mesh.pipeline import kernels, step_operators

    model = model_of(pipeline_scenario(workload__vocab_size=48).values["workload"])
    ks = {k.name: k for g in kernels(model, True, True, True, 48) for k in g}
    assert ks["embedding.lookup"].weight_bytes == (48 + 8) * 32 * 2  # (V + S) H, as the step counts it
    assert ks["head.logits+loss"].weight_bytes == 48 * 32 * 2
    # inference gives the logits: no loss
    assert [op.name for op in step_operators(model, False, 48)][-2:] == ["head.final_norm", "head.logits"]
    # too little SRAM for the head's table alone names the head, not the embedding
    sc = pipeline_scenario(rows=14, cols=16, workload__vocab_size=20000, machine__sram_kib=2)
    with pytest.raises(InputError, match="head.logits needs") as e:  # inference: no loss
        build(sc)
    assert "embedding" not in str(e.value)


def test_a_pipeline_step_is_the_chips_time_for_a_batch_plus_the_hosts(tmp_path):
    """docs/design.md, "Chip and host": the layer pipeline's step is a batch at the steady rate on the
    chip plus machine.host_seconds; samples/s end to end and on the chip; the report and the Perfetto
    export show the host's part."""
    import json
    import subprocess
    import sys

    from meshsim.run import run_scenario

    sc = pipeline_scenario(10, 14, run__cycles=1500, run__window_cycles=500, workload__batch=2,
                           machine__host_seconds=2e-6)
    res = run_scenario(sc, tmp_path / "p.h5", progress=False)
    s = res.summary
    chip = 2 / s["samples_per_second_steady"]
    assert s["chip_seconds"] == pytest.approx(chip) and s["step_seconds_steady"] == s["chip_seconds"]
    assert s["host_seconds"] == 2e-6 and s["step_seconds"] == pytest.approx(chip + 2e-6)
    assert s["samples_per_second"] == pytest.approx(2 / (chip + 2e-6))
    assert s["chip_samples_per_second"] == s["samples_per_second_steady"] > s["samples_per_second"]
    # what finished over the run, the fill included
    assert s["samples_per_second_run"] == pytest.approx(s["samples_finished"] / (1500 / (s["clock_ghz"] * 1e9)))
    r = subprocess.run([sys.executable, "-m", "meshsim", "report", str(res.path)], capture_output=True, text=True)
    assert r.returncode == 0 and "ms + host 0.002 ms" in r.stdout
    trace = tmp_path / "p.trace.json"
    r = subprocess.run([sys.executable, "-m", "meshsim", "export", str(res.path), "-o", str(trace)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    host = [e for e in json.loads(trace.read_text())["traceEvents"] if e.get("cat") == "host"]
    assert len(host) == 1 and host[0]["dur"] == pytest.approx(2.0)  # microseconds
