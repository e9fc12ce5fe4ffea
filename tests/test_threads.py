"""More threads are never a trap (docs/mesh.md, "Threads"): the default thread count follows the
grid, never exceeds the cores the process may run on, and threads spin only briefly at barriers."""

import os
import subprocess
import sys
from pathlib import Path

import numba

from meshsim import threads
from meshsim.mesh import sim as mesh
from meshsim.mesh.sim import PES_PER_THREAD, available_cores, default_threads, set_threads

ROOT = Path(__file__).resolve().parents[1]


def test_small_grids_run_on_one_thread_and_large_ones_on_every_core(monkeypatch):
    monkeypatch.setattr(mesh, "available_cores", lambda: 4)
    assert default_threads(32 * 48) == 1  # the smoke scenario
    assert default_threads(64 * 64) == 1
    assert default_threads(PES_PER_THREAD - 1) == 1
    assert default_threads(2 * PES_PER_THREAD) == 2
    assert default_threads(3 * PES_PER_THREAD + 5) == 3
    assert default_threads(757 * 996) == 4  # the full wafer: every core
    assert default_threads(0) == 1  # the rdu and the ipu: serial kernels


def test_threads_never_exceed_the_cores_the_process_may_run_on():
    cores = available_cores()
    assert 1 <= cores <= numba.config.NUMBA_NUM_THREADS
    if hasattr(os, "sched_getaffinity"):
        assert cores <= len(os.sched_getaffinity(0))
    try:
        assert set_threads(cores + 5) == cores
        assert set_threads(0, 757 * 996) == min(cores, 757 * 996 // PES_PER_THREAD)  # the mesh's: by PEs
        assert threads.set_threads(0, default_threads(757 * 996)) == min(cores, 757 * 996 // PES_PER_THREAD)
        assert threads.set_threads(0) == 1  # a machine whose kernels are serial
        assert set_threads(1) == 1
    finally:
        numba.set_num_threads(numba.config.NUMBA_NUM_THREADS)


def test_a_run_with_the_default_threads_records_how_many_it_used(tmp_path):
    from meshsim.run import run_scenario
    from meshsim.scenario import load_scenario

    res = run_scenario(load_scenario(ROOT / "scenarios" / "smoke.toml", [("run.cycles", 50)]), tmp_path / "s.h5",
                       progress=False)
    assert res.summary["threads"] == 1


def test_threads_spin_briefly_at_barriers_unless_the_environment_says_otherwise():
    code = "import os, kernels.config; print(os.environ.get('GOMP_SPINCOUNT'), os.environ.get('OMP_WAIT_POLICY'))"
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
    env["PYTHONPATH"] = str(ROOT)

    def seen(**extra):
        out = subprocess.run([sys.executable, "-c", code], env=dict(env, **extra), capture_output=True, text=True,
                             check=True)
        return out.stdout.split()

    assert seen() == ["3000", "None"]
    assert seen(OMP_WAIT_POLICY="ACTIVE") == ["None", "ACTIVE"]  # the user's choice stands
    assert seen(GOMP_SPINCOUNT="100") == ["100", "None"]
