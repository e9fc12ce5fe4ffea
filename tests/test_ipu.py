"""The ipu machine (docs/ipu.md): kernel against its slow reference, determinism, the directions the
model must show, presets, validation, the memory check, the result file and report."""

from __future__ import annotations

import itertools
import math
import subprocess
import sys
from pathlib import Path

import h5py
import numpy as np
import pytest
from conftest import assert_same_results
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kernels import ipu as K
from kernels.reference.ipu_ref import simulate
from meshsim.errors import InputError
from meshsim.ipu.compiler import compile_scenario
from meshsim.ipu.keys import PRESETS as IPU_PRESETS
from meshsim.ipu.output import IpuResultWriter
from meshsim.ipu.sim import IpuSim
from meshsim.run import RunInterrupted, run_scenario
from meshsim.scenario import load_scenario, scenario_from_dict

ROOT = Path(__file__).resolve().parents[1]

SMALL_MACHINE = dict(tiles=16, gemm_block=16, tile_sram_kib=4096)


def scenario(workload=None, machine=None, steps=2, **run):
    w = dict(type="transformer", hidden_size=64, n_layers=2, n_heads=4, seq_len=40, batch=4, vocab_size=100)
    w.update(workload or {})
    m = dict(type="ipu", **SMALL_MACHINE)
    m.update(machine or {})
    return scenario_from_dict({"run": {"steps": steps, **run}, "machine": m, "workload": w})


def run_kernel(sc, per_call=1):
    prog = compile_scenario(sc)
    sim = IpuSim(prog)
    parts = []
    while not sim.finished:
        parts.append(sim.advance(per_call))
    ss, pl, lat = (np.concatenate([p[i] for p in parts]) for i in range(3))
    return prog, sim, ss, pl, lat


def assert_matches_reference(sc):
    prog, sim, ss, pl, lat = run_kernel(sc)
    ref = simulate(sc.values)
    assert len(ref["templates"]) == len(prog.templates)
    for i, (a, t) in enumerate(zip(ref["templates"], prog.templates, strict=True)):
        got = dict(stage=t.stage, name=t.name, direction=t.direction, kind=t.kind, units=t.units, flops=t.flops,
                   compute=t.compute, sync=t.sync, exchange=t.exchange, sent_max=t.sent_max,
                   received_max=t.received_max)
        assert got == {k: a[k] for k in got}, f"template {i}"
        assert prog.busy[i].tolist() == list(a["busy"]), f"template {i}: tile busy cycles"
    assert ss.tolist() == [list(r) for r in ref["supersteps"]]
    assert pl.tolist() == [list(r) for r in ref["pipeline"]]
    assert lat.tolist() == ref["microbatch_latency"]
    assert prog.memory.tolist() == ref["memory"]
    assert sim.tile_busy().tolist() == ref["tile_busy"]
    assert sim.cycle == ref["cycles"]
    sh = ref["shares"]
    assert sim.shares.tolist() == [sh["compute"], sh["sync"], sh["exchange"], sh["transfer"]]


# the grouped schedule (GPipe); INTERLEAVED_CASES below run the default, interleaved one
CASES = [dict(seq_len=s, layers_per_stage=lpi, n_layers=sum(lpi) or 2, training=tr, recompute=rc, replicas=r,
              microbatches=g, pipeline_schedule="grouped")
         for s, lpi, tr, rc, r, g in itertools.product((32, 40), ([], [0, 1, 1], [2, 1]), (False, True),
                                                       (False, True), (1, 2), (1, 2))
         if tr or not rc]


@pytest.mark.parametrize("w", CASES, ids=lambda w: "-".join(f"{k[:3]}{v}" for k, v in w.items()))
def test_kernel_matches_reference_superstep_by_superstep(w):
    assert_matches_reference(scenario(w))


INTERLEAVED_CASES = [dict(pipeline_schedule="interleaved", layers_per_stage=lpi, n_layers=sum(lpi) or 2, training=True,
                         recompute=rc, replicas=r, microbatches=g, batch=4 * g)
                     for lpi, rc, r, g in itertools.product(([], [0, 1, 1], [2, 1], [1, 1, 1, 1]), (False, True),
                                                            (1, 2), (1, 2, 5))]


@pytest.mark.parametrize("w", INTERLEAVED_CASES, ids=lambda w: "-".join(f"{k[:3]}{v}" for k, v in w.items()))
def test_kernel_matches_reference_with_the_interleaved_schedule(w):
    """docs/ipu.md, "The pipeline": forward and backward in the same pipeline step, the fill and drain
    of 2n - 2 steps, and each stage's activations of the micro-batches in flight ("Memory")."""
    assert_matches_reference(scenario(w))


def test_the_interleaved_schedule_keeps_the_micro_batches_in_flight_and_idles_less(tmp_path):
    w = dict(layers_per_stage=[1, 1, 1, 1], n_layers=4, training=True, microbatches=8, batch=8)
    grouped = compile_scenario(scenario({**w, "pipeline_schedule": "grouped"}, machine=dict(code_kib_per_tile=1)))
    inter = compile_scenario(scenario({**w, "pipeline_schedule": "interleaved"}, machine=dict(code_kib_per_tile=1)))
    n, m = 4, 8
    assert [inter.spec.in_flight(s) for s in range(n)] == [7, 5, 3, 1]
    assert [grouped.spec.in_flight(s) for s in range(n)] == [m] * n
    # the same supersteps, so the same per-tile outputs: the stash is (in flight) x (one micro-batch's)
    assert (inter.memory_parts["weights"] == grouped.memory_parts["weights"]).all()
    assert (inter.memory_parts["activations"] < grouped.memory_parts["activations"]).all()
    assert inter.pipeline_rows_per_step == m + 2 * n - 2 and grouped.pipeline_rows_per_step == 2 * (m + n - 1)
    _, _, _, pl, _ = run_kernel(scenario({**w, "pipeline_schedule": "interleaved"}), per_call=2)
    assert set(pl[:, K.PL_DIRECTION].tolist()) == {3}
    # the bubble: stage s idles in max(2n - 2 - m, 2s) of the m + 2n - 2 steps: 0 + 2 + 4 + 6 of 4 x 14
    s_inter = run_scenario(scenario({**w, "pipeline_schedule": "interleaved"}), tmp_path / "i.h5",
                           progress=False).summary
    s_group = run_scenario(scenario({**w, "pipeline_schedule": "grouped"}), tmp_path / "g.h5", progress=False).summary
    assert s_inter["pipeline_bubble_fraction"] == 12 / 56 and s_group["pipeline_bubble_fraction"] == 3 / 11
    # one stage: nothing to fill, the two schedules take the same time
    one = dict(training=True, microbatches=4, batch=4)
    a, b = (run_kernel(scenario({**one, "pipeline_schedule": x}))[1] for x in ("grouped", "interleaved"))
    assert a.cycle == b.cycle


