"""The mesh's part of `meshsim bench` (meshsim.bench; docs/design.md, "Performance").

Prints simulated PE-cycles per second on the full WSE-2 fabric (757 x 996) with migration on at
moderate load (offered load 0.5: rate 0.05, geometric work of mean 10, least_loaded, threshold 2),
with 1 thread and with all cores; start-up time cold (compiling) and cached; bytes of state per
PE; the bytes of state a PE-cycle of the task path, of routed traffic and of the layer pipeline
touches, counted, against the bandwidth a triad streams (the simulator's own roofline), and the
task path's speed with its state in cache; what an idle and a busy PE cost on the task path, on
the hotspot scenario and in the layer pipeline's fill; each migration policy's speed beside
least_loaded's; peak memory of a full-fabric 1,000-cycle run; the HDF5 writing overhead; a run's
threads on a busy host; and the plain reference's speed on a small grid for the ratio.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import numba

from ..bench import STREAM, python_json
from . import policies

#: The shipped scenarios the bench runs.
SCENARIOS = Path(__file__).resolve().parents[2] / "scenarios"

BENCH_SCENARIO = {
    "run": {"cycles": 1000, "seed": 1, "window_cycles": 100},
    "machine": {"rows": 757, "cols": 996, "queue_capacity": 16, "hop_latency_cycles": 1},
    "migration": {"policy": "least_loaded", "threshold": 2},
    "workload": {"type": "uniform", "injection_rate": 0.05, "work_distribution": "geometric", "work_cycles": 10,
                 "work_max_cycles": 400},
    "output": {"frame_every_cycles": 100, "flush_every_cycles": 500},
}


_STARTUP = textwrap.dedent("""
    import time, json
    t0 = time.perf_counter()
    from meshsim.scenario import scenario_from_dict
    from meshsim.mesh import MeshSim, build_inputs
    t1 = time.perf_counter()
    sc = scenario_from_dict({d})
    sim = MeshSim(build_inputs(sc), 1)
    t2 = time.perf_counter()
    sim.advance(1)
    t3 = time.perf_counter()
    print(json.dumps(dict(imports=t1 - t0, setup=t2 - t1, first_cycle=t3 - t2)))
""")


_PEAK = textwrap.dedent("""
    import json, sys
    from meshsim.bench import peak_memory_bytes
    from meshsim.run import run_scenario
    from meshsim.scenario import scenario_from_dict
    res = run_scenario(scenario_from_dict({d}), sys.argv[1], progress=False)
    print(json.dumps(dict(peak_bytes=peak_memory_bytes(), wall=res.summary["wall_seconds"],
                          kernel=res.summary["kernel_seconds"], output=res.summary["output_seconds"])))
