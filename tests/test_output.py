"""Result files (docs/design.md, "Result files"): layout, self-description, consistency with the run,
and what an interrupted run leaves behind."""

import math

import h5py
import numpy as np
import pytest

from meshsim import metrics
from meshsim.report import read_summary
from meshsim.run import RunInterrupted, run_scenario
from meshsim.scenario import scenario_from_dict

# docs/design.md, "Result files", word for word: the names users' scripts rely on.
STABLE_SUMMARY_KEYS = ["cycles", "n_units", "li", "percent_imbalance", "jain_index", "cv", "utilization",
                       "latency_mean_cycles", "latency_var_cycles2", "latency_p50_cycles", "latency_p99_cycles",
                       "latency_max_cycles", "injected", "refused", "completed", "in_system_at_end", "migrated",
                       "wall_seconds", "pe_cycles_per_second"]


def scenario(**over):
    d = {"run": {"cycles": 450, "seed": 5, "window_cycles": 100},
         "machine": {"rows": 12, "cols": 17, "queue_capacity": 8},
         "migration": {"policy": "least_loaded", "threshold": 1},
         "workload": {"type": "hotspot", "injection_rate": 0.03, "hot_rate": 0.4, "work_distribution": "geometric",
                      "work_cycles": 6, "work_max_cycles": 100},
         "output": {"frame_every_cycles": 50, "flush_every_cycles": 200}}
    for key, value in over.items():
        section, name = key.split("__")
        d[section][name] = value
    return scenario_from_dict(d)


@pytest.fixture(scope="module")
def result(tmp_path_factory):
    path = tmp_path_factory.mktemp("out") / "run.h5"
    res = run_scenario(scenario(), path, progress=False)
    return res


def test_a_complete_run_is_renamed_and_marked_complete(result):
    assert result.path.name == "run.h5"
    assert not (result.path.parent / "run.incomplete.h5").exists()
    with h5py.File(result.path) as f:
        assert bool(f.attrs["complete"]) is True
        assert f.attrs["cycles_done"] == 450
        assert f.attrs["schema_version"] == 1
        assert "workload" in f.attrs["scenario_resolved"]
        assert "hot_rate = 0.4" in f.attrs["scenario_resolved"]


def test_every_dataset_has_units_and_a_description(result):
    seen = []

    def visit(name, obj):
        if isinstance(obj, h5py.Dataset):
            seen.append(name)
            assert "units" in obj.attrs, name
            assert obj.attrs["description"], name

    with h5py.File(result.path) as f:
        f.visititems(visit)
    assert {"series/busy", "occupancy/depth_histogram", "occupancy/queue_depth", "units/busy_cycles",
            "latency/histogram", "windows/li"} <= set(seen)


def test_time_series_carry_the_cycle_dimension_scale(result):
    with h5py.File(result.path) as f:
        for name in ("series/busy", "series/completed", "occupancy/depth_histogram"):
            ds = f[name]
            assert ds.dims[0][0].name == "/cycle"
            assert ds.chunks is not None and ds.compression == "gzip"
        assert f["occupancy/queue_depth"].dims[1][0].name == "/row"
        assert f["occupancy/queue_depth"].dims[2][0].name == "/col"
        assert f["cycle"][:].tolist() == list(range(450))


def test_series_totals_and_summary_agree(result):
    with h5py.File(result.path) as f:
        s = {k: f["series"][k][:] for k in f["series"]}
        u = {k: f["units"][k][:] for k in f["units"]}
        hist = f["latency/histogram"][:]
        depth = f["occupancy/depth_histogram"][:]
        assert f["occupancy/queue_depth"].shape == (9, 12, 17)
        assert f["occupancy/frame_cycle"][:].tolist() == [49, 99, 149, 199, 249, 299, 349, 399, 449]
        assert np.array_equal(f["occupancy/queue_depth"][-1], u["queue_depth_end"])
        assert f["windows/li"].shape == (5,)
    summary = result.summary
    assert int(s["completed"].sum()) == int(u["completed"].sum()) == summary["completed"] == int(hist.sum())
    assert int(s["busy"].sum()) == int(u["busy_cycles"].sum())
    assert int(s["injected"].sum()) == summary["injected"]
    assert int(s["latency_sum"].sum()) == int(u["latency_sum"].sum())
    assert np.all(depth.sum(axis=1) == 12 * 17)
    assert np.array_equal((depth * np.arange(9)).sum(axis=1), s["queued"])
    # Conservation at the end, from the file alone.
    assert summary["injected"] == summary["refused"] + int(s["queued"][-1]) + int(s["in_service"][-1]) + \
        int(s["in_flight"][-1]) + summary["completed"]
    lb = metrics.load_balance(u["busy_cycles"])
    assert summary["li"] == pytest.approx(lb["li"], rel=1e-12)
    assert summary["migrated"] > 0


