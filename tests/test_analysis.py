"""`meshsim report`'s recomputation from the file (meshsim.analysis) against independent numpy
computations on the raw datasets, the diagnosis, comparisons and the roofline."""

import json
from pathlib import Path

import h5py
import numpy as np
import pytest

from meshsim.analysis import analyse, format_comparison, format_report
from meshsim.cli import main
from meshsim.errors import InputError
from meshsim.roofline import kernels, platform_of, presets
from meshsim.run import run_scenario
from meshsim.scenario import scenario_from_dict
from meshsim.transformer import Model


def hotspot(**output):
    return scenario_from_dict({
        "run": {"cycles": 400, "window_cycles": 50},
        "machine": {"rows": 12, "cols": 16},
        "workload": {"type": "hotspot", "injection_rate": 0.02, "hot_rate": 0.3, "hot_regions": [[3, 4, 7, 9]]},
        "output": {"frame_every_cycles": 50, **output}})


@pytest.fixture(scope="module")
def mesh_file(tmp_path_factory):
    return run_scenario(hotspot(), tmp_path_factory.mktemp("a") / "hot.h5", progress=False).path


@pytest.fixture(scope="module")
def rdu_file(tmp_path_factory):
    sc = scenario_from_dict({"machine": {"type": "rdu", "preset": "sn10"},
                             "workload": {"type": "transformer", "hidden_size": 256, "n_heads": 4, "n_layers": 2,
                                          "seq_len": 256, "batch": 4, "tile_tokens": 32, "training": True,
                                          "parallelism": "T2P2D1", "microbatches": 2}})
    return run_scenario(sc, tmp_path_factory.mktemp("r") / "rdu.h5", progress=False).path


def test_whole_run_figures_equal_numpy_on_the_raw_datasets(mesh_file):
    a = analyse(mesh_file)
    with h5py.File(mesh_file) as f:
        b = f["units/busy_cycles"][()].astype(float)
        h = f["latency/histogram"][()]
        cycles = f.attrs["cycles_done"]
    w = a["whole"]
    assert w["li"] == pytest.approx(b.mean() / b.max())
    assert w["jain_index"] == pytest.approx(b.sum() ** 2 / (b.size * (b ** 2).sum()))
    assert w["cv"] == pytest.approx(b.std() / b.mean())
    assert w["utilization"] == pytest.approx(b.sum() / (b.size * cycles))
    lat = np.repeat(np.arange(h.size), h)
    assert w["latency_mean_cycles"] == pytest.approx(lat.mean())
    assert w["latency_var_cycles2"] == pytest.approx(lat.var())
    assert w["latency_p99_cycles"] == int(np.quantile(lat, 0.99, method="inverted_cdf"))
    assert w["idle_units"] == int((b == 0).sum())


def test_windows_from_the_file_match_the_run_and_regroup(mesh_file):
    own = analyse(mesh_file)["windows"]
    with h5py.File(mesh_file) as f:
        stored = f["windows/li"][()]
        per = f["windows/busy_cycles"][()].astype(float)
    assert own["source"] == "windows/busy_cycles" and len(own["rows"]) == 8
    assert [r["li"] for r in own["rows"]] == pytest.approx(stored.tolist())
    wide = analyse(mesh_file, window=200)["windows"]["rows"]
    assert [(r["start"], r["end"]) for r in wide] == [(0, 200), (200, 400)]
    first = per[:4].sum(axis=0)
    assert wide[0]["li"] == pytest.approx(first.mean() / first.max())
    with pytest.raises(InputError, match="multiple"):
        analyse(mesh_file, window=75)


def test_without_window_busy_the_stored_figures_serve_and_say_so(tmp_path):
    path = run_scenario(hotspot(window_busy=False), tmp_path / "nw.h5", progress=False).path
    win = analyse(path)["windows"]
    assert win["source"].startswith("stored") and len(win["rows"]) == 8
    with pytest.raises(InputError, match="keeps no per-window busy cycles"):
        analyse(path, window=100)


