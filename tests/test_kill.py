"""A run killed with SIGKILL at any moment leaves a file that opens, that `meshsim report` reads
(marked incomplete), and whose datasets hold at least the cycles its `cycles_done` says
(docs/results.md): for the mesh, the rdu and the ipu, and for a sweep's point files.

Every kill waits for a moment of the run's file's life, never for a number of seconds, so that what
a kill finds does not depend on how fast the host is or how loaded: the process just started (no
file yet), its layout's temporary file there (being laid out), its file there (before its first
flush), its first flush in the file, or its second or third. The default run kills each machine
twice: when its file appears and after its first flush; `-m slow` kills each at 20 moments, drawn
from those (a seeded draw, half of them after a flush), each a little after the moment (a seeded
delay, which moves where the kill lands, never what the test asks of the file). An rdu run of a
second is killed mid-way, held just after its first flush (tests/held.py). tests/test_resume.py
kills mesh runs at their first flush and checkpoint and resumes them.
"""

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import h5py
import numpy as np
import pytest
from held import kill, start_held, wait_held

from meshsim.output import incomplete_path, open_result_file, part_path

ROOT = Path(__file__).resolve().parents[1]
ENV = dict(os.environ, PYTHONPATH=str(ROOT))
#: A safety net only: every wait is for a state of a file, however long the host takes to reach it.
PATIENCE = 900.0

# machine -> overrides of a short run that loads (or compiles) the kernels before the kills
WARM = {"mesh": ["run.cycles=20"], "rdu": ["workload.n_layers=1"], "ipu": ["run.steps=1"]}

# machine -> (scenario, overrides that make a run long enough to be killed mid-way, flushing often:
# the rdu and the ipu flush after their first kernel call and then every second, for many seconds)
RUNS = {
    "mesh": ("smoke.toml", ["run.cycles=100000000", "output.flush_every_cycles=20", "run.window_cycles=100"]),
    "rdu": ("rdu_sn30_train_h4096.toml", ["workload.n_layers=96", "workload.batch=32"]),
    "ipu": ("ipu_gpt2_24l_8ipu.toml", ["run.steps=2000"]),
}

#: The moments a run is killed at: a state of its files the test waits for.
MOMENTS = ("start", "layout", "file", "flush 1", "flush 2", "flush 3")


def _meshsim(*args, cwd):
    return subprocess.run([sys.executable, "-m", "meshsim", *map(str, args)], capture_output=True, text=True,
                          cwd=cwd, env=ENV)


def _start(args, cwd):
    return subprocess.Popen([sys.executable, "-m", "meshsim", *map(str, args)], cwd=cwd, env=ENV,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)


def _cycles_done(inc: Path) -> int | None:
    """The cycles_done of a running (or killed) result file, read through SWMR as a reader may while
    it is written; None if it cannot be read just now (replaced while the run finishes, say)."""
    try:
        with open_result_file(inc) as f:
            return int(f.attrs["cycles_done"])
    except (OSError, RuntimeError, KeyError, ValueError):
        return None


def _reached(out: Path, moment: str, flushes: set) -> bool:
    """Whether the run writing `out` is at `moment` (MOMENTS) or past it; `flushes` collects the
    cycles_done values seen, each a flush."""
    inc = incomplete_path(out)
    if moment == "start":
        return True
    if moment == "layout":
        return part_path(inc).exists() or inc.exists()
    if moment == "file":
        return inc.exists()
    done = _cycles_done(inc) if inc.exists() else None
    if done:
        flushes.add(done)
    return len(flushes) >= int(moment.split()[1])


def wait_for(proc, out: Path, moment: str) -> None:
    """Wait until the run reaches `moment`; AssertionError if it ends first."""
    flushes: set = set()
    t0 = time.monotonic()
    while not _reached(out, moment, flushes):
        assert proc.poll() is None, f"the run ended (exit status {proc.returncode}) before the moment {moment!r}"
        assert time.monotonic() - t0 < PATIENCE, f"the run never reached the moment {moment!r}"
        time.sleep(0.005)


