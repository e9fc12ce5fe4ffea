"""The Python API: meshsim.run and meshsim.load (meshsim/run.py and meshsim/result.py; README, "Python API")."""

import re
from pathlib import Path

import h5py
import numpy as np
import pytest
import xarray as xr

import meshsim
from meshsim.errors import InputError
from meshsim.report import read_summary
from meshsim.run import RunInterrupted, run_scenario
from meshsim.scenario import load_scenario

ROOT = Path(__file__).resolve().parents[1]
SMOKE = ROOT / "scenarios" / "smoke.toml"


@pytest.fixture(scope="module")
def mesh_result(tmp_path_factory):
    out = tmp_path_factory.mktemp("api") / "smoke.h5"
    return meshsim.run(SMOKE, {"run.cycles": 600}, out=out, migration={"policy": "none"})


def test_run_returns_the_summary_the_path_and_labelled_series_and_maps(mesh_result):
    r = mesh_result
    assert r.complete and r.machine == "mesh" and r.name == "smoke"
    assert r.summary == read_summary(r.path)[1]
    with h5py.File(r.path) as f:
        assert r.summary["li"] == f["summary"].attrs["li"]
        busy = f["series/busy"][()]
    assert r.scenario["migration"]["policy"] == "none" and r.scenario["run"]["cycles"] == 600
    assert isinstance(r.series, xr.Dataset) and r.series.sizes["cycle"] == 600
    assert r.series["cycle"].values.tolist() == list(range(600))
    np.testing.assert_array_equal(r.series["busy"].values, busy)
    m = r.maps
    assert (m.sizes["row"], m.sizes["col"]) == (32, 48) and m["row"].values.tolist() == list(range(32))
    # every PE's busy cycles summed over the grid is every cycle's busy PEs summed over the run
    assert int(m["busy_cycles"].sum()) == int(r.series["busy"].sum())
    assert "queue_depth" in r.frames and r.frames.sizes["frame_cycle"] == 6
    assert "regions" in r.groups and r.dataset("regions").sizes["region"] == 2
    assert r.report()["whole"]["li"] == pytest.approx(r.summary["li"])
    assert "smoke: mesh, complete" in str(r) and "li=" in repr(r)


def test_run_is_the_command_lines_run_bit_for_bit(mesh_result, tmp_path):
    sc = load_scenario(SMOKE, ["run.cycles=600", "migration.policy=none"])
    other = run_scenario(sc, tmp_path / "cli.h5", progress=False)
    with h5py.File(mesh_result.path) as a, h5py.File(other.path) as b:
        for group in ("series", "units", "occupancy"):
            for name in a[group]:
                np.testing.assert_array_equal(a[group][name][()], b[group][name][()], err_msg=f"{group}/{name}")


def test_load_reads_a_file_again_and_scenarios_come_as_paths_dicts_or_scenarios(mesh_result, tmp_path):
    again = meshsim.load(mesh_result.path)
    assert again.summary == mesh_result.summary
    xr.testing.assert_identical(again.series, mesh_result.series)
    sc = load_scenario(SMOKE)
    r = meshsim.run(sc, out=tmp_path / "a.h5", run={"cycles": 100})
    d = meshsim.run({"machine": {"type": "mesh", "rows": 8, "cols": 8}, "run": {"cycles": 100}}, out=tmp_path / "b.h5")
    assert (r.summary["cycles"], d.summary["cycles"], d.maps.sizes["row"]) == (100, 100, 8)
    assert sc.values["run"]["cycles"] == 2000  # the Scenario given is not changed


def test_a_scenario_object_takes_overrides_as_its_file_would(tmp_path):
    sc = load_scenario(ROOT / "scenarios" / "rdu_mistral_7b.toml", ["workload.n_layers=1"])
    r = meshsim.run(sc, out=tmp_path / "r.h5", machine={"preset": "sn10"})
    # the preset fills the chip's keys the scenario leaves out, as on the command line
    assert (r.scenario["machine"]["pcus"], r.scenario["workload"]["n_layers"]) == (640, 1)