""")


def _scenario(quick: bool, **run):
    import copy

    d = copy.deepcopy(BENCH_SCENARIO)
    if quick:
        d["machine"].update(rows=128, cols=128)
    d["run"].update(run)
    return d


def measure(quick: bool = False, cycles: int = 300, log=print) -> dict:
    """Run every measurement and return the figures as a dict."""
    from ..scenario import scenario_from_dict

    fig = {}
    sc = scenario_from_dict(_scenario(quick))
    n_pe = sc.get("machine", "rows") * sc.get("machine", "cols")
    fig["grid"] = f"{sc.get('machine', 'rows')} x {sc.get('machine', 'cols')}"
    fig["n_pes"] = n_pe
    fig["cores"] = numba.config.NUMBA_NUM_THREADS
    _startup(fig, log)
    _speed(fig, sc, cycles, log)
    _idle_and_busy(fig, quick, cycles, log)
    _policies(fig, quick, cycles, log)
    _hotspot(fig, quick, cycles, log)
    _full_run(fig, quick, log)
    _checkpoint(fig, quick, log)
    _traffic(fig, sc, cycles, log)
    _pipeline(fig, quick, log)
    _decode(fig, quick, log)
    fig.update(measure_contention(quick=quick, log=log))
    _reference(fig, log)
    return fig


def _startup(fig: dict, log) -> None:
    """Start-up: a fresh process up to the end of its first cycle, with an empty and a warm cache."""
    with tempfile.TemporaryDirectory() as cache:
        env = dict(os.environ, NUMBA_CACHE_DIR=cache)
        small = repr(_scenario(True, cycles=10))
        cold, cold_wall = python_json(_STARTUP.format(d=small), env=env)
        warm, warm_wall = python_json(_STARTUP.format(d=small), env=env)
    fig["startup_cold_seconds"] = cold_wall
    fig["startup_cached_seconds"] = warm_wall
    fig["compile_seconds"] = cold["first_cycle"] - warm["first_cycle"]
    fig["cached_first_call_seconds"] = warm["first_cycle"]
    log(f"start-up to the first cycle: {cold_wall:.2f} s cold (compiling {fig['compile_seconds']:.2f} s), "
        f"{warm_wall:.2f} s cached")


def _speed(fig: dict, sc, cycles: int, log) -> None:
    """Simulation speed, kernel only, after a warm-up that fills the queues."""
    from ..scenario import scenario_from_dict
    from .sim import MeshSim, available_cores, build_inputs, set_threads
    from .state import state_bytes_per_pe

    n_pe = fig["n_pes"]
    sim = MeshSim(build_inputs(sc), cycles)
    fig["state_bytes_per_pe"] = state_bytes_per_pe(sim.state)
    sim.advance(min(cycles, 200))
    for label, threads in (("1_thread", 1), ("all_cores", 0)):
        n = set_threads(threads or available_cores())
        sim.advance(min(cycles, 50))
        t = time.perf_counter()
        sim.advance(cycles)
        dt = time.perf_counter() - t
        fig[f"pe_cycles_per_second_{label}"] = n_pe * cycles / dt
        log(f"speed, {n} thread{'s' if n > 1 else ''}: {n_pe * cycles / dt / 1e6:.1f} million PE-cycles/s "
            f"({cycles} cycles of {fig['grid']} in {dt:.2f} s)")
    log(f"state: {fig['state_bytes_per_pe']:.0f} bytes per PE at queue capacity 16")
    # The kernel's own roofline: the bytes its PE-cycles touch against what the cores can stream.
    _report_roofline(fig, "task_path", "task path", fig["pe_cycles_per_second_all_cores"], task_path_bytes(sim, cycles),
                     log, floor=False, at=" at the 2-thread speed", streamed=" (a triad on all cores)")
    # The same path on a grid whose state the caches hold, on one thread (a grid this small spends
    # much of a cycle at the threads' barrier): how much of the full fabric's time is memory's.
    d = _scenario(True)
    d["machine"].update(rows=128, cols=128)
    small = MeshSim(build_inputs(scenario_from_dict(d)), 20 * cycles)
    n = set_threads(1)
    small.advance(250)
    t = time.perf_counter()
    small.advance(20 * cycles)
    dt = time.perf_counter() - t
    set_threads(available_cores())
    rate = 128 * 128 * 20 * cycles / dt
    mib = 128 * 128 * fig["state_bytes_per_pe"] / 2**20
    fig["task_path_in_cache_pe_cycles_per_second_1_thread"] = rate
    log(f"task path in cache, {n} thread: {rate / 1e6:.1f} million PE-cycles/s on 128 x 128 ({mib:.1f} MiB of "
        f"state), {rate / fig['pe_cycles_per_second_1_thread']:.2f} times the full fabric's on one thread: what "
        f"the path would gain if memory cost nothing")


#: The policies `meshsim bench` times, each beside least_loaded: (label, migration keys), from the
#: policies' table (meshsim.mesh.policies).
POLICY_RUNS = policies.bench_runs()


def _policies(fig: dict, quick: bool, cycles: int, log) -> None:
    """Each migration policy's speed on the task path at offered load 0.9 (rate 0.09), where queues
    pass the threshold and the policies move tasks, against least_loaded's; all cores."""
    from kernels import mesh as K

    from ..scenario import scenario_from_dict
    from .sim import MeshSim, available_cores, build_inputs, set_threads

    n = set_threads(available_cores())
    rates = {}
    moved = {}
    for label, keys in POLICY_RUNS:
        d = _scenario(quick)
        d["workload"]["injection_rate"] = 0.09
        d["migration"].update(keys)
        sim = MeshSim(build_inputs(scenario_from_dict(d)), cycles)
        sim.advance(min(cycles, 250))
        t = time.perf_counter()
        sim.advance(cycles)
        dt = time.perf_counter() - t
        rates[label] = fig["n_pes"] * cycles / dt
        moved[label] = float(sim.series[:cycles, K.S_MIGRATED].sum()) / (fig["n_pes"] * cycles)
    fig["policy_pe_cycles_per_second"] = rates
    base = rates["least_loaded"]
    log(f"policies, {n} thread{'s' if n > 1 else ''}, offered load 0.9 (threshold 2), {cycles} cycles of "
        f"{fig['grid']} each:")
    for label, rate in rates.items():
        log(f"  {label}: {rate / 1e6:.1f} million PE-cycles/s, {rate / base:.2f} of least_loaded's "
            f"({moved[label]:.4f} tasks moved a PE-cycle)")


