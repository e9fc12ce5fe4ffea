"""Runs that resume (docs/results.md, "Resuming a run"): a mesh or ipu run stopped at any moment, by
its `stop` callable, Ctrl-C, SIGTERM or SIGKILL, goes on with `meshsim run --resume` (or
`resume_run`) from its checkpoint, and the file it finishes with holds every dataset and attribute
of a run never stopped, bit for bit, at 1 and 2 threads; a sweep's point resumes the same way.

The stops fall at random kernel-call boundaries (a seeded draw, with kernel calls of an odd length
so that they fall between windows, frames and flushes), several times in one run. The default
run covers the workloads whose state differs most (Bernoulli tasks with migration, hot regions
with work stealing, the layer pipeline, the ipu); `-m slow` adds the rest and more stops.
"""

import os
import random
import signal
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import h5py
import numpy as np
import pytest
from conftest import assert_same_results
from held import kill, start_held, wait_held

from meshsim.checkpoint import checkpoint_path, state_digest
from meshsim.cli import main
from meshsim.errors import InputError
from meshsim.output import incomplete_path, plain
from meshsim.run import RunInterrupted, resume_run, run_scenario
from meshsim.scenario import load_scenario

ROOT = Path(__file__).resolve().parents[1]
SC = ROOT / "scenarios"
ENV = dict(os.environ, PYTHONPATH=str(ROOT))
EVERY = "output.checkpoint_every_seconds=0"  # the 5% rule alone (the default)

# A layer pipeline small enough that chunks finish early in the run (its steady state starts).
SMALL_PIPE = ["machine.rows=12", "machine.cols=24", "workload.hidden_size=32", "workload.n_layers=1",
              "workload.n_heads=2", "workload.seq_len=8", "workload.tokens_per_chunk=1", "workload.chunks_in_flight=8",
              "run.cycles=2000", "run.window_cycles=100", "output.flush_every_cycles=200", "workload.vocab_size=0"]

# name -> (scenario, overrides, kernel call length)
CASES = {
    "uniform": ("wse2_uniform.toml", ["machine.rows=40", "machine.cols=56", "run.cycles=1500",
                                      "output.flush_every_cycles=150"], 37),
    "hotspot_stealing": ("smoke.toml", ["run.cycles=1200", "output.flush_every_cycles=100",
                                        'migration.policy="work_stealing"'], 45),
    "pipeline_train": ("wse2_gpt2_small_train.toml", [*SMALL_PIPE, "workload.batch=8", "output.frame_every_cycles=100"],
                       70),
    "traffic": ("noc_uniform_k16.toml", ["run.cycles=2500", "workload.warmup_cycles=300",
                                         "workload.measure_cycles=1500", "output.flush_every_cycles=200"], 93),
    "streaming": ("wse2_llm_7b.toml", [*SMALL_PIPE, "machine.rows=6", "machine.cols=12", "workload.n_layers=3",
                                       "workload.batch=1", "workload.chunks_in_flight=16",
                                       "workload.weight_bandwidth_gbps=400.0", "run.cycles=3000"], 70),
    "gradient_hysteresis": ("wse2_skewed_migrating.toml", ["machine.rows=40", "machine.cols=40", "run.cycles=1200",
                                                           'migration.policy="gradient"', "migration.hysteresis=2",
                                                           "output.flush_every_cycles=100"], 29),
    "diffusion": ("mesh_uniform_high_load.toml", ["machine.rows=32", "machine.cols=32", "run.cycles=1000",
                                                  'migration.policy="diffusion"', "output.flush_every_cycles=100"], 41),
    "ipu": ("ipu_gpt2_even.toml", ["run.steps=24"], 2),
    "decode": ("wse2_llama3_8b_decode.toml", ["workload.output_tokens=40"], 1),
    "ipu_decode": ("ipu_gpt2_xl_decode.toml", ["workload.output_tokens=40"], 1),
}
DEFAULT = ("uniform", "hotspot_stealing", "pipeline_train", "ipu", "decode", "ipu_decode")


def _scenario(name, extra=()):
    scenario, overrides, _ = CASES[name]
    return load_scenario(SC / scenario, [*overrides, EVERY, *extra])


def _stop_after(k):
    """A run's `stop`: True from its (k + 1)th kernel-call boundary on."""
    asked = iter(range(10**9))
    return lambda: next(asked) >= k


