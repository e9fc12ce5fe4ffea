"""The run engine: a scenario in, an HDF5 result and a summary out (DESIGN.md sections 5, 6, 8).

`run_scenario` is the library entry point; the command line is a thin layer over it. The kernel
runs many cycles per call; between calls the engine appends the per-cycle series, takes frames,
closes LI windows, flushes the file and moves the progress bar. Nothing here touches a PE.
"""

from __future__ import annotations

import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from tqdm import tqdm

from kernels import mesh as K

from . import metrics
from .mesh import MeshSim, build_inputs, set_threads
from .output import ResultWriter
from .state import busy_cycles, state_bytes_per_pe


class RunInterrupted(Exception):
    """The run was stopped by Ctrl-C or SIGTERM; `path` holds the incomplete result."""

    def __init__(self, path: Path, cycles_done: int):
        self.path = path
        self.cycles_done = cycles_done
        super().__init__(f"interrupted after {cycles_done} cycles; the incomplete result is {path}")


@dataclass
class RunResult:
    """What a run produced: the result file and the summary stored in its /summary group."""

    path: Path
    summary: dict


def default_output_path(scenario) -> Path:
    """results/NAME.h5 under the current directory (DESIGN.md section 6)."""
    return Path("results") / f"{scenario.name}.h5"