def _report_roofline(fig: dict, key: str, label: str, speed: float, counted: dict, log, floor: bool = True,
                     at: str = "", streamed: str = "") -> None:
    """A path's roofline: the bytes it counted a PE-cycle (`counted`, with "total") at `speed` PE-cycles
    per second against the bandwidth a triad streams (measured once, in a fresh process so that its
    arrays stay out of this one's memory, and kept in `fig`); kept under `key` and printed. `floor`:
    the count leaves some bytes out."""
    bw = fig.get("stream_bandwidth_bytes_per_second")
    if bw is None:
        bw = fig["stream_bandwidth_bytes_per_second"] = python_json(STREAM)[0]["bandwidth"]
    done = speed * counted["total"]
    fig[f"{key}_bytes_per_pe_cycle"] = counted["total"]
    fig[f"{key}_roofline_fraction"] = done / bw
    log(f"roofline, {label}: {'at least ' if floor else ''}{counted['total']:.1f} bytes of state a PE-cycle (counted: "
        + "; ".join(f"{k} {v:.2f}" for k, v in counted.items() if k != "total")
        + f"), {done / 1e9:.1f} GB/s{at} against {bw / 1e9:.1f} GB/s streamed{streamed}: {done / bw:.2f} of the bound")


_COUNTS = "every PE: send and receive counts (read, written)"


def _sizes_and_rates(sim, n: int):
    """What both roofline counts start from: the item size of every state array by field name, and
    a function giving a series column's events per PE-cycle over the last `n` cycles of `sim`."""
    st, s = sim.state, sim.series[:n]
    n_pe = st.q_len.size
    b = {name: getattr(st, name).dtype.itemsize for name in st._fields if hasattr(getattr(st, name), "dtype")}
    return b, lambda col: float(s[:, col].sum()) / (n_pe * n)


def _task_bytes(b: dict) -> int:
    """A queued task's three fields."""
    return b["q_work"] + b["q_birth"] + b["q_hops"]


def _started_per_pe_cycle(sim, n: int, completed: float) -> float:
    """Tasks started in service per PE-cycle over the last `n` cycles of `sim`: those completed, plus
    the growth of the number in service."""
    from kernels import mesh as K

    s = sim.series[:n]
    return completed + float(s[-1, K.S_IN_SERVICE] - s[0, K.S_IN_SERVICE]) / (sim.state.q_len.size * n)


def _counts_bytes(b: dict) -> int:
    """Every PE reads its four send and four receive counts from the last cycle's slot and writes them
    into this cycle's."""
    return 2 * b["sent_h"] * 4 + 2 * b["recv_h"] * 4


def task_path_bytes(sim, n: int) -> dict:
    """The bytes of state a PE-cycle of the task path reads and writes, over the last `n` cycles of
    `sim`: counted from what each step of kernels/mesh.py's `_step_rows` touches (the sizes from the
    state's own dtypes) and how often each step ran (the series). Every PE of a running segment
    reads and writes its counts, queue length, server and depth; the steps 1-6 that only some PEs
    take add their fields per event. A field read and written counts twice; the neighbours' rows
    of counts and depths, read again from the cache, count once. Returns the breakdown, in bytes per
    PE-cycle, and its sum under "total"."""
    import numpy as np

    from kernels import mesh as K

    b, per = _sizes_and_rates(sim, n)
    migrating = int(sim.inputs.cfg[K.CFG_POLICY]) != K.POLICY_NONE
    task = _task_bytes(b)
    injected, refused = per(K.S_INJECTED), per(K.S_REFUSED)
    completed = per(K.S_COMPLETED)
    started = _started_per_pe_cycle(sim, n, completed)
    depth = sim.depth_series[:n].sum(axis=0).astype(float)
    q = np.arange(depth.size)
    behind = float((depth[1:] * (q[1:] - 1)).sum() / max(depth[1:].sum(), 1))  # tasks behind a head that starts
    out = {
        _COUNTS: _counts_bytes(b),
        "every PE: queue length, server, threshold, depth": b["q_len"] + 2 * b["s_rem"] + b["thr"] + b["depth_h"]
        + (b["depth_h"] if migrating else 0),
        "offered tasks": injected * 2 * b["tot_injected"] + (injected - refused) * task
        + refused * 2 * b["tot_refused"],
        "started tasks": started * (task + 2 * task * behind + 2 * b["tot_started"] + b["s_birth"] + b["s_hops"]),
        "completed tasks": completed * (b["s_birth"] + b["s_hops"] + 2 * b["tot_completed"] + 2 * b["tot_latency"]
                                        + 2 * 8),
        "migrated tasks": per(K.S_MIGRATED) * (task + b["link"] + 2 * b["tot_migrated_out"])
        + per(K.S_RECEIVED) * (b["link"] + task + 2 * b["tot_migrated_in"]),
    }
    out["total"] = sum(out.values())
    return out


