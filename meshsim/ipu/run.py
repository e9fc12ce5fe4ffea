"""An ipu run between kernel calls (meshsim.machine.Run): the pipeline schedule run step by step,
its rows written as they come, its summary (the figures are defined in docs/ipu.md). meshsim.run
drives it with every machine's file life (docs/results.md: flushed after the first kernel call, then
every FLUSH_SECONDS, with a provisional summary and the per-tile totals so far).
"""

from __future__ import annotations

import numpy as np

from kernels import ipu as K

from .. import metrics
from ..errors import InputError
from ..machine import Run
from .compiler import IpuProgram
from .output import IpuResultWriter
from .sim import IpuSim, run_steps, stage_times

# Seconds between flushes of the result file.
FLUSH_SECONDS = 1.0


def bubble_fraction(n: int, m: int, interleaved: bool) -> float:
    """The share of stage x pipeline-step slots in which a stage runs no micro-batch (docs/ipu.md,
    "Observables and metrics"): (n - 1) / (m + n - 1) grouped or in inference; interleaved, stage s idles
    in max(2n - 2 - m, 2s) of the m + 2n - 2 steps (those outside its forwards and its backwards)."""
    if not interleaved:
        return (n - 1) / (m + n - 1)
    return sum(max(2 * n - 2 - m, 2 * s) for s in range(n)) / (n * (m + 2 * n - 2))


def summarise(prog: IpuProgram, sim: IpuSim, wall: float, kernel_seconds: float, threads: int,
              start_cycle: int = 0) -> dict:
    """The run's figures: the stable names (docs/design.md, "Result files") and the ipu's (docs/ipu.md).
    start_cycle: where this process took the run up (a resumed run's), for the simulation speed."""
    spec = prog.spec
    cycles = sim.cycle
    busy = sim.tile_busy()
    n_units = prog.stages * spec.tiles
    lat = np.concatenate(sim.latencies) if sim.latencies else np.zeros(0, np.int64)
    la = metrics.sample_latency_stats(lat)
    st = stage_times(prog)
    stage_lb = metrics.load_balance(st)
    flops = int(sum(t.flops * int(c) for t, c in zip(prog.templates, sim.count, strict=True)))
    seconds = cycles / (spec.clock_ghz * 1e9)
    done = sim.steps_done
    nan = float("nan")
    m, n = spec.microbatches, prog.stages
    mem = prog.memory
    cap = spec.tile_sram_kib * 1024
    per_ss = np.array([t.li for t in prog.templates])
    finite = per_ss[np.isfinite(per_ss)]
    started = done * m
    return {
        "cycles": cycles,
        "n_units": n_units,
        **metrics.balance_figures(busy, cycles),
        "flop_utilization": flops / (spec.peak_flops_per_cycle * n * cycles) if cycles else nan,
        **metrics.latency_figures(la),
        "injected": started,
        "refused": 0,
        "completed": started,
        "in_system_at_end": 0,
        "migrated": 0,
        "preset": spec.preset,
        "ipus": n * spec.replicas * spec.tensor_parallel,
        "stages": n,
        "replicas": spec.replicas,
        "tensor_parallel": spec.tensor_parallel,
        "microbatches": m,
        "microbatch_sequences": spec.micro.batch,
        "steps": done,
        "supersteps": int(sim.count.sum()),
        "superstep_templates": len(prog.templates),
        "superstep_li_min": float(finite.min()) if finite.size else nan,
        "superstep_li_mean": float(finite.mean()) if finite.size else nan,
        "stage_li": stage_lb["li"],
        "stage_cycles_max": int(st.max()),
        "stage_cycles_min": int(st.min()),
        "busiest_stage": int(np.argmax(st)),
        "compute_fraction": int(sim.shares[K.SH_COMPUTE]) / cycles if cycles else nan,
        "sync_fraction": int(sim.shares[K.SH_SYNC]) / cycles if cycles else nan,
        "exchange_fraction": int(sim.shares[K.SH_EXCHANGE]) / cycles if cycles else nan,
        "transfer_fraction": int(sim.shares[K.SH_TRANSFER]) / cycles if cycles else nan,
        "pipeline_bubble_fraction": bubble_fraction(n, m, spec.interleaved),
        # an HDF5 attribute holds 64-bit integers; a run past them keeps its FLOPs as a float
        "flops": flops if flops < 2**63 else float(flops),
        "clock_ghz": spec.clock_ghz,
        "simulated_seconds": seconds,
        **metrics.step_figures(seconds / done if done else nan, spec.host_seconds, spec.model.batch),
        "achieved_tflops": flops / n / seconds / 1e12 if cycles else nan,
        "memory_max_bytes": int(mem.max()),
        "memory_mean_bytes": float(mem.mean()),
        "memory_min_bytes": int(mem.min()),
        "memory_max_fraction": int(mem.max()) / cap,
        "wall_seconds": wall,
        "kernel_seconds": kernel_seconds,
        "pe_cycles_per_second": n_units * (cycles - start_cycle) / kernel_seconds if kernel_seconds else nan,
        "threads": threads,
    }


