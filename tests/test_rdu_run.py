"""rdu runs end to end: the result file, the summary, determinism, interruption, and the directions
a user expects of the model (docs/rdu.md; docs/design.md, "Metrics" and "Result files")."""

import json
import subprocess
import sys
from pathlib import Path

import h5py
import numpy as np
import pytest
from conftest import assert_same_results

from kernels import rdu as K
from meshsim.rdu import compiler as R
from meshsim.rdu.sim import RduSim
from meshsim.report import STABLE_SUMMARY_KEYS, read_summary
from meshsim.run import RunInterrupted, run_scenario
from meshsim.scenario import scenario_from_dict

ROOT = Path(__file__).resolve().parent.parent


#: The mechanisms apart from the calibrated values: the blocks alone, a short section switch, no host time
#: and the whole chip to place on (docs/rdu.md, "Calibration" has the fitted ones).
MECHANISM_MACHINE = dict(section_switch_cycles=10_000, host_seconds=0.0, pcu_place_limit=1.0, section_fill=0.7)


def scenario(**workload):
    machine = {**MECHANISM_MACHINE, **workload.pop("machine", {})}
    w = dict(type="transformer", hidden_size=256, n_heads=4, n_layers=2, seq_len=256, batch=4, tile_tokens=32,
             vocab_size=0)
    w.update(workload)
    return scenario_from_dict({"machine": {"type": "rdu", "preset": "sn10", **machine}, "workload": w})


@pytest.fixture(scope="module")
def result(tmp_path_factory):
    sc = scenario(training=True, parallelism="T2P2D1", microbatches=2)
    return run_scenario(sc, tmp_path_factory.mktemp("rdu") / "r.h5", progress=False, max_cycles_per_call=97)


def test_the_result_file_holds_the_whole_run(result):
    s = result.summary
    assert all(k in s for k in STABLE_SUMMARY_KEYS)
    with h5py.File(result.path) as f:
        assert f.attrs["machine"] == "rdu" and bool(f.attrs["complete"])
        assert f.attrs["cycles_done"] == s["cycles"]
        cycles = f["series/interval_cycles"][:]
        start = f["interval_start"][:]
        assert cycles.min() >= 1 and int(cycles.sum()) == s["cycles"]
        assert start.tolist() == (np.cumsum(cycles) - cycles).tolist()
        busy = f["series/busy_pcus"][:]
        assert busy.shape == (len(cycles), 2)
        # the per-PCU totals and the per-interval series count the same busy PCU-cycles
        assert int((busy * cycles[:, None]).sum()) == int(f["units/pcu_busy_cycles"][:].sum())
        assert np.array_equal(f["occupancy/stage_busy_pcus"][:].sum(axis=2), busy)
        assert f["units/pcu_busy_cycles"].shape == (2, 640)
        lat = f["latency/tile_latency"][:]
        assert lat.min() >= 0 and lat.size == s["injected"] == s["completed"]
        sec = f["sections"]
        assert sec["end_cycle"][:].max() == s["cycles"] - 1
        assert np.all((sec["li"][:] > 0) & (sec["li"][:] <= 1))
        ops = f["operators"]
        assert ops["name"].shape == ops["li"].shape and int(ops["kind"][:].sum()) > 0  # all-reduces
        for name in ("busy_pcus", "ddr_busy", "phase"):
            assert f["series"][name].attrs["units"] and f["series"][name].attrs["description"]
    assert 0 < s["li"] <= 1 and 0 < s["utilization"] < 1 and 0 < s["pcu_utilization"] <= s["utilization"]
    assert s["chips"] == 4 and s["chips_simulated"] == 2 and 0 < s["pipeline_bubble_fraction"] < 1
    assert s["time_per_sample_seconds"] == pytest.approx((s["cycles"] / (s["clock_ghz"] * 1e9) + s["host_seconds"]) / 4)


def test_the_summary_flops_are_the_chips(result):
    spec = R.spec_from_scenario(scenario(training=True, parallelism="T2P2D1", microbatches=2))
    per_microbatch = sum(op.flops for layers in R.layer_groups(2, 2) for phase in ("forward", "backward")
                         for op in R.chip_ops(spec, layers, phase))
    assert result.summary["flops"] == 2 * per_microbatch  # two microbatches through both stages
    from meshsim.transformer import operators, totals

    # a tensor-parallel half of the GEMMs and attention, the norms and adds whole
    model = totals(operators(spec.model, training=True))["flops"]
    assert model / 2 < result.summary["flops"] < model


def test_xarray_opens_the_series(result):
    import xarray as xr

    with xr.open_dataset(result.path, engine="h5netcdf", group="series") as ds:
        assert ds["busy_pcus"].dims == ("interval_start", "chip")