@pytest.fixture
def first_calls(monkeypatch):
    """The progress (cycles; ipu: steps) at which each run's first kernel call starts, in order: a
    resumed run's must be its checkpoint's, not 0."""
    from meshsim.ipu.decode import IpuDecodeRun
    from meshsim.ipu.run import IpuRun
    from meshsim.mesh.decode import DecodeRun
    from meshsim.mesh.run import MeshRun

    starts = []
    for cls in (MeshRun, IpuRun, DecodeRun, IpuDecodeRun):
        def spy(self, _advance=cls.advance):
            if not getattr(self, "_spied", False):
                self._spied = True
                starts.append(self.done)
            return _advance(self)
        monkeypatch.setattr(cls, "advance", spy)
    return starts


def _held(out: Path) -> int:
    """The progress a stopped run's checkpoint holds."""
    with h5py.File(checkpoint_path(out), "r") as f:
        return int(f.attrs["done"])


def stop_and_resume(sc, out: Path, per_call: int, stops: list, threads: int, first_calls: list) -> list:
    """Run `sc` into `out`, stopped after stops[0] kernel calls, resumed and stopped after each
    further count, then resumed to its end; returns the cycles at each stop. Each resumed run must
    start its kernel calls where the checkpoint it resumed from was."""
    at, n0 = [], len(first_calls)
    for i, k in enumerate(stops):
        try:
            if i == 0:
                run_scenario(sc, out, threads=threads, progress=False, max_cycles_per_call=per_call,
                             stop=_stop_after(k))
            else:
                held = _held(out)
                resume_run(incomplete_path(out), threads=threads, progress=False, max_cycles_per_call=per_call,
                           stop=_stop_after(k))
        except RunInterrupted as e:
            at.append(e.cycles_done)
            assert checkpoint_path(out).exists()
        if i > 0:
            assert first_calls[-1] == held > 0
    held = _held(out)
    resume_run(incomplete_path(out), threads=threads, progress=False, max_cycles_per_call=per_call)
    assert first_calls[-1] == held > 0 and len(first_calls) - n0 == len(stops) + 1
    assert out.exists() and not incomplete_path(out).exists() and not checkpoint_path(out).exists()
    return at


@pytest.fixture(scope="module")
def references(tmp_path_factory):
    """The uninterrupted run of each case (one thread) and its count of kernel calls, made when first
    asked for."""
    made = {}

    def get(name):
        if name not in made:
            out = tmp_path_factory.mktemp("ref") / f"{name}.h5"
            calls = []
            run_scenario(_scenario(name), out, threads=1, progress=False, max_cycles_per_call=CASES[name][2],
                         stop=lambda: calls.append(1) and False)
            made[name] = (out, len(calls))
        return made[name]
    return get


def _case_params(names, marks=()):
    return [pytest.param(n, t, id=f"{n}-{t}threads", marks=marks) for n in names for t in (1, 2)]


