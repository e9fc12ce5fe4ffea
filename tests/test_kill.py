"""A run killed with SIGKILL at any moment leaves a file that opens, that `meshsim report` reads
(marked incomplete), and whose datasets hold at least the cycles its `cycles_done` says
(docs/results.md): for the mesh, the rdu and the ipu, and for a sweep's point files.

The default run kills each machine twice: just after its file appears, and at a random moment (a
seeded draw, from the process's start, so before the file exists, while its layout is written,
during flushes or between them); `-m slow` kills each at 20. tests/test_resume.py kills a mesh run
after its first checkpoint and resumes it.
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

from meshsim.output import open_result_file, part_path

ROOT = Path(__file__).resolve().parents[1]
ENV = dict(os.environ, PYTHONPATH=str(ROOT))

# machine -> overrides of a short run that loads (or compiles) the kernels before the kills
WARM = {"mesh": ["run.cycles=20"], "rdu": ["workload.n_layers=1"], "ipu": ["run.steps=1"]}

# machine -> (scenario, overrides that make a run long enough to be killed mid-way, flushing often)
RUNS = {
    "mesh": ("smoke.toml", ["run.cycles=100000000", "output.flush_every_cycles=20", "run.window_cycles=100"]),
    "rdu": ("rdu_sn30_train_h4096.toml", ["workload.n_layers=96", "workload.batch=32"]),
    "ipu": ("ipu_gpt2_24l_8ipu.toml", ["run.steps=2000"]),
}


def _meshsim(*args, cwd):
    return subprocess.run([sys.executable, "-m", "meshsim", *map(str, args)], capture_output=True, text=True,
                          cwd=cwd, env=ENV)


def _start(args, cwd):
    return subprocess.Popen([sys.executable, "-m", "meshsim", *map(str, args)], cwd=cwd, env=ENV,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)


def _kill_at(proc, seconds):
    try:
        proc.wait(timeout=seconds)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def _kill_after_file(proc, inc: Path, seconds: float) -> None:
    """Kill `proc` `seconds` after the file `inc` appears (or when it ends, or after 300 s without it)."""
    t0 = time.perf_counter()
    while not inc.exists() and proc.poll() is None and time.perf_counter() - t0 < 300:
        time.sleep(0.005)
    _kill_at(proc, seconds)


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
        assert "the run stopped before it wrote a summary (0 cycles done" in rep.stderr, rep.stderr
        assert done == 0
        return "no flush yet"
    assert rep.returncode == 0, rep.stderr
    assert "INCOMPLETE" in rep.stdout
    pl = _meshsim("plot", inc, "--kind", "timeline", "-o", path.parent / "plots", cwd=cwd)
    assert "Traceback" not in pl.stderr, pl.stderr
    assert pl.returncode == 0 or (pl.returncode == 2 and "killed in the middle of a flush" in pl.stderr), pl.stderr
    return "flushed"


def _time_to_file(args, cwd, path) -> float:
    """Seconds from a run's start until its incomplete file exists (the run then killed)."""
    inc = path.with_name(path.stem + ".incomplete.h5")
    t0 = time.perf_counter()
    proc = _start(args, cwd)
    try:
        while not inc.exists() and proc.poll() is None and time.perf_counter() - t0 < 120:
            time.sleep(0.01)
        return time.perf_counter() - t0
    finally:
        _kill_at(proc, 0)


def kill_runs(machine: str, kills: int, work: Path, seed: int = 1) -> list:
    scenario, overrides = RUNS[machine]
    out = work / f"{machine}.h5"
    args = ["run", ROOT / "scenarios" / scenario, *overrides, "-o", out, "-q", "--threads", "1"]
    # the run's own timing on this host: kills fall from its start to a few seconds past the file's
    # appearance, so some land before it exists, some while it is laid out, most while it runs
    warm = _meshsim("run", ROOT / "scenarios" / scenario, *WARM[machine], "-o", work / "warm.h5", "-q", cwd=work)
    assert warm.returncode == 0, warm.stderr
    appear = _time_to_file(args, work, out)
    rng = random.Random(seed)
    found = []
    for k in range(kills):
        inc = out.with_name(out.stem + ".incomplete.h5")
        for p in (out, inc, part_path(inc)):
            p.unlink(missing_ok=True)
        if k:
            _kill_at(_start(args, work), rng.uniform(0.5 * appear, appear + 3.0))
        else:  # just after the file appears, however long that takes on a busy host
            _kill_after_file(_start(args, work), inc, 0.02)
        found.append(check_killed(out, machine, work))
    return found


@pytest.mark.parametrize("machine", ["mesh", "rdu", "ipu"])
def test_a_run_killed_at_random_moments_leaves_a_file_report_reads(tmp_path, machine):
    found = kill_runs(machine, 2, tmp_path)
    assert "flushed" in found or "no flush yet" in found, found


@pytest.mark.slow
@pytest.mark.parametrize("machine", ["mesh", "rdu", "ipu"])
def test_twenty_kills_each_leave_a_readable_file(tmp_path, machine):
    found = kill_runs(machine, 20, tmp_path, seed=20)
    print(machine, {k: found.count(k) for k in set(found)})
    assert found.count("flushed") >= 10, found


def test_a_killed_sweep_keeps_readable_point_files(tmp_path):
    (tmp_path / "sw.toml").write_text(
        f'[sweep]\nbase = "{(ROOT / "scenarios" / "smoke.toml").as_posix()}"\nname = "k"\n'
        '[set]\n"run.cycles" = 100000000\n"output.flush_every_cycles" = 20\n'
        '[grid]\n"workload.hot_rate" = [0.3, 0.4]\n')
    proc = subprocess.Popen([sys.executable, "-m", "meshsim", "sweep", "sw.toml", "--serial", "--threads", "1"],
                            cwd=tmp_path, env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    t0 = time.perf_counter()
    done = 0
    try:
        while done < 20 and time.perf_counter() - t0 < 180:  # read while it runs, as SWMR allows
            time.sleep(0.1)
            for p in tmp_path.glob("**/points/*.incomplete.h5"):
                with open_result_file(p) as f:
                    done = int(f.attrs["cycles_done"])
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    files = list(tmp_path.glob("**/points/*.incomplete.h5"))
    assert len(files) == 1
    final = files[0].with_name(files[0].name.replace(".incomplete", ""))
    assert check_killed(final, "mesh", tmp_path) == "flushed"
    with open_result_file(files[0]) as f:
        assert f["series/busy"].shape[0] >= int(f.attrs["cycles_done"]) >= 20
        assert np.all(f["series/busy"][: int(f.attrs["cycles_done"])] >= 0)