def traffic_path_bytes(sim, n: int) -> dict:
    """The bytes of state a PE-cycle of routed traffic reads and writes over the last `n` cycles of
    `sim`, counted as `task_path_bytes` counts them: every PE's counts, queue length, server,
    threshold, depth, router-queue lengths and source queue, then per event (from the series) a
    message put on a link (its slot, the link's total), one taken off (its slot), a packet offered
    (the PE's offered total and source-queue head) and one delivered (the delivered total and the
    latency histogram's bin). A packet that waits in a router queue adds its slot's write and read,
    which the series do not count: the figure is a floor. Breakdown in bytes per PE-cycle, "total"
    their sum."""
    from kernels import mesh as K

    b, per = _sizes_and_rates(sim, n)
    out = {
        _COUNTS: _counts_bytes(b),
        "every PE: queue length, server, threshold, depth, router and source queues": b["q_len"] + 2 * b["s_rem"]
        + b["thr"] + b["depth_h"] + 8 * b["oq_len"] + b["src_pending"],
        "messages sent": per(K.S_LINK_SENT) * (b["link"] + 2 * b["link_total"]),
        "messages received": per(K.S_LINK_RECEIVED) * b["link"],
        "packets offered": per(K.S_PKT_OFFERED) * (2 * b["tot_pkt_offered"] + 2 * b["src_scan"]),
        "packets delivered": per(K.S_PKT_DELIVERED) * (2 * b["tot_pkt_delivered"] + 2 * 8),
    }
    out["total"] = sum(out.values())
    return out


def pipeline_path_bytes(sim, n: int) -> dict:
    """The bytes of state a PE-cycle of the layer pipeline reads and writes over the last `n` cycles of
    `sim`, counted as `task_path_bytes` counts them, for a stretch in which every segment is stepped
    (the steady state): every PE's counts, queue length, server, depth, router-queue lengths and
    outputs left to send, then per event from the series a message put on a link and taken off, a
    wavelet delivered (the PE's wavelet count), a task queued, started and completed. Tasks moved up
    a queue and wavelets that wait in a router queue are not in the series: the figure is a floor.
    Breakdown in bytes per PE-cycle, "total" their sum."""
    from kernels import mesh as K

    b, per = _sizes_and_rates(sim, n)
    task = _task_bytes(b)
    completed = per(K.S_COMPLETED)
    started = _started_per_pe_cycle(sim, n, completed)
    out = {
        _COUNTS: _counts_bytes(b),
        "every PE: queue length, server, depth, router queues, outputs left": b["q_len"] + 2 * b["s_rem"]
        + b["depth_h"] + b["oq_len64"] + b["out_left"],
        "messages sent": per(K.S_LINK_SENT) * (b["link"] + 2 * b["link_total"]),
        "messages received": per(K.S_LINK_RECEIVED) * b["link"],
        "wavelets delivered": per(K.S_PKT_DELIVERED) * 2 * b["lp_got"],
        "tasks queued": per(K.S_INJECTED) * task,
        "started tasks": started * (task + 2 * b["tot_started"] + b["s_birth"] + b["s_hops"]),
        "completed tasks": completed * (b["s_birth"] + b["s_hops"] + 2 * b["tot_completed"] + 2 * b["tot_latency"]
                                        + b["lp_g"]),
    }
    out["total"] = sum(out.values())
    return out


def _idle_and_busy(fig: dict, quick: bool, cycles: int, log) -> None:
    """What an idle PE costs against a busy one on the task path: the bench's fabric with nothing offered
    (every PE idle), and with 50 times its capacity offered in tasks of 1,000 cycles (every PE serving
    a task from about cycle 100, its queue full from about 400), all cores, after a warm-up."""
    from ..scenario import scenario_from_dict
    from .sim import MeshSim, available_cores, build_inputs, set_threads

    n_pe = fig["n_pes"]
    set_threads(available_cores())
    cost = {}
    for label, wl in (("idle", dict(injection_rate=0.0)),
                      ("busy", dict(injection_rate=0.05, work_distribution="fixed", work_cycles=1000))):
        d = _scenario(quick)
        d["workload"].update(wl)
        if wl.get("work_distribution") == "fixed":
            del d["workload"]["work_max_cycles"]
        sim = MeshSim(build_inputs(scenario_from_dict(d)), max(cycles, 500))
        sim.advance(500)
        t = time.perf_counter()
        sim.advance(cycles)
        dt = time.perf_counter() - t
        busy = float(sim.series[:cycles, 0].mean()) / n_pe
        cost[label] = dt / (n_pe * cycles) * 1e9
        fig[f"task_path_{label}_ns_per_pe_cycle"] = cost[label]
        fig[f"task_path_{label}_busy_fraction"] = busy
    log(f"task path, all cores: an idle PE costs {cost['idle']:.2f} ns a cycle, a busy one {cost['busy']:.2f} ns "
        f"(idle {cost['idle'] / cost['busy']:.2f} of busy; {cycles} cycles of {fig['grid']} with nothing offered, "
        f"and with every PE serving)")