def test_report_prints_the_rdu_summary(result):
    root, s = read_summary(result.path)
    from meshsim.report import format_summary, summary_json

    text = format_summary(s, root, result.path)
    assert "fusion o1" in text and "PCUs" in text and "DDR" in text
    assert json.loads(summary_json(s, root))["summary"]["fusion"] == "o1"


def test_results_are_identical_across_threads_reruns_and_chunks(tmp_path, result):
    sc = scenario(training=True, parallelism="T2P2D1", microbatches=2)
    for i, (threads, chunk) in enumerate([(1, None), (2, 5), (1, 97)]):
        assert_same_results(result.path, run_scenario(sc, tmp_path / f"{i}.h5", threads=threads, progress=False,
                                                      max_cycles_per_call=chunk).path)


def test_an_interrupted_run_leaves_a_readable_incomplete_file(tmp_path, monkeypatch):
    calls = {"n": 0}
    real = RduSim.advance

    def advance_then_interrupt(self):
        calls["n"] += 1
        if calls["n"] == 3:
            raise KeyboardInterrupt
        return real(self)

    monkeypatch.setattr(RduSim, "advance", advance_then_interrupt)
    path = tmp_path / "cut.h5"
    with pytest.raises(RunInterrupted) as e:
        run_scenario(scenario(), path, progress=False, max_cycles_per_call=50)
    kept = tmp_path / "cut.incomplete.h5"
    assert not path.exists() and e.value.path == kept
    with h5py.File(kept) as f:
        assert bool(f.attrs["complete"]) is False
        cycles = f["series/interval_cycles"][:]
        assert len(cycles) == 100 and int(cycles.sum()) == f.attrs["cycles_done"] == e.value.cycles_done
        assert f["summary"].attrs["cycles"] == e.value.cycles_done
        summary = f["summary"].attrs
        assert summary["injected"] >= summary["completed"] and summary["in_system_at_end"] >= 0
        assert np.isnan(summary["time_per_sample_seconds"])
        busy = f["series/busy_pcus"][:, 0]
        assert int(busy @ cycles) == int(f["units/pcu_busy_cycles"][:].sum())


def test_busy_pcus_never_exceed_the_chip(tmp_path):
    # many small operators in few sections: the one-PCU floor must come out of the chip's PCUs
    sc = scenario(fusion="o3", hidden_size=2048, n_heads=1, n_layers=4, machine={"pcus": 8})
    res = run_scenario(sc, tmp_path / "p.h5", progress=False)
    with h5py.File(res.path) as f:
        cycles = f["series/interval_cycles"][:]
        busy = f["series/busy_pcus"][:]
        assert busy.max() <= 8
        assert int(busy[:, 0] @ cycles) == int(f["units/pcu_busy_cycles"][:].sum())


