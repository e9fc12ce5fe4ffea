"""Sweeps (docs/design.md, "Sweeps"; docs/sweeps.md): the file format and its errors, point ids and
seeds, the summary table, failures, restarts, Ctrl-C, a killed worker, and bit-identical results
serially and on Dask clusters of different sizes."""

import csv
import hashlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import h5py
import numpy as np
import pytest
from conftest import assert_same_results as assert_identical
from conftest import result_contents as contents

from meshsim.cli import main
from meshsim.errors import InputError
from meshsim.report import read_summary
from meshsim.sweep import (
    dask_client,
    derive_seed,
    load_sweep,
    point_id,
    point_status,
    run_sweep,
)
from meshsim.sweep.execute import can_resume

ROOT = Path(__file__).resolve().parents[1]

BASE = """
[run]
cycles = 300
seed = 5
window_cycles = 50
[machine]
rows = 24
cols = 12
queue_capacity = 6
[migration]
policy = "least_loaded"
threshold = 2
[workload]
type = "skewed"
injection_rate = 0.1
sigma = 1.0
work_distribution = "uniform"
work_min_cycles = 1
work_max_cycles = 10
[output]
frame_every_cycles = 100
flush_every_cycles = 100
"""


def trace_base(trace_file):
    """BASE with a trace workload reading `trace_file`."""
    return BASE.replace('type = "skewed"', f'type = "trace"\ntrace_file = "{trace_file}"').replace(
        'injection_rate = 0.1\nsigma = 1.0\nwork_distribution = "uniform"\nwork_min_cycles = 1\n'
        "work_max_cycles = 10\n", "")


def write(tmp_path, sweep_text, base=BASE, name="s.toml"):
    (tmp_path / "base.toml").write_text(base)
    path = tmp_path / name
    path.write_text(sweep_text)
    return path


def problems(path, **kw):
    with pytest.raises(InputError) as e:
        load_sweep(path, **kw)
    return e.value.problems


def read_csv(path):
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


# ---------------------------------------------------------------------------------------------
# The file


def test_grid_is_a_cartesian_product_zip_runs_alongside_and_repetitions_are_innermost(tmp_path):
    path = write(tmp_path, """
[sweep]
base = "base.toml"
repetitions = 2
output = "out"
[set]
run.cycles = 200
[grid]
migration.threshold = [1, 3]
"machine.hop_latency_cycles" = [1, 2]
[zip]
workload.injection_rate = [0.05, 0.1]
workload.sigma = [0.5, 1.5]
""")
    sw = load_sweep(path)
    assert sw.keys == ["migration.threshold", "machine.hop_latency_cycles", "workload.injection_rate",
                       "workload.sigma"]
    assert len(sw.points) == 2 * 2 * 2 * 2
    first = [dict(p.params) for p in sw.points[:4]]
    assert first[0] == {"migration.threshold": 1, "machine.hop_latency_cycles": 1, "workload.injection_rate": 0.05,
                        "workload.sigma": 0.5}
    assert first[1] == first[0] and [p.repetition for p in sw.points[:4]] == [0, 1, 0, 1]
    assert first[2]["workload.injection_rate"] == 0.1 and first[2]["workload.sigma"] == 1.5
    assert dict(sw.points[-1].params)["migration.threshold"] == 3
    # [set] applies to every point and is not a column; the folder is relative to the current one.
    assert all(("run.cycles", 200) in p.overrides for p in sw.points)
    assert sw.output == Path("out").absolute()
    assert [p.index for p in sw.points] == list(range(16))


def test_point_ids_are_stable_hashes_of_the_resolved_overrides(tmp_path):
    a = load_sweep(write(tmp_path, '[sweep]\nbase = "base.toml"\n[grid]\nworkload.injection_rate = [0.1, 0.2]\n'
                                   'migration.threshold = [1, 2]\n'))
    # The same points written in another key order, with an integer for a float key.
    b = load_sweep(write(tmp_path, '[sweep]\nbase = "base.toml"\n[grid]\nmigration.threshold = [1, 2]\n'
                                   'workload.injection_rate = [0.1, 0.2]\n', name="t.toml"))
    assert sorted(p.id for p in a.points) == sorted(p.id for p in b.points)
    assert len({p.id for p in a.points}) == 4 and all(len(p.id) == 12 for p in a.points)
    # The id is the hash of the overrides as resolved, seed included: pinned, so that it stays stable.
    p = a.points[0]
    assert p.id == point_id(list(reversed(p.overrides)))
    assert point_id([("migration.threshold", 1), ("run.seed", 7)]) == point_id([("run.seed", 7),
                                                                                ("migration.threshold", 1)])
    # SHA-256 of the sorted [key, value] pairs as compact JSON (docs/sweeps.md), first 12 hex digits.
    assert hashlib.sha256(b'[["migration.threshold",1],["run.seed",7]]').hexdigest()[:12] == "bcf4b225bc99"
    assert point_id([("migration.threshold", 1), ("run.seed", 7)]) == "bcf4b225bc99"
    c = load_sweep(write(tmp_path, '[sweep]\nbase = "base.toml"\n[grid]\nworkload.injection_rate = [1, 0.5]\n',
                         name="u.toml"))
    assert dict(c.points[0].params)["workload.injection_rate"] == 1.0


def test_each_point_and_repetition_gets_its_own_seed_derived_from_the_base_seed(tmp_path):
    sw = load_sweep(write(tmp_path, '[sweep]\nbase = "base.toml"\nrepetitions = 3\n[grid]\n'
                                    'migration.threshold = [1, 2]\n'))
    seeds = [p.seed for p in sw.points]
    assert len(set(seeds)) == 6 and all(0 <= s < 2**63 for s in seeds)
    p = sw.points[4]
    assert p.seed == derive_seed(5, p.params, 1) and ("run.seed", p.seed) in p.overrides
    assert derive_seed(6, p.params, 1) != p.seed  # the base seed matters
    # "shared": every point of a repetition draws the same numbers (base seed + repetition).
    sh = load_sweep(write(tmp_path, '[sweep]\nbase = "base.toml"\nrepetitions = 2\nseeds = "shared"\n[grid]\n'
                                    'migration.threshold = [1, 2]\n', name="t.toml"))
    assert [p.seed for p in sh.points] == [5, 6, 5, 6]
    # A swept seed is used as given.
    given = load_sweep(write(tmp_path, '[sweep]\nbase = "base.toml"\n[grid]\nrun.seed = [11, 12]\n', name="u.toml"))
    assert [p.seed for p in given.points] == [11, 12]


