"""meshsim calibrate: a fit recovers a key's value from a table made with it, and writes a preset file a
scenario can use (docs/design.md, "Calibration")."""

from __future__ import annotations

import pytest

from meshsim.accuracy import read_table
from meshsim.calibrate import check_keys, fit
from meshsim.errors import InputError
from meshsim.rdu.keys import RDU_FITTED
from meshsim.scenario import scenario_from_dict

RDU = ("machine.type=rdu workload.type=transformer workload.hidden_size=64 workload.n_layers=2 workload.n_heads=2 "
       "workload.seq_len=64 workload.batch=2 workload.tile_tokens=32 workload.fusion=o0")


def test_a_fit_recovers_the_host_time_a_table_was_made_with(tmp_path):
    from meshsim.accuracy import evaluate

    table = tmp_path / "t.csv"
    table.write_text("case,scenario,overrides,figure,reference,source,role\n"
                     f"chip,,{RDU},chip_samples_per_second,1,made,validation\n")
    chip = evaluate(read_table(table))[0]["model"]
    host = 0.25
    ref = 2 / (2 / chip + host)
    table.write_text("case,scenario,overrides,figure,reference,source,role,fit\n"
                     f"end to end,,{RDU},samples_per_second,{ref!r},made,calibration,machine.host_seconds\n")
    f = fit(read_table(table), ("machine.host_seconds",))
    assert f.start == {"machine.host_seconds": RDU_FITTED["host_seconds"]}  # the preset's
    assert f.values["machine.host_seconds"] == pytest.approx(host, rel=0.02)
    assert abs(f.after[0]["error"]) < 0.01 < abs(f.before[0]["error"])


def test_only_numeric_machine_keys_can_be_fitted():
    assert check_keys("machine.host_seconds, machine.section_fill") == ("machine.host_seconds", "machine.section_fill")
    for bad in ("workload.batch", "machine.placement", "machine.nope", ""):
        with pytest.raises(InputError):
            check_keys(bad)


def test_a_preset_file_fills_the_keys_a_scenario_leaves_out(tmp_path):
    preset = tmp_path / "fitted.toml"
    preset.write_text("[machine]\nhost_seconds = 1.5\nsection_fill = 0.8\n[calibration]\nkeys = []\n")
    sc = scenario_from_dict({"machine": {"type": "rdu", "preset_file": str(preset), "section_fill": 0.6},
                             "workload": {"type": "transformer"}})
    assert sc.values["machine"]["host_seconds"] == 1.5 and sc.values["machine"]["section_fill"] == 0.6
    preset.write_text("[machine]\npreset = \"sn10\"\n")
    with pytest.raises(InputError) as e:
        scenario_from_dict({"machine": {"type": "rdu", "preset_file": str(preset)},
                            "workload": {"type": "transformer"}})
    assert "machine.preset" in str(e.value.problems)


def test_cross_validation_refits_without_each_group_and_reports_its_rows(tmp_path, capsys):
    from meshsim.accuracy import evaluate
    from meshsim.cli import main

    table = tmp_path / "t.csv"
    table.write_text("case,scenario,overrides,figure,reference,source,role\n"
                     f"chip,,{RDU},chip_samples_per_second,1,made,validation\n")
    chip = evaluate(read_table(table))[0]["model"]
    # two models measured with host times of 0.2 and 0.4 s: each left out is predicted from the other
    refs = [2 / (2 / chip + host) for host in (0.2, 0.4)]
    table.write_text("case,scenario,overrides,figure,reference,source,role,group,fit\n" + "".join(
        f"m{i},,{RDU},samples_per_second,{r!r},made,calibration,g{i},machine.host_seconds\n"
        for i, r in enumerate(refs)))
    assert main(["accuracy", "--no-shipped", "--table", str(table), "--cross-validate", "-q"]) == 0
    out = capsys.readouterr().out
    rows = [line.split() for line in out.splitlines() if line.startswith(("g0", "g1"))]
    assert [r[0] for r in rows] == ["g0", "g1"]
    # left out, each row is predicted with the other's host time: its error is the other's, not ~0
    assert all(abs(float(r[-1].rstrip("%"))) > 1 for r in rows)
    assert "cross-validated: largest error" in out


def test_a_summary_without_a_file_is_the_files_summary(tmp_path):
    """meshsim.run.summary_only: what a fit evaluates is what `meshsim run` writes (wall times aside); a
    machine that needs its file gives None."""
    from meshsim.report import read_summary
    from meshsim.run import run_scenario, summary_only

    sc = scenario_from_dict({}, overrides=RDU.split() + ["workload.training=true", "machine.host_seconds=0.5"])
    quiet = summary_only(sc)
    on_file = read_summary(run_scenario(sc, tmp_path / "r.h5", progress=False).path)[1]
    timing = {"wall_seconds", "kernel_seconds", "pe_cycles_per_second"}
    assert set(quiet) == set(on_file)
    assert {k: v for k, v in quiet.items() if k not in timing} == {k: v for k, v in on_file.items() if k not in timing}
    assert quiet["step_seconds"] == quiet["chip_seconds"] + 0.5
    mesh = scenario_from_dict({}, overrides=["machine.type=mesh", "machine.rows=4", "machine.cols=4", "run.cycles=10"])
    assert summary_only(mesh) is None


@pytest.mark.slow
def test_the_shipped_rdu_values_are_a_fit_to_the_shipped_table():
    """About five minutes: refitting the shipped table's keys from the shipped values (meshsim.params
    RDU_FITTED) finds nothing better than a hair away: they are the fit docs/rdu.md, "Calibration" reports."""
    from meshsim.accuracy import SHIPPED
    from meshsim.calibrate import table_keys

    cases = read_table(SHIPPED)
    keys = table_keys(cases)
    assert keys == tuple(f"machine.{k}" for k in RDU_FITTED)
    f = fit(cases, keys)
    assert f.start == {f"machine.{k}": v for k, v in RDU_FITTED.items()}
    assert f.cost_after >= 0.99 * f.cost_before
    for k, v in RDU_FITTED.items():
        assert f.values[f"machine.{k}"] == pytest.approx(v, rel=0.05), k


def test_fit_keys_take_only_the_calibration_rows_that_name_them():
    from meshsim.accuracy import SHIPPED, read_table
    from meshsim.calibrate import calibration_rows

    cases = read_table(SHIPPED)
    decode = calibration_rows(cases, ("machine.decode_phase_cycles",))
    assert [c.case for c in decode] == [c.case for c in cases if c.case.startswith("WSE-2 LLaMA3-8B decode")]
    rdu = calibration_rows(cases, ("machine.section_switch_cycles", "machine.host_seconds"))
    assert rdu and all(c.case.startswith("SN30") for c in rdu)
    assert len(calibration_rows(cases)) == len(decode) + len(rdu)