def test_summary_holds_the_stable_names(result):
    root, summary = read_summary(result.path)
    for key in STABLE_SUMMARY_KEYS:
        assert key in summary, key
    assert summary["n_units"] == 12 * 17
    assert 0 < summary["li"] <= 1
    assert summary["latency_p50_cycles"] <= summary["latency_p99_cycles"] <= summary["latency_max_cycles"]
    assert root["complete"] is True or root["complete"] == 1
    assert not math.isnan(summary["latency_mean_cycles"])
    assert not math.isnan(summary["latency_var_cycles2"])


def test_windows_cover_the_run(result):
    with h5py.File(result.path) as f:
        assert f["windows/window_start"][:].tolist() == [0, 100, 200, 300, 400]
        assert f["windows/window_end"][:].tolist() == [100, 200, 300, 400, 450]
        assert int(f["windows/completed"][:].sum()) == result.summary["completed"]
        assert np.all((f["windows/li"][:] > 0) & (f["windows/li"][:] <= 1))


def test_an_interrupted_run_leaves_a_readable_incomplete_file(tmp_path, monkeypatch):
    from meshsim.mesh import sim as mesh

    calls = {"n": 0}
    real = mesh.MeshSim.advance

    def advance_then_interrupt(self, n):
        calls["n"] += 1
        if calls["n"] == 4:
            raise KeyboardInterrupt
        return real(self, n)

    monkeypatch.setattr(mesh.MeshSim, "advance", advance_then_interrupt)
    path = tmp_path / "cut.h5"
    with pytest.raises(RunInterrupted) as e:
        run_scenario(scenario(), path, progress=False)
    assert not path.exists()
    kept = tmp_path / "cut.incomplete.h5"
    assert e.value.path == kept and e.value.cycles_done == 150
    with h5py.File(kept) as f:
        assert bool(f.attrs["complete"]) is False
        assert f.attrs["cycles_done"] == 150
        assert f["series/busy"].shape == (150,)
        assert f["summary"].attrs["cycles"] == 150
        assert int(f["units/completed"][:].sum()) == int(f["series/completed"][:].sum())


def test_a_trace_run_reports_events_it_did_not_offer(tmp_path):
    trace = tmp_path / "t.csv"
    trace.write_text("cycle,row,col,work_cycles\n0,0,0,5\n3,1,1,2\n999,0,0,1\n")
    sc = scenario_from_dict({"run": {"cycles": 20}, "machine": {"rows": 2, "cols": 2},
                             "workload": {"type": "trace", "trace_file": str(trace)},
                             "output": {"frame_every_cycles": 0}})
    res = run_scenario(sc, tmp_path / "t.h5", progress=False)
    assert res.summary["injected"] == 2 and res.summary["completed"] == 2
    assert res.summary["trace_events_not_offered"] == 1
    assert res.summary["latency_mean_cycles"] == 3.5


def test_xarray_opens_every_group(result):
    import xarray as xr  # a test extra, with h5netcdf

    with xr.open_dataset(result.path, engine="h5netcdf", group="series") as ds:
        assert ds.sizes["cycle"] == 450 and int(ds["completed"].sum()) == result.summary["completed"]
    with xr.open_dataset(result.path, engine="h5netcdf", group="occupancy") as ds:
        assert dict(ds["queue_depth"].sizes) == {"frame_cycle": 9, "row": 12, "col": 17}
        assert ds["queue_depth"].attrs["units"] == "tasks"
    for group in ("windows", "units", "latency", "regions"):
        with xr.open_dataset(result.path, engine="h5netcdf", group=group) as ds:
            assert len(ds.data_vars) > 0