def test_an_inline_base_and_a_sweep_of_repetitions_only(tmp_path):
    text = "[sweep]\nrepetitions = 3\n" + "".join(
        f"[base.{line[1:-1]}]\n" if line.startswith("[") else line + "\n" for line in BASE.strip().splitlines())
    sw = load_sweep(write(tmp_path, text))
    assert len(sw.points) == 3 and sw.keys == [] and len({p.seed for p in sw.points}) == 3
    assert "rows = 24" in sw.points[0].resolved


def test_every_problem_in_a_sweep_file_is_reported_at_once(tmp_path):
    path = write(tmp_path, """
[sweep]
base = "base.toml"
repetitons = 2
seeds = "random"
[grid]
migration.treshold = [1, 2]
workload.injection_rate = 0.1
machine.rows = [8, 0]
[zip]
workload.sigma = [0.5, 1.5]
workload.work_max_cycles = [4]
[set]
machine.rows = 16
[grd]
""")
    msgs = problems(path)
    text = "\n".join(msgs)
    assert f"{path}: sweep.repetitons: unknown key (did you mean sweep.repetitions?)" in text
    assert "sweep.seeds = \"random\": must be one of 'per_point', 'shared'" in text
    assert "[grid] migration.treshold: unknown key; did you mean migration.threshold?" in text
    assert "[grid] workload.injection_rate = 0.1: must be a non-empty list" in text
    assert "[zip]: every list must have the same length; the lengths are workload.sigma 2, workload.work_max_cycles 1" \
        in text
    assert "machine.rows: is in both [set] and [grid]" in text
    assert "[grd]: unknown table (did you mean [grid]?)" in text
    assert all(m.startswith(str(path)) for m in msgs)


def test_a_bad_value_in_the_grid_names_the_table_the_key_the_value_and_what_is_allowed(tmp_path):
    path = write(tmp_path, '[sweep]\nbase = "base.toml"\nrepetitions = 2\n[grid]\nmachine.rows = [8, 0, 5000]\n'
                           'migration.threshold = [1, 2]\n')
    msgs = problems(path)
    assert msgs == [f"{path}: [grid] machine.rows = 0: must be an integer in [1, 4096] (PEs)",
                    f"{path}: [grid] machine.rows = 5000: must be an integer in [1, 4096] (PEs)"]


def test_base_scenario_problems_and_missing_base(tmp_path):
    assert problems(write(tmp_path, "[sweep]\nrepetitions = 1\n")) == [
        f"{tmp_path / 's.toml'}: no base scenario: give sweep.base = \"FILE.toml\" or an inline [base] table"]
    msgs = problems(write(tmp_path, '[sweep]\nbase = "nope.toml"\n'))
    assert msgs == [f"{tmp_path / 's.toml'}: sweep.base = \"nope.toml\": no such scenario file"]
    msgs = problems(write(tmp_path, '[sweep]\nbase = "base.toml"\n', base=BASE.replace("rows = 24", "rows = -1")))
    assert msgs == [f"{tmp_path / 'base.toml'}: machine.rows = -1: must be an integer in [1, 4096] (PEs)"]
    msgs = problems(write(tmp_path, '[sweep]\nbase = "base.toml"\nrepetitions = 0\n[base.run]\ncycles = 5\n'))
    assert "sweep.repetitions = 0: must be an integer in [1, 10000]" in "\n".join(msgs)
    assert "sweep.base and [base]: give the base scenario once" in "\n".join(msgs)


def test_combination_rules_apply_to_each_point(tmp_path):
    # The threshold must stay below the queue capacity: the points with a smaller queue are refused.
    msgs = problems(write(tmp_path, '[sweep]\nbase = "base.toml"\n[grid]\nmachine.queue_capacity = [8, 3]\n'
                                    '[set]\nmigration.threshold = 4\n'))
    assert msgs == [f"{tmp_path / 's.toml'}: [set] migration.threshold = 4: must be less than "
                    "machine.queue_capacity = 3, so an integer in [0, 2] (tasks)"]


def test_repeated_points_and_seed_sweeps_with_repetitions_are_refused(tmp_path):
    msgs = problems(write(tmp_path, '[sweep]\nbase = "base.toml"\n[grid]\nmigration.threshold = [1, 2, 1]\n'))
    assert msgs == [f"{tmp_path / 's.toml'}: the points migration.threshold=1 (repetition 0) and "
                    "migration.threshold=1 (repetition 0) are the same run; remove the repeated values"]
    msgs = problems(write(tmp_path, '[sweep]\nbase = "base.toml"\nrepetitions = 2\n[grid]\nrun.seed = [1, 2]\n'))
    assert msgs == [f"{tmp_path / 's.toml'}: sweep.repetitions = 2: run.seed is given in [grid], so every repetition "
                    "would be the same run; leave repetitions at 1 or let the sweep derive the seeds"]
    msgs = problems(write(tmp_path, '[sweep]\nbase = "base.toml"\nrepetitions = 3\nseeds = "shared"\n[set]\n'
                                    'run.seed = 4\n'))
    assert [m.split(": ", 2)[1] for m in msgs] == ["sweep.repetitions = 3", 'sweep.seeds = "shared"']