class IpuRun(Run):
    """An ipu run between kernel calls: the schedule run some steps per call (default: as many as
    keep a call's rows near a million), the rows written as they come, the file flushed after the
    first call and then every FLUSH_SECONDS with the per-tile totals so far."""

    def __init__(self, prog: IpuProgram, per_call: int | None = None):
        self.prog = prog
        self.sim = IpuSim(prog)
        self.per_call = per_call or max(1, 1_000_000 // max(1, prog.rows_per_step))
        self.total = prog.spec.steps
        self._rows = None

    def open_writer(self, path, scenario, threads: int) -> IpuResultWriter:
        return IpuResultWriter(path, scenario, self.prog, threads=threads,
                               compression_level=scenario.get("output", "compression_level"))

    @property
    def finished(self) -> bool:
        return self.sim.finished

    @property
    def done(self) -> int:
        return self.sim.steps_done

    @property
    def cycle(self) -> int:
        return self.sim.cycle

    def advance(self) -> int:
        before = self.sim.steps_done
        self._rows = self.sim.advance(self.per_call)
        return self.sim.steps_done - before

    def record(self, writer) -> None:
        writer.append(*self._rows)

    def catch_up(self, writer) -> None:
        if writer.n_lat < self.sim.steps_done * self.prog.spec.microbatches:
            # stopped between the kernel call and its output: the rows are recomputed from the
            # steps' start (the schedule is a pure function of the program)
            _rewrite_last(self.prog, self.sim, writer)

    def flush_due(self, seconds_since_flush: float) -> bool:
        return seconds_since_flush >= FLUSH_SECONDS

    def prepare_flush(self, writer) -> None:
        writer.write_totals(self.sim.tile_busy())

    def summarise(self, timing) -> dict:
        return summarise(self.prog, self.sim, timing.wall, timing.kernel_total, timing.threads, timing.start_cycle)

    def write_final(self, writer) -> None:
        writer.write_totals(self.sim.tile_busy())


    def checkpoint(self) -> tuple:
        s = self.sim
        return dict(steps_done=s.steps_done, cycle=s.cycle), dict(count=s.count, shares=s.shares)

    def restore(self, values: dict, arrays: dict, writer) -> None:
        s = self.sim
        for name in ("count", "shares"):
            a = arrays.get(name)
            if a is None or a.shape != getattr(s, name).shape:
                raise InputError(f"checkpoint array {name}: does not fit this run's program, so the run cannot "
                                 "resume; run the scenario again")
            setattr(s, name, a.astype(np.int64, copy=True))
        s.steps_done, s.cycle = int(values["steps_done"]), int(values["cycle"])
        if writer.n_lat != s.steps_done * self.prog.spec.microbatches:
            raise InputError(f"{writer.path}: holds {writer.n_lat} micro-batch latencies and its checkpoint "
                             f"{s.steps_done} steps; the run cannot resume")
        # the latencies of the steps done are the file's (the summary's percentiles read them all)
        s.latencies = [writer.lat[:writer.n_lat]] if writer.n_lat else []


def _rewrite_last(prog: IpuProgram, sim: IpuSim, writer: IpuResultWriter) -> None:
    """Write the rows of steps the kernel ran but the writer did not get, by running them again on
    a scratch state from where the file ends."""
    m = prog.spec.microbatches
    first = writer.n_lat // m
    # the last pipeline row written in full (a cut write may have left rows after it)
    last = writer.n_pl - 1
    start = int(writer.f["pipeline/start_cycle"][last] + writer.f["pipeline/cycles"][last]) if writer.n_pl else 0
    _, rows = run_steps(prog, first, sim.steps_done - first, start, np.zeros(len(prog.templates), np.int64),
                        np.zeros(K.N_SH, np.int64))
    writer.append(*rows)