def idle_and_busy_fit(busy, ns) -> dict:
    """What an idle and a busy PE cost a cycle, from stretches of one workload at different busy
    fractions: the least-squares line through the (busy fraction, ns per PE-cycle) points, read at 0
    (every PE idle) and 1 (every PE busy). Returns both readings with their standard errors, and the
    fit's R^2, so that a line that does not fit, or a reading the points do not pin down, is seen."""
    import numpy as np

    x, y = np.asarray(busy, dtype=float), np.asarray(ns, dtype=float)
    if x.size < 4 or np.ptp(x) == 0:
        raise ValueError("the fit needs four or more stretches at different busy fractions")
    (slope, idle), cov = np.polyfit(x, y, 1, cov="unscaled")
    resid = y - (idle + slope * x)
    var = float(resid @ resid) / (x.size - 2)  # the residuals' variance scales the unscaled covariance
    at_one = np.array([1.0, 1.0])  # d(idle + slope) / d(slope, idle)
    return {"idle": float(idle), "idle_se": float(np.sqrt(var * cov[1, 1])),
            "busy": float(idle + slope), "busy_se": float(np.sqrt(var * at_one @ cov @ at_one)),
            "r2": float(1 - resid @ resid / ((y - y.mean()) @ (y - y.mean())))}


def _report_fit(fig: dict, key: str, label: str, how: str, busy: list, ns: list, log) -> None:
    """Fit `idle_and_busy_fit` to the stretches, keep the points and both readings in `fig` under
    `key`, and print them, `how` saying what the stretches were."""
    f = idle_and_busy_fit(busy, ns)
    fig[f"{key}_busy_fractions"] = busy
    fig[f"{key}_ns_per_pe_cycle"] = ns
    fig[f"{key}_idle_ns_per_pe_cycle"] = f["idle"]
    fig[f"{key}_busy_ns_per_pe_cycle"] = f["busy"]
    log(f"{label}: an idle PE costs {f['idle']:.2f} +- {f['idle_se']:.2f} ns a cycle, a busy one {f['busy']:.2f} +- "
        f"{f['busy_se']:.2f} ns (idle {f['idle'] / f['busy']:.2f} of busy; the line through {how}, "
        f"{min(busy):.3f}-{max(busy):.3f} of the PEs busy, {min(ns):.2f}-{max(ns):.2f} ns a PE-cycle, "
        f"R^2 {f['r2']:.3f})")


def _hotspot(fig: dict, quick: bool, cycles: int, log) -> None:
    """Sparse activity on the shipped hotspot scenario (16 hot regions on a background at 0.2 of
    capacity): its background rate scaled by 0.5, 1, 1.5 and 2, each timed on all cores after a
    warm-up, and the line through (busy fraction, ns per PE-cycle) read at 0 and 1 busy
    (`idle_and_busy_fit`). Its segments all hold some work, so none is skipped: this is the cost of
    an idle PE among busy ones."""
    from ..scenario import load_scenario
    from .sim import MeshSim, available_cores, build_inputs, set_threads

    path = SCENARIOS / "wse2_hotspot.toml"
    if not path.is_file():
        return
    base = load_scenario(path)
    rate = base.get("workload", "injection_rate")
    small = [("machine.rows", 128), ("machine.cols", 128), ("workload.hot_regions", [[56, 56, 72, 72]])]
    set_threads(available_cores())
    busy, ns = [], []
    for scale in (0.5, 1.0, 1.5, 2.0):
        sc = load_scenario(path, overrides=(small if quick else []) + [("workload.injection_rate", rate * scale)])
        n_pe = sc.get("machine", "rows") * sc.get("machine", "cols")
        sim = MeshSim(build_inputs(sc), max(cycles, 300))
        sim.advance(300)
        t = time.perf_counter()
        sim.advance(cycles)
        dt = time.perf_counter() - t
        busy.append(float(sim.series[:cycles, 0].mean()) / n_pe)
        ns.append(dt / (n_pe * cycles) * 1e9)
    _report_fit(fig, "hotspot", "hotspot, all cores", f"{len(ns)} runs of {cycles} cycles with the background at "
                "0.5-2 times the scenario's", busy, ns, log)


def _full_run(fig: dict, quick: bool, log) -> None:
    """A whole run with output (frames every 100 cycles) in a fresh process: peak memory and the share of
    the time spent outside the kernel (series, histograms, frames, windows, flushes, and the checkpoint
    every run writes at its first flush)."""
    with tempfile.TemporaryDirectory() as tmp:
        run_cycles = 1000
        r, _ = python_json(_PEAK.format(d=repr(_scenario(quick, cycles=run_cycles))), os.path.join(tmp, "b.h5"))
    fig["run_cycles"] = run_cycles
    fig["peak_memory_bytes"] = r["peak_bytes"]
    fig["run_wall_seconds"] = r["wall"]
    fig["run_kernel_seconds"] = r["kernel"]
    fig["run_output_seconds"] = r["output"]
    fig["output_overhead_fraction"] = r["output"] / (r["kernel"] + r["output"])
    log(f"full run of {run_cycles} cycles with output: {r['wall']:.2f} s wall, {r['kernel']:.2f} s in the kernel, "
        f"{r['output']:.2f} s writing series, histograms, frames every 100 cycles, windows and the checkpoint at "
        "the first flush: "
        f"{fig['output_overhead_fraction'] * 100:.1f}% of the run; peak memory {r['peak_bytes'] / 2**30:.2f} GiB")