def test_more_sweep_file_mistakes_get_clear_messages(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    where = tmp_path / "s.toml"
    msgs = problems(write(tmp_path, '[sweep]\nbase = "base.toml"\noutput = ""\n[grid]\nrun.threads = [1, 2]\n'
                                    '"migration.threshold" = [1]\nmigration.threshold = [2, 3]\n'
                                    'machine.rows = [10, 20, 30]\nmachine.cols = [10, 20, 30]\n'
                                    'workload.sigma = [0.1, 0.2, 0.3]\nworkload.injection_rate = [0.1, 0.2, 0.3]\n'))
    assert msgs[0] == f'{where}: sweep.output = "": must name a folder, such as results/sweeps/NAME'
    assert (f"{where}: [grid] run.threads: the threads of each point are set with meshsim sweep --threads N "
            "(results do not depend on them)") in msgs
    assert f"{where}: [grid] migration.threshold: given twice (quoted and dotted); give it once" in msgs
    big = '[sweep]\nbase = "base.toml"\n[grid]\n' + "".join(
        f"{k} = [{', '.join(str(v) for v in range(1, 60))}]\n" for k in ("machine.rows", "machine.cols",
                                                                         "workload.work_max_cycles"))
    assert problems(write(tmp_path, big)) == [f"{where}: 205,379 points: at most 100,000 in one sweep; split it "
                                              "into several sweep files"]
    # A bad [set] value, a bad grid value and an output that is a file: all at once.
    (tmp_path / "afile").write_text("")
    msgs = problems(write(tmp_path, '[sweep]\nbase = "base.toml"\noutput = "afile"\n[set]\nmachine.cols = 0\n'
                                    '[grid]\nmigration.threshold = [1, 99]\n'))
    assert [m.split(": ", 2)[1] for m in msgs] == ["[set] machine.cols = 0", "[grid] migration.threshold = 99",
                                                   'sweep.output = "afile"']
    assert msgs[2].endswith("afile is a file, not a folder")
    # A problem of the base that only a point's values cause names the point.
    hot = BASE.replace('type = "skewed"', 'type = "hotspot"\nhot_rate = 0.3\nhot_regions = [[2, 2, 6, 6]]').replace(
        "sigma = 1.0\n", "")
    msgs = problems(write(tmp_path, '[sweep]\nbase = "base.toml"\n[grid]\nmachine.rows = [24, 4]\n', base=hot))
    assert len(msgs) == 1 and msgs[0].startswith(f"{where}: at the point machine.rows=4: {tmp_path / 'base.toml'}: "
                                                 "workload.hot_regions")
    # An inline base's problems say so; a missing sweep file is a sweep file.
    msgs = problems(write(tmp_path, '[sweep]\n[base.machine]\nrows = 0\n'))
    assert msgs == [f"{where} [base]: machine.rows = 0: must be an integer in [1, 4096] (PEs)"]
    assert problems(tmp_path / "nope.toml") == [f"{tmp_path / 'nope.toml'}: no such sweep file"]


def test_cli_errors_exit_2_without_traceback_and_write_nothing(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path = write(tmp_path, '[sweep]\nbase = "base.toml"\n[grid]\nmachine.rows = [0]\n')
    assert main(["sweep", str(path)]) == 2
    err = capsys.readouterr().err
    assert "meshsim: error:" in err and "machine.rows = 0" in err and "Traceback" not in err
    assert not (tmp_path / "results").exists()
    good = write(tmp_path, '[sweep]\nbase = "base.toml"\n', name="g.toml")
    for args, message in (
            (["--workers", "2", "--scheduler", "tcp://127.0.0.1:1"], "--workers: applies only to the local cluster"),
            (["--queue", "short"], "--queue: applies only with --cluster slurm|pbs"),
            (["--serial", "--cluster", "slurm"], "--serial: runs the points in this process"),
            (["--scheduler-file", "nope.json"], "--scheduler-file nope.json: no such file")):
        assert main(["sweep", str(good), *args]) == 2
        assert message in capsys.readouterr().err
    assert not (tmp_path / "results").exists()


def test_a_sweep_never_runs_more_threads_than_the_host_has_cores(tmp_path, capsys, monkeypatch):
    import meshsim.sweep as sweep_module

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sweep_module, "host_cores", lambda: 2)  # as the command reads it
    monkeypatch.setattr(sweep_module.cluster, "host_cores", lambda: 2)  # as dask_client does
    good = write(tmp_path, '[sweep]\nbase = "base.toml"\n', name="g.toml")
    for args, message in ((["--threads", "3"], "--threads 3: more than this host's 2 core(s)"),
                          (["--threads", "3", "--serial"], "--threads 3: more than this host's 2 core(s)"),
                          (["--workers", "3"], "--workers 3 with --threads 1: 3 threads at once on this host's 2 "
                                               "core(s), which only slows every point; at most 2 worker(s)"),
                          (["--workers", "2", "--threads", "2"], "at most 1 worker(s)")):
        assert main(["sweep", str(good), *args]) == 2
        assert message in capsys.readouterr().err
    assert not (tmp_path / "results").exists()
    # the local cluster's default: one worker per --threads cores
    seen = {}

    class Cluster:
        def __init__(self, **kw):
            seen.update(kw)
            raise RuntimeError("stop here")

    import distributed

    monkeypatch.setattr(distributed, "LocalCluster", Cluster)
    with pytest.raises(RuntimeError, match="stop here"):
        with sweep_module.dask_client(threads=2):
            pass
    assert seen["n_workers"] == 1 and seen["threads_per_worker"] == 1


# ---------------------------------------------------------------------------------------------
# Running


def test_a_serial_sweep_writes_a_file_per_point_and_the_summary_table(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path = write(tmp_path, '[sweep]\nbase = "base.toml"\nrepetitions = 2\n[grid]\nmigration.threshold = [1, 4]\n')
    assert main(["sweep", str(path), "--dry-run"]) == 0
    out = capsys.readouterr().out
    sw = load_sweep(path)
    assert "4 points (2 x 2 repetitions), seeds per_point" in out and "0 complete" in out
    for p in sw.points:
        assert f"{p.id}  {p.repetition}    {p.seed}" in out
    assert not sw.output.exists()

    assert main(["sweep", str(path), "--serial"]) == 0
    out = capsys.readouterr().out
    assert "4 of 4 points complete (4 run, 0 already complete, 0 failed)" in out and "overhead" in out
    rows = read_csv(sw.summary_csv)
    assert [r["point_id"] for r in rows] == [p.id for p in sw.points]
    assert list(rows[0])[:6] == ["point_id", "repetition", "seed", "migration.threshold", "status", "cycles"]
    for r, p in zip(rows, sw.points, strict=True):
        assert Path(p.output).name == f"{p.id}.h5" and Path(p.output).parent == sw.output / "points"
        root, summary = read_summary(p.output)
        assert root["complete"] and root["seed"] == p.seed and int(r["seed"]) == p.seed
        assert f"migration.threshold={dict(p.params)['migration.threshold']}" in root["overrides"].splitlines()
        assert root["scenario_resolved"] == p.resolved
        assert r["status"] == "done" and r["path"] == p.output and r["error"] == ""
        assert float(r["migration.threshold"]) == dict(p.params)["migration.threshold"]
        for key in ("li", "utilization", "latency_mean_cycles", "completed"):
            assert float(r[key]) == summary[key]  # repr of a float reads back exactly
    # The HDF5 table holds the same columns, typed.
    with h5py.File(sw.summary_h5) as f:
        t = f["table"]
        assert list(f.attrs["columns"]) == list(rows[0]) and list(f.attrs["parameters"]) == sw.keys
        assert t["seed"].dtype == np.int64 and list(t["seed"][:]) == [p.seed for p in sw.points]
        assert t["li"].dtype == np.float64 and list(t["li"][:]) == [float(r["li"]) for r in rows]
        assert t["latency_percentile_overflow"].dtype == np.bool_
        assert {r["latency_percentile_overflow"] for r in rows} <= {"true", "false"}
        assert t["migration.threshold"].attrs["role"] == "parameter" and t["li"].attrs["role"] == "summary"
        assert [s.decode() for s in t["status"][:]] == ["done"] * 4
    # The bundled sweep plot reads the table.
    assert main(["plot", str(sw.summary_csv), "--metric", "li", "--x", "migration.threshold"]) == 0
    assert Path(capsys.readouterr().out.strip()).stat().st_size > 1000


def test_a_point_that_raises_is_recorded_and_the_others_go_on_then_a_rerun_finishes_it(tmp_path, capsys, monkeypatch):
    import meshsim.run as runner

    monkeypatch.chdir(tmp_path)
    path = write(tmp_path, '[sweep]\nbase = "base.toml"\n[grid]\nmigration.threshold = [1, 2, 3]\n')
    sw = load_sweep(path)
    real = runner.run_scenario

    def broken(sc, output, **kw):
        if sc.get("migration", "threshold") == 2:
            raise RuntimeError("out of cheese")
        return real(sc, output, **kw)

    monkeypatch.setattr(runner, "run_scenario", broken)
    assert main(["sweep", str(path), "--serial"]) == 1
    cap = capsys.readouterr()
    assert "1 point(s) failed" in cap.err and f"failed {sw.points[1].id}" in cap.out
    rows = read_csv(sw.summary_csv)
    assert [r["status"] for r in rows] == ["done", "failed", "done"]
    assert rows[1]["error"] == "RuntimeError: out of cheese"
    assert "Traceback" in rows[1]["traceback"] and "in broken" in rows[1]["traceback"]
    assert rows[1]["li"] == "" and rows[0]["li"] != ""
    done = {p.id: os.stat(p.output).st_mtime_ns for p in sw.points if Path(p.output).exists()}
    assert len(done) == 2

    monkeypatch.setattr(runner, "run_scenario", real)
    ran = []
    res = run_sweep(sw, on_row=lambda p, row: ran.append(p.id))
    assert ran == [sw.points[1].id] and res.skipped == 2 and res.failed == 0
    assert {p.id: os.stat(p.output).st_mtime_ns for p in sw.points if p.id in done} == done
    assert [r["status"] for r in read_csv(sw.summary_csv)] == ["done"] * 3


def test_a_rerun_skips_complete_points_and_reruns_incomplete_missing_and_stale_ones(tmp_path):
    path = write(tmp_path, f'[sweep]\nbase = "base.toml"\noutput = "{tmp_path / "out"}"\n[grid]\n'
                           'migration.threshold = [1, 2, 3, 4]\n')
    sw = load_sweep(path)
    run_sweep(sw)
    assert [point_status(p) for p in sw.points] == ["complete"] * 4
    a, b = sw.points[1], sw.points[2]
    os.remove(a.output)
    incomplete = Path(b.output).with_name(f"{b.id}.incomplete.h5")
    os.replace(b.output, incomplete)
    with h5py.File(incomplete, "r+") as f:
        f.attrs["complete"] = False
    assert [point_status(p) for p in sw.points] == ["complete", "new", "incomplete", "complete"]
    ran = []
    run_sweep(sw, on_row=lambda p, row: ran.append(p.id))
    assert sorted(ran) == sorted([a.id, b.id]) and not incomplete.exists()
    # Another base scenario under the same overrides: the files hold another run, so all rerun.
    (tmp_path / "base.toml").write_text(BASE.replace("cycles = 300", "cycles = 200"))
    sw2 = load_sweep(path)
    assert [p.id for p in sw2.points] == [p.id for p in sw.points]
    assert [point_status(p) for p in sw2.points] == ["stale"] * 4
    ran.clear()
    run_sweep(sw2, on_row=lambda p, row: ran.append(p.id))
    assert len(ran) == 4 and read_summary(sw2.points[0].output)[1]["cycles"] == 200


def test_a_point_whose_trace_is_bad_fails_on_its_own(tmp_path):
    (tmp_path / "good.csv").write_text("cycle,row,col,work_cycles\n0,1,1,5\n3,2,2,4\n")
    (tmp_path / "bad.csv").write_text("cycle,row,col,work_cycles\n0,1,1,5\n3,99,2,4\n")
    base = trace_base("good.csv")
    path = write(tmp_path, f'[sweep]\nbase = "base.toml"\noutput = "{tmp_path / "out"}"\n[zip]\n'
                           'workload.trace_file = ["good.csv", "bad.csv"]\n', base=base)
    res = run_sweep(load_sweep(path))
    rows = read_csv(res.sweep.summary_csv)
    assert [r["status"] for r in rows] == ["done", "failed"] and res.failed == 1
    assert "bad.csv" in rows[1]["error"] and "row" in rows[1]["error"] and rows[1]["traceback"] == ""
    assert not Path(res.sweep.points[1].output).exists()


# ---------------------------------------------------------------------------------------------
# Dask


def busy_worker_pid(client):
    """The process id of a worker that the scheduler has given a point to run."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        busy = [addr for addr, keys in client.processing().items() if keys]
        if busy:
            return client.run(os.getpid)[busy[0]]
        time.sleep(0.05)
    raise AssertionError("no worker was given a point within 30 s")


def test_results_are_bit_identical_serially_and_on_clusters_of_1_and_2_workers(tmp_path):
    text = ('[sweep]\nbase = "base.toml"\noutput = "{out}"\nrepetitions = 2\n[grid]\n'
            'migration.policy = ["least_loaded", "random_lower"]\n')
    (tmp_path / "base.toml").write_text(BASE)
    results = {}
    for how in ("serial", 1, 2):
        path = tmp_path / f"{how}.toml"
        path.write_text(text.format(out=tmp_path / str(how)))
        sw = load_sweep(path)
        if how == "serial":
            res = run_sweep(sw)
        else:
            with dask_client(workers=how) as client:
                res = run_sweep(sw, client=client)
                assert res.workers == how
        assert res.ran == 4 and res.failed == 0
        results[how] = {p.id: contents(p.output) for p in sw.points}
    assert results["serial"].keys() == results[1].keys() == results[2].keys()
    for pid, first in results["serial"].items():
        assert first["summary@completed"] > 0
        assert_identical(first, results[1][pid])
        assert_identical(first, results[2][pid])


def test_killing_a_worker_loses_no_finished_point_and_the_sweep_completes(tmp_path):
    noc = (ROOT / "scenarios" / "noc_latency_load.toml").read_text()
    path = write(tmp_path, f'[sweep]\nbase = "base.toml"\noutput = "{tmp_path / "out"}"\n[set]\nmachine.rows = 24\n'
                           'machine.cols = 24\nrun.cycles = 6000\n[grid]\n'
                           'workload.injection_rate = [0.01, 0.02, 0.03, 0.04, 0.05, 0.06]\n', base=noc)
    sw = load_sweep(path)
    finished, victims = {}, []
    with dask_client(workers=2) as client:
        def on_row(p, row):
            if not finished:  # after the first point: kill a worker that is running a point
                victims.append(busy_worker_pid(client))
                os.kill(victims[0], signal.SIGKILL)
            finished[p.id] = os.stat(p.output).st_mtime_ns

        res = run_sweep(sw, client=client, on_row=on_row)
        assert victims[0] not in client.run(os.getpid).values()  # its nanny started a new worker
    assert res.ran == 6 and res.failed == 0
    assert [point_status(p) for p in sw.points] == ["complete"] * 6
    assert {p.id: os.stat(p.output).st_mtime_ns for p in sw.points} == finished  # nothing ran twice after it finished
    assert [r["status"] for r in read_csv(sw.summary_csv)] == ["done"] * 6


def test_joining_an_existing_cluster_by_address_or_scheduler_file(tmp_path, capsys, monkeypatch):
    from distributed import LocalCluster

    monkeypatch.chdir(tmp_path)
    path = write(tmp_path, '[sweep]\nbase = "base.toml"\n[grid]\nmigration.threshold = [1, 2]\n')
    with dask_client(workers=1) as client:
        assert main(["sweep", str(path), "--scheduler", client.scheduler.address, "-q"]) == 0
    assert [r["status"] for r in read_csv(tmp_path / "results" / "sweeps" / "s" / "summary.csv")] == ["done"] * 2
    info = tmp_path / "scheduler.json"
    with LocalCluster(n_workers=1, threads_per_worker=1, host="127.0.0.1", dashboard_address="127.0.0.1:0",
                      scheduler_kwargs={"scheduler_file": str(info)}):
        assert main(["sweep", str(path), "--scheduler-file", str(info), "-o", "other", "-q"]) == 0
    assert [r["status"] for r in read_csv(tmp_path / "other" / "summary.csv")] == ["done"] * 2


def test_joining_a_tls_cluster_with_the_certificates_of_the_dask_configuration(tmp_path, monkeypatch):
    pytest.importorskip("cryptography")
    import dask
    from distributed import LocalCluster, Security

    monkeypatch.chdir(tmp_path)
    path = write(tmp_path, '[sweep]\nbase = "base.toml"\n[grid]\nmigration.threshold = [1, 2]\n')
    authority = Security.temporary()  # stands for the site's certificates, as files
    (tmp_path / "ca.pem").write_text(authority.tls_ca_file)
    (tmp_path / "node.pem").write_text(authority.tls_worker_cert + authority.tls_worker_key)
    tls = {f"distributed.comm.tls.{k}": str(tmp_path / ("ca.pem" if k == "ca-file" else "node.pem"))
           for k in ("ca-file", "scheduler.cert", "worker.cert", "client.cert")}
    info = tmp_path / "scheduler.json"
    with dask.config.set(tls), LocalCluster(n_workers=1, threads_per_worker=1, host="127.0.0.1", protocol="tls",
                                            security=Security(), dashboard_address="127.0.0.1:0",
                                            scheduler_kwargs={"scheduler_file": str(info)}) as lc:
        assert lc.scheduler_address.startswith("tls://127.0.0.1:")
        assert main(["sweep", str(path), "--scheduler", lc.scheduler_address, "-q"]) == 0
        assert main(["sweep", str(path), "--scheduler-file", str(info), "-o", "other", "-q"]) == 0
    for out in (tmp_path / "results" / "sweeps" / "s", tmp_path / "other"):
        assert [r["status"] for r in read_csv(out / "summary.csv")] == ["done"] * 2


# The group's Ctrl-C on a cluster in the default run; each other signal, way of running and target under
# -m slow.
@pytest.mark.parametrize("how, sig, group", [(["--workers", "2"], signal.SIGINT, True),
                                             pytest.param(["--serial"], signal.SIGINT, True, marks=pytest.mark.slow),
                                             pytest.param(["--workers", "2"], signal.SIGTERM, False,
                                                          marks=pytest.mark.slow),
                                             pytest.param(["--serial"], signal.SIGTERM, False, marks=pytest.mark.slow)])
def test_ctrl_c_stops_the_sweep_keeps_finished_points_and_a_rerun_completes_it(tmp_path, how, sig, group):
    noc = (ROOT / "scenarios" / "noc_latency_load.toml").read_text()
    # Points of about 2.5 s here: when the first has finished, the next ones have just started.
    path = write(tmp_path, '[sweep]\nbase = "base.toml"\n[set]\nmachine.rows = 24\nmachine.cols = 24\n'
                           'run.cycles = 20000\n[grid]\nworkload.injection_rate = [0.01, 0.02, 0.03, 0.04]\n',
                 base=noc)
    summary = tmp_path / "results" / "sweeps" / "s" / "summary.csv"
    cmd = [sys.executable, "-m", "meshsim", "sweep", str(path), *how]
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    # Ctrl-C as a process started from a terminal gets it, even where this test runs with SIGINT
    # ignored (a shell's background job ignores it, and its children inherit that).
    p = subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         start_new_session=True, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + 300
    while not (summary.exists() and any(r["status"] == "done" for r in read_csv(summary))):
        if time.monotonic() > deadline or p.poll() is not None:  # wait for the first finished point
            p.kill()
            pytest.fail(f"no point finished: {p.communicate()[1]}")
        time.sleep(0.2)
    # Ctrl-C on a terminal reaches every process of the group; SIGTERM (a batch system) the sweep's.
    (os.killpg if group else os.kill)(p.pid, sig)
    out, err = p.communicate(timeout=60)
    assert p.returncode == 130, err
    assert "interrupted:" in err and "Traceback" not in err and "KeyboardInterrupt" not in err
    rows = read_csv(summary)
    sw = load_sweep(path, output=summary.parent)
    statuses = [r["status"] for r in rows]
    assert "done" in statuses and "interrupted" in statuses and set(statuses) <= {"done", "interrupted", "not run"}
    for r, pt in zip(rows, sw.points, strict=True):
        if r["status"] == "done":
            assert point_status(pt) == "complete"
        if r["status"] == "interrupted":  # the run stopped at a kernel-call boundary and kept its file
            assert r["path"].endswith(".incomplete.h5") and point_status(pt) == "incomplete"
            with h5py.File(r["path"]) as f:
                assert not f.attrs["complete"] and f.attrs["cycles_done"] < 20000
            if "--serial" in how:  # stopped at a boundary in this process: it resumes from there
                assert can_resume(pt)
    rerun = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert rerun.returncode == 0, rerun.stderr + rerun.stdout + summary.read_text()
    assert f"{statuses.count('done')} already complete" in rerun.stdout
    assert [r["status"] for r in read_csv(summary)] == ["done"] * 4
    assert not list(summary.parent.glob("points/*.checkpoint.h5"))  # resumed points end as any


def test_jobqueue_job_scripts_carry_the_queue_walltime_cores_and_memory(tmp_path, monkeypatch):
    pytest.importorskip("dask_jobqueue")
    pytest.importorskip("cryptography")
    import dask

    from meshsim.sweep.cluster import jobqueue_cluster, remove_certificate_files

    monkeypatch.chdir(tmp_path)  # where the workers' certificate files go by default
    monkeypatch.setenv("NUMBA_CACHE_DIR", "/shared/numba cache")
    shared = tmp_path / "shared"
    shared.mkdir()
    with jobqueue_cluster("slurm", queue="short", account="lab", walltime="00:30:00", cores=4, memory="8GB",
                           dashboard=False, shared_dir=shared) as c:
        script = c.job_script()
        # TLS by default: a temporary authority, whose certificate and key the workers read from files
        # in the shared folder, readable by this user only; removed as the sweep ends.
        assert c.scheduler.address.startswith("tls://") and f" {c.scheduler.address} " in script
        assert "--protocol tls://" in script
        files = {flag: script.split(f" {flag} ")[1].split()[0] for flag in ("--tls-ca-file", "--tls-cert", "--tls-key")}
        assert {Path(f).parent for f in files.values()} == {shared}
        for f in files.values():
            assert os.stat(f).st_mode & 0o777 == 0o600
            assert "-----BEGIN " in Path(f).read_text()
        assert "PRIVATE KEY" in Path(files["--tls-key"]).read_text()
        remove_certificate_files(c)
        assert list(shared.iterdir()) == []
    assert "#SBATCH -p short" in script and "#SBATCH -A lab" in script and "#SBATCH -t 00:30:00" in script
    assert "#SBATCH --cpus-per-task=4" in script and "#SBATCH --mem=" in script
    assert "--nworkers 4" in script and "--nthreads 1" in script
    assert "export NUMBA_CACHE_DIR='/shared/numba cache'" in script and "export NUMBA_NUM_THREADS=1" in script
    with jobqueue_cluster("pbs", queue="batch", account=None, walltime="01:00:00", cores=2, memory="4GB",
                           dashboard=False) as c:
        script = c.job_script()
    assert "#PBS -q batch" in script and "walltime=01:00:00" in script and "--nworkers 2" in script
    # Cores from dask-jobqueue's configuration, and points of 3 threads: one worker per 3 cores.
    with dask.config.set({"jobqueue.slurm.cores": 6, "jobqueue.slurm.memory": "12GB"}):
        with jobqueue_cluster("slurm", queue=None, account=None, walltime=None, cores=None, memory=None,
                               dashboard=False) as c:
            script = c.job_script()
        assert "--nworkers 6" in script and "--nthreads 1" in script and "#SBATCH --cpus-per-task=6" in script
        with jobqueue_cluster("slurm", queue=None, account=None, walltime=None, cores=None, memory=None,
                               dashboard=False, threads=3) as c:
            script = c.job_script()
        assert "--nworkers 2" in script and "--nthreads 1" in script and "#SBATCH --cpus-per-task=6" in script
        assert "export NUMBA_NUM_THREADS=3" in script
    with jobqueue_cluster("pbs", queue=None, account=None, walltime=None, cores=8, memory="16GB", dashboard=False,
                           threads=4) as c:
        script = c.job_script()
    assert "--nworkers 2" in script and "--nthreads 1" in script and "#PBS -l select=1:ncpus=8:mem=" in script
    with pytest.raises(InputError, match="--cluster slurm: .*give --cores and --memory"):
        jobqueue_cluster("slurm", queue=None, account=None, walltime=None, cores=None, memory=None, dashboard=False)
    # --insecure: plain TCP, no certificates.
    with jobqueue_cluster("pbs", queue=None, account=None, walltime=None, cores=2, memory="4GB", dashboard=False,
                           insecure=True) as c:
        script = c.job_script()
        assert c.scheduler.address.startswith("tcp://") and "--tls" not in script and "--protocol" not in script
    assert [f.name for f in tmp_path.iterdir() if f.name.startswith(".dask-jobqueue")] == []


def test_jobqueue_clusters_use_the_certificates_of_the_dask_configuration(tmp_path, monkeypatch):
    pytest.importorskip("dask_jobqueue")
    pytest.importorskip("cryptography")
    import dask
    from distributed import Security

    from meshsim.sweep.cluster import jobqueue_cluster

    monkeypatch.chdir(tmp_path)
    authority = Security.temporary()  # stands for certificates the site provides, as files
    (tmp_path / "ca.pem").write_text(authority.tls_ca_file)
    (tmp_path / "node.pem").write_text(authority.tls_worker_cert + authority.tls_worker_key)
    tls = {"ca-file": str(tmp_path / "ca.pem"), "scheduler.cert": str(tmp_path / "node.pem"),
           "worker.cert": str(tmp_path / "node.pem"), "client.cert": str(tmp_path / "node.pem")}
    with dask.config.set({f"distributed.comm.tls.{k}": v for k, v in tls.items()}):
        with jobqueue_cluster("slurm", queue=None, account=None, walltime=None, cores=2, memory="4GB",
                               dashboard=False) as c:
            script = c.job_script()
            assert c.scheduler.address.startswith("tls://")
        assert f"--tls-ca-file {tmp_path / 'ca.pem'} --tls-cert {tmp_path / 'node.pem'}" in script
    assert sorted(f.name for f in tmp_path.iterdir()) == ["ca.pem", "node.pem"]  # nothing written for them
    with dask.config.set({"distributed.comm.tls.ca-file": str(tmp_path / "ca.pem")}):
        with pytest.raises(InputError, match="--cluster pbs: your Dask configuration names TLS certificates but not "
                                             "distributed.comm.tls.scheduler.cert, distributed.comm.tls.worker.cert"):
            jobqueue_cluster("pbs", queue=None, account=None, walltime=None, cores=2, memory="4GB", dashboard=False)


def test_a_client_without_the_clusters_certificate_cannot_connect_to_its_scheduler(tmp_path, monkeypatch):
    pytest.importorskip("dask_jobqueue")
    pytest.importorskip("cryptography")
    import gc

    import dask
    from distributed import Client, Security

    from meshsim.sweep.cluster import jobqueue_cluster

    monkeypatch.chdir(tmp_path)
    # The cluster as a sweep builds it, its scheduler on the loopback interface.
    with dask.config.set({"jobqueue.slurm.interface": "lo"}), \
            jobqueue_cluster("slurm", queue=None, account=None, walltime=None, cores=1, memory="1GB",
                              dashboard=False) as c:
        address = c.scheduler.address
        assert address.startswith("tls://127.")
        for attempt in (lambda: Client(address, timeout="2s"),  # no certificate at all
                        lambda: Client(address, security=Security.temporary(), timeout="2s"),  # another authority's
                        lambda: Client(address.replace("tls://", "tcp://"), timeout="2s")):  # plain TCP
            with pytest.raises((OSError, TypeError)) as refused:
                attempt().close()
            # the refused client goes now: older distributed hangs if one is collected while the
            # next one starts its event loop
            del refused
            gc.collect()
        with Client(address, security=c.security, timeout="5s") as client:
            assert client.scheduler_info()["address"] == address


def test_an_unencrypted_scheduler_on_another_machine_is_refused_unless_insecure(tmp_path, capsys, monkeypatch):
    import dask
    import distributed

    monkeypatch.chdir(tmp_path)
    path = write(tmp_path, '[sweep]\nbase = "base.toml"\n')
    tried = []

    def client(address=None, **kw):  # a test connects to nothing outside this machine
        assert "scheduler_file" not in kw  # the address checked is the address given
        tried.append(address)
        raise OSError("connection refused")

    monkeypatch.setattr(distributed, "Client", client)
    (tmp_path / "sched.json").write_text('{"address": "tcp://node7.invalid:8786"}')
    for args, shown in ((["--scheduler", "tcp://node7.invalid:8786"], "--scheduler tcp://node7.invalid:8786"),
                        (["--scheduler", "10.0.0.5:8786"], "--scheduler 10.0.0.5:8786"),
                        (["--scheduler", "ws://node7.invalid:8786"], "--scheduler ws://node7.invalid:8786"),
                        (["--scheduler-file", "sched.json"], "--scheduler-file sched.json (tcp://node7.invalid:8786)")):
        assert main(["sweep", str(path), *args]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"meshsim: error: {shown}: refused: ") and err.count("\n") == 1, err
        assert "anyone who can reach that port can run code as you" in err and "tls://" in err and "--insecure" in err
    assert tried == [] and not (tmp_path / "results").exists()
    # --insecure lets it through to the connection attempt; a loopback address needs no --insecure.
    for args in (["--scheduler", "tcp://node7.invalid:8786", "--insecure"], ["--scheduler-file", "sched.json",
                 "--insecure"], ["--scheduler", "tcp://127.0.0.1:1"], ["--scheduler", "tcp://[::1]:1"],
                 ["--scheduler", "localhost:1"], ["--scheduler", "127.8.9.10:1"]):
        assert main(["sweep", str(path), *args]) == 2
        err = capsys.readouterr().err
        assert "cannot connect to the Dask scheduler (OSError: connection refused)" in err, err
    assert tried == ["tcp://node7.invalid:8786", "tcp://node7.invalid:8786", "tcp://127.0.0.1:1", "tcp://[::1]:1",
                     "localhost:1", "127.8.9.10:1"]
    assert not (tmp_path / "results").exists()
    # tls:// connects with the certificates of the Dask configuration, and needs them.
    assert main(["sweep", str(path), "--scheduler", "tls://node7.invalid:8786"]) == 2
    assert "a tls:// scheduler needs your certificates in Dask's configuration" in capsys.readouterr().err
    with dask.config.set({"distributed.comm.tls.ca-file": "ca.pem", "distributed.comm.tls.client.cert": "me.pem"}):
        assert main(["sweep", str(path), "--scheduler", "tls://node7.invalid:8786"]) == 2
    assert tried[-1] == "tls://node7.invalid:8786"
    assert main(["sweep", str(path), "--insecure"]) == 2
    assert "--insecure: applies only with --scheduler, --scheduler-file or --cluster" in capsys.readouterr().err


# ---------------------------------------------------------------------------------------------
# The shipped sweeps


@pytest.mark.parametrize("name, n_points, keys", [
    ("noc_load", 30, ["workload.injection_rate"]),
    ("migration_threshold", 8, ["migration.threshold", "machine.hop_latency_cycles"]),
    ("rdu_hidden_fusion", 12, ["workload.hidden_size", "workload.fusion"]),
    ("ipu_stage_split", 12, ["workload.layers_per_stage", "machine.exchange_bytes_per_cycle"]),
])
def test_the_shipped_sweep_files_are_valid(tmp_path, name, n_points, keys):
    sw = load_sweep(ROOT / "scenarios" / "sweeps" / f"{name}.toml", output=tmp_path)
    assert len(sw.points) == n_points and sw.keys == keys


def test_the_rdu_sweep_shows_fusion_and_hidden_size_raising_pcu_utilisation(tmp_path):
    sw = load_sweep(ROOT / "scenarios" / "sweeps" / "rdu_hidden_fusion.toml", output=tmp_path)
    res = run_sweep(sw)
    assert res.failed == 0
    rows = {(int(r["workload.hidden_size"]), r["workload.fusion"]): r for r in read_csv(sw.summary_csv)}
    util = {k: float(r["pcu_utilization"]) for k, r in rows.items()}
    wait = {k: float(r["ddr_wait_fraction"]) for k, r in rows.items()}
    for h in (1024, 2048, 4096, 8192):
        assert util[h, "o0"] < util[h, "o1"] < util[h, "o3"]
    for fusion in ("o0", "o1", "o3"):
        # the same sections, each with its fixed switch cost, do more work as the hidden size grows
        assert util[1024, fusion] < util[2048, fusion] < util[4096, fusion] < util[8192, fusion]
        # at 8,192 a layer's 12 H^2 weight bytes hold the DDR longer than the PCUs take to use them: the
        # step waits on DDR most there (docs/rdu.md, "Which lever moves which figure")
        assert max(wait[h, fusion] for h in (1024, 2048, 4096)) < 0.1 < 0.3 < wait[8192, fusion]


def test_the_ipu_sweep_shows_the_busiest_stage_and_the_exchange_setting_the_pace(tmp_path):
    sw = load_sweep(ROOT / "scenarios" / "sweeps" / "ipu_stage_split.toml", output=tmp_path)
    res = run_sweep(sw)
    assert res.failed == 0
    rows = {(r["workload.layers_per_stage"], int(r["machine.exchange_bytes_per_cycle"])): r
            for r in read_csv(sw.summary_csv)}
    for x in (2, 4, 8):
        sps = {split: float(rows[split, x]["samples_per_second"]) for split, y in rows if y == x}
        assert max(sps, key=sps.get) == "[3, 3, 3, 3]"
        assert sps["[0, 4, 4, 4]"] == sps["[2, 3, 3, 4]"]  # the same busiest stage
    for split in ("[0, 4, 4, 4]", "[3, 3, 3, 3]", "[0, 3, 4, 5]", "[2, 3, 3, 4]"):
        share = [float(rows[split, x]["exchange_fraction"]) for x in (2, 4, 8)]
        assert share == sorted(share, reverse=True)


def test_a_point_that_kills_its_worker_every_time_is_recorded_as_failed(tmp_path):
    import dask

    noc = (ROOT / "scenarios" / "noc_latency_load.toml").read_text()
    path = write(tmp_path, f'[sweep]\nbase = "base.toml"\noutput = "{tmp_path / "out"}"\n[set]\nmachine.rows = 24\n'
                           'machine.cols = 24\nrun.cycles = 6000\n[grid]\n'
                           'workload.injection_rate = [0.01, 0.02, 0.03, 0.04]\n', base=noc)
    sw = load_sweep(path)
    # No second chance: the point running on the killed worker fails at once (distributed.KilledWorker).
    with dask.config.set({"distributed.scheduler.allowed-failures": 0}):
        with dask_client(workers=2) as client:
            killed = []

            def on_row(p, row):
                if not killed:
                    killed.append(busy_worker_pid(client))
                    os.kill(killed[0], signal.SIGKILL)

            res = run_sweep(sw, client=client, on_row=on_row)
    rows = read_csv(sw.summary_csv)
    failed = [r for r in rows if r["status"] == "failed"]
    # The point it was running is lost, and any Dask had already handed it.
    assert res.failed == len(failed) >= 1 and sum(r["status"] == "done" for r in rows) == 4 - len(failed)
    for r in failed:
        assert r["error"].startswith("KilledWorker") and "KilledWorker" in r["traceback"]
    res = run_sweep(sw)  # and a rerun finishes them
    assert res.ran == len(failed) and [r["status"] for r in read_csv(sw.summary_csv)] == ["done"] * 4


def test_one_sweep_at_a_time_in_a_folder_and_not_another_sweeps_folder(tmp_path):
    from meshsim.sweep.execute import FolderLock

    out = tmp_path / "out"
    a = load_sweep(write(tmp_path, f'[sweep]\nbase = "base.toml"\noutput = "{out}"\n'))
    b = load_sweep(write(tmp_path, f'[sweep]\nbase = "base.toml"\noutput = "{out}"\n', name="b.toml"))
    with FolderLock(a):
        with pytest.raises(InputError, match="another meshsim sweep is running in this folder"):
            run_sweep(a)
    run_sweep(a)
    with pytest.raises(InputError, match=f"holds the results of the sweep {tmp_path / 's.toml'}; give this one "
                                         "another folder"):
        run_sweep(b)
    assert read_csv(a.summary_csv)[0]["status"] == "done"


def test_a_point_runs_from_any_folder_and_finds_the_base_scenarios_trace(tmp_path, monkeypatch):
    from meshsim.sweep import run_point

    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "t.csv").write_text("cycle,row,col,work_cycles\n0,1,1,5\n")
    base = trace_base("t.csv")
    (tmp_path / "sub" / "base.toml").write_text(base)
    (tmp_path / "s.toml").write_text(f'[sweep]\nbase = "sub/base.toml"\noutput = "{tmp_path / "out"}"\n')
    monkeypatch.chdir(tmp_path)
    sw = load_sweep("s.toml")  # relative, as typed on a command line
    assert Path(sw.points[0].base_path).is_absolute()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)  # a worker started in another folder
    row = run_point(sw.points[0])
    assert row["status"] == "done" and row["injected"] == 1


def test_dashboard_without_bokeh_is_a_clear_error_that_leaves_no_folder(tmp_path, capsys, monkeypatch):
    import importlib.util

    if importlib.util.find_spec("bokeh") is not None:
        pytest.skip("bokeh is installed: the dashboard would start")
    monkeypatch.chdir(tmp_path)
    path = write(tmp_path, '[sweep]\nbase = "base.toml"\n')
    assert main(["sweep", str(path), "--dashboard"]) == 2
    assert "--dashboard: Dask's dashboard needs bokeh; install it with pip install bokeh" in capsys.readouterr().err
    assert not (tmp_path / "results").exists()


def test_a_failed_task_whose_file_is_complete_is_recorded_from_the_file(tmp_path):
    from meshsim.sweep.execute import row_after_failure

    sw = load_sweep(write(tmp_path, f'[sweep]\nbase = "base.toml"\noutput = "{tmp_path / "out"}"\n[grid]\n'
                                    'migration.threshold = [1, 2]\n'))
    run_sweep(sw)
    os.remove(sw.points[1].output)
    done = row_after_failure(sw.points[0], RuntimeError("scheduler lost"))
    assert done["status"] == "done" and done["li"] == read_summary(sw.points[0].output)[1]["li"]
    lost = row_after_failure(sw.points[1], RuntimeError("scheduler lost"))
    assert lost["status"] == "failed" and lost["error"] == "RuntimeError: scheduler lost"


def test_nested_stop_signals_pass_a_signal_to_the_outer_one():
    from meshsim.run import StopSignals

    with StopSignals() as outer:
        with StopSignals() as inner:  # a run inside a serial sweep
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.05)
        assert inner.signalled and outer.signalled
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL


def test_odd_output_values_and_scheduler_files_are_clear_errors(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert problems(write(tmp_path, '[sweep]\nbase = "base.toml"\noutput = 5\n')) == [
        f"{tmp_path / 's.toml'}: sweep.output = 5: must be a string: the folder of the results, relative to the "
        "current folder (default results/sweeps/NAME)"]
    (tmp_path / "existing").mkdir()
    (tmp_path / "sched.json").write_text("not json")
    path = write(tmp_path, '[sweep]\nbase = "base.toml"\n', name="g.toml")
    assert main(["sweep", str(path), "-o", "existing", "--scheduler-file", "sched.json"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("meshsim: error: --scheduler-file sched.json: is not JSON; a scheduler file is the JSON "
                          "object that dask scheduler --scheduler-file FILE writes") and "Traceback" not in err
    assert list((tmp_path / "existing").iterdir()) == []  # not even the lock file


def test_the_same_sweep_reached_through_another_path_is_the_same_sweep(tmp_path, monkeypatch):
    (tmp_path / "sub").mkdir()
    write(tmp_path, f'[sweep]\nbase = "base.toml"\noutput = "{tmp_path / "out"}"\n')
    run_sweep(load_sweep(tmp_path / "s.toml"))
    monkeypatch.chdir(tmp_path / "sub")
    res = run_sweep(load_sweep("../s.toml", output="../out"))
    assert res.skipped == 1 and res.ran == 0