def test_a_grid_of_more_than_850000_pes_runs(tmp_path):
    sc = scenario_from_dict({"run": {"cycles": 6, "window_cycles": 3}, "machine": {"rows": 850, "cols": 1001},
                             "workload": {"injection_rate": 0.3, "work_cycles": 2},
                             "output": {"frame_every_cycles": 3}})
    res = run_scenario(sc, tmp_path / "big.h5", progress=False)
    assert res.summary["n_units"] == 850_850
    assert res.summary["injected"] == res.summary["refused"] + res.summary["completed"] + \
        res.summary["in_system_at_end"]
    assert res.summary["completed"] > 0


def test_hotspot_runs_report_each_region(result):
    with h5py.File(result.path) as f:
        g = f["regions"]
        names = [n.decode() for n in g["name"][:]]
        assert names == ["background", "hot_1"]
        labels = g["region_map"][:]
        busy = f["units/busy_cycles"][:]
        # The default hot region: the middle quarter of each side of the 12 x 17 grid.
        assert labels.sum() == 3 * 4 and labels[4:7, 6:10].all()
        assert g["n_units"][:].tolist() == [12 * 17 - 12, 12]
        assert int(g["completed"][:].sum()) == result.summary["completed"]
        assert int(g["injected"][:].sum()) == result.summary["injected"]
        hot = metrics.load_balance(busy[labels == 1])
        assert g["li"][1] == pytest.approx(hot["li"], rel=1e-12)
        assert g["utilization"][1] == pytest.approx(busy[labels == 1].sum() / (12 * 450), rel=1e-12)
        assert f["windows/region_li"].shape == (5, 2)


def test_report_prints_regions_and_json_holds_them(result, capsys):
    import json

    from meshsim.cli import main

    assert main(["report", str(result.path)]) == 0
    out = capsys.readouterr().out
    assert "background" in out and "hot_1" in out
    assert main(["report", str(result.path), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert set(data["regions"]) == {"background", "hot_1"}
    assert data["regions"]["hot_1"]["n_units"] == 12


def test_a_traffic_run_writes_packet_series_link_totals_and_packet_figures(tmp_path):
    sc = scenario_from_dict({
        "run": {"cycles": 1200, "seed": 2},
        "machine": {"rows": 6, "cols": 6, "link_buffer_messages": 4},
        "migration": {"policy": "none"},
        "workload": {"type": "traffic", "pattern": "uniform", "injection_rate": 0.1, "warmup_cycles": 200,
                     "measure_cycles": 600},
        "output": {"frame_every_cycles": 0}})
    res = run_scenario(sc, tmp_path / "noc.h5", progress=False)
    s = res.summary
    with h5py.File(res.path) as f:
        offered = f["series/packets_offered"][:]
        delivered = f["series/packets_delivered"][:]
        links = f["units/link_messages"][:]
        assert links.shape == (6, 6, 4) and f["units/link_messages"].dims[2][0].name == "/direction"
        assert int(links.sum()) == int(f["series/link_sent"][:].sum())
        # No link leaves the grid: the north links of row 0 and the west links of column 0 are idle.
        assert links[0, :, 0].sum() == 0 and links[:, 0, 3].sum() == 0
        assert int(f["latency/histogram"][:].sum()) == s["packets_measured_delivered"]
        assert int(f["units/packets_offered"][:].sum()) == s["packets_offered"] == int(offered.sum())
    assert s["packets_delivered"] == int(delivered.sum())
    assert s["packets_offered"] == s["packets_delivered"] + s["packets_in_source_at_end"] + \
        s["packets_in_router_at_end"] + int(f_in_flight(res.path))
    assert s["packets_measured_delivered"] == s["packets_measured_offered"] > 0
    assert s["accepted_per_pe_cycle"] == pytest.approx(s["offered_per_pe_cycle"], rel=0.05)
    assert s["offered_per_pe_cycle"] == pytest.approx(0.1, rel=0.1)
    # A packet that never waits has latency hops x 1; the mean over 6 x 6 is about 2 x 6 / 3 = 4.
    assert 4.0 <= s["packet_latency_mean_cycles"] < 6.0
    assert 0 < s["link_utilization_max"] <= 1
    assert s["packet_latency_complete"] is True or s["packet_latency_complete"] == 1
    with h5py.File(res.path) as f:
        links = f["units/link_messages"][:]
    # The mean over the 4 x 6 x 5 = 120 links that exist, not the 144 slots with the grid's edges.
    assert s["link_utilization_mean"] == pytest.approx(links.sum() / 120 / 1200, rel=1e-12)


def f_in_flight(path):
    with h5py.File(path) as f:
        return f["series/in_flight"][-1]