def _checkpoint(fig: dict, quick: bool, log) -> None:
    """One checkpoint (docs/results.md, "Resuming a run") of the bench's grid after 300 cycles,
    written as a run writes it: seconds, bytes of state, bytes on disk."""
    from .. import machine as machines
    from ..checkpoint import checkpoint_path
    from ..run import save_checkpoint
    from ..scenario import scenario_from_dict

    sc = scenario_from_dict(_scenario(quick, cycles=300))
    mesh = machines.get("mesh")
    run = mesh.start(sc, mesh.compile_scenario(sc))
    with tempfile.TemporaryDirectory() as tmp:
        writer = mesh.open_writer(Path(tmp) / "c.h5", sc, run, numba.get_num_threads())
        try:
            with writer:
                while not run.finished:
                    run.advance()
                    run.record(writer)
                writer.flush(run.cycle)
                t0 = time.perf_counter()
                save_checkpoint(run, writer)
                seconds = time.perf_counter() - t0
                on_disk = checkpoint_path(writer.final_path).stat().st_size
        finally:
            writer.close_incomplete()
    fig["checkpoint_seconds"] = seconds
    fig["checkpoint_state_bytes"] = run.checkpoint_bytes()
    fig["checkpoint_file_bytes"] = on_disk
    log(f"checkpoint after {run.cycle} cycles: {run.checkpoint_bytes() / 1e6:.0f} MB of state written in "
        f"{seconds:.2f} s, {on_disk / 1e6:.1f} MB on disk")


def _traffic(fig: dict, sc, cycles: int, log) -> None:
    """Routed traffic: uniform random packets at half the uniform channel-load bound, all cores, timed in
    the steady state: after as many cycles as the longest XY route has hops (rows + cols - 2; the mean
    is about a third of that), every route carries its full share of packets."""
    from kernels.mesh import S_LINK_SENT

    from ..scenario import scenario_from_dict
    from .sim import MeshSim, available_cores, build_inputs, set_threads

    rows, cols = sc.get("machine", "rows"), sc.get("machine", "cols")
    n = rows * cols
    rate = 0.5 * 4 / max(rows, cols) * (n - 1) / n
    fill = rows + cols + 100
    timed = min(cycles, 200)
    ts = scenario_from_dict({
        "run": {"cycles": fill + timed, "seed": 1},
        "machine": {"rows": rows, "cols": cols},  # default links: 2-message buffers, full bandwidth at L = 1
        "migration": {"policy": "none"},
        "workload": {"type": "traffic", "pattern": "uniform", "injection_rate": rate, "warmup_cycles": 0,
                     "measure_cycles": fill + timed}})
    set_threads(available_cores())
    tsim = MeshSim(build_inputs(ts), max(fill, timed))
    tsim.advance(fill)
    t = time.perf_counter()
    tsim.advance(timed)
    dt = time.perf_counter() - t
    hops = float(tsim.series[:timed, S_LINK_SENT].sum()) / (n * timed)  # link sends per PE-cycle
    fig["traffic_rate_per_pe_cycle"] = rate
    fig["traffic_link_sends_per_pe_cycle"] = hops
    fig["traffic_pe_cycles_per_second_all_cores"] = n * timed / dt
    log(f"routed traffic, uniform at {rate:.5f} packets/PE/cycle (half the channel-load bound), all cores: "
        f"{n * timed / dt / 1e6:.1f} million PE-cycles/s ({timed} cycles after {fill} to fill the network; "
        f"{hops:.2f} hops per PE-cycle)")
    _report_roofline(fig, "traffic", "routed traffic", fig["traffic_pe_cycles_per_second_all_cores"],
                     traffic_path_bytes(tsim, timed), log)