def _stops(cycles: int, *periods: int):
    """The cycle counts at which the engine must stop the kernel, in order: every multiple of each
    period (0 = none) below `cycles`, then `cycles`. Generated lazily: a run may be long."""
    done = 0
    while done < cycles:
        done = min([cycles] + [(done // p + 1) * p for p in periods if p > 0])
        yield done


class _Terminate(BaseException):
    """Raised from the SIGTERM handler so that the run unwinds like Ctrl-C."""


def _on_sigterm(signum, frame):
    raise _Terminate()


def run_scenario(scenario, output=None, *, threads: int | None = None, progress: bool | None = None,
                 max_cycles_per_call: int | None = None) -> RunResult:
    """Run a validated mesh scenario and write its HDF5 result.

    output: the result path (default results/NAME.h5); threads: Numba threads (default run.threads,
    0 = all cores); progress: show a progress bar (default: when stderr is a terminal).
    Raises InputError for a bad trace before anything is written, RunInterrupted on Ctrl-C/SIGTERM.
    """
    t_start = time.perf_counter()
    final = Path(output) if output is not None else default_output_path(scenario)
    inputs = build_inputs(scenario)  # may raise InputError: before any file exists
    n_threads = set_threads(scenario.get("run", "threads") if threads is None else threads)
    out = scenario.values["output"]
    cycles = scenario.get("run", "cycles")
    window = scenario.get("run", "window_cycles")
    frame_every = out["frame_every_cycles"]
    flush_every = out["flush_every_cycles"]
    chunk = min(flush_every, cycles) if max_cycles_per_call is None else max_cycles_per_call
    stops = _stops(cycles, window, frame_every, flush_every, chunk)
    sim = MeshSim(inputs, max_chunk=chunk)  # no stretch between stops is longer than `chunk`
    n_units = inputs.rows * inputs.cols
    if progress is None:
        progress = sys.stderr.isatty()

    old_term = None
    if hasattr(signal, "SIGTERM"):
        try:
            old_term = signal.signal(signal.SIGTERM, _on_sigterm)
        except ValueError:  # not the main thread (e.g. a worker): leave signals alone
            old_term = None
    writer = ResultWriter(final, scenario, rows=inputs.rows, cols=inputs.cols, queue_capacity=inputs.queue_capacity,
                          latency_bins=inputs.latency_bins, threads=n_threads,
                          compression_level=out["compression_level"])
    lat_hist = np.zeros(inputs.latency_bins, np.int64)
    lat_count = lat_sum = lat_sq = lat_max = 0
    busy_total = migrated = hops = 0
    win_start = 0
    busy_at_window = np.zeros((inputs.rows, inputs.cols), np.int64)
    win_completed = win_lat = 0
    kernel_seconds = 0.0
    first_call_seconds = None
    first_call_cycles = 0
    output_seconds = 0.0  # series, frames, windows, audits and flushes between kernel calls
    bar = tqdm(total=cycles, unit="cycle", disable=not progress, delay=2.0, file=sys.stderr, dynamic_ncols=True)
    done = 0
    try:
        with writer:
            try:
                for stop in stops:
                    n = stop - done
                    t0 = time.perf_counter()
                    sim.advance(n)
                    dt = time.perf_counter() - t0
                    if first_call_seconds is None:
                        first_call_seconds, first_call_cycles = dt, n
                    else:
                        kernel_seconds += dt
                    t_out = time.perf_counter()
                    s = sim.series[:n]
                    writer.append_cycles(done, s, sim.depth_series[:n])
                    c = s[:, K.S_COMPLETED].sum()
                    lat_count += int(c)
                    lat_sum += int(s[:, K.S_LATENCY_SUM].sum())
                    lat_sq += int(s[:, K.S_LATENCY_SQ_SUM].sum())
                    lat_max = max(lat_max, int(s[:, K.S_LATENCY_MAX].max()))
                    busy_total += int(s[:, K.S_BUSY].sum())
                    migrated += int(s[:, K.S_MIGRATED].sum())
                    hops += int(s[:, K.S_HOPS_SUM].sum())
                    win_completed += int(c)
                    win_lat += int(s[:, K.S_LATENCY_SUM].sum())
                    lat_hist += sim.take_latency_histogram()
                    done = stop
                    if frame_every and done % frame_every == 0:
                        st = sim.state
                        writer.append_frame(done - 1, st.q_len, st.s_rem > 0)
                    if done % window == 0 or done == cycles:
                        busy_now = busy_cycles(sim.state)
                        lb = metrics.load_balance(busy_now - busy_at_window)
                        span = done - win_start
                        writer.append_window(win_start, dict(
                            window_end=done, li=lb["li"], percent_imbalance=lb["percent_imbalance"],
                            jain_index=lb["jain_index"], cv=lb["cv"], busy_min=lb["min"], busy_max=lb["max"],
                            utilization=metrics.utilization(int((busy_now - busy_at_window).sum()), n_units, span),
                            completed=win_completed,
                            latency_mean=win_lat / win_completed if win_completed else float("nan")))
                        busy_at_window = busy_now
                        win_start, win_completed, win_lat = done, 0, 0
                    if done % flush_every == 0 or done == cycles:
                        sim.audit()
                        writer.flush(done)
                    bar.update(n)
                    output_seconds += time.perf_counter() - t_out
            except (KeyboardInterrupt, _Terminate):
                _write_totals(writer, sim, inputs, lat_hist, lat_count, lat_sum, lat_sq, lat_max)
                summary = _summary(sim, n_units, done, busy_total, migrated, hops, lat_hist, lat_count, lat_sum,
                                   lat_sq, lat_max, time.perf_counter() - t_start, kernel_seconds, first_call_seconds,
                                   first_call_cycles, n_threads)
                _add_clock(summary, scenario.get("machine", "clock_ghz"))
                path = writer.finish(summary, done, complete=False)
                raise RunInterrupted(path, done) from None
            _write_totals(writer, sim, inputs, lat_hist, lat_count, lat_sum, lat_sq, lat_max)
            summary = _summary(sim, n_units, done, busy_total, migrated, hops, lat_hist, lat_count, lat_sum, lat_sq,
                               lat_max, time.perf_counter() - t_start, kernel_seconds, first_call_seconds,
                               first_call_cycles, n_threads)
            summary["output_seconds"] = output_seconds
            _add_clock(summary, scenario.get("machine", "clock_ghz"))
            unoffered = sim.unoffered_events(cycles)
            if scenario.get("workload", "type") == "trace":
                summary["trace_events_not_offered"] = unoffered
            path = writer.finish(summary, done, complete=True)
    finally:
        bar.close()
        if old_term is not None:
            signal.signal(signal.SIGTERM, old_term)
    return RunResult(path=path, summary=summary)


def _add_clock(summary: dict, clock_ghz: float) -> None:
    """Figures at the machine's clock: the simulated time and the task throughput per second."""
    seconds = summary["cycles"] / (clock_ghz * 1e9)
    summary["clock_ghz"] = clock_ghz
    summary["simulated_seconds"] = seconds
    summary["throughput_tasks_per_second"] = summary["completed"] / seconds if seconds else float("nan")


def _write_totals(writer, sim, inputs, lat_hist, count, total, total_sq, maximum):
    st = sim.state
    rates = inputs.rates if inputs.rates is not None else np.full((inputs.rows, inputs.cols), np.nan)
    units = dict(busy_cycles=busy_cycles(st), injected=st.tot_injected, refused=st.tot_refused,
                 completed=st.tot_completed, migrated_out=st.tot_migrated_out, migrated_in=st.tot_migrated_in,
                 latency_sum=st.tot_latency, injection_rate=rates, queue_depth_end=st.q_len)
    writer.write_totals(units, lat_hist, dict(count=count, sum=total, sum_sq=total_sq, max=maximum))


def _summary(sim, n_units, cycles, busy_total, migrated, hops, lat_hist, lat_count, lat_sum, lat_sq, lat_max,
             wall, kernel_seconds, first_call_seconds, first_call_cycles, threads) -> dict:
    """The run's figures: the stable names of DESIGN.md section 5 and more."""
    st = sim.state
    busy = busy_cycles(st)
    lb = metrics.load_balance(busy)
    lat = metrics.latency_stats(lat_hist, lat_count, lat_sum, lat_sq, lat_max)
    injected = int(st.tot_injected.sum())
    refused = int(st.tot_refused.sum())
    completed = int(st.tot_completed.sum())
    in_system = injected - refused - completed
    # Simulation speed over the cycles after the first kernel call, which carries compilation.
    steady_cycles = cycles - first_call_cycles if kernel_seconds > 0 else cycles
    steady_seconds = kernel_seconds if kernel_seconds > 0 else (first_call_seconds or float("nan"))
    return {
        "cycles": cycles,
        "n_units": n_units,
        "li": lb["li"],
        "percent_imbalance": lb["percent_imbalance"],
        "jain_index": lb["jain_index"],
        "cv": lb["cv"],
        "busy_min_cycles": lb["min"],
        "busy_max_cycles": lb["max"],
        "busy_mean_cycles": lb["mean"],
        "compute_time_spread": metrics.compute_time_spread(busy),
        "active_units": int(np.count_nonzero(busy)),
        "utilization": metrics.utilization(busy_total, n_units, cycles),
        "latency_mean_cycles": lat["mean"],
        "latency_var_cycles2": lat["var"],
        "latency_p50_cycles": lat["p50"],
        "latency_p90_cycles": lat["p90"],
        "latency_p99_cycles": lat["p99"],
        "latency_max_cycles": lat["max"],
        "latency_percentile_overflow": lat["percentile_overflow"],
        "injected": injected,
        "refused": refused,
        "completed": completed,
        "in_system_at_end": in_system,
        "migrated": migrated,
        "hops_per_completed_task": hops / completed if completed else float("nan"),
        "throughput_tasks_per_cycle": completed / cycles if cycles else float("nan"),
        "wall_seconds": wall,
        "kernel_seconds": kernel_seconds + (first_call_seconds or 0.0),
        "first_call_seconds": first_call_seconds or 0.0,
        "pe_cycles_per_second": n_units * steady_cycles / steady_seconds if steady_seconds else float("nan"),
        "threads": threads,
        "state_bytes_per_pe": state_bytes_per_pe(st),
    }