def _kill(proc) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def _cycles_held(f, machine) -> int:
    """The cycles the file's datasets cover."""
    if machine == "mesh":
        return min(f["cycle"].shape[0], *(ds.shape[0] for ds in f["series"].values()),
                   f["occupancy/depth_histogram"].shape[0])
    if machine == "rdu":
        n = min(f["interval_start"].shape[0], f["series/interval_cycles"].shape[0])
        return int(f["interval_start"][n - 1] + f["series/interval_cycles"][n - 1]) if n else 0
    n = min(f["pipeline/start_cycle"].shape[0], f["pipeline/cycles"].shape[0])
    return int(f["pipeline/start_cycle"][n - 1] + f["pipeline/cycles"][n - 1]) if n else 0


def check_killed(path: Path, machine: str, cwd) -> str:
    """Check what a kill left at `path` (a result's final name); returns what was found."""
    inc = path.with_name(path.stem + ".incomplete.h5")
    if path.exists():  # it finished before the kill
        with h5py.File(path, "r") as f:
            assert bool(f.attrs["complete"])
        return "complete"
    if not inc.exists():
        return "before the file"  # killed before the layout was on disk: nothing had run
    with open_result_file(inc) as f:
        done = int(f.attrs["cycles_done"])
        assert bool(f.attrs["complete"]) is False
        f.visititems(lambda name, obj: obj[()] if isinstance(obj, h5py.Dataset) else None)  # every byte reads
        assert done <= _cycles_held(f, machine)
    rep = _meshsim("report", inc, cwd=cwd)
    assert "Traceback" not in rep.stderr, rep.stderr
    if rep.returncode == 2:  # killed before its first flush
        assert "the run was stopped before its first flush: the file holds no cycles yet" in rep.stderr, rep.stderr
        assert "it cannot resume" in rep.stderr and done == 0
        return "no flush yet"
    assert rep.returncode == 0, rep.stderr
    assert "INCOMPLETE" in rep.stdout
    pl = _meshsim("plot", inc, "--kind", "timeline", "-o", path.parent / "plots", cwd=cwd)
    assert "Traceback" not in pl.stderr, pl.stderr
    assert pl.returncode == 0 or (pl.returncode == 2 and "killed in the middle of a flush" in pl.stderr), pl.stderr
    return "flushed"


def kill_runs(machine: str, moments: list, work: Path, seed: int = 1) -> list:
    """Start the machine's run once per moment, kill it there (a seeded delay after it, up to
    `delay` seconds: where the kill lands, not what is asked of the file) and check what it left."""
    scenario, overrides = RUNS[machine]
    out = work / f"{machine}.h5"
    args = ["run", ROOT / "scenarios" / scenario, *overrides, "-o", out, "-q", "--threads", "1"]
    warm = _meshsim("run", ROOT / "scenarios" / scenario, *WARM[machine], "-o", work / "warm.h5", "-q", cwd=work)
    assert warm.returncode == 0, warm.stderr
    rng = random.Random(seed)
    found = []
    for moment, delay in moments:
        inc = incomplete_path(out)
        for p in (out, inc, part_path(inc)):
            p.unlink(missing_ok=True)
        proc = _start(args, work)
        try:
            wait_for(proc, out, moment)
            if delay:
                time.sleep(rng.uniform(0.0, delay))
        finally:
            _kill(proc)
        what = check_killed(out, machine, work)
        # what each moment must find, whatever the host's speed: a kill after a flush keeps it
        assert what in {"start": ("before the file", "no flush yet", "flushed"),
                        "layout": ("before the file", "no flush yet", "flushed"),
                        "file": ("no flush yet", "flushed")}.get(moment, ("flushed",)), (moment, what)
        found.append(what)
    return found