def test_regions_and_the_diagnosis_name_the_hot_spot(mesh_file):
    a = analyse(mesh_file)
    with h5py.File(mesh_file) as f:
        b = f["units/busy_cycles"][()].astype(float)
        labels = f["regions/region_map"][()]
    hot = next(r for r in a["regions"] if r["name"] == "hot_1")
    part = b[labels == 1]
    assert hot["li"] == pytest.approx(part.mean() / part.max())
    d = a["diagnosis"]
    assert d["target_li"] == 0.98 and not d["meets"]
    assert any("hot_1" in x["finding"] and "regions/utilization" in x["figure"] for x in d["findings"])
    assert analyse(mesh_file, target=0.1)["diagnosis"]["findings"] == []
    text = format_report(a)
    assert "diagnosis: LI" in text and "hot_1" in text


def test_rdu_figures_from_the_file_match_the_run(rdu_file):
    a = analyse(rdu_file)
    with h5py.File(rdu_file) as f:
        s = dict(f["summary"].attrs)
        stored = f["sections/li"][()]
        b = f["units/pcu_busy_cycles"][()].astype(float)
    w = a["whole"]
    assert w["li"] == pytest.approx(b.mean() / b.max())
    assert w["chip_li"] == pytest.approx(b.sum(axis=1).mean() / b.sum(axis=1).max())
    for key in ("ddr_wait_fraction", "pipeline_bubble_fraction", "pmu_utilization", "ddr_busy_fraction",
                "latency_mean_cycles", "latency_p99_cycles", "ddr_effective_gbps"):
        assert w[key] == pytest.approx(s[key]), key
    assert [r["li"] for r in a["sections"]] == pytest.approx(stored.tolist())
    with h5py.File(rdu_file) as f:
        occ = f["sections/li_occupied"][()]
        span = (f["sections/end_cycle"][()] - f["sections/start_cycle"][()] + 1).astype(float)
        held = f["sections/pcus"][()].astype(float)
    assert [r["li_occupied"] for r in a["sections"]] == pytest.approx(occ.tolist(), nan_ok=True)
    ok = held > 0
    assert w["li_occupied"] == pytest.approx(np.average(occ[ok], weights=span[ok])) == pytest.approx(s["li_occupied"])
    assert w["pcu_alloc_mean"] == pytest.approx((span * held).sum() / (b.shape[1] * span.sum()))
    assert w["pcu_alloc_mean"] == pytest.approx(s["pcu_alloc_mean"])
    assert w["pcu_alloc_max"] == pytest.approx(s["pcu_alloc_max"]) == pytest.approx(held.max() / b.shape[1])
    rows = a["windows"]["rows"]
    util, span = [r["utilization"] for r in rows], [r["end"] - r["start"] for r in rows]
    assert len(util) == 10 and sum(span) == s["cycles"]
    assert np.average(util, weights=span) == pytest.approx(s["utilization"], rel=1e-9)
    assert a["diagnosis"]["target_li"] == 0.85