TP_CASES = [dict(tensor_parallel=t, layers_per_stage=lpi, n_layers=sum(lpi) or 2, training=tr, recompute=rc, replicas=r,
                 batch=8, microbatches=g, pipeline_schedule=sch)
            for (t, lpi, tr, rc, r, g), sch in zip(
                [c for c in itertools.product((2, 4), ([], [0, 1, 1]), (False, True), (False, True), (1, 2), (1, 2))
                 if c[2] or not c[3]], itertools.cycle(("grouped", "interleaved")))]


@pytest.mark.parametrize("w", TP_CASES, ids=lambda w: "-".join(f"{k[:3]}{v}" for k, v in w.items()))
def test_kernel_matches_reference_with_tensor_parallelism(w):
    """docs/ipu.md, "Tensor parallelism": the split operators, fewer attention units, the all-reduces
    in the exchange phases and the split weights of the gradient all-reduce."""
    assert_matches_reference(scenario(w))


def test_tensor_parallelism_splits_the_work_and_all_reduces_in_the_exchange():
    one, two = (compile_scenario(scenario(dict(tensor_parallel=t, training=True))) for t in (1, 2))
    a, b = ({t.name: t for t in p.templates} for p in (one, two))
    assert b["layer0.qkv_proj"].units * 2 == a["layer0.qkv_proj"].units
    assert b["layer0.attn_v"].units * 2 == a["layer0.attn_v"].units
    assert b["layer0.ln1"].units == a["layer0.ln1"].units  # replicated
    assert b["layer0.qkv_proj"].flops * 2 == a["layer0.qkv_proj"].flops
    spec = two.spec
    e, th = spec.micro.element_bytes, spec.micro.tokens * spec.micro.hidden_size
    ring = spec.ipu_sync_cycles + math.ceil(-(-2 * th * e // 2) * spec.clock_ghz / spec.ipu_link_gbps)
    for name in ("layer0.out_proj", "layer0.ffn_down", "layer0.qkv_proj.backward", "layer0.ffn_up.backward"):
        assert b[name].exchange >= ring, name
    assert b["layer0.qkv_proj"].exchange < ring and b["layer0.out_proj.backward"].exchange < ring
    assert int(two.memory.max()) < int(one.memory.max())  # each IPU holds half the matrices


@pytest.mark.parametrize("machine,workload", [
    (dict(tiles=5000, gemm_block=8, worker_threads=3), dict(vocab_size=0, training=True, batch=2)),  # E < N
    (dict(tiles=7, gemm_block=24, worker_threads=1, exchange_bytes_per_cycle=3, macs_per_cycle=5,
          vector_flops_per_cycle=3), dict(precision="fp32", ffn_multiplier=3, seq_len=50, batch=2)),
    (dict(tiles=16), dict(vocab_size=0, layers_per_stage=[1, 1], training=True, recompute=True)),  # no embedding
    # attention units several per tile and per thread: which thread a unit runs on matters
    (dict(tiles=16, gemm_block=8, worker_threads=2), dict(training=True)),
    (dict(tiles=16, gemm_block=8, worker_threads=4), dict(seq_len=36, batch=2)),
    (dict(tiles=16, streaming_memory_gbps=0.01, sync_cycles=0, exchange_latency_cycles=0),
     dict(layers_per_stage=[1, 1], training=True)),  # IPU 0 slowest through its token ids
])
def test_kernel_matches_reference_at_the_edges(machine, workload):
    assert_matches_reference(scenario(workload, machine))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(heads=st.sampled_from([1, 2, 4]), head_dim=st.sampled_from([4, 8, 12]), layers=st.integers(1, 3),
       seq=st.integers(1, 40), sequences=st.integers(1, 3), micro=st.integers(1, 3), replicas=st.integers(1, 2),
       training=st.booleans(), recompute=st.booleans(), alone=st.booleans(), stages=st.integers(1, 3),
       tiles=st.integers(1, 40), threads=st.integers(1, 6), block=st.integers(1, 20), vocab=st.sampled_from([0, 7]),
       precision=st.sampled_from(["fp8", "bf16", "fp32", "tf32"]), xbytes=st.integers(1, 9),
       tp=st.sampled_from([1, 2, 4]), fp32_rate=st.sampled_from([0.25, 0.5, 0.3, 1.0, 0.3333333333333333]),
       group=st.sampled_from([1, 2, 4]), gated=st.booleans(), bias=st.booleans(), ffn_width=st.integers(0, 50),
       schedule=st.sampled_from(["grouped", "interleaved"]))
def test_kernel_matches_reference_on_random_models(heads, head_dim, layers, seq, sequences, micro, replicas, training,
                                                   recompute, alone, stages, tiles, threads, block, vocab, precision,
                                                   xbytes, tp, fp32_rate, group, gated, bias, ffn_width, schedule):
    stages = min(stages, layers)
    split = [layers // stages + (1 if s < layers % stages else 0) for s in range(stages)]
    if alone and vocab:
        split = [0] + split
    # grouped-query attention where the shape allows it (docs/ipu.md, "The transformer's operators")
    kv = heads // group if heads % group == 0 and head_dim % group == 0 else 0
    w = dict(hidden_size=heads * head_dim, n_heads=heads, n_layers=layers, seq_len=seq,
             batch=sequences * micro * replicas, microbatches=micro, replicas=replicas, training=training,
             recompute=recompute and training, layers_per_stage=split if len(split) > 1 else [], vocab_size=vocab,
             precision=precision,
             tensor_parallel=tp if heads % tp == 0 and (kv or heads) % tp == 0 and ffn_width % tp == 0 else 1,
             n_kv_heads=kv, mlp="gated" if gated else "gelu", bias=bias, ffn_width=ffn_width,
             pipeline_schedule=schedule)
    m = dict(tiles=tiles, worker_threads=threads, gemm_block=block, exchange_bytes_per_cycle=xbytes,
             tile_sram_kib=1_048_576, fp32_rate=fp32_rate)
    assert_matches_reference(scenario(w, m))


def test_steps_are_identical_and_the_split_over_calls_does_not_matter():
    sc = scenario(dict(layers_per_stage=[0, 1, 1], training=True, microbatches=2, replicas=2), steps=3)
    _, sim1, ss1, pl1, lat1 = run_kernel(sc, per_call=1)
    _, sim3, ss3, pl3, lat3 = run_kernel(sc, per_call=3)
    assert np.array_equal(ss1, ss3) and np.array_equal(pl1, pl3) and np.array_equal(lat1, lat3)
    assert np.array_equal(sim1.shares, sim3.shares) and sim1.cycle == sim3.cycle
    step = sim1.cycle // 3
    per = len(ss1) // 3
    shifted = ss1[per:2 * per].copy()
    shifted[:, K.SS_START] -= step
    shifted[:, K.SS_STEP] -= 1
    assert np.array_equal(shifted, ss1[:per])
    assert sim1.shares.sum() == sim1.cycle


def test_results_are_bit_identical_across_threads_and_reruns(tmp_path):
    sc = scenario(dict(layers_per_stage=[0, 1, 1], training=True, recompute=True, microbatches=2), steps=3)
    a = run_scenario(sc, tmp_path / "a.h5", threads=1, progress=False).path
    b = run_scenario(sc, tmp_path / "b.h5", threads=2, progress=False).path
    c = run_scenario(sc, tmp_path / "c.h5", threads=2, progress=False, max_cycles_per_call=1).path
    for other in (b, c):
        assert_same_results(a, other)


GPT2 = dict(hidden_size=768, n_layers=12, n_heads=12, seq_len=1024, batch=8, training=True, recompute=True,
            microbatches=8)


def gpt2(split, **kw):
    w = dict(GPT2, layers_per_stage=split)
    w.update(kw)
    return scenario_from_dict({"machine": {"type": "ipu", "gemm_block": 32},
                               "workload": dict(type="transformer", **w)})


def summary_of(sc, tmp_path, name):
    return run_scenario(sc, tmp_path / f"{name}.h5", progress=False).summary


def test_the_busiest_stage_sets_throughput(tmp_path):
    """Moving a layer between two stages that are not the busiest changes nothing; adding one to the
    busiest stage slows every step by what it adds to that stage."""
    base = summary_of(gpt2([0, 4, 4, 4]), tmp_path, "base")
    shuffled = summary_of(gpt2([1, 3, 4, 4]), tmp_path, "shuffled")  # IPUs 0-1 lighter, the busiest unchanged
    heavier = summary_of(gpt2([0, 3, 4, 5]), tmp_path, "heavier")
    assert shuffled["stage_cycles_max"] == base["stage_cycles_max"]
    assert shuffled["samples_per_second"] == pytest.approx(base["samples_per_second"], rel=1e-12)
    assert heavier["stage_cycles_max"] > base["stage_cycles_max"]
    assert heavier["samples_per_second"] < base["samples_per_second"]
    # every pipeline step in which the busiest stage (IPU 3) has a micro-batch lasts its time
    m = 8
    prog, sim, _, pl, _ = run_kernel(gpt2([0, 3, 4, 5]))
    fwd = pl[pl[:, K.PL_DIRECTION] == 0]
    bwd = pl[pl[:, K.PL_DIRECTION] == 1]
    assert (fwd[3:3 + m, K.PL_SLOWEST] == 3).all() and (bwd[:m, K.PL_SLOWEST] == 3).all()
    per = prog.t_comp + prog.t_sync + prog.t_exch
    t_fwd = per[prog.fwd_idx[prog.fwd_ptr[3]:prog.fwd_ptr[4]]].sum()
    t_bwd = per[prog.bwd_idx[prog.bwd_ptr[3]:prog.bwd_ptr[4]]].sum()
    assert t_fwd + t_bwd == heavier["stage_cycles_max"]
    assert (fwd[3:3 + m, K.PL_CYCLES] == t_fwd + prog.transfer).all()
    assert (bwd[:m, K.PL_CYCLES] == t_bwd + prog.transfer).all()
    assert sim.cycle == heavier["cycles"]


def test_balancing_layers_per_stage_raises_stage_li_and_throughput(tmp_path):
    uneven = summary_of(gpt2([0, 3, 4, 5]), tmp_path, "uneven")
    alone = summary_of(gpt2([0, 4, 4, 4]), tmp_path, "alone")
    even = summary_of(gpt2([3, 3, 3, 3]), tmp_path, "even")
    assert uneven["stage_li"] < alone["stage_li"] < even["stage_li"]
    assert uneven["samples_per_second"] < alone["samples_per_second"] < even["samples_per_second"]
    assert even["stage_li"] > 0.99


def test_more_exchange_bytes_raise_the_exchange_share(tmp_path):
    even = ROOT / "scenarios/ipu_gpt2_even.toml"
    # the same bytes over a narrower exchange...
    shares = [run_scenario(load_scenario(even, [f"machine.exchange_bytes_per_cycle={x}"]), tmp_path / f"x{x}.h5",
                           progress=False).summary["exchange_fraction"] for x in (8, 4, 2)]
    assert shares[0] < shares[1] < shares[2]
    # ...and more bytes over the same exchange: smaller GEMM blocks read their input rows more often
    runs = [run_scenario(load_scenario(even, [f"machine.gemm_block={b}"]), tmp_path / f"b{b}.h5", progress=False)
            for b in (32, 16)]
    with h5py.File(runs[0].path) as a, h5py.File(runs[1].path) as b:
        assert b["templates/received_max_bytes"][()].sum() > a["templates/received_max_bytes"][()].sum()
    assert runs[1].summary["exchange_fraction"] > runs[0].summary["exchange_fraction"]


def test_presets_give_the_published_peaks_and_a_key_set_wins():
    peaks = {}
    for name, tflops in (("gc200", 250), ("bow", 350), ("gc2", 124.5)):
        sc = scenario_from_dict({"machine": {"type": "ipu", "preset": name}, "workload": {"type": "transformer"}})
        m = sc.values["machine"]
        assert {k: m[k] for k in IPU_PRESETS[name]} == IPU_PRESETS[name]
        peaks[name] = m["tiles"] * m["macs_per_cycle"] * 2 * m["clock_ghz"] * 1e9 / 1e12
        assert peaks[name] == pytest.approx(tflops, rel=0.01)
    sc = scenario_from_dict({"machine": {"type": "ipu", "preset": "gc2", "tiles": 100},
                             "workload": {"type": "transformer"}})
    assert sc.values["machine"]["tiles"] == 100 and sc.values["machine"]["tile_sram_kib"] == 256
    # no preset named: gc200; the resolved text loads again to the same values
    sc = scenario_from_dict({"machine": {"type": "ipu"}, "workload": {"type": "transformer"}})
    assert sc.values["machine"]["preset"] == "gc200"
    again = load_scenario("x.toml", text=sc.resolved_toml())
    assert again.values == sc.values


def problems(text, *overrides):
    with pytest.raises(InputError) as e:
        load_scenario("s.toml", list(overrides), text=text)
    return e.value.problems


IPU = '[machine]\ntype = "ipu"\n[workload]\ntype = "transformer"\n'


def test_bad_ipu_scenarios_name_the_key_the_value_and_what_is_allowed():
    assert problems(IPU, "workload.layers_per_stage=[0,4,4,5]") == [
        "override workload.layers_per_stage=[0,4,4,5]: workload.layers_per_stage = [0, 4, 4, 5]: sums to 13 layers; "
        "must sum to workload.n_layers = 12 (default)"]
    assert problems(IPU, "workload.layers_per_stage=[4,0,8]") == [
        "override workload.layers_per_stage=[4,0,8]: workload.layers_per_stage = [4, 0, 8]: entry 1 is 0: every IPU "
        "after the first holds at least one layer (only IPU 0 may hold the embedding alone)"]
    assert problems(IPU, "workload.layers_per_stage=[4,-1]") == [
        "override workload.layers_per_stage=[4,-1]: workload.layers_per_stage = [4, -1]: must be a list of integers "
        "in [0, 1024] (layers); item 1 is -1"]
    assert problems(IPU, "workload.layers_per_stage=4") == [
        "override workload.layers_per_stage=4: workload.layers_per_stage = 4: must be a list of integers in "
        "[0, 1024] (layers)"]
    assert problems(IPU, "workload.layers_per_stage=[0,12]", "workload.vocab_size=0") == [
        "override workload.layers_per_stage=[0,12]: workload.layers_per_stage = [0, 12]: entry 0 is 0 but "
        "workload.vocab_size = 0 leaves out the embedding: IPU 0 would hold nothing"]
    assert problems(IPU, "workload.microbatches=3") == [
        "override workload.microbatches=3: workload.batch = 8 (default): must be a multiple of "
        "workload.replicas x workload.microbatches = 1 x 3 = 3 (each micro-batch holds whole sequences)"]
    assert problems(IPU, "machine.preset=sn30") == [
        'override machine.preset=sn30: machine.preset = "sn30": is not a preset of the ipu; when machine.type is '
        '"ipu" it must be one of "gc200", "bow", "gc2"']
    assert problems(IPU, "workload.recompute=true") == [
        "override workload.recompute=true: workload.recompute = true: applies only with training "
        "(workload.training = false (default)): inference keeps no activations to recompute"]
    assert problems(IPU, "workload.fusion=o3") == [
        'override workload.fusion=o3: workload.fusion = "o3": applies only when machine.type is "rdu" (it is "ipu")']
    assert problems('[machine]\ntype = "ipu"\n') == [
        's.toml: workload.type = "uniform" (default): must be "transformer" or "decode" when machine.type is "ipu" '
        '(the ipu runs a model mapped onto its tiles, or generates tokens with one)']
    assert problems('[machine]\ntype = "rdu"\n[workload]\ntype = "transformer"\nreplicas = 2\n') == [
        's.toml: workload.replicas = 2: must be 1 when machine.type is "rdu"; its data-parallel copies are the D '
        'of workload.parallelism']
    assert problems("[workload]\ntype = \"layer_pipeline\"\nreplicas = 65\n[migration]\npolicy = \"none\"\n") == [
        "s.toml: workload.replicas = 65: must be an integer in [1, 64] (copies) for a layer_pipeline workload"]
    assert problems(IPU, "run.steps=0") == [
        "override run.steps=0: run.steps = 0: must be an integer in [1, 1_000_000] (steps)"]
    assert problems("[run]\nsteps = 3\n") == [
        's.toml: run.steps = 3: applies only when machine.type is "ipu" (it is "mesh")']


def test_a_tile_over_its_sram_is_an_error_naming_the_ipu_and_nothing_is_written(tmp_path):
    out = tmp_path / "r.h5"
    r = subprocess.run([sys.executable, "-m", "meshsim", "run", str(ROOT / "scenarios/ipu_gpt2_4stage.toml"),
                        "machine.gemm_block=64", "-o", str(out)], capture_output=True, text=True)
    assert r.returncode == 2, r.stderr
    assert "Traceback" not in r.stderr
    assert "machine.tile_sram_kib = 624: IPU 1 (layers 0-3) does not fit: tile" in r.stderr
    assert "of 638,976" in r.stderr and "workload.layers_per_stage" in r.stderr
    assert "IPU 0" not in r.stderr  # the embedding alone fits
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(InputError, match="IPU 0"):
        compile_scenario(scenario(machine=dict(tile_sram_kib=1, code_kib_per_tile=0)))
    ref = scenario(machine=dict(tile_sram_kib=1, code_kib_per_tile=0))
    with pytest.raises(ValueError, match="IPU 0"):  # the oracle's own error: it imports nothing of meshsim
        simulate(ref.values)


def test_memory_per_tile_follows_the_rules_for_inference_training_and_recomputation():
    inf = compile_scenario(scenario(dict(training=False), machine=dict(code_kib_per_tile=1)))
    tr = compile_scenario(scenario(dict(training=True, microbatches=2, batch=4),
                                   machine=dict(code_kib_per_tile=1)))
    rc = compile_scenario(scenario(dict(training=True, recompute=True, microbatches=2, batch=4),
                                   machine=dict(code_kib_per_tile=1)))
    # training keeps every micro-batch's activations and the gradients; recomputation keeps fewer
    assert (tr.memory_parts["weights"] == 2 * inf.memory_parts["weights"]).all()
    assert tr.memory.max() > rc.memory.max()
    assert (rc.memory_parts["weights"] == tr.memory_parts["weights"]).all()
    assert inf.memory_parts["code"] == 1024


def test_memory_weights_by_hand():
    # one block and the embedding, H = 64, bf16, 16 tiles: ceil(bytes / 16) per operator on every tile
    # ln1 2H, qkv 3H^2 + 3H, out H^2 + H, ln2 2H, ffn_up 4H^2 + 4H, ffn_down 4H^2 + H, embedding 100 H
    per_op = [128, 12480, 4160, 128, 16640, 16448, 6400]
    expected = sum(-(-2 * x // 16) for x in per_op)
    assert expected == 7048
    inf = compile_scenario(scenario(dict(n_layers=1)))
    assert (inf.memory_parts["weights"] == expected).all()
    tr = compile_scenario(scenario(dict(n_layers=1, training=True)))
    assert (tr.memory_parts["weights"] == 2 * expected).all()


def test_attention_costs_do_not_overflow_on_long_sequences():
    from meshsim.ipu import compiler as ipu
    from meshsim.transformer import operators

    sc = scenario(dict(hidden_size=16384, n_heads=16, seq_len=1_048_576, batch=1, n_layers=1, vocab_size=0,
                       precision="fp8"), dict(gemm_block=512))
    spec = ipu.spec_of(sc.values)
    for op in operators(spec.micro):
        if op.kind == "attention":
            cost, back, out, inp = ipu._units(op, "attention", spec)
            d = spec.micro.batch * 16 * 1_048_576
            assert int(cost[0]) == -(-(op.flops * 512 // d) // (2 * spec.macs_per_cycle)) > 0
            assert int(cost.sum()) >= op.flops // (2 * spec.macs_per_cycle)
            assert int(out.sum()) == op.output_bytes and int(inp.sum()) == op.input_bytes
            assert (back >= cost).all()


def test_programs_and_runs_too_large_to_hold_are_refused_before_anything_runs(monkeypatch):
    from meshsim.ipu import compiler as ipu

    with pytest.raises(InputError, match=r"machine.tiles = 1,000,000: .* busy counts; at most 50,000,000"):
        compile_scenario(scenario(dict(n_layers=12, training=True), dict(tiles=1_000_000)))
    with pytest.raises(InputError, match=r"workload.microbatches = 1,000,000: .* supersteps per step"):
        compile_scenario(scenario(dict(batch=1_000_000, microbatches=1_000_000, seq_len=1)))
    with pytest.raises(InputError, match=r"gemm_block = 1: an IPU.s operators cut into 170,482,688 work"):
        compile_scenario(load_scenario(ROOT / "scenarios/ipu_gpt2_even.toml",
                                       ["machine.gemm_block=1", "workload.microbatches=1"]))
    with pytest.raises(InputError, match=r"<scenario>: run.steps = 1,000,000: 92,000,000 supersteps .* 543,478 steps"):
        compile_scenario(scenario(dict(training=True, microbatches=2), steps=1_000_000))
    # the cycles a run could last, and the template count, exactly at their limits
    w = dict(training=True, recompute=True, layers_per_stage=[1, 1], replicas=2, batch=4, microbatches=2)
    sc = scenario(w, steps=3)
    p = compile_scenario(sc)
    per = p.t_comp + p.t_sync + p.t_exch
    pipe_steps = 2 + 2 - 1
    bound = (pipe_steps * (max(per[p.fwd_idx[p.fwd_ptr[s]:p.fwd_ptr[s + 1]]].sum() for s in range(2)) + p.io0
                           + p.transfer)
             + pipe_steps * (max(per[p.bwd_idx[p.bwd_ptr[s]:p.bwd_ptr[s + 1]]].sum() for s in range(2)) + p.transfer)
             + p.allreduce)
    assert run_kernel(sc)[1].cycle <= 3 * bound
    monkeypatch.setattr(ipu, "MAX_TEMPLATE_TILES", len(p.templates) * 16)
    monkeypatch.setattr(ipu, "MAX_CYCLES", 3 * bound)
    compile_scenario(sc)
    with pytest.raises(InputError, match="run.steps = 4: 4 steps of up to"):
        compile_scenario(scenario(w, steps=4))
    monkeypatch.setattr(ipu, "MAX_CYCLES", bound - 1)
    with pytest.raises(InputError, match="workload: one step of this model could last"):
        compile_scenario(scenario(w, steps=1))
    monkeypatch.setattr(ipu, "MAX_TEMPLATE_TILES", len(p.templates) * 16 - 1)
    with pytest.raises(InputError, match="busy counts"):
        compile_scenario(sc)


def test_a_run_past_64_bit_flops_keeps_them_as_a_float(tmp_path):
    s = run_scenario(load_scenario(ROOT / "scenarios/ipu_gpt2_even.toml",
                                   ["workload.batch=8192", "workload.microbatches=1", "run.steps=4000",
                                    "machine.tile_sram_kib=1048576", "machine.gemm_block=1024"]),
                     tmp_path / "r.h5", progress=False).summary
    assert isinstance(s["flops"], float) and s["flops"] > 2**63


def test_an_interrupted_run_leaves_a_readable_incomplete_file(tmp_path):
    sc = scenario(dict(training=True, layers_per_stage=[1, 1]), steps=5)
    calls = []

    def stop():
        calls.append(1)
        return len(calls) >= 2

    with pytest.raises(RunInterrupted) as e:
        run_scenario(sc, tmp_path / "r.h5", progress=False, max_cycles_per_call=1, stop=stop)
    path = e.value.path
    assert path.name == "r.incomplete.h5" and not (tmp_path / "r.h5").exists()
    full = run_scenario(sc, tmp_path / "full.h5", progress=False).path
    with h5py.File(path) as f, h5py.File(full) as g:
        assert not f.attrs["complete"]
        n = f["supersteps/start_cycle"].shape[0]
        assert 0 < n < g["supersteps/start_cycle"].shape[0]
        assert np.array_equal(f["supersteps/start_cycle"][()], g["supersteps/start_cycle"][:n])
        steps = f["summary"].attrs["steps"]
        assert 0 < steps < 5 and f.attrs["cycles_done"] == f["pipeline/start_cycle"][-1] + f["pipeline/cycles"][-1]
        assert (f["units/tile_busy_cycles"][()] * 5 == g["units/tile_busy_cycles"][()] * steps).all()
    _report_and_plot(path, tmp_path)


def _report_and_plot(path, tmp_path):
    for cmd in (["report", str(path)], ["plot", str(path), "-o", str(tmp_path / "plots")]):
        r = subprocess.run([sys.executable, "-m", "meshsim", *cmd], capture_output=True, text=True)
        assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr


# the cut while writing the latencies in the default run; the pipeline rows' two under -m slow (the same
# writer, earlier datasets)
@pytest.mark.parametrize("cut_at", [pytest.param("pl:step", marks=pytest.mark.slow),
                                    pytest.param("pl:slowest_stage", marks=pytest.mark.slow), "lat"])
def test_ctrl_c_in_the_first_kernel_call_or_while_writing_loses_nothing(tmp_path, monkeypatch, cut_at):

    sc = scenario(dict(training=True, layers_per_stage=[1, 1]), steps=4)
    full = run_scenario(sc, tmp_path / "full.h5", progress=False).path

    def interrupted(*a, **k):
        raise KeyboardInterrupt

    with monkeypatch.context() as m:
        m.setattr(IpuSim, "advance", interrupted)
        with pytest.raises(RunInterrupted) as e:
            run_scenario(sc, tmp_path / "zero.h5", progress=False)
    with h5py.File(e.value.path) as f:
        assert f["supersteps/start_cycle"].shape == (0,) and f.attrs["cycles_done"] == 0
    _report_and_plot(e.value.path, tmp_path)

    # a Ctrl-C while the second call's rows are half written: the rows are written again, once
    append = IpuResultWriter.append
    calls = []

    def half_written(self, ss, pl, lat):
        calls.append(1)
        if len(calls) == 2:  # some of the tables are written, then Ctrl-C
            put = self._put
            target = self.lat if cut_at == "lat" else self.pl[cut_at.split(":")[1]]

            def cut(ds, t0, data):
                if ds.name == target.name:
                    raise KeyboardInterrupt
                put(ds, t0, data)

            self._put = cut
            try:
                append(self, ss, pl, lat)
            finally:
                self._put = put
        append(self, ss, pl, lat)

    with monkeypatch.context() as m:
        m.setattr(IpuResultWriter, "append", half_written)
        with pytest.raises(RunInterrupted) as e:
            run_scenario(sc, tmp_path / "half.h5", progress=False, max_cycles_per_call=1)
    with h5py.File(e.value.path) as f, h5py.File(full) as g:
        n = f["supersteps/start_cycle"].shape[0]
        assert n == g["supersteps/start_cycle"].shape[0] // 2  # two of four steps, each once
        for name in ("supersteps/start_cycle", "supersteps/template", "pipeline/start_cycle",
                     "latency/microbatch_latency"):
            k = f[name].shape[0]
            assert np.array_equal(f[name][()], g[name][:k]), name
        assert f["summary"].attrs["steps"] == 2


def test_result_file_layout_and_report_recompute_the_run(tmp_path):
    from meshsim.analysis import analyse, format_comparison

    sc = scenario(dict(training=True, layers_per_stage=[0, 1, 1], replicas=2, microbatches=2), steps=2)
    res = run_scenario(sc, tmp_path / "r.h5", progress=False)
    s = res.summary
    with h5py.File(res.path) as f:
        assert f.attrs["machine"] == "ipu" and f.attrs["complete"]
        for group in ("supersteps", "templates", "pipeline", "units", "occupancy", "latency"):
            for name, ds in f[group].items():
                assert "units" in ds.attrs and "description" in ds.attrs, f"{group}/{name}"
        assert f["units/tile_busy_cycles"].shape == (3, 16)
        assert f["occupancy/tile_busy_cycles"].shape == (f["templates/li"].shape[0], 16)
        assert (f["pipeline/direction"][()] == 2).sum() == 2  # one all-reduce per step
        assert f["latency/microbatch_latency"].shape == (4,)
    a = analyse(res.path)
    w = a["whole"]
    for k in ("li", "utilization", "stage_li", "compute_fraction", "sync_fraction", "exchange_fraction",
              "transfer_fraction", "latency_mean_cycles"):
        assert w[k] == pytest.approx(s[k], rel=1e-12), k
    assert s["compute_fraction"] + s["sync_fraction"] + s["exchange_fraction"] + s["transfer_fraction"] == \
        pytest.approx(1.0)
    assert s["samples_per_second"] == pytest.approx(4 * 2 / (s["cycles"] / (s["clock_ghz"] * 1e9)))
    text = format_comparison([a, a])
    assert "stage_li" in text and "samples_per_second" in text


def test_report_compares_the_three_machines_side_by_side(tmp_path):
    model = dict(hidden_size=64, n_layers=2, n_heads=4, seq_len=64, batch=4, vocab_size=256)
    mesh = scenario_from_dict({"run": {"cycles": 3000}, "machine": {"rows": 24, "cols": 24},
                               "migration": {"policy": "none"}, "workload": dict(type="layer_pipeline", **model)})
    rdu = scenario_from_dict({"machine": {"type": "rdu", "pcus": 64, "pmus": 64},
                              "workload": dict(type="transformer", tile_tokens=32, **model)})
    ipu = scenario_from_dict({"machine": {"type": "ipu", "tiles": 64},
                              "workload": dict(type="transformer", layers_per_stage=[1, 1], **model)})
    paths = [run_scenario(sc, tmp_path / f"{name}.h5", progress=False).path
             for name, sc in (("mesh", mesh), ("rdu", rdu), ("ipu", ipu))]
    r = subprocess.run([sys.executable, "-m", "meshsim", "report", *map(str, paths)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[1].split() == ["machine", "mesh", "rdu", "ipu"]
    row = next(line for line in lines if line.startswith("samples_per_second "))
    assert all(float(x.replace(",", "")) > 0 for x in row.split()[2:])  # rdu and ipu: one step
    steady = next(line for line in lines if line.startswith("samples_per_second_steady")).split()
    assert float(steady[1].replace(",", "")) > 0 and steady[2:] == ["n/a", "n/a"]  # the mesh's steady state
    assert any(line.startswith("li ") for line in lines)


def test_shipped_ipu_scenarios_run(tmp_path):
    figures = {}
    for name in ("ipu_gpt2_4stage", "ipu_gpt2_even", "ipu_gpt2_uneven"):
        s = run_scenario(load_scenario(ROOT / f"scenarios/{name}.toml"), tmp_path / f"{name}.h5",
                         progress=False).summary
        figures[name] = (round(s["stage_li"], 4), round(s["samples_per_second"], 1))
    assert figures == {"ipu_gpt2_4stage": (0.75, 104.5), "ipu_gpt2_even": (0.9999, 126.6),
                       "ipu_gpt2_uneven": (0.6, 88.9)}


@pytest.mark.slow
def test_the_24_layer_model_over_8_ipus_runs_100_steps(tmp_path):
    s = run_scenario(load_scenario(ROOT / "scenarios/ipu_gpt2_24l_8ipu.toml"), tmp_path / "r.h5",
                     progress=False).summary
    assert s["steps"] == 100 and s["stages"] == 8 and s["memory_max_fraction"] <= 1


def test_plot_draws_every_kind_an_ipu_file_has(tmp_path):
    from meshsim.plots import applicable, plot

    sc = scenario(dict(training=True, layers_per_stage=[0, 1, 1], microbatches=2))
    path = run_scenario(sc, tmp_path / "r.h5", progress=False).path
    assert applicable(path) == ["timeline", "latency", "busy", "roofline"]
    written = plot(path, tmp_path / "plots")
    assert sorted(p.name for p in written) == ["busy.png", "latency.png", "roofline.png", "timeline.png"]
    assert all(p.stat().st_size > 10_000 for p in written)


def test_validate_compiles_and_checks_memory():
    r = subprocess.run([sys.executable, "-m", "meshsim", "validate", str(ROOT / "scenarios/ipu_gpt2_4stage.toml")],
                       capture_output=True, text=True)
    assert r.returncode == 0 and "valid (ipu gc200, 4 stage(s) x 1 replica(s), 398 superstep templates" in r.stdout
    r = subprocess.run([sys.executable, "-m", "meshsim", "validate", str(ROOT / "scenarios/ipu_gpt2_4stage.toml"),
                        "machine.gemm_block=64"], capture_output=True, text=True)
    assert r.returncode == 2 and "does not fit" in r.stderr and "Traceback" not in r.stderr


def test_the_roofline_places_the_compiled_supersteps_on_the_exchange():
    """docs/ipu.md, "Roofline": the platform's roof is the exchange, the kernels are layer 0's
    supersteps, each attaining its FLOPs over its three phases and bound by the longest."""
    from meshsim.ipu.compiler import compile_program, roofline_rows, spec_of
    from meshsim.roofline import platform_of

    sc = scenario(dict(training=True, layers_per_stage=[1, 1]))
    plat = platform_of(sc.values)
    m = sc.values["machine"]
    assert plat.bandwidth == pytest.approx(m["tiles"] * m["exchange_bytes_per_cycle"] * m["clock_ghz"] * 1e9)
    rows = roofline_rows(sc.values, plat)
    prog = compile_program(spec_of(sc.values))
    layer0 = [t for t in prog.templates if t.layer == 0 and t.direction != 2 and t.flops]
    assert [r["name"] for r in rows] == [t.name.split(".", 1)[1] for t in layer0]
    for r, t in zip(rows, layer0, strict=True):
        cycles = t.compute + t.sync + t.exchange
        assert r["attainable_flops"] == pytest.approx(t.flops * m["clock_ghz"] * 1e9 / cycles)
        assert r["attainable_flops"] <= plat.peak_flops
        longest = max(("compute", t.compute), ("sync", t.sync), ("exchange", t.exchange), key=lambda x: x[1])[0]
        assert r["bound"] == longest
    # GPT-2 small on four GC200s: its matrix supersteps are bound by compute, its elementwise and
    # norm ones by their exchange
    gpt2 = load_scenario(ROOT / "scenarios" / "ipu_gpt2_even.toml")
    big = roofline_rows(gpt2.values, platform_of(gpt2.values))
    assert {r["bound"] for r in big if r["kind"] in ("gemm", "attention")} == {"compute"}
    assert {r["bound"] for r in big if r["kind"] in ("elementwise", "norm")} == {"exchange"}


UPDATE_CASES = [dict(training=True, optimizer=o, master_weights=mw, layers_per_stage=lpi, n_layers=sum(lpi) or 2,
                     replicas=r, batch=4, tensor_parallel=t)
                for o, mw, lpi, r, t in itertools.product(("sgd", "adam"), ("same", "fp32"), ([], [0, 1, 1]), (1, 2),
                                                          (1, 2))]


@pytest.mark.parametrize("w", UPDATE_CASES, ids=lambda w: "-".join(f"{k[:3]}{v}" for k, v in w.items()))
def test_kernel_matches_reference_with_the_optimiser_update(w):
    assert_matches_reference(scenario(w))


@pytest.mark.parametrize("workload, end_row", [
    # 16 tiles, one stage of 2 blocks (49,984 weights each) and the embedding (6,400): P = 106,368
    # parameters at bf16; Adam moves 12 + 10 bytes of each over 20 GB/s of streaming memory:
    # ceil(22 P x 1.33 / 20) = 155,617 cycles, against ceil(12 P / (16 x 16)) = 4,986 of vector work
    (dict(optimizer="adam"), (155_617, 0)),
    (dict(optimizer="adam", master_weights="fp32"), (198_058, 0)),  # 14 + 14 bytes
    (dict(optimizer="sgd"), (42_441, 0)),  # 4 + 2 bytes
    # two replicas: the gradient all-reduce, 5,000 + ceil(212,736 x 1.33 / 320) = 5,885, comes first
    (dict(optimizer="adam", replicas=2), (161_502, 5_885)),
])
def test_the_end_row_of_a_step_holds_the_all_reduce_and_the_update_by_hand(workload, end_row):
    prog, sim, ss, pl, lat = run_kernel(scenario(dict(training=True, **workload)))
    ends = pl[pl[:, K.PL_DIRECTION] == 2]
    assert len(ends) == 2  # one per step
    assert all((int(r[K.PL_CYCLES]), int(r[K.PL_TRANSFER])) == end_row for r in ends)


def test_a_streaming_memory_fast_enough_leaves_the_update_to_the_tiles_vector_work():
    prog = compile_scenario(scenario(dict(training=True, optimizer="adam"), dict(streaming_memory_gbps=10000.0)))
    assert prog.update == 4_986


@pytest.mark.parametrize("per_node", [16, 6, 3, 2])
def test_kernel_matches_reference_when_groups_cross_nodes(per_node):
    """docs/ipu.md, "Topology": 12 IPUs (3 stages x T2 x 2 replicas) in nodes of 16, 6, 3 and 2."""
    assert_matches_reference(scenario(dict(n_layers=3, layers_per_stage=[1, 1, 1], tensor_parallel=2, replicas=2,
                                           training=True), dict(ipus_per_node=per_node, node_link_gbps=25.0),
                                    steps=1))


@pytest.mark.parametrize("per_node, tensor, transfer, end", [
    # IPU (ti, s, ri) is number (ri 3 + s) 2 + ti. Nodes of 16 hold all 12; of 6 one replica each
    # (only the gradient all-reduce crosses: 20,000 + ceil(63,040 x 1.33 / 25) = 23,354); of 3, stage
    # 1's tensor group {2, 3} and the hand-over {1, 3} cross too: 20,000 + ceil(10,240 x 1.33 / 25)
    (16, [5_043] * 3, 5_043, 5_263),
    (6, [5_043] * 3, 5_043, 23_354),
    (3, [5_043, 20_545, 5_043], 20_545, 23_354),
])
def test_a_movement_across_nodes_takes_the_slower_link_by_hand(per_node, tensor, transfer, end):
    sc = scenario(dict(n_layers=3, layers_per_stage=[1, 1, 1], tensor_parallel=2, replicas=2, training=True),
                  dict(ipus_per_node=per_node, node_link_gbps=25.0), steps=1)
    prog, sim, ss, pl, lat = run_kernel(sc)
    base = {t.stage: t.exchange for t in compile_scenario(scenario(
        dict(n_layers=3, layers_per_stage=[1, 1, 1], tensor_parallel=1, replicas=2, training=True))).templates
        if t.name.endswith("out_proj")}
    got = {t.stage: t.exchange for t in prog.templates if t.name.endswith("out_proj")}
    assert [got[s] - base[s] for s in range(3)] == tensor  # the all-reduce in each stage's exchange
    assert set(pl[pl[:, K.PL_DIRECTION] != 2, K.PL_TRANSFER].tolist()) == {transfer}
    assert pl[pl[:, K.PL_DIRECTION] == 2, K.PL_CYCLES].tolist() == [end]


def test_more_than_4096_ipus_are_refused_with_or_without_a_stage_split():
    for split in ([], [4, 4]):
        with pytest.raises(InputError, match="asks for .* IPUs; at most 4096"):
            scenario(dict(n_heads=64, hidden_size=64 * 4, n_layers=8, layers_per_stage=split, tensor_parallel=64,
                          replicas=128, batch=128))


def test_a_long_decimal_fp32_rate_is_the_nearest_fraction_and_does_not_wrap():
    """docs/ipu.md, "Names": fp32_rate as the fraction nearest it with a denominator of at most 10^6,
    so 1/3 written to sixteen digits costs what 1/3 costs, and no product wraps 64 bits."""
    third = scenario(dict(precision="fp32", training=True), dict(fp32_rate=0.3333333333333333))
    a = compile_scenario(third)
    quarter = compile_scenario(scenario(dict(precision="fp32", training=True), dict(fp32_rate=0.25)))
    for t3, t4 in zip(a.templates, quarter.templates, strict=True):
        if t3.kind == 0:  # a GEMM at a third of the 16-bit rate is faster than at a quarter, and positive
            assert 0 < t3.compute <= t4.compute
    assert_matches_reference(third)