@pytest.mark.parametrize("machine", ["mesh", "rdu", "ipu"])
def test_a_run_killed_before_and_after_its_first_flush_leaves_a_file_report_reads(tmp_path, machine):
    found = kill_runs(machine, [("file", 0.0), ("flush 1", 0.0)], tmp_path)
    assert found[1] == "flushed", found


@pytest.mark.slow
@pytest.mark.parametrize("machine", ["mesh", "rdu", "ipu"])
def test_twenty_kills_each_leave_a_readable_file(tmp_path, machine):
    rng = random.Random(f"twenty {machine}")
    moments = [(MOMENTS[i % 3], 0.5) for i in range(10)] + [(MOMENTS[3 + i % 3], 0.5) for i in range(10)]
    rng.shuffle(moments)  # ten before the first flush or at it, ten after one
    found = kill_runs(machine, moments, tmp_path, seed=20)
    print(machine, {k: found.count(k) for k in set(found)})
    assert found.count("flushed") >= sum(m.startswith("flush") for m, _ in moments) >= 10, found


@pytest.mark.slow  # the rdu's kill before and after its first flush is in the default run, above
def test_an_rdu_run_killed_mid_way_leaves_a_file_report_reads(tmp_path):
    """An rdu run of about a second (its kernel calls a few tenths each) is flushed after its first
    call: killed there, mid-way, its file holds a summary of what ran, which report reads."""
    sc = ROOT / "scenarios" / "rdu_gpt2_o1.toml"
    whole = _meshsim("run", sc, "-o", tmp_path / "whole.h5", "-q", "--threads", "1", cwd=tmp_path)
    assert whole.returncode == 0, whole.stderr
    out = tmp_path / "rdu.h5"
    proc = start_held(["run", sc, "-o", out, "-q", "--threads", "1"], tmp_path, "flushed")
    try:
        wait_held(proc, tmp_path)
    finally:
        kill(proc)
    assert check_killed(out, "rdu", tmp_path) == "flushed"
    inc = incomplete_path(out)
    with open_result_file(inc) as f, h5py.File(tmp_path / "whole.h5", "r") as w:
        assert 0 < int(f.attrs["cycles_done"]) < int(w.attrs["cycles_done"])  # mid-way
    rep = _meshsim("report", inc, "--json", cwd=tmp_path)
    assert rep.returncode == 0, rep.stderr
    assert '"complete": false' in rep.stdout and '"analysis": null' in rep.stdout


def test_a_killed_sweep_keeps_readable_point_files(tmp_path):
    (tmp_path / "sw.toml").write_text(
        f'[sweep]\nbase = "{(ROOT / "scenarios" / "smoke.toml").as_posix()}"\nname = "k"\n'
        '[set]\n"run.cycles" = 100000000\n"output.flush_every_cycles" = 20\n'
        '[grid]\n"workload.hot_rate" = [0.3, 0.4]\n')
    proc = subprocess.Popen([sys.executable, "-m", "meshsim", "sweep", "sw.toml", "--serial", "--threads", "1"],
                            cwd=tmp_path, env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    t0 = time.monotonic()
    done = 0
    try:
        while done < 20:  # read while it runs, as SWMR allows, until a point's file shows a flush
            assert proc.poll() is None, f"the sweep ended (exit status {proc.returncode})"
            assert time.monotonic() - t0 < PATIENCE, "no point's file ever showed a flush"
            time.sleep(0.01)
            for p in tmp_path.glob("**/points/*.incomplete.h5"):
                done = max(done, _cycles_done(p) or 0)
    finally:
        _kill(proc)
    files = list(tmp_path.glob("**/points/*.incomplete.h5"))
    assert len(files) == 1
    final = files[0].with_name(files[0].name.replace(".incomplete", ""))
    assert check_killed(final, "mesh", tmp_path) == "flushed"
    with open_result_file(files[0]) as f:
        assert f["series/busy"].shape[0] >= int(f.attrs["cycles_done"]) >= 20
        assert np.all(f["series/busy"][: int(f.attrs["cycles_done"])] >= 0)