def test_a_killed_run_loads_and_a_file_written_again_is_refused(tmp_path):
    import signal
    import subprocess
    import sys
    import time

    out = tmp_path / "k.h5"
    proc = subprocess.Popen([sys.executable, "-m", "meshsim", "run", str(SMOKE), "-o", str(out), "run.cycles=200000",
                             "output.flush_every_cycles=200"], cwd=ROOT, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    part = tmp_path / "k.incomplete.h5"
    try:
        deadline = time.time() + 120
        while time.time() < deadline:
            try:
                if part.exists() and meshsim.load(part).summary.get("cycles", 0) >= 400:
                    break
            except InputError:  # the first flush not yet made
                pass
            time.sleep(0.2)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    r = meshsim.load(part)
    # per-unit totals are written only when a run finishes (docs/results.md); the series and frames are there
    assert not r.complete and r.series.sizes["cycle"] >= 400 and "queue_depth" in r.frames and not r.maps.data_vars
    first = meshsim.run(SMOKE, out=tmp_path / "same.h5", run={"cycles": 50})
    meshsim.run(SMOKE, out=tmp_path / "same.h5", run={"cycles": 60})
    with pytest.raises(InputError, match="written again by another run"):
        _ = first.series


def test_rdu_and_ipu_results_have_their_series_and_maps(tmp_path):
    rdu = meshsim.run(ROOT / "scenarios" / "rdu_gpt2_o1.toml", out=tmp_path / "rdu.h5",
                      workload={"n_layers": 1, "training": False})
    assert rdu.machine == "rdu" and "interval_start" in rdu.series.coords
    assert rdu.maps["pcu_busy_cycles"].dims == ("chip", "pcu")
    ipu = meshsim.run(ROOT / "scenarios" / "ipu_gpt2_even.toml", out=tmp_path / "ipu.h5")
    assert ipu.machine == "ipu" and ipu.series.sizes["superstep"] > 0
    assert int(ipu.series["compute_cycles"].sum()) > 0 and "tile" in ipu.maps.coords


def test_a_stopped_run_raises_and_its_file_loads_as_incomplete(tmp_path):
    calls = []

    def stop():
        calls.append(1)
        return len(calls) > 1

    sc = load_scenario(SMOKE, ["output.flush_every_cycles=100"])
    with pytest.raises(RunInterrupted) as err:
        run_scenario(sc, tmp_path / "s.h5", progress=False, max_cycles_per_call=100, stop=stop)
    r = meshsim.load(err.value.path)
    assert not r.complete and 0 < r.series.sizes["cycle"] < 2000


def test_bad_input_is_an_input_error_naming_the_key(tmp_path):
    with pytest.raises(InputError) as err:
        meshsim.run(SMOKE, out=tmp_path / "x.h5", migration={"polcy": "none"})
    assert "migration.polcy" in str(err.value) and "policy" in str(err.value)
    with pytest.raises(InputError, match="takes a dict"):
        meshsim.run(SMOKE, out=tmp_path / "x.h5", output="x.h5")
    with pytest.raises(InputError, match="scenario = 42"):
        meshsim.run(42)
    with pytest.raises(InputError, match="no such result file"):
        meshsim.load(tmp_path / "none.h5")
    with pytest.raises(InputError, match="has no group 'nope'"):
        meshsim.load(_small(tmp_path)).dataset("nope")
    assert not (tmp_path / "x.h5").exists() and not list(tmp_path.glob("x*.h5"))


def _small(tmp_path):
    return meshsim.run(SMOKE, out=tmp_path / "small.h5", run={"cycles": 50}).path


def test_the_run_module_stays_importable_and_is_the_api(tmp_path):
    import meshsim.run as runner

    assert runner.run_scenario is run_scenario and callable(meshsim.run) and meshsim.run is runner
    r = runner(SMOKE, ["run.cycles=50"], out=tmp_path / "m.h5")
    assert isinstance(r, meshsim.Result) and r.summary["cycles"] == 50


def test_the_readme_example_runs(tmp_path, monkeypatch):
    """README, "Python API": the notebook-style example, as written, in a scratch folder."""
    text = (ROOT / "README.md").read_text()
    block = re.search(r"### Python API.*?```python\n(.*?)```", text, re.S)
    assert block, "README has a Python API section with a python example"
    monkeypatch.chdir(tmp_path)
    (tmp_path / "scenarios").symlink_to(ROOT / "scenarios")
    import matplotlib

    matplotlib.use("Agg")
    exec(compile(block.group(1), "README.md", "exec"), {})
    assert list((tmp_path / "results").glob("*.h5"))
