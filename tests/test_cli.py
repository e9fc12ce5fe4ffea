"""The command line through a real subprocess: exit codes, messages, no traceback, no half-written
result (docs/design.md, "Scenario files" and "Command line")."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def meshsim(*args, cwd):
    return subprocess.run([sys.executable, "-m", "meshsim", *map(str, args)], capture_output=True, text=True, cwd=cwd,
                          env=dict(os.environ, PYTHONPATH=str(ROOT)))


@pytest.fixture
def work(tmp_path):
    shutil.copy(ROOT / "scenarios" / "smoke.toml", tmp_path / "smoke.toml")
    return tmp_path


def test_run_writes_results_under_results_and_prints_the_summary(work):
    p = meshsim("run", "smoke.toml", "run.cycles=300", cwd=work)
    assert p.returncode == 0, p.stderr
    assert (work / "results" / "smoke.h5").exists()
    for word in ("LI", "utilisation", "latency", "p99", "variance", "million PE-cycles/s"):
        assert word in p.stdout
    rep = meshsim("report", "results/smoke.h5", "--json", cwd=work)
    assert rep.returncode == 0, rep.stderr
    data = json.loads(rep.stdout)
    assert data["summary"]["cycles"] == 300 and data["file"]["complete"] is True
    assert 0 < data["summary"]["li"] <= 1


def test_bad_scenario_exits_2_with_every_problem_and_writes_nothing(work):
    (work / "bad.toml").write_text('[machine]\nrows = 0\nhop_latency_cycles = 9\n[migration]\npolicy = "least"\n'
                                   '[workload]\ninjection_rat = 0.1\n')
    p = meshsim("run", "bad.toml", "-o", "out.h5", cwd=work)
    assert p.returncode == 2
    assert "Traceback" not in p.stderr
    assert "machine.rows = 0: must be an integer in [1, 4096]" in p.stderr
    assert "machine.hop_latency_cycles = 9: must be an integer in [1, 8]" in p.stderr
    assert 'did you mean "least_loaded"' in p.stderr
    assert "workload.injection_rat: unknown key; did you mean workload.injection_rate?" in p.stderr
    assert "bad.toml" in p.stderr
    assert not (work / "out.h5").exists() and not (work / "out.incomplete.h5").exists()
    assert not (work / "results").exists()


def test_bad_override_exits_2(work):
    p = meshsim("run", "smoke.toml", "migration.threshold=99", cwd=work)
    assert p.returncode == 2 and "Traceback" not in p.stderr
    assert "migration.threshold = 99" in p.stderr
    assert not (work / "results").exists()


def test_missing_scenario_and_bad_trace_exit_2(work):
    p = meshsim("run", "nope.toml", cwd=work)
    assert p.returncode == 2 and "nope.toml: no such scenario file" in p.stderr
    (work / "t.csv").write_text("cycle,row,col,work_cycles\n0,0,0,5\n1,99,0,5\n")
    (work / "tr.toml").write_text('[machine]\nrows = 4\ncols = 4\n[workload]\ntype = "trace"\ntrace_file = "t.csv"\n')
    p = meshsim("run", "tr.toml", cwd=work)
    assert p.returncode == 2 and "Traceback" not in p.stderr
    assert "line 3" in p.stderr and "row" in p.stderr and "99" in p.stderr
    assert not (work / "results").exists()


def test_report_of_a_file_that_is_not_a_result_exits_2(work):
    (work / "x.h5").write_bytes(b"not hdf5 at all")
    p = meshsim("report", "x.h5", cwd=work)
    assert p.returncode == 2 and "x.h5: not a readable HDF5 file" in p.stderr and "Traceback" not in p.stderr
    import h5py

    with h5py.File(work / "y.h5", "w") as f:
        f["a"] = 1
    p = meshsim("report", "y.h5", cwd=work)
    assert p.returncode == 2 and "y.h5: not a meshsim result file" in p.stderr
    p = meshsim("report", "missing.h5", cwd=work)
    assert p.returncode == 2 and "missing.h5: no such result file" in p.stderr


def test_validate_accepts_the_shipped_scenarios(work):
    # The command's own entry point, called once for each scenario in one process (a process each
    # would spend most of the test starting Python).
    names = sorted(str(p) for p in (ROOT / "scenarios").glob("*.toml"))
    code = ("import sys\nfrom meshsim.cli import main\nfor name in sys.argv[1:]:\n"
            "    print(name, main(['validate', name]), flush=True)\n")
    p = subprocess.run([sys.executable, "-c", code, *names], capture_output=True, text=True, cwd=work,
                       env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert p.returncode == 0, p.stderr
    for name in names:
        assert f"{name} 0" in p.stdout.splitlines(), (name, p.stdout, p.stderr)
    assert p.stdout.count("valid") >= len(names)


def _ctrl_c_as_on_a_terminal():
    """In the child: Ctrl-C as a process started from a terminal gets it, even when this test runs
    where SIGINT is ignored (a shell's background job ignores it, and its children inherit that)."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.mark.parametrize("signame", ["SIGTERM", "SIGINT"])
def test_sigterm_or_ctrl_c_leaves_an_incomplete_readable_file(work, signame):
    import signal
    import time

    import h5py

    from meshsim.output import open_result_file

    # A new session, so that SIGINT reaches the run alone, as Ctrl-C would from its terminal.
    proc = subprocess.Popen([sys.executable, "-m", "meshsim", "run", "smoke.toml", "run.cycles=100000000",
                             "output.flush_every_cycles=100", "-o", "long.h5", "-q"], cwd=work,
                            env=dict(os.environ, PYTHONPATH=str(ROOT)), stderr=subprocess.PIPE, text=True,
                            start_new_session=True, preexec_fn=_ctrl_c_as_on_a_terminal)
    partial = work / "long.incomplete.h5"
    try:
        deadline = time.time() + 180
        done = 0
        while done < 300 and time.time() < deadline:  # a few flushes in (read while it runs, as SWMR allows)
            time.sleep(0.2)
            if partial.exists():
                with open_result_file(partial) as f:
                    done = int(f.attrs["cycles_done"])
        proc.send_signal(getattr(signal, signame))
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:  # never leave a run behind, whatever failed above
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, err
    assert "interrupted after" in err and "long.incomplete.h5" in err
    assert not (work / "long.h5").exists()
    with h5py.File(partial, "r") as f:
        done = int(f.attrs["cycles_done"])
        assert bool(f.attrs["complete"]) is False and done >= 100
        assert f["series/busy"].shape == (done,)
        assert f["summary"].attrs["cycles"] == done
        assert int(f["units/completed"][:].sum()) == int(f["series/completed"][:].sum())
        assert int(f["latency/histogram"][:].sum()) == f["summary"].attrs["completed"]


@pytest.mark.parametrize("target, message", [
    ("adir", "adir: is a directory; give a file name"),
    ("", "the result path must name a file"),
    ("afile/x.h5", "afile is not a directory"),
])
def test_a_bad_output_path_exits_2_before_running(work, target, message):
    (work / "adir").mkdir()
    (work / "afile").write_text("x")
    p = meshsim("run", "smoke.toml", "-o", target, cwd=work)
    assert p.returncode == 2 and "Traceback" not in p.stderr
    assert message in p.stderr
    assert not list(work.glob("**/*.h5"))


def test_report_of_a_run_killed_before_its_first_flush_says_so(work):
    import h5py

    with h5py.File(work / "k.incomplete.h5", "w") as f:
        f.attrs["schema_version"] = 1
        f.attrs["cycles_done"] = 0
        f.create_group("summary")
    p = meshsim("report", "k.incomplete.h5", cwd=work)
    assert p.returncode == 2 and "Traceback" not in p.stderr
    assert "k.incomplete.h5: the run was stopped before its first flush: the file holds no cycles yet, and no " \
           "summary; it cannot resume (there is no checkpoint of it): run the scenario again" in p.stderr


def test_a_killed_run_keeps_a_file_that_report_reads(work):
    import signal
    import time

    from meshsim.output import open_result_file

    proc = subprocess.Popen([sys.executable, "-m", "meshsim", "run", "smoke.toml", "run.cycles=100000000",
                             "output.flush_every_cycles=100", "-o", "k.h5", "-q"], cwd=work,
                            env=dict(os.environ, PYTHONPATH=str(ROOT)), start_new_session=True)
    partial = work / "k.incomplete.h5"
    try:
        deadline = time.time() + 120
        done = 0
        while done < 100 and time.time() < deadline:  # read while it runs, as SWMR allows
            time.sleep(0.2)
            if partial.exists():
                with open_result_file(partial) as f:
                    done = int(f.attrs["cycles_done"])
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    with open_result_file(partial) as f:  # readable after SIGKILL (through SWMR's reader: docs/results.md)
        done = int(f.attrs["cycles_done"])
        assert bool(f.attrs["complete"]) is False and done >= 100
    p = meshsim("report", "k.incomplete.h5", cwd=work)
    assert p.returncode == 0, p.stderr
    assert "INCOMPLETE" in p.stdout


def test_validate_reads_the_trace_too(work):
    (work / "t.csv").write_text("cycle,row,col,work_cycles\n0,0,0,5\n1,99,0,5\n")
    (work / "tr.toml").write_text('[machine]\nrows = 4\ncols = 4\n[workload]\ntype = "trace"\ntrace_file = "t.csv"\n')
    p = meshsim("validate", "tr.toml", cwd=work)
    assert p.returncode == 2 and "line 3" in p.stderr and "99" in p.stderr


def test_validate_places_a_pipeline_as_a_run_would(work):
    (work / "p.toml").write_text('[machine]\nrows = 4\ncols = 4\n[migration]\npolicy = "none"\n'
                                 '[workload]\ntype = "layer_pipeline"\n')
    p = meshsim("validate", "p.toml", cwd=work)
    assert p.returncode == 2 and "Traceback" not in p.stderr
    assert "machine.rows = 4: the 13 bands" in p.stderr and "need at least 6 columns" in p.stderr


def test_run_echoes_the_scenario_text_into_the_result(work):
    import h5py

    p = meshsim("run", "smoke.toml", "run.cycles=50", "-o", "e.h5", "-q", cwd=work)
    assert p.returncode == 0, p.stderr
    with h5py.File(work / "e.h5") as f:
        assert f.attrs["scenario_text"] == (work / "smoke.toml").read_text()
        assert "cycles = 50" in f.attrs["scenario_resolved"]
        assert "run.cycles=50" in f.attrs["overrides"]


def test_bench_rejects_a_non_positive_cycle_count(work):
    p = meshsim("bench", "--cycles", "0", cwd=work)
    assert p.returncode == 2 and "must be an integer >= 1" in p.stderr


def test_a_traffic_run_prints_offered_and_accepted_load(work):
    p = meshsim("run", ROOT / "scenarios" / "noc_uniform_k16.toml", "run.cycles=1500", "workload.warmup_cycles=300",
                "workload.measure_cycles=600", "-o", "noc.h5", cwd=work)
    assert p.returncode == 0, p.stderr
    assert "offered" in p.stdout and "accepted" in p.stdout and "packets/PE/cycle" in p.stdout
    assert "(measured packets)" in p.stdout


def test_a_traffic_window_longer_than_the_run_is_an_input_error(work):
    p = meshsim("validate", ROOT / "scenarios" / "noc_uniform_k16.toml", "run.cycles=100", cwd=work)
    assert p.returncode == 2
    assert ("workload.measure_cycles = 5000: workload.warmup_cycles + workload.measure_cycles = 6000 must be at "
            "most run.cycles = 100") in p.stderr


def test_options_and_overrides_go_in_any_order(work):
    import h5py

    p = meshsim("run", "smoke.toml", "-o", "a.h5", "run.cycles=50", "-q", "run.seed=3", cwd=work)
    assert p.returncode == 0, p.stderr
    with h5py.File(work / "a.h5") as f:
        assert "cycles = 50" in f.attrs["scenario_resolved"] and "seed = 3" in f.attrs["scenario_resolved"]
    for args in (["--resolved", "smoke.toml", "run.cycles=7"], ["smoke.toml", "--resolved", "run.cycles=7"],
                 ["smoke.toml", "run.cycles=7", "--resolved"]):
        p = meshsim("validate", *args, "run.seed=5", cwd=work)
        assert p.returncode == 0, p.stderr
        assert "7 cycles" in p.stdout and "cycles = 7" in p.stdout and "seed = 5" in p.stdout


def test_a_bad_option_among_overrides_is_still_a_usage_error(work):
    p = meshsim("run", "smoke.toml", "run.cycles=5", "--bogus", "run.seed=2", cwd=work)
    assert p.returncode == 2 and "Traceback" not in p.stderr
    assert "unrecognized arguments: --bogus" in p.stderr
    p = meshsim("validate", "smoke.toml", "run.cycles=5", "--threads", "2", cwd=work)
    assert p.returncode == 2 and "unrecognized arguments: --threads 2" in p.stderr
    p = meshsim("run", "smoke.toml", "run.cycles=5", "-o", cwd=work)
    assert p.returncode == 2 and "argument -o/--output: expected one argument" in p.stderr
    assert not (work / "results").exists()


def test_roofline_takes_overrides_like_run(work):
    scenario = ROOT / "scenarios" / "rdu_gpt2_o1.toml"
    plain = meshsim("roofline", scenario, cwd=work)
    wide = meshsim("roofline", scenario, "workload.precision=fp32", cwd=work)
    assert plain.returncode == 0 and wide.returncode == 0, plain.stderr + wide.stderr
    assert "qkv_proj" in wide.stdout and wide.stdout != plain.stdout  # 4-byte elements: twice the bytes
    p = meshsim("roofline", scenario, "workload.hidden_size=0", cwd=work)
    assert p.returncode == 2 and "Traceback" not in p.stderr
    assert p.stderr.strip().splitlines() == [
        "meshsim: error: override workload.hidden_size=0: workload.hidden_size = 0: must be an integer in "
        "[1, 65536] (elements)"]
    p = meshsim("roofline", "workload.hidden_size=1024", cwd=work)
    assert p.returncode == 2 and "overrides apply to a scenario; write roofline SCENARIO.toml" in p.stderr
    (work / "r.h5").write_bytes(b"")
    p = meshsim("roofline", "r.h5", "workload.hidden_size=1024", cwd=work)
    assert p.returncode == 2 and "r.h5: overrides (section.key=value) apply to a scenario (.toml)" in p.stderr


def with_closed_stdout(*args, cwd):
    """The command with its stdout a pipe whose reader has gone, as `| head -c 100` leaves it."""
    read, write = os.pipe()
    os.close(read)
    try:
        return subprocess.run([sys.executable, "-m", "meshsim", *map(str, args)], stdout=write,
                              stderr=subprocess.PIPE, text=True, cwd=cwd, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    finally:
        os.close(write)


def test_a_closed_stdout_ends_every_command_quietly_with_141(work):
    p = meshsim("run", "smoke.toml", "run.cycles=50", "-o", "r.h5", "-q", cwd=work)
    assert p.returncode == 0, p.stderr
    for args in (["report", "r.h5", "--json"], ["report", "r.h5", "r.h5"], ["validate", "smoke.toml", "--resolved"],
                 ["roofline"], ["run", "smoke.toml", "run.cycles=50", "-o", "s.h5"]):
        p = with_closed_stdout(*args, cwd=work)
        assert (p.returncode, p.stderr) == (141, ""), args
    p = with_closed_stdout("--help", cwd=work)  # argparse drops its help quietly itself
    assert p.stderr == "" and p.returncode in (0, 141)
    p = with_closed_stdout("validate", "nope.toml", cwd=work)  # errors go to stderr as before
    assert p.returncode == 2 and p.stderr == "meshsim: error: nope.toml: no such scenario file\n"


def test_a_broken_pipe_other_than_stdout_keeps_its_traceback(monkeypatch):
    from meshsim import cli

    def broken(args):
        raise BrokenPipeError(32, "Broken pipe")  # a socket's, say: stdout is still read

    monkeypatch.setattr(cli, "_cmd_roofline", broken)
    with pytest.raises(BrokenPipeError):
        cli.main(["roofline"])


def test_a_keys_old_name_on_the_command_line_is_one_warning_line(work):
    p = meshsim("validate", ROOT / "scenarios" / "ipu_gpt2_4stage.toml", "workload.gradient_accumulation=8", cwd=work)
    assert p.returncode == 0, p.stderr
    assert p.stderr == ("meshsim: warning: override workload.gradient_accumulation=8: workload.gradient_accumulation "
                        "is now workload.microbatches; the old name will go\n")


def test_the_command_line_runs_from_the_folder_above_a_clone_named_meshsim(tmp_path):
    # There the clone's top level (no __init__.py) is found first, as an empty namespace package, where
    # the project is installed in editable mode; `python -m meshsim` puts the package itself in its place.
    (tmp_path / "meshsim").symlink_to(ROOT, target_is_directory=True)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    p = subprocess.run([sys.executable, "-m", "meshsim", "validate", "meshsim/scenarios/smoke.toml"],
                       capture_output=True, text=True, cwd=tmp_path, env=env)
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith("meshsim/scenarios/smoke.toml: valid (mesh 32 x 48"), p.stdout


def test_a_step_with_a_key_value_cache_is_counted_by_roofline_and_refused_by_run(work):
    scenario = ROOT / "scenarios" / "rdu_gpt2_o1.toml"
    step = ("workload.training=false", "workload.seq_len=1", "workload.tile_tokens=1")
    decode = (*step, "workload.context=1023")
    plain = meshsim("roofline", scenario, *step, cwd=work)
    cached = meshsim("roofline", scenario, *decode, cwd=work)
    assert plain.returncode == 0 and cached.returncode == 0, plain.stderr + cached.stderr

    def attention_mb(out):
        return float(next(line for line in out.splitlines() if line.startswith("layer0.attn_v")).split()[3])

    # attn_v reads the 1,024 cached and new values of 8 sequences: 8 x 1,024 x 768 x 2 bytes more
    assert attention_mb(cached.stdout) - attention_mb(plain.stdout) == pytest.approx(8 * 1023 * 768 * 2 / 1e6,
                                                                                   abs=0.3)
    for command in ("run", "validate"):
        p = meshsim(command, scenario, *decode, cwd=work)
        assert p.returncode == 2 and "Traceback" not in p.stderr, p.stderr
        assert p.stderr.startswith("meshsim: error: workload.context = 1023: a step with a key-value cache"), p.stderr
        assert "meshsim roofline" in p.stderr
    assert not (work / "results").exists()
    p = meshsim("validate", scenario, "workload.context=8", "workload.training=true", cwd=work)
    assert p.returncode == 2 and "workload.context = 8: a key-value cache serves inference" in p.stderr, p.stderr