@pytest.mark.parametrize("name,threads", [
    *_case_params(DEFAULT),
    *_case_params([n for n in CASES if n not in DEFAULT], marks=pytest.mark.slow),
])
def test_a_run_stopped_and_resumed_twice_ends_as_an_uninterrupted_one(tmp_path, references, first_calls, name,
                                                                      threads):
    ref, n = references(name)
    rng = random.Random(f"{name}{threads}")
    first = rng.randrange(1, n // 2)  # a stop in the first half, the other in the second
    second = rng.randrange(n // 2 - first, n - first - 3)
    at = stop_and_resume(_scenario(name), tmp_path / "r.h5", CASES[name][2], [first, second], threads, first_calls)
    assert len(at) == 2 and 0 < at[0] < at[1]
    assert_same_results(ref, tmp_path / "r.h5")


@pytest.mark.slow
@pytest.mark.parametrize("name", list(CASES))
def test_many_stops_in_one_run(tmp_path, references, first_calls, name):
    ref, n = references(name)
    rng = random.Random(name)
    stops = [rng.randrange(0, 6) for _ in range(n // 4)]  # some at once: a stop right after resuming
    stop_and_resume(_scenario(name), tmp_path / "r.h5", CASES[name][2], stops, 2, first_calls)
    assert_same_results(ref, tmp_path / "r.h5")


def test_a_trace_run_resumes_and_not_once_its_trace_changed(tmp_path, first_calls, capsys):
    rng = np.random.default_rng(3)
    n = 4000
    rows = np.column_stack([np.sort(rng.integers(0, 900, n)), rng.integers(0, 24, n), rng.integers(0, 24, n),
                            rng.integers(1, 30, n)])
    (tmp_path / "t.csv").write_text("cycle,row,col,work_cycles\n" + "\n".join(",".join(map(str, r)) for r in rows))
    text = (SC / "smoke.toml").read_text().replace('type = "hotspot"', 'type = "trace"\ntrace_file = "t.csv"')
    text = text.replace("injection_rate = 0.04\nhot_rate = 0.3\n", "").replace(
        'work_distribution = "geometric"\nwork_cycles = 8\nwork_max_cycles = 200\n', "")
    (tmp_path / "t.toml").write_text(text)
    sc = load_scenario(tmp_path / "t.toml", ["machine.rows=24", "machine.cols=24", "run.cycles=1000",
                                              "output.flush_every_cycles=100", EVERY])
    run_scenario(sc, tmp_path / "ref.h5", threads=1, progress=False, max_cycles_per_call=70)
    stop_and_resume(sc, tmp_path / "r.h5", 70, [4, 3], 2, first_calls)
    assert_same_results(tmp_path / "ref.h5", tmp_path / "r.h5")
    # a trace edited between the stop and the resume is refused: the run would mix two workloads
    out = tmp_path / "s.h5"
    with pytest.raises(RunInterrupted):
        run_scenario(sc, out, threads=1, progress=False, stop=_stop_after(3))
    text = (tmp_path / "t.csv").read_text()
    (tmp_path / "t.csv").write_text(text + "\n899,0,0,5")
    assert "the run's inputs differ from when it started: its trace file" in _error(capsys, "--resume",
                                                                                     incomplete_path(out))
    (tmp_path / "t.csv").write_text(text)
    assert main(["run", "--resume", str(incomplete_path(out)), "-q"]) == 0


# --- stopped by a signal, resumed from the command line --------------------------------------------

# machine -> (scenario, overrides of a run that lasts some seconds and flushes often)
SIGNAL_RUNS = {
    "mesh": ("smoke.toml", ["run.cycles=16000", "output.flush_every_cycles=400", "run.window_cycles=800"]),
    "ipu": ("ipu_gpt2_24l_8ipu.toml", ["run.steps=600"]),
}


def _start(args, cwd):
    return subprocess.Popen([sys.executable, "-m", "meshsim", *map(str, args)], cwd=cwd, env=ENV,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)


def stop_by_signal(machine, sig, threads, work: Path, seed) -> str:
    """Start the machine's run, send `sig` at a random moment after its first checkpoint, then
    resume it from the command line; returns how the stopped run ended."""
    scenario, overrides = SIGNAL_RUNS[machine]
    out = work / f"{machine}.h5"
    proc = _start(["run", SC / scenario, *overrides, EVERY, "-o", out, "-q", "--threads", threads], work)
    ck = checkpoint_path(out)
    t0 = time.perf_counter()
    try:
        while not ck.exists() and proc.poll() is None and time.perf_counter() - t0 < 300:
            time.sleep(0.01)
        time.sleep(random.Random(seed).uniform(0.0, 1.0))
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, sig)
        proc.wait()
    if out.exists():
        return "finished before the signal"
    assert incomplete_path(out).exists() and ck.exists()
    with h5py.File(ck, "r") as f:
        held = int(f.attrs["cycles_done"])
    r = subprocess.run([sys.executable, "-m", "meshsim", "run", "--resume", incomplete_path(out), "-q", "--threads",
                        str(threads)], cwd=work, env=ENV, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert out.exists() and not incomplete_path(out).exists() and not ck.exists()
    assert not list(work.glob("*.part"))
    ref = work / "ref.h5"
    run_scenario(load_scenario(SC / scenario, [*overrides, EVERY]), ref, threads=threads, progress=False)
    assert_same_results(ref, out)
    return f"resumed from {held}"


@pytest.mark.parametrize("machine,sig,threads", [
    ("mesh", signal.SIGKILL, 2),
    pytest.param("mesh", signal.SIGTERM, 1, marks=pytest.mark.slow),  # the path of the stops above, by a signal
    pytest.param("mesh", signal.SIGINT, 2, marks=pytest.mark.slow),
    pytest.param("ipu", signal.SIGKILL, 1, marks=pytest.mark.slow),
    pytest.param("ipu", signal.SIGTERM, 2, marks=pytest.mark.slow),
], ids=lambda v: getattr(v, "name", str(v)))
def test_a_run_stopped_by_a_signal_resumes_from_the_command_line(tmp_path, machine, sig, threads):
    how = stop_by_signal(machine, sig, threads, tmp_path, f"{machine}{sig}{threads}")
    assert how.startswith("resumed"), how


# --- killed at its first flush: the first checkpoint, and what the messages say ----------------------

# smoke.toml flushed every 300 cycles: its first flush at cycle 300
FIRST = ["run.cycles=1200", "output.flush_every_cycles=300", "run.window_cycles=100"]


def _held_and_killed(tmp_path, args, at):
    proc = start_held(args, tmp_path, at)
    try:
        wait_held(proc, tmp_path)
    finally:
        kill(proc)


def _reported(capsys, path) -> tuple:
    """(exit status, stdout, stderr) of `meshsim report PATH`."""
    code = main(["report", str(path)])
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    return code, out, err


def test_when_a_checkpoint_is_due():
    """The rule alone, on times given to it (docs/results.md, "Resuming a run")."""
    from meshsim.run import CheckpointClock

    auto = CheckpointClock(0.0, 0.0, have_one=False, guess=1e9)
    assert auto.due(0.0)  # the first flush gets one, however long it is guessed to take
    auto.tried(10.0, 11.0)  # it took a second
    assert not auto.due(30.9) and auto.due(31.1)  # then 20 times as long after it
    every = CheckpointClock(60.0, 0.0, have_one=False, guess=0.0)
    assert every.due(0.0)  # the first with the first flush, whatever the interval
    every.tried(0.0, 0.01)
    assert not every.due(59.9) and every.due(60.1)
    forced = CheckpointClock(0.001, 0.0, have_one=False, guess=1e9)
    forced.tried(10.0, 11.0)  # a second to write, and one due 1 ms after it all the same
    assert forced.due(11.002)
    resumed = CheckpointClock(0.0, 0.0, have_one=True, guess=0.5)  # resumed from one: the rule from there
    assert not resumed.due(9.9) and resumed.due(10.0)


def test_a_run_killed_right_after_its_first_flush_resumes(tmp_path, capsys):
    """The first checkpoint comes with the first flush, however long checkpoints are guessed to take
    (tests/held.py guesses them endless): a run killed just after it keeps a file report reads,
    and resumes to the file a run never stopped writes. Killed again as the resumed run makes its
    first flush, the file holds the cycles resumed from but no summary, and report says it resumes."""
    out = tmp_path / "r.h5"
    args = ["run", SC / "smoke.toml", *FIRST, "-o", out, "-q", "--threads", "1"]
    _held_and_killed(tmp_path, args, "checkpoint")
    inc, ck = incomplete_path(out), checkpoint_path(out)
    assert _held(out) == 300
    code, text, _ = _reported(capsys, inc)
    assert code == 0 and "INCOMPLETE (300 cycles done)" in text
    _held_and_killed(tmp_path, ["run", "--resume", inc, "-q", "--threads", "1"], "flush")
    code, _, err = _reported(capsys, inc)
    assert code == 2 and f"{inc}: the run was stopped before it wrote a summary: the file holds 300 cycles, but no " \
                          f"figures of them; it resumes from its checkpoint at cycle 300: meshsim run --resume {inc}" \
                          in err, err
    assert main(["run", "--resume", str(inc), "-q", "--threads", "1"]) == 0
    assert out.exists() and not inc.exists() and not ck.exists()
    ref = tmp_path / "ref.h5"
    run_scenario(load_scenario(SC / "smoke.toml", FIRST), ref, threads=1, progress=False)
    assert_same_results(ref, out)


def test_what_a_run_killed_before_its_first_checkpoint_kept_is_said_truly(tmp_path, capsys):
    """Killed before its first flush, a run kept no cycles and cannot resume; killed between its first
    flush and the checkpoint after it, it kept the flush's cycles, which report reads, and cannot
    resume: report and --resume say which, and how many cycles."""
    out = tmp_path / "r.h5"
    inc = incomplete_path(out)
    args = ["run", SC / "smoke.toml", *FIRST, "-o", out, "-q", "--threads", "1"]
    _held_and_killed(tmp_path, args, "flush")
    code, _, err = _reported(capsys, inc)
    assert code == 2 and f"{inc}: the run was stopped before its first flush: the file holds no cycles yet, and no " \
                          "summary; it cannot resume (there is no checkpoint of it): run the scenario again" in err, err
    assert f"{inc}: the run was stopped before its first flush: the file holds no cycles, and there is no " \
           "checkpoint r.checkpoint.h5 beside it, so there is nothing to resume; run the scenario again" \
           in _error(capsys, "--resume", inc)
    _held_and_killed(tmp_path, args, "flushed")
    assert not checkpoint_path(out).exists()
    code, text, _ = _reported(capsys, inc)
    assert code == 0 and "INCOMPLETE (300 cycles done)" in text
    assert f"{inc}: holds 300 cycles (as of its last flush; `meshsim report` reads them), but no checkpoint " \
           "r.checkpoint.h5 beside it, so the run cannot resume" in _error(capsys, "--resume", inc)


# --- a sweep's point ---------------------------------------------------------------------------------

def test_a_sweep_point_resumes_within_itself(tmp_path):
    from meshsim.sweep import load_sweep, run_point
    from meshsim.sweep.execute import can_resume

    (tmp_path / "sw.toml").write_text(
        f'[sweep]\nbase = "{(SC / "smoke.toml").as_posix()}"\nname = "p"\n'
        f'[set]\n"run.cycles" = 1500\n"output.flush_every_cycles" = 100\n"output.checkpoint_every_seconds" = 0\n'
        '[grid]\n"workload.hot_rate" = [0.3]\n')
    point = load_sweep(tmp_path / "sw.toml").points[0]
    with pytest.raises(RunInterrupted):
        run_point(point, also_stop=_stop_after(7))
    assert can_resume(point)
    row = run_point(point)
    assert row["status"] == "done"
    resumed = Path(point.output)
    fresh = tmp_path / "fresh.h5"
    run_scenario(load_scenario(point.base_path, list(point.overrides), text=point.base_text), fresh, threads=1,
                 progress=False)
    assert_same_results(fresh, resumed)


# --- what cannot resume --------------------------------------------------------------------------------

def _stopped(tmp_path, name="r", extra=(), calls=3):
    sc = _scenario("hotspot_stealing", extra)
    out = tmp_path / f"{name}.h5"
    with pytest.raises(RunInterrupted):
        run_scenario(sc, out, threads=1, progress=False, max_cycles_per_call=45, stop=_stop_after(calls))
    return out


def _error(capsys, *args) -> str:
    assert main(["run", *map(str, args)]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and err.startswith("meshsim: error: ")
    return err


def test_what_cannot_resume_is_a_clear_error_that_leaves_the_file_as_it_was(tmp_path, capsys):
    out = _stopped(tmp_path)
    inc = incomplete_path(out)
    before = inc.read_bytes()
    assert "give no scenario file with it" in _error(capsys, "--resume", inc, SC / "smoke.toml")
    assert "give no -o with it" in _error(capsys, "--resume", inc, "-o", tmp_path / "x.h5")
    assert "give a scenario file, or --resume" in _error(capsys)
    assert "no such result file" in _error(capsys, "--resume", tmp_path / "none.incomplete.h5")
    # a checkpoint of another run of the same name
    (tmp_path / "o").mkdir()
    other = _stopped(tmp_path / "o", "r")
    ck = checkpoint_path(out)
    saved = ck.read_bytes()
    ck.write_bytes(checkpoint_path(other).read_bytes())
    assert "belongs to another run of this name" in _error(capsys, "--resume", inc)
    ck.write_bytes(saved)
    ck.rename(ck.with_suffix(".kept"))
    assert "no checkpoint r.checkpoint.h5 beside it" in _error(capsys, "--resume", inc)
    ck.with_suffix(".kept").rename(ck)
    assert inc.read_bytes() == before and not list(tmp_path.glob("*.part"))
    assert main(["run", "--resume", str(inc), "-q"]) == 0
    assert "the run is complete: there is nothing to resume" in _error(capsys, "--resume", out)


def test_an_rdu_run_is_not_resumable(tmp_path, capsys):
    sc = load_scenario(SC / "rdu_gpt2_o1.toml")
    out = tmp_path / "rdu.h5"
    with pytest.raises(RunInterrupted):
        run_scenario(sc, out, threads=1, progress=False, max_cycles_per_call=1, stop=_stop_after(1))
    assert not checkpoint_path(out).exists()
    assert "rdu runs do not resume" in _error(capsys, "--resume", incomplete_path(out))


def test_a_fresh_run_removes_the_checkpoint_of_the_run_it_replaces(tmp_path):
    out = _stopped(tmp_path)
    assert checkpoint_path(out).exists()
    run_scenario(_scenario("hotspot_stealing", ["run.cycles=300"]), out, threads=1, progress=False)
    assert out.exists() and not checkpoint_path(out).exists() and not incomplete_path(out).exists()


def test_a_checkpoint_cut_while_written_is_ignored(tmp_path, references):
    """A kill while a checkpoint is written leaves its temporary file; the one before it holds."""
    out = _stopped(tmp_path, calls=5)
    part = checkpoint_path(out).with_name(checkpoint_path(out).name + ".part")
    part.write_bytes(b"\x89HDF cut short")
    resume_run(incomplete_path(out), threads=1, progress=False, max_cycles_per_call=45)
    assert not part.exists()
    assert_same_results(references("hotspot_stealing")[0], out)


def test_a_run_lost_right_after_it_resumed_keeps_a_readable_file_that_resumes_again(tmp_path, references):
    """A resumed run flushes at once, with its provisional summary: lost before its next flush (a
    failure at its first kernel-call boundary here), the file still opens at the cycles resumed
    from, with their figures, and resumes again."""
    from meshsim.output import open_result_file, read_provisional

    out = _stopped(tmp_path, calls=6)
    with h5py.File(checkpoint_path(out), "r") as f:
        held = int(f.attrs["cycles_done"])

    def lost():
        raise RuntimeError("the node went away")
    with pytest.raises(RuntimeError, match="went away"):
        resume_run(incomplete_path(out), threads=1, progress=False, max_cycles_per_call=45, stop=lost)
    with open_result_file(incomplete_path(out)) as f:
        assert int(f.attrs["cycles_done"]) == held and f["series/busy"].shape[0] >= held
        assert read_provisional(f)["cycles"] == held
    resume_run(incomplete_path(out), threads=2, progress=False, max_cycles_per_call=45)
    assert_same_results(references("hotspot_stealing")[0], out)


def test_a_run_resumed_on_the_stops_it_followed_goes_on_checkpointing(tmp_path, references):
    """Resumed without max_cycles_per_call, a run follows the stops its checkpoint kept (a Run
    started again): that Run still checkpoints, and a second stop resumes from its newer checkpoint."""
    out = _stopped(tmp_path, calls=3)
    with h5py.File(checkpoint_path(out), "r") as f:
        first = int(f.attrs["cycles_done"])
    with pytest.raises(RunInterrupted):
        resume_run(incomplete_path(out), threads=1, progress=False, stop=_stop_after(3))
    with h5py.File(checkpoint_path(out), "r") as f:
        assert int(f.attrs["cycles_done"]) > first
    resume_run(incomplete_path(out), threads=1, progress=False)
    assert_same_results(references("hotspot_stealing")[0], out)


def test_the_python_api_resumes_a_stopped_run(tmp_path, references):
    import meshsim

    out = _stopped(tmp_path, calls=4)
    result = meshsim.resume(incomplete_path(out), threads=2)
    assert result.complete and result.path == out
    assert_same_results(references("hotspot_stealing")[0], out)
    assert result.summary["cycles"] == 1200


def test_a_run_resumed_from_a_checkpoint_behind_its_file_writes_those_cycles_again(tmp_path, first_calls):
    """Checkpoints far apart (here only where the run stops at a boundary): lost later, the file
    holds cycles after its checkpoint, which the resumed run drops and runs again."""
    sc = _scenario("hotspot_stealing", ["output.checkpoint_every_seconds=1e9"])
    out = tmp_path / "r.h5"
    with pytest.raises(RunInterrupted):
        run_scenario(sc, out, threads=1, progress=False, max_cycles_per_call=45, stop=_stop_after(4))
    held = _held(out)
    seen = []

    def lost():
        seen.append(1)
        if len(seen) > 12:
            raise RuntimeError("the node went away")
        return False
    with pytest.raises(RuntimeError):
        resume_run(incomplete_path(out), threads=2, progress=False, stop=lost)
    with h5py.File(incomplete_path(out), "r", swmr=True) as f:  # killed: still marked open for writing
        assert int(f.attrs["cycles_done"]) > held and f["series/busy"].shape[0] > held
    assert _held(out) == held
    resume_run(incomplete_path(out), threads=1, progress=False)
    assert first_calls[-1] == held
    ref = tmp_path / "ref.h5"  # of the same scenario (checkpoint_every_seconds is in its resolved text)
    run_scenario(sc, ref, threads=1, progress=False, max_cycles_per_call=45)
    assert_same_results(ref, out)


def test_a_run_still_going_is_neither_resumed_nor_replaced(tmp_path):
    """A second process (here the run's own stop callable, which runs between its kernel calls)
    that resumes the run, or starts another to the same result, is refused while it writes."""
    sc = _scenario("hotspot_stealing", ["run.cycles=600"])
    out = tmp_path / "r.h5"
    errors = []

    def meddle():
        if len(errors) < 2 and incomplete_path(out).exists():
            for attempt in (lambda: resume_run(incomplete_path(out), progress=False),
                            lambda: run_scenario(sc, out, threads=1, progress=False)):
                with pytest.raises(InputError) as e:
                    attempt()
                errors.append(str(e.value))
        return False
    run_scenario(sc, out, threads=1, progress=False, max_cycles_per_call=45, stop=meddle)
    assert len(errors) == 2 and all("another run is writing it now (it holds r.lock)" in e for e in errors)
    assert out.exists() and not (tmp_path / "r.lock").exists()


@contextmanager
def _edited_and_signed(ck):
    """The checkpoint `ck` opened for editing, then given the digest of what it holds after the
    edit: a checkpoint whole in itself that disagrees with its file."""
    with h5py.File(ck, "r+") as f:
        yield f
    with h5py.File(ck, "r+") as f:
        attrs = {k: plain(v) for k, v in f.attrs.items()}
        lengths = {k: int(v) for k, v in f["lengths"].attrs.items()}
        arrays = {k: ds[()] for k, ds in f["state"].items()}
        f.attrs["state_sha256"] = state_digest(attrs, lengths, plain(f["state"].attrs["values"]), arrays)


def test_a_resume_that_fails_while_copying_leaves_the_file_and_its_checkpoint_as_they_were(tmp_path, capsys):
    out = _stopped(tmp_path, calls=5)
    inc, ck = incomplete_path(out), checkpoint_path(out)
    before, saved = inc.read_bytes(), ck.read_bytes()
    # a checkpoint that counts more rows than the file holds, then one without an array of the state
    with _edited_and_signed(ck) as f:
        f["lengths"].attrs["series/busy"] = np.int64(10**6)
    assert "series/busy holds 200 rows and its checkpoint counts 1000000" in _error(capsys, "--resume", inc)
    ck.write_bytes(saved)
    with _edited_and_signed(ck) as f:
        del f["state/state.q_len"]
    assert "checkpoint array state.q_len: missing" in _error(capsys, "--resume", inc)
    ck.write_bytes(saved)
    with _edited_and_signed(ck) as f:
        f.attrs["cycles_done"] = np.int64(10**6)
    assert "the file was replaced by an older one" in _error(capsys, "--resume", inc)
    ck.write_bytes(b"not a checkpoint")
    assert "cannot be read" in _error(capsys, "--resume", inc)
    ck.write_bytes(saved)
    assert inc.read_bytes() == before
    with h5py.File(inc, "r+") as f:
        f.attrs["meshsim_version"] = "0.0.1"
    assert "written by meshsim 0.0.1" in _error(capsys, "--resume", inc)
    with h5py.File(inc, "r+") as f:
        f.attrs["meshsim_version"] = h5py.File(ck, "r").attrs["meshsim_version"]
    assert not list(tmp_path.glob("*.part")) and not (tmp_path / "r.lock").exists()
    assert ck.read_bytes() == saved
    assert main(["run", "--resume", str(inc), "-q"]) == 0


def test_a_checkpoint_that_cannot_be_written_is_a_warning_and_the_run_goes_on(tmp_path, capsys, monkeypatch):
    import errno

    import meshsim.checkpoint
    import meshsim.run

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")
    monkeypatch.setattr(meshsim.checkpoint, "write", full)
    monkeypatch.setattr(meshsim.run, "CHECKPOINT_BYTES_PER_SECOND", float("inf"))  # one due at every flush
    out = tmp_path / "r.h5"
    res = run_scenario(_scenario("hotspot_stealing", ["run.cycles=300"]), out, threads=1, progress=False)
    assert res.path == out and out.exists()
    err = capsys.readouterr().err
    assert "meshsim: warning: " in err and "could not be written (No space left on device)" in err
    assert "the run goes on" in err