def test_the_command_line_runs_and_refuses_rdu_scenarios(tmp_path):
    good = tmp_path / "g.toml"
    good.write_text('[machine]\ntype = "rdu"\npreset = "sn10"\n[workload]\ntype = "transformer"\n'
                    "hidden_size = 256\nn_heads = 4\nn_layers = 1\nseq_len = 128\nbatch = 2\n")
    run = subprocess.run([sys.executable, "-m", "meshsim", "run", str(good), "-o", str(tmp_path / "g.h5")],
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert "fusion o1" in run.stdout and (tmp_path / "g.h5").exists()
    bad = subprocess.run([sys.executable, "-m", "meshsim", "run", str(good), "workload.fusion=o5", "-o",
                          str(tmp_path / "b.h5")], capture_output=True, text=True)
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
    assert 'workload.fusion = "o5": must be one of "o0", "o1", "o3"' in bad.stderr
    assert not (tmp_path / "b.h5").exists() and not (tmp_path / "b.incomplete.h5").exists()
    # a layout the chip cannot hold: named by the scenario file and the keys to change
    tight = subprocess.run([sys.executable, "-m", "meshsim", "validate", str(good), "machine.pcus=2"],
                           capture_output=True, text=True)
    assert tight.returncode == 2 and "Traceback" not in tight.stderr
    assert f"meshsim: error: {good}: section chip0:layer0.ln2..layer0.gelu: 3 compute operators but machine.pcus = 2" \
        in tight.stderr


# The directions a user expects (docs/rdu.md; the magnitudes are in docs/guide.md).


def summary(**kw):
    preset = kw.pop("preset", "sn30")
    prog = R.compile_program(R.spec_for(preset, **{**MECHANISM_MACHINE, "vocab_size": 0, **kw}))
    sim = RduSim(prog)
    from meshsim.rdu.run import _Sums, summarise

    sums = _Sums(prog.n_chips)
    while not sim.finished:
        n = sim.advance()
        sums.add(sim.out_cycles[:n], sim.out_series[:n])
    return summarise(prog, sim, sums, 0.0, 1.0, 1)


GPT2 = dict(hidden_size=768, n_heads=12, n_layers=4, seq_len=1024, batch=8)


def test_fusion_lowers_time_per_sample_and_raises_pcu_utilisation():
    runs = [summary(fusion=f, **GPT2) for f in ("o0", "o1", "o3")]
    times = [s["time_per_sample_seconds"] for s in runs]
    util = [s["pcu_utilization"] for s in runs]
    assert times[0] > times[1] > times[2]
    assert util[0] < util[1] < util[2]
    # o3's sections share the chip among several operators: its whole-chip LI is the highest (an o0
    # section that needs more PCUs than the chip has holds them all, so o0's can top o1's)
    assert runs[2]["li"] > max(runs[0]["li"], runs[1]["li"])


def test_larger_hidden_sizes_raise_pcu_utilisation_until_the_weights_hold_the_step():
    runs = [summary(hidden_size=h, n_heads=16, n_layers=2, seq_len=512, batch=8) for h in (1024, 2048, 4096, 8192)]
    util = [s["pcu_utilization"] for s in runs]
    assert util[0] < util[1] < util[2]
    # at 8,192 a GEMM of these 4,096 tokens does 4,096 FLOPs per weight byte, near the SN30's peak
    # over its DDR bandwidth: loading the weights holds the step, and a larger batch lifts it
    assert max(s["ddr_wait_fraction"] for s in runs) == runs[3]["ddr_wait_fraction"]
    big = summary(hidden_size=8192, n_heads=16, n_layers=2, seq_len=512, batch=32)
    assert big["pcu_utilization"] > util[2] and big["ddr_wait_fraction"] < runs[3]["ddr_wait_fraction"]


def test_prefetch_raises_effective_ddr_bandwidth():
    kw = dict(hidden_size=4096, n_heads=32, n_layers=2, seq_len=512, batch=1)
    off, on = summary(prefetch=False, **kw), summary(prefetch=True, **kw)
    assert on["ddr_effective_gbps"] > off["ddr_effective_gbps"]
    assert on["time_per_sample_seconds"] < off["time_per_sample_seconds"]
    assert on["ddr_bytes"] == off["ddr_bytes"]  # the same bytes, sooner


def test_a_lower_ddr_cap_lowers_throughput_once_sections_spill():
    kw = dict(preset="sn10", hidden_size=8192, n_heads=64, n_layers=1, seq_len=512, batch=4, fusion="o0")
    runs = [summary(ddr_bandwidth_gbps=bw, **kw) for bw in (200.0, 100.0, 50.0)]
    assert all(s["sections_spilled"] > 0 for s in runs)
    rates = [s["samples_per_second"] for s in runs]
    assert rates[0] > rates[1] > rates[2]
    assert rates[2] < 0.3 * rates[0]  # DDR-bound: a quarter of the bandwidth, about a quarter of the rate
    # without a spill the weights load once a section, not with every tile: the same quarter of the
    # bandwidth costs less
    kept = [summary(ddr_bandwidth_gbps=bw, **{**kw, "preset": "sn30", "hidden_size": 2048, "n_heads": 16})
            for bw in (200.0, 50.0)]
    assert all(s["sections_spilled"] == 0 for s in kept)
    assert kept[1]["samples_per_second"] / kept[0]["samples_per_second"] > rates[2] / rates[0]


def test_a_program_that_cannot_move_is_reported_not_looped():
    prog = R.compile_program(R.spec_for("sn10", n_layers=1, hidden_size=64, n_heads=1, seq_len=64, batch=1))
    prog.instance[0, 0, K.IN_DEP_CHIP] = 0  # waits for itself: never ready
    prog.instance[0, 0, K.IN_DEP_INST] = 0
    with pytest.raises(RuntimeError, match="stuck"):
        RduSim(prog).run()


def test_an_uneven_pipeline_split_moves_the_chips_balance_and_the_step(tmp_path):
    """workload.layers_per_stage is a lever the summary answers to: [2, 2] is the even split itself,
    [1, 3] loads the second stage three times the first."""
    out = {}
    for split in ([], [2, 2], [1, 3]):
        sc = scenario(n_layers=4, parallelism="T1P2D1", microbatches=2, layers_per_stage=split)
        out[str(split)] = run_scenario(sc, tmp_path / f"{len(out)}.h5", progress=False).summary
    even, same, uneven = out["[]"], out["[2, 2]"], out["[1, 3]"]
    assert same["cycles"] == even["cycles"] and same["chip_li"] == even["chip_li"] == 1.0
    assert uneven["chip_li"] == pytest.approx(2 / 3, rel=1e-3) and uneven["cycles"] > even["cycles"]
    assert uneven["pipeline_bubble_fraction"] > even["pipeline_bubble_fraction"]


def _sections_in_the_run(name, *overrides):
    """(roofline rows by section name, the run's RUN cycles, DDR-wait cycles, passes and DDR-busy
    cycles of each) for the sections of layer 0 on chip 0 of a shipped scenario with two layers."""
    from meshsim.rdu.compiler import compile_scenario, roofline_rows
    from meshsim.roofline import platform_of
    from meshsim.scenario import load_scenario

    sc = load_scenario(ROOT / "scenarios" / f"{name}.toml",
                       ["workload.n_layers=2", "workload.vocab_size=0", *overrides])
    prog = compile_scenario(sc)
    _, cycles, series, _ = RduSim(prog).run()
    rows = {r["name"]: r for r in roofline_rows(sc.values, platform_of(sc.values))}
    inst, phase, wait, busy = (series[:, 0, k] for k in (K.SR_INSTANCE, K.SR_PHASE, K.SR_DDR_WAIT, K.SR_DDR_BUSY))
    seen = {sec: [0, 0, 0, 0.0] for sec in rows}
    for k in range(int(prog.n_instances[0])):
        sec = prog.sections[int(prog.instance[0, k, K.IN_SECTION])].name.split(":", 1)[1]
        if sec in rows:
            m = (inst == k) & (phase == K.PH_RUN)
            seen[sec][0] += int(cycles[m].sum())
            seen[sec][1] += int((cycles[m] * wait[m]).sum())
            seen[sec][2] += 1
            seen[sec][3] += float((cycles[m] * busy[m]).sum())
    return rows, seen, prog.spec.clock_ghz * 1e9


@pytest.mark.parametrize("name", ["rdu_gpt2_o0", "rdu_gpt2_o1", "rdu_gpt2_o3", "rdu_tp8"])
def test_each_section_reaches_the_roof_the_roofline_gives_it(name):
    """Without prefetch (which moves weight loads from one pass into the one before), each section of
    layer 0 reaches its roof (docs/rdu.md, "Roofline") within 20% in the run (within 10% but where
    a compute roof lies close to the DDR one); the roof bounds it."""
    rows, seen, clock = _sections_in_the_run(name, "workload.prefetch=false")
    assert rows
    for sec, r in rows.items():
        run, _, passes, _ = seen[sec]
        achieved = r["flops"] * passes / (run / clock)
        assert 0.8 <= achieved / r["attainable_flops"] <= 1.001, (sec, r["bound"], achieved / r["attainable_flops"])


@pytest.mark.parametrize("prefetch", ["true", "false"])
def test_a_section_the_roofline_calls_ddr_bound_keeps_the_ddr_busy(prefetch):
    """One operator per section (o0): the sections the roofline calls DDR-bound are those that keep
    the DDR busy in the run, more than 85% of their time; the others do not. (Their PCUs need not
    wait long: a section waiting on DDR holds only the PCUs that keep pace with it.)"""
    rows, seen, _ = _sections_in_the_run("rdu_gpt2_o0", f"workload.prefetch={prefetch}")
    for sec, r in rows.items():
        run, _, _, busy = seen[sec]
        assert (busy / run > 0.85) == (r["bound"] == "memory"), (sec, r["bound"], busy / run)
    assert 0 < sum(r["bound"] == "memory" for r in rows.values()) < len(rows)


def test_a_section_its_tensor_all_reduce_holds_back_is_bound_by_the_interconnect():
    """Eight-way tensor parallelism: the sections whose slowest stage is an all-reduce are called
    interconnect-bound, never on-chip (docs/rdu.md, "Roofline")."""
    from meshsim.rdu.compiler import roofline_rows
    from meshsim.roofline import platform_of
    from meshsim.scenario import load_scenario

    sc = load_scenario(ROOT / "scenarios" / "rdu_tp8.toml", ["workload.n_layers=2"])
    rows = roofline_rows(sc.values, platform_of(sc.values))
    held_back = [r for r in rows if r["slowest_stage"].endswith(".allreduce")]
    assert held_back and all(r["bound"] in ("interconnect", "memory") for r in held_back)
    assert all(r["bound"] != "interconnect" for r in rows if not r["slowest_stage"].endswith(".allreduce"))