def test_report_compares_files_side_by_side(mesh_file, rdu_file, capsys):
    assert main(["report", str(mesh_file), str(rdu_file)]) == 0
    out = capsys.readouterr().out
    assert "hot.h5" in out and "rdu.h5" in out and "meets target LI" in out
    assert main(["report", str(mesh_file), str(rdu_file), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [d["machine"] for d in data["files"]] == ["mesh", "rdu"]
    table = format_comparison([analyse(mesh_file), analyse(rdu_file)])
    cycles = next(line for line in table.splitlines() if line.startswith("cycles"))
    assert cycles.split()[1:] == ["400", f"{analyse(rdu_file)['cycles']:,}"]
    # no two cells run together, however long a figure's name or value (li_active_steady under a.h5)
    a, b = analyse(mesh_file), analyse(rdu_file)
    a["file"], b["file"] = "a.h5", "b.h5"
    a["whole"]["a_figure_name_longer_than_the_label_column"] = 1.0
    a["diagnosis"]["figure"] = b["diagnosis"]["figure"] = "li_active_steady"
    for line in format_comparison([a, b]).splitlines():
        if line.startswith(("judged LI", "a_figure_name")):
            assert len(line.split()) == (4 if line.startswith("judged") else 3), line
    judged = next(line for line in format_comparison([a, b]).splitlines() if line.startswith("judged LI"))
    assert judged.split()[2:] == [a["diagnosis"]["figure"], b["diagnosis"]["figure"]]


def test_report_says_when_a_lever_cannot_move_the_judged_li(tmp_path, capsys):
    """Runs that differ in the batch (256 tiles or more a pass: fill and drain weigh little) or the
    placement show the same li_occupied; the comparison says which figures those levers move
    (docs/rdu.md, "Which lever moves which figure"); a lever that moves it (fusion) gets no note."""
    def run(name, **workload):
        sc = scenario_from_dict({"machine": {"type": "rdu", "preset": "sn10", **workload.pop("machine", {})},
                                 "workload": {"type": "transformer", "hidden_size": 256, "n_heads": 4, "n_layers": 1,
                                              "seq_len": 1024, "batch": 16, "fusion": "o1", "vocab_size": 0,
                                              **workload}})
        return str(run_scenario(sc, tmp_path / name, progress=False).path)

    a, b = run("a.h5"), run("b.h5", batch=32)
    c, d = run("c.h5", machine={"placement": "packed"}), run("d.h5", fusion="o3")
    assert main(["report", a, b, c]) == 0
    out = capsys.readouterr().out
    notes = [line for line in out.splitlines() if line.startswith("note:")]
    assert len(notes) == 2
    assert "workload.batch differs (16 / 32 / 16) but li_occupied" in notes[1] and "step_seconds" in notes[1]
    assert "machine.placement differs (spread / spread / packed)" in notes[0] and "moves li:" in notes[0]
    assert analyse(a)["whole"]["li"] != analyse(c)["whole"]["li"]  # placement moves the whole chip's LI
    assert main(["report", a, d]) == 0
    assert "note:" not in capsys.readouterr().out


def test_report_says_why_tensor_parallelism_leaves_the_ipus_stage_li(tmp_path, capsys):
    def run(name, t):
        sc = scenario_from_dict({"machine": {"type": "ipu", "tiles": 16, "gemm_block": 16, "tile_sram_kib": 4096},
                                 "workload": {"type": "transformer", "hidden_size": 64, "n_layers": 2, "n_heads": 4,
                                              "seq_len": 32, "batch": 4, "vocab_size": 0, "layers_per_stage": [1, 1],
                                              "tensor_parallel": t}})
        return str(run_scenario(sc, tmp_path / name, progress=False).path)

    assert main(["report", run("a.h5", 1), run("b.h5", 2)]) == 0
    notes = [line for line in capsys.readouterr().out.splitlines() if line.startswith("note:")]
    assert len(notes) == 1 and "workload.tensor_parallel differs (1 / 2) but stage_li" in notes[0]
    assert "on the ipu workload.tensor_parallel moves samples_per_second" in notes[0]


def test_report_json_holds_the_analysis(mesh_file, capsys):
    assert main(["report", str(mesh_file), "--json", "--window", "100"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["summary"]["cycles"] == 400 and len(data["analysis"]["windows"]["rows"]) == 4
    assert main(["report", str(mesh_file), "--window", "0"]) == 2
    assert "--window 0: must be an integer >= 1" in capsys.readouterr().err


def test_report_refuses_what_is_not_a_result(tmp_path, capsys):
    bad = tmp_path / "x.h5"
    with h5py.File(bad, "w") as f:
        f.attrs["something"] = 1
    assert main(["report", str(bad)]) == 2
    assert "not a meshsim result file" in capsys.readouterr().err


def test_ridges_come_from_the_presets():
    p = presets()
    assert p["wse2"].ridge == pytest.approx(7.5e15 / 20e15)
    assert p["sn30"].peak_flops == pytest.approx(688e12, rel=1e-3)
    assert p["sn30"].ridge == pytest.approx(p["sn30"].peak_flops / 200e9)
    assert p["gc200"].ridge == pytest.approx(250e12 / 47.5e12)


def test_kernels_get_a_verdict_by_their_intensity():
    values = {"machine": {"type": "rdu", "preset": "sn30", "pcus": 1280, "pcu_lanes": 16, "pcu_stages": 6,
                          "clock_ghz": 2.799, "ddr_bandwidth_gbps": 200.0}}
    plat = platform_of(values)
    rows = kernels(Model(4096, 1, 32, 2048, 8), False, plat)
    by = {r["name"]: r for r in rows}
    assert by["ffn_up"]["intensity"] > by["gelu"]["intensity"]
    assert by["gelu"]["bound"] == "memory"
    for r in rows:
        assert r["bound"] == ("memory" if r["intensity"] < plat.ridge else "compute")
        assert r["attainable_flops"] == pytest.approx(min(plat.peak_flops, r["intensity"] * plat.bandwidth))


def test_roofline_command_prints_platforms_and_kernels(rdu_file, capsys):
    assert main(["roofline"]) == 0
    out = capsys.readouterr().out
    assert "WSE-2" in out and "GC200" in out and "ridge" in out
    assert all(line.endswith("datasheet") for line in out.splitlines()[1:])  # no scenario: the presets alone
    assert main(["roofline", str(rdu_file)]) == 0
    out = capsys.readouterr().out
    # the rdu's kernels are its compiled sections, on their DDR bytes (docs/rdu.md, "Roofline")
    assert "sections holding layer 0, as compiled" in out and "ffn_up" in out and " section " in out
    # the chip's datasheet roof and the roof its kernels are placed on, each named as such
    assert next(line for line in out.splitlines() if line.startswith("rdu ")).endswith("this scenario's machine")
    assert "datasheet: a chip's published peak" in out
    assert {line.split()[-1] for line in out.splitlines() if " section " in line} <= {"memory", "compute", "on-chip",
                                                                                      "interconnect"}
    assert main(["roofline", str(Path(__file__).resolve().parent.parent / "scenarios" / "wse2_gpt2_small.toml")]) == 0
    assert "kernels of one layer" in capsys.readouterr().out


def test_a_section_that_moves_nothing_over_ddr_has_no_intensity_rather_than_an_infinite_one(capsys):
    # GPT-2 at batch 1, one operator a section: attention's scores and softmax, and GELU, stay in PMUs
    scenario = str(Path(__file__).resolve().parent.parent / "scenarios" / "rdu_gpt2_o0.toml")
    assert main(["roofline", scenario, "workload.batch=1", "workload.training=false"]) == 0
    out = capsys.readouterr().out
    assert "inf" not in out.split()
    rows = {line.split()[0]: line.split() for line in out.splitlines() if " section " in line}
    assert rows["layer0.attn_scores_softmax"][4] == "none" and rows["layer0.attn_scores_softmax"][3] == "0.00"
    assert rows["layer0.qkv_proj"][4] == "708"
    assert "FLOP/B none: the kernel moves no byte over DDR; only its own roof bounds it" in out


def test_the_diagnosis_names_idle_units_ddr_waits_and_memory_bound_kernels(tmp_path):
    # a layer pipeline whose kernels leave PEs idle
    pipe = run_scenario(scenario_from_dict({
        "run": {"cycles": 300}, "machine": {"rows": 20, "cols": 20}, "migration": {"policy": "none"},
        "workload": {"type": "layer_pipeline", "hidden_size": 64, "n_layers": 1, "n_heads": 2, "seq_len": 16,
                     "batch": 1, "replicas": 3, "vocab_size": 0}}), tmp_path / "p.h5", progress=False).path
    found = analyse(pipe)["diagnosis"]["findings"]
    assert any("never worked" in x["finding"] and x["figure"].startswith("units/busy_cycles") for x in found)
    # an rdu whose sections spill and wait on DDR
    rdu = run_scenario(scenario_from_dict({
        "machine": {"type": "rdu", "preset": "sn10", "pmus": 8, "pmu_kib": 64, "ddr_bandwidth_gbps": 5.0,
                    "section_switch_cycles": 10_000},  # the DDR's waits, not the sections' switches
        "workload": {"type": "transformer", "hidden_size": 256, "n_heads": 4, "n_layers": 1, "seq_len": 128,
                     "batch": 2, "fusion": "o1", "vocab_size": 0}}), tmp_path / "r.h5", progress=False).path
    found = analyse(rdu)["diagnosis"]["findings"]
    figures = " ".join(x["figure"] for x in found)
    assert "series/ddr_wait" in figures and "sections/spilled_bytes" in figures and "roofline" in figures


def test_an_rdu_file_without_operator_pcus_uses_the_runs_section_figures(rdu_file, tmp_path):
    import shutil

    old = tmp_path / "old.h5"
    shutil.copy(rdu_file, old)
    with h5py.File(old, "a") as f:
        del f["operators/pcu0"]
    # the run's stored figures stand in for the ones recomputed from the operators' PCUs
    derived = [r["li"] for r in analyse(rdu_file)["sections"]]
    assert [r["li"] for r in analyse(old)["sections"]] == pytest.approx(derived)


def test_a_traffic_run_reports_packet_latency_and_no_balance(tmp_path):
    path = run_scenario(scenario_from_dict({
        "run": {"cycles": 300}, "machine": {"rows": 6, "cols": 6}, "migration": {"policy": "none"},
        "workload": {"type": "traffic", "injection_rate": 0.1, "warmup_cycles": 50, "measure_cycles": 150}}),
        tmp_path / "noc.h5", progress=False)
    a = analyse(path.path)
    w = a["whole"]
    assert "latency_mean_cycles" not in w
    assert w["packet_latency_mean_cycles"] == pytest.approx(path.summary["packet_latency_mean_cycles"])
    assert w["packets_delivered"] == path.summary["packets_delivered"]
    assert a["diagnosis"]["meets"] is None and "does not apply" in a["diagnosis"]["note"]
    assert "LI does not apply" in format_report(a)


def test_a_file_killed_before_its_totals_reports_what_it_has(mesh_file, tmp_path, capsys):
    import shutil

    cut = tmp_path / "cut.incomplete.h5"
    shutil.copy(mesh_file, cut)
    with h5py.File(cut, "a") as f:
        for g in ("units", "latency"):
            for k in list(f[g]):
                del f[g][k]
        f.attrs["complete"] = False
    assert main(["report", str(cut)]) == 0
    assert "no recomputation" in capsys.readouterr().out
    assert main(["report", str(cut), "--window", "75"]) == 0  # nothing to regroup: said, not refused
    assert main(["report", str(mesh_file), "--target", "1.5"]) == 2
    assert "--target 1.5: must be a number in (0, 1]" in capsys.readouterr().err


def test_a_pipelines_task_latency_is_labelled_as_tasks(tmp_path):
    res = run_scenario(scenario_from_dict({
        "run": {"cycles": 300}, "machine": {"rows": 20, "cols": 20}, "migration": {"policy": "none"},
        "workload": {"type": "layer_pipeline", "hidden_size": 64, "n_layers": 1, "n_heads": 2, "seq_len": 16,
                     "batch": 1}}), tmp_path / "p.h5", progress=False)
    with h5py.File(res.path) as f:
        assert f["latency/histogram"].attrs["units"] == "tasks"
    w = analyse(res.path)["whole"]
    assert "packet_latency_mean_cycles" not in w
    assert w["latency_mean_cycles"] == pytest.approx(res.summary["latency_mean_cycles"])


def test_a_layer_pipeline_is_judged_in_its_steady_state_with_the_fill_apart(tmp_path):
    """The fill (the first chunk crossing the pipeline) is not what a user balances: report judges
    the steady state's LI over the pipeline's PEs, recomputed from the per-window busy cycles, and
    names the fill's apart."""
    res = run_scenario(scenario_from_dict({
        "run": {"cycles": 2000, "window_cycles": 50}, "machine": {"rows": 20, "cols": 20},
        "migration": {"policy": "none"}, "output": {"frame_every_cycles": 50, "flush_every_cycles": 500},
        "workload": {"type": "layer_pipeline", "hidden_size": 64, "n_layers": 1, "n_heads": 2, "seq_len": 16,
                     "batch": 64, "vocab_size": 0}}), tmp_path / "p.h5", progress=False)
    s = res.summary
    a = analyse(res.path)
    w, d = a["whole"], a["diagnosis"]
    assert d["figure"] == "li_active_steady" and d["li"] == w["li_active_steady"]
    # the stops fall on window boundaries here, so the recomputation is the run's own figure
    assert w["steady_from_cycle"] == s["steady_from_cycle"]
    assert w["li_active_steady"] == pytest.approx(s["li_active_steady"], rel=1e-12)
    assert w["li_fill"] < w["li_active_steady"] and w["li_active"] < w["li_active_steady"]
    assert {"li", "li_active", "li_fill"} <= set(d["others"])
    text = format_report(a)
    assert "diagnosis: LI" in text and "li_active_steady" in text and "also: li " in text


def test_the_ipu_is_judged_on_its_stages_with_the_tiles_named_beside(tmp_path):
    from meshsim.scenario import load_scenario

    sc = load_scenario(Path(__file__).resolve().parents[1] / "scenarios" / "ipu_gpt2_uneven.toml")
    a = analyse(run_scenario(sc, tmp_path / "i.h5", progress=False).path)
    d = a["diagnosis"]
    assert d["figure"] == "stage_li" and d["li"] == a["whole"]["stage_li"]
    assert d["others"]["li"] == a["whole"]["li"] and d["meets"] == (d["li"] >= 0.80)


def test_streamed_weights_are_a_roof_of_their_own_which_the_runs_waits_bear_out():
    """The 7B model streamed in at 150 GB/s: its matrix kernels are bound by the weights' stream (as
    the run, waiting on weights most of the time, shows), not by compute; resident weights on the
    same wafer leave them compute-bound."""
    from meshsim.roofline import format_table, model_of
    from meshsim.scenario import load_scenario
    from meshsim.transformer import operators

    root = Path(__file__).resolve().parents[1] / "scenarios"
    streamed = load_scenario(root / "wse2_llm_7b.toml").values
    plat = platform_of(streamed)
    assert plat.weight_bandwidth == 150e9
    model, training = model_of(streamed)
    weights = {op.name.split(".", 1)[1]: op.weight_bytes for op in operators(model, training) if op.layer == 0}
    rows = {r["name"]: r for r in kernels(model, training, plat)}
    for gemm in ("qkv_proj", "out_proj", "ffn_up", "ffn_down"):
        r = rows[gemm]
        assert r["bound"] == "weights"
        assert r["attainable_flops"] == pytest.approx(r["flops"] / weights[gemm] * 150e9)
        assert r["attainable_flops"] < 0.1 * plat.peak_flops
    assert "weights streamed in at 150 GB/s" in format_table(streamed)
    resident = load_scenario(root / "wse2_gpt2_small.toml").values
    assert platform_of(resident).weight_bandwidth is None
    assert all(r["bound"] != "weights" for r in kernels(*model_of(resident), platform_of(resident)))