def _decode(fig: dict, quick: bool, log) -> None:
    """Decode on the wafer (docs/decode.md): one token of LLaMA3-8B's shape (32 layers, 4K context) on a
    420 x 420 region, computed one line a step and over the whole grid, and the shipped scenario's
    128-token generation (Llama 3 8B on 660 x 660)."""
    import numpy as np

    from kernels import decode as K

    from ..scenario import load_scenario
    from .decode import DecodeState, decode_spec, spread

    p, layers = 420, (4 if quick else 32)
    rows = spread(p, 4096)
    args = (p, -(-4096 // p), -(-6144 // p), -(-14336 // p), 2, 32, layers)
    tail = (21, 2, 2, 1, 1, 252, 4, 1, np.zeros(layers, np.int64), 1)
    K.token(*args, rows, *tail)  # compiled (or loaded) before the timing
    K.token(*args, np.where(np.arange(p) == 0, 0, rows), *tail)
    t = time.perf_counter()
    by_lines = K.token(*args, rows, *tail)
    fig["decode_token_by_lines_seconds"] = time.perf_counter() - t
    grid_rows = rows.copy()
    grid_rows[0] = 0  # a row without tokens: every line of every step is computed
    t = time.perf_counter()
    K.token(*args, grid_rows, *tail)
    fig["decode_token_whole_grid_seconds"] = dt = time.perf_counter() - t
    fig["decode_whole_grid_pe_cycles_per_second"] = p * p * by_lines / dt
    log(f"decode, a token of {layers} LLaMA3-8B layers on {p} x {p} at 4K context: "
        f"{fig['decode_token_by_lines_seconds'] * 1e3:.1f} ms one line a step, {dt:.2f} s over the whole grid "
        f"({p * p * by_lines / dt / 1e6:.0f} million PE-cycles/s)")
    scenario = SCENARIOS / "wse2_llama3_8b_decode.toml"
    if scenario.is_file():
        tokens = 16 if quick else 128
        state = DecodeState(decode_spec(load_scenario(scenario, [("workload.output_tokens", tokens)])))
        t = time.perf_counter()
        state.advance(tokens)
        fig["decode_generation_seconds"] = dt = time.perf_counter() - t
        log(f"decode, the shipped Llama 3 8B scenario (660 x 660): {tokens} tokens in {dt:.2f} s")


def _pipeline(fig: dict, quick: bool, log) -> None:
    """The layer pipeline: GPT-2 small (with its embedding and head) over the whole fabric from an empty
    wafer (the first token needs about 15,400 cycles to cross it, so the fill is what a short run spends
    its time on), then in its steady state."""
    from kernels.mesh import S_CHUNKS_FINISHED, S_LINK_SENT

    from .sim import MeshSim, build_inputs

    gpt2 = SCENARIOS / "wse2_gpt2_small.toml"
    if gpt2.is_file():
        from ..scenario import load_scenario

        over = [("machine.rows", 128), ("machine.cols", 128), ("workload.n_layers", 2)] if quick else []
        ps = load_scenario(gpt2, overrides=over)
        pn = ps.get("machine", "rows") * ps.get("machine", "cols")
        psim = MeshSim(build_inputs(ps), 1000)
        psim.advance(10)
        # The first 10,000 cycles, a thousand at a time: each thousand's time and busy fraction.
        times, busy = [], []
        for _ in range(10):
            t = time.perf_counter()
            psim.advance(1000)
            times.append(time.perf_counter() - t)
            busy.append(float(psim.series[:1000, 0].mean()) / pn)
        dt = times[0] + times[1]
        fig["pipeline_pe_cycles_per_second_all_cores"] = pn * 2000 / dt
        fig["pipeline_busy_fraction_at_2000_cycles"] = busy[1]
        log(f"layer pipeline, GPT-2 small from an empty wafer, all cores: {pn * 2000 / dt / 1e6:.1f} million "
            f"PE-cycles/s over its first 2,000 cycles ({busy[1]:.2f} of the PEs busy by then)")
        ten = sum(times)
        fig["pipeline_first_10000_cycles_seconds"] = ten
        log(f"layer pipeline, GPT-2 small from an empty wafer, all cores: its first 10,000 cycles in {ten:.1f} s")
        ns = [x / (pn * 1000) * 1e9 for x in times]
        _report_fit(fig, "pipeline_fill", "layer pipeline, its fill", "its first ten thousands of cycles", busy, ns,
                    log)
        # Then the steady state: from 1,000 cycles after the first chunk finished, 2,000 cycles timed.
        done = 10010
        while not psim.series[:1000, S_CHUNKS_FINISHED].any() and done < 200_000:
            psim.advance(1000)
            done += 1000
        psim.advance(1000)
        t = time.perf_counter()
        psim.advance(1000)
        psim.advance(1000)
        dt = time.perf_counter() - t
        busy = float(psim.series[:1000, 0].mean()) / pn
        moved = float(psim.series[:1000, S_LINK_SENT].mean()) / pn
        fig["pipeline_steady_pe_cycles_per_second_all_cores"] = pn * 2000 / dt
        fig["pipeline_steady_busy_fraction"] = busy
        fig["pipeline_steady_link_sends_per_pe_cycle"] = moved
        log(f"layer pipeline, GPT-2 small in its steady state, all cores: {pn * 2000 / dt / 1e6:.1f} million "
            f"PE-cycles/s over 2,000 cycles from cycle {done + 1000:,} ({busy:.2f} of the PEs busy, {moved:.3f} "
            f"link sends per PE-cycle)")
        _report_roofline(fig, "pipeline", "layer pipeline in its steady state",
                         fig["pipeline_steady_pe_cycles_per_second_all_cores"], pipeline_path_bytes(psim, 1000), log)


def _reference(fig: dict, log) -> None:
    """The plain reference on a small grid, for the ratio."""
    from kernels.reference.mesh_ref import MeshReference, rate_map

    from ..scenario import scenario_from_dict

    rs = scenario_from_dict(_scenario(True))
    rows, cols, ref_cycles = 8, 8, 40
    wl = rs.values["workload"]
    ref = MeshReference(rows=rows, cols=cols, queue_capacity=16, hop_latency_cycles=1, link_messages_per_cycle=1,
                        link_buffer_messages=2, credit_delay_cycles=1, policy="least_loaded", threshold=2,
                        info_delay_cycles=1, max_per_cycle=1, seed=1,
                        rates=rate_map(rows, cols, "uniform", wl["injection_rate"]), work_distribution="geometric",
                        work_cycles=10, work_min_cycles=1, work_max_cycles=400, trace_events=None)
    t = time.perf_counter()
    for _ in range(ref_cycles):
        ref.step()
    dt = time.perf_counter() - t
    fig["reference_pe_cycles_per_second"] = rows * cols * ref_cycles / dt
    fig["speedup_over_reference"] = fig["pe_cycles_per_second_all_cores"] / fig["reference_pe_cycles_per_second"]
    log(f"plain reference ({rows} x {cols}): {fig['reference_pe_cycles_per_second']:.0f} PE-cycles/s; "
        f"the kernel is {fig['speedup_over_reference']:,.0f} times faster")


_CONTENDED_RUN = textwrap.dedent("""
    import json, sys
    from meshsim.run import run_scenario
    from meshsim.scenario import scenario_from_dict
    threads = None if sys.argv[2] == "default" else int(sys.argv[2])
    res = run_scenario(scenario_from_dict({d}), sys.argv[1], threads=threads, progress=False)
    print(json.dumps(dict(kernel=res.summary["kernel_seconds"], threads=res.summary["threads"])))
""")


_BUSY = "while True:\n    pass\n"


def measure_contention(quick: bool = False, log=print) -> dict:
    """More threads must never be a trap on a busy host: the same 256 x 256 run (the smallest grid
    that gets two threads by default, meshsim.mesh.PES_PER_THREAD) with the default threads and
    with one, two at once and one beside a process that keeps a core busy, each in a fresh process;
    the figure is the wall time from starting the runs to the last one's end."""
    d = _scenario(True, cycles=500 if quick else 5_000)
    d["machine"] = dict(d["machine"], rows=256, cols=256)
    d["output"] = dict(d["output"], frame_every_cycles=0, flush_every_cycles=5000)
    script = _CONTENDED_RUN.format(d=repr(d))
    fig = {}
    with tempfile.TemporaryDirectory() as tmp:
        def runs(n: int, threads: str, busy: bool):
            hog = subprocess.Popen([sys.executable, "-c", _BUSY]) if busy else None
            try:
                if hog is not None:
                    time.sleep(0.2)
                t = time.perf_counter()
                procs = [subprocess.Popen([sys.executable, "-c", script, os.path.join(tmp, f"c{i}.h5"), threads],
                                          stdout=subprocess.PIPE, text=True) for i in range(n)]
                outs = [json.loads(p.communicate()[0]) for p in procs]
                return time.perf_counter() - t, outs
            finally:
                if hog is not None:
                    hog.kill()
                    hog.wait()

        runs(1, "1", False)  # compiles or loads the kernels first
        for name, n, busy in (("two_at_once", 2, False), ("beside_a_busy_process", 1, True)):
            wall_default, outs = runs(n, "default", busy)
            wall_one, ones = runs(n, "1", busy)
            k_default, k_one = max(o["kernel"] for o in outs), max(o["kernel"] for o in ones)
            fig[f"contention_{name}_seconds_default_threads"] = wall_default
            fig[f"contention_{name}_seconds_one_thread"] = wall_one
            fig[f"contention_{name}_ratio"] = wall_default / wall_one
            fig[f"contention_{name}_kernel_ratio"] = k_default / k_one
            what = "two runs at once" if n == 2 else "one run beside a busy process"
            log(f"contention, {what} (256 x 256, {d['run']['cycles']:,} cycles, fresh processes): "
                f"{wall_default:.2f} s with the default threads ({outs[0]['threads']} each), {wall_one:.2f} s with "
                f"one thread each: {wall_default / wall_one:.2f} times ({k_default:.2f} s against {k_one:.2f} s in "
                f"the kernel: {k_default / k_one:.2f} times)")
    return fig
