"""A machine is a unit (docs/design.md, "Machines"): a fourth machine, defined here with a key, two
presets, a cross-key rule and an old key name of its own and registered in one line, runs through
`meshsim run`, `meshsim report` and a sweep without any other change; and the registry names the
machines, suggests the closest name and finds the built-in ones."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from meshsim import machine as machines
from meshsim import metrics
from meshsim.cli import main
from meshsim.errors import InputError
from meshsim.machine import Machine, Run, register
from meshsim.output import ResultFile, describe, open_result_file
from meshsim.params import PARAMS, Param, compose, param
from meshsim.report import read_summary
from meshsim.run import run_scenario
from meshsim.scenario import scenario_from_dict

ROOT = Path(__file__).resolve().parents[1]
UNITS = 6
PER_CALL = 64


class ToyWriter(ResultFile):
    def __init__(self, path, scenario, threads):
        super().__init__(path, scenario, "toy", threads, scenario.get("run", "cycles"), 0)
        g = self.f.create_group("series")
        self.busy = g.create_dataset("busy", shape=(0,), maxshape=(None,), dtype=np.int64, chunks=(1024,))
        describe(self.busy, "units", "units busy in the cycle")
        self.f.create_group("summary")

    def write_totals(self, busy):
        self._finishing()
        ds = self.f.create_group("units").create_dataset("busy_cycles", data=busy)
        describe(ds, "cycles", "cycles each unit was busy")


class ToyRun(Run):
    """Unit i works every (i + 1)-th cycle: an imbalance whose LI is known in closed form."""

    def __init__(self, cycles, units, per_call):
        self.total = cycles
        self.units = units
        self.per_call = per_call or PER_CALL
        self.t = 0
        self.busy = np.zeros(units, np.int64)
        self.last = np.zeros(0, np.int64)

    finished = property(lambda self: self.t >= self.total)
    done = property(lambda self: self.t)
    cycle = property(lambda self: self.t)

    def advance(self):
        t = np.arange(self.t, min(self.total, self.t + self.per_call))
        on = (t[:, None] % (np.arange(self.units) + 1)) == 0
        self.busy += on.sum(axis=0)
        self.last = on.sum(axis=1).astype(np.int64)
        self.t += len(t)
        return len(t)

    def record(self, writer):
        writer._append(writer.busy, self.last)

    def flush_due(self, seconds_since_flush):
        return True

    def summarise(self, timing):
        s = dict(cycles=self.t, n_units=self.units, **metrics.balance_figures(self.busy, self.t))
        s.update({f"latency_{k}_cycles": 0.0 for k in ("mean", "p50", "p90", "p99", "max")}, latency_var_cycles2=0.0,
                 injected=0, refused=0, completed=0, in_system_at_end=0, migrated=0, wall_seconds=timing.wall,
                 pe_cycles_per_second=float("nan"), threads=timing.threads)
        return s

    def write_final(self, writer):
        writer.write_totals(self.busy)


class Toy(Machine):
    name = "toy"
    unit_label = "units"
    # its own key and presets: one package's rows, composed into the table by registering it
    params = (Param("machine", "toy_units", "int", "units", UNITS, "Units of the toy machine.", (1, 64),
                    ("machine.type", ("toy",))),)
    presets = {"six": {"toy_units": 6}, "three": {"toy_units": 3}}
    default_preset = "six"
    aliases = {"machine.toy_count": "machine.toy_units"}

    def compile_scenario(self, scenario):
        return scenario.get("run", "cycles"), scenario.get("machine", "toy_units")

    def check_scenario(self, ok, get, add, shown, path=None):
        if ok("machine.toy_units", "run.seed") and get("machine.toy_units") == 13 and get("run.seed") == 13:
            add("machine.toy_units", ["run.seed"], "is unlucky with run.seed = 13")

    def start(self, scenario, inputs, per_call=None):
        return ToyRun(*inputs, per_call)

    def open_writer(self, path, scenario, run, threads):
        return ToyWriter(path, scenario, threads)


@pytest.fixture(scope="module", autouse=True)
def toy():
    register(Toy())  # the one line that makes a machine available
    yield
    machines.unregister("toy")


def toy_file(tmp_path):
    scenario = tmp_path / "toy.toml"
    scenario.write_text('[machine]\ntype = "toy"\n')
    return scenario


def test_the_toy_runs_and_its_figures_are_right(tmp_path):
    res = run_scenario(scenario_from_dict({"machine": {"type": "toy"}}), tmp_path / "toy.h5", progress=False)
    busy = np.array([len(range(0, 1000, i + 1)) for i in range(UNITS)])
    assert res.summary["li"] == pytest.approx(busy.mean() / busy.max())
    with open_result_file(res.path) as f:
        assert f.attrs["machine"] == "toy" and f.attrs["complete"]
        assert f["series/busy"].shape == (1000,)
        assert f["units/busy_cycles"][()].tolist() == busy.tolist()


def test_the_toys_own_key_its_presets_its_rule_and_its_old_name_come_with_its_package(tmp_path):
    # its key is in the table while it is registered, for it alone
    assert param("machine", "toy_units").default == UNITS
    assert "toy" in param("machine", "preset").applies_when[1] and "three" in param("machine", "preset").choices
    with pytest.raises(InputError, match='machine.toy_units = 4: applies only when machine.type is "toy"'):
        scenario_from_dict({"machine": {"type": "mesh", "toy_units": 4}})
    # the default preset fills it; another preset, then the scenario's own value, win
    assert scenario_from_dict({"machine": {"type": "toy"}}).get("machine", "toy_units") == 6
    three = scenario_from_dict({"machine": {"type": "toy", "preset": "three"}})
    assert three.get("machine", "toy_units") == 3
    assert scenario_from_dict({"machine": {"type": "toy", "preset": "three", "toy_units": 5}}).get(
        "machine", "toy_units") == 5
    with pytest.raises(InputError, match="machine.preset = \"sn30\": is not a preset of the toy"):
        scenario_from_dict({"machine": {"type": "toy", "preset": "sn30"}})
    # its cross-key rule
    with pytest.raises(InputError, match="machine.toy_units = 13: is unlucky with run.seed = 13"):
        scenario_from_dict({"machine": {"type": "toy", "toy_units": 13}, "run": {"seed": 13}})
    # its old name, with a warning
    with pytest.warns(FutureWarning, match="machine.toy_count is now machine.toy_units"):
        assert scenario_from_dict({"machine": {"type": "toy", "toy_count": 2}}).get("machine", "toy_units") == 2
    # not resumable (its Run keeps no checkpoint): the checkpoint key is not its
    with pytest.raises(InputError, match='output.checkpoint_every_seconds = 5.0: applies only when machine.type is '
                                         '"mesh" or "ipu"'):
        scenario_from_dict({"machine": {"type": "toy"}, "output": {"checkpoint_every_seconds": 5.0}})
    # and a run on the preset's units
    res = run_scenario(three, tmp_path / "three.h5", progress=False)
    busy = np.array([len(range(0, 1000, i + 1)) for i in range(3)])
    assert res.summary["n_units"] == 3 and res.summary["li"] == pytest.approx(busy.mean() / busy.max())


def test_the_table_follows_the_registry_through_every_register_and_unregister():
    # (a machine registered again under a name, even one whose object reuses the old one's id, is seen)
    for units in (3, 5, 7):
        class Again(Toy):
            name = "again"
            params = (Param("machine", "again_units", "int", "units", units, "Units.", (1, 64),
                            ("machine.type", ("again",))),)
            presets, aliases = {}, {}

        register(Again())
        assert param("machine", "again_units").default == units
        machines.unregister("again")
        with pytest.raises(KeyError):
            param("machine", "again_units")


def test_a_machine_may_not_declare_a_key_another_has():
    class Clash(Toy):
        name = "clash"
        params = (Param("machine", "rows", "int", "PEs", 1, "Rows again.", (1, 2), ("machine.type", ("clash",))),)

    with pytest.raises(InputError, match="machine 'clash': machine.rows is already a key of machine 'mesh'"):
        compose([machines.get("mesh"), Clash()])
    assert "toy_units" in {p.name for p in PARAMS}


def test_the_toy_runs_and_reports_through_the_command_line(tmp_path, capsys):
    out = tmp_path / "toy.h5"
    assert main(["validate", str(toy_file(tmp_path))]) == 0
    assert "valid (toy)" in capsys.readouterr().out
    assert main(["run", str(toy_file(tmp_path)), "-o", str(out), "-q"]) == 0
    root, summary = read_summary(out)
    assert root["machine"] == "toy" and summary["cycles"] == 1000
    assert main(["report", str(out)]) == 0
    text = capsys.readouterr().out
    assert "toy, complete" in text and "recomputed from the file's datasets" in text
    assert main(["report", str(out), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["analysis"]["whole"]["li"] == pytest.approx(summary["li"])
    assert data["analysis"]["diagnosis"]["target_li"] == Toy.target_li


def test_the_toy_sweeps(tmp_path, capsys):
    sweep = tmp_path / "toy_sweep.toml"
    sweep.write_text(f'[sweep]\nbase = "{toy_file(tmp_path).name}"\nname = "toys"\n'
                     f'output = "{tmp_path / "out"}"\n\n[grid]\n"run.seed" = [1, 2]\n')
    assert main(["sweep", str(sweep), "--serial"]) == 0
    rows = [line.split(",") for line in (tmp_path / "out" / "summary.csv").read_text().splitlines()]
    head, points = rows[0], rows[1:]
    assert [r[head.index("status")] for r in points] == ["done", "done"]
    assert [r[head.index("run.seed")] for r in points] == ["1", "2"]
    assert all(float(r[head.index("li")]) == pytest.approx(2451 / 6 / 1000) for r in points)
    for r in points:
        assert read_summary(r[head.index("path")])[0]["machine"] == "toy"


def test_the_registry_suggests_the_closest_machine():
    assert machines.names()[:3] == ("mesh", "rdu", "ipu") and "toy" in machines.names()
    assert machines.get("rdu").name == "rdu"
    with pytest.raises(InputError, match="did you mean 'mesh'"):
        machines.get("mseh")
    with pytest.raises(InputError) as e:
        scenario_from_dict({"machine": {"type": "toi"}})
    assert 'did you mean "toy"' in str(e.value)


def test_the_old_entry_points_keep_working_with_a_deprecation():
    import meshsim.engine
    import meshsim.noc
    from meshsim import run
    from meshsim.mesh import noc

    with pytest.warns(DeprecationWarning, match="meshsim.run.run_scenario"):
        assert meshsim.engine.run_scenario is run.run_scenario
    with pytest.warns(DeprecationWarning, match="meshsim.mesh.noc"):
        assert meshsim.noc.saturation_bound is noc.saturation_bound
    with pytest.raises(AttributeError):
        meshsim.engine.no_such_name  # noqa: B018


def test_a_mistyped_machine_still_gets_every_problem_of_its_workload():
    """Every problem at once: with machine.type misspelt, the layer pipeline's own rules are still
    checked, and an rdu asked for a layer pipeline hears of its replicas too."""
    with pytest.raises(InputError) as e:
        scenario_from_dict({"machine": {"type": "mseh"},
                            "workload": {"type": "layer_pipeline", "replicas": 100, "seq_len": 10,
                                         "tokens_per_chunk": 4}})
    assert len(e.value.problems) == 3, e.value.problems
    assert any("workload.tokens_per_chunk" in p for p in e.value.problems)
    with pytest.raises(InputError) as e:
        scenario_from_dict({"machine": {"type": "rdu"}, "workload": {"type": "layer_pipeline", "replicas": 100}})
    assert [p.split(": ")[1].split(" =")[0] for p in e.value.problems] == ["workload.type", "workload.replicas"]


def test_reading_a_scenario_imports_no_kernel():
    """Validating a scenario asks its machine for its checks alone: no Numba, no h5py, no kernels."""
    code = ("import sys\nfrom meshsim.scenario import load_scenario\n"
            "for s in ('smoke', 'rdu_gpt2_o1', 'ipu_gpt2_4stage', 'wse2_gpt2_small'):\n"
            "    load_scenario(f'scenarios/{s}.toml')\n"
            "print(sorted(m for m in ('numba', 'h5py', 'kernels') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_an_installed_package_that_cannot_be_loaded_leaves_the_others_working(monkeypatch):
    class Broken:
        name = "broken"

        def load(self):
            raise ImportError("no module named broken_machine")

    monkeypatch.setattr(machines, "_plugins", lambda: (Broken(),))
    with pytest.warns(RuntimeWarning, match="machine 'broken' could not be loaded"):
        assert scenario_from_dict({"machine": {"type": "mesh"}}).get("machine", "type") == "mesh"


def test_a_machine_whose_check_does_not_take_the_path_is_still_asked():
    seen = []

    class OldStyle(Toy):
        name = "oldstyle"
        params, presets, aliases = (), {}, {}

        def check_scenario(self, ok, get, add, shown):
            seen.append(get("machine.type"))

    register(OldStyle())
    try:
        scenario_from_dict({"machine": {"type": "oldstyle"}})
    finally:
        machines.unregister("oldstyle")
    assert seen == ["oldstyle"]


def test_an_installed_package_declares_its_machine_by_entry_point(monkeypatch):
    class Entry:
        name = "plugged"

        def load(self):
            # (without the toy's own keys: two machines may not declare one key)
            register(type("Plugged", (Toy,), {"name": "plugged", "params": (), "presets": {}, "aliases": {}})())

    monkeypatch.setattr(machines, "_plugins", lambda: (Entry(),))
    try:
        assert "plugged" in machines.names()
        assert machines.get("plugged").name == "plugged"
        assert scenario_from_dict({"machine": {"type": "plugged"}}).get("machine", "type") == "plugged"
    finally:
        machines.unregister("plugged")
