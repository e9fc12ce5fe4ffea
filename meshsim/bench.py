"""`meshsim bench`: figures, not tests (docs/design.md, "Performance").

Each machine measures itself (its Machine's `bench`: the mesh's in meshsim/mesh/bench.py, the rdu's
and the ipu's in theirs), in registry order; this module holds what they share (a fresh process's
figures with an empty and a warm compilation cache, peak memory, the bandwidth a triad streams)
and the sweep figures (`meshsim bench --sweep`).
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

# A scenario (argv[1], with {over}) run into argv[2] in a fresh process: its summary's figures
# {keys} as they are, and the process's time, wall and kernel seconds and peak memory.
FRESH_RUN = textwrap.dedent("""
    import json, sys, time
    t0 = time.perf_counter()
    from meshsim.bench import peak_memory_bytes
    from meshsim.run import run_scenario
    from meshsim.scenario import load_scenario
    sc = load_scenario(sys.argv[1], {over})
    res = run_scenario(sc, sys.argv[2], progress=False)
    s = res.summary
    print(json.dumps(dict(process=time.perf_counter() - t0, wall=s["wall_seconds"], kernel=s["kernel_seconds"],
                          peak_bytes=peak_memory_bytes(),
                          **{{k: s[k] for k in {keys}}})))
""")


STREAM = textwrap.dedent("""
    import json
    from meshsim.bench import stream_bandwidth
    print(json.dumps(dict(bandwidth=stream_bandwidth())))
""")


def peak_memory_bytes() -> int:
    """This process's peak resident memory: Linux's VmHWM, which starts afresh at exec. (getrusage's
    ru_maxrss does not: a process started from a large one reports at least its parent's size, so
    the bench's fresh processes read as large as the bench itself.) ru_maxrss where there is no
    /proc (KiB on Linux and the BSDs, bytes on macOS)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    import resource

    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024


def python_json(code: str, *args, env=None) -> tuple[dict, float]:
    t = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, env=env, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1]), time.perf_counter() - t


def cold_and_cached(code: str, scenario: Path) -> tuple[dict, dict]:
    """Figures of `code` run on a scenario in a fresh process twice: with an empty compilation cache,
    then with the cache the first run filled."""
    with tempfile.TemporaryDirectory() as tmp:
        env = dict(os.environ, NUMBA_CACHE_DIR=os.path.join(tmp, "cache"))
        cold, _ = python_json(code, str(scenario), os.path.join(tmp, "a.h5"), env=env)
        warm, _ = python_json(code, str(scenario), os.path.join(tmp, "b.h5"), env=env)
    return cold, warm


def stream_bandwidth(n: int = 1 << 25, repeats: int = 5) -> float:
    """Bytes per second a triad a = b + 3c streams with all the threads in use (STREAM's count: two
    arrays read and one written, 24 bytes an element), the best of `repeats`."""
    import numpy as np
    from numba import njit, prange

    @njit(parallel=True, cache=False)
    def triad(a, b, c):
        for i in prange(a.shape[0]):
            a[i] = b[i] + 3.0 * c[i]

    a, b, c = np.zeros(n), np.ones(n), np.ones(n)
    triad(a[:1024], b[:1024], c[:1024])
    best = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        triad(a, b, c)
        best = min(best, time.perf_counter() - t)
    return 24 * n / best


def measure(quick: bool = False, cycles: int = 300, log=print) -> dict:
    """Every machine's measurements, in registry order, as one dict of figures."""
    from . import machine

    fig = {}
    for m in machine.all_machines():
        fig.update(m.bench(quick=quick, cycles=cycles, log=log))
    return fig


# Sweep figures: a 24 x 24 mesh under uniform routed traffic, one point a rate (about 1.5 s each
# single-threaded here), and the same base cut to 10 cycles for the overhead alone.
_SWEEP_BASE = """
[run]
cycles = {cycles}
seed = 3
[machine]
rows = 24
cols = 24
[migration]
policy = "none"
[workload]
type = "traffic"
pattern = "uniform"
injection_rate = 0.05
warmup_cycles = 0
measure_cycles = {cycles}
[output]
frame_every_cycles = 0
"""


_SWEEP_FILE = """
[sweep]
base = "base.toml"
output = "{out}"
[grid]
workload.injection_rate = [{rates}]
"""


def measure_sweep(workers: int = 2, log=print) -> dict:
    """The sweep bars (docs/sweeps.md, "Figures"): per-point overhead on the local cluster
    (16 points of 10 cycles: scheduling, worker start-up, reading the scenario, writing the row),
    and a 16-point sweep of equal small scenarios run one after another in this process against
    the local cluster of `workers` single-threaded workers."""
    from .sweep import dask_client, load_sweep, run_sweep

    fig = {"sweep_workers": workers}
    rates = ", ".join(f"{0.01 + 0.002 * i:.3f}" for i in range(16))
    with tempfile.TemporaryDirectory() as tmp:
        def sweep_of(name, cycles):
            folder = Path(tmp) / name
            folder.mkdir()
            (folder / "base.toml").write_text(_SWEEP_BASE.format(cycles=cycles))
            (folder / "s.toml").write_text(_SWEEP_FILE.format(out=folder / "out", rates=rates))
            return load_sweep(folder / "s.toml")

        connect = functools.partial(dask_client, workers=workers)  # starting the cluster counts
        res = run_sweep(sweep_of("tiny", 10), connect=connect, progress=False)
        fig["sweep_overhead_seconds_per_point"] = res.overhead_per_point
        log(f"sweep overhead, 16 points of 10 cycles on {workers} local workers: {res.overhead_per_point:.2f} s per "
            f"point beyond the runs, starting the cluster included ({res.wall_seconds:.2f} s in all)")

        run_sweep(sweep_of("warm", 10), progress=False)  # this process compiles or loads the kernels first
        serial = run_sweep(sweep_of("serial", 12_000), progress=False)
        par = run_sweep(sweep_of("cluster", 12_000), connect=connect, progress=False)
        fig["sweep16_serial_seconds"] = serial.wall_seconds
        fig["sweep16_cluster_seconds"] = par.wall_seconds
        fig["sweep16_ratio"] = par.wall_seconds / serial.wall_seconds
        fig["sweep16_cluster_overhead_seconds_per_point"] = par.overhead_per_point
        log(f"16-point sweep of equal scenarios ({serial.run_seconds / 16:.2f} s a point): {serial.wall_seconds:.1f} s "
            f"one after another, {par.wall_seconds:.1f} s on {workers} local workers, starting them included: "
            f"{fig['sweep16_ratio']:.2f} of the serial time; overhead {par.overhead_per_point:.2f} s per point")
    return fig


def run_bench(json_out: bool = False, quick: bool = False, cycles: int = 300, sweep: bool = False) -> dict:
    """`meshsim bench`: print the figures (as JSON with json_out); with `sweep`, the sweep figures only."""
    log = (lambda *_: None) if json_out else print
    fig = measure_sweep(log=log) if sweep else measure(quick=quick, cycles=cycles, log=log)
    if json_out:
        print(json.dumps(fig, indent=2))
    return fig
