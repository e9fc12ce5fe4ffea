"""Running an ipu scenario: compile, run the pipeline schedule step by step, write the result,
summarise (DESIGN.md sections 2.3, 3 and 5; the figures are defined in docs/ipu.md).

`meshsim.engine.run_scenario` hands ipu scenarios here; the run has the other machines' file life
(docs/results.md: NAME.incomplete.h5 flushed every FLUSH_SECONDS with a provisional summary and
the per-tile totals so far, NAME.h5 when complete, kept on Ctrl-C or SIGTERM, readable after
SIGKILL).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import h5py
import numpy as np
from tqdm import tqdm

from kernels import ipu as K

from .. import metrics
from ..errors import InputError
from .compiler import IpuProgram, compile_scenario
from ..output import ResultFile, describe

#: name -> (column, units, description) of the supersteps/ table.
SUPERSTEPS = {
    "step": (K.SS_STEP, "1", "step the superstep belongs to"),
    "direction": (K.SS_DIRECTION, "1", "0 forward, 1 backward pipeline step (recompute runs in backward ones)"),
    "pipeline_step": (K.SS_PIPELINE_STEP, "1", "pipeline step of its direction"),
    "stage": (K.SS_STAGE, "1", "IPU (pipeline stage) that ran it"),
    "microbatch": (K.SS_MICROBATCH, "1", "micro-batch it processed"),
    "template": (K.SS_TEMPLATE, "1", "row of templates/ it ran (and of occupancy/tile_busy_cycles)"),
    "start_cycle": (K.SS_START, "cycle", "first cycle of its compute phase"),
    "compute_cycles": (K.SS_COMPUTE, "cycles", "length of the compute phase (the busiest tile)"),
    "sync_cycles": (K.SS_SYNC, "cycles", "length of the sync phase"),
    "exchange_cycles": (K.SS_EXCHANGE, "cycles", "length of the exchange phase"),
}

#: name -> (column, units, description) of the pipeline/ table.
PIPELINE = {
    "step": (K.PL_STEP, "1", "step"),
    "direction": (K.PL_DIRECTION, "1", "0 forward, 1 backward pipeline step, 2 the gradient all-reduce"),
    "index": (K.PL_INDEX, "1", "pipeline step of its direction"),
    "start_cycle": (K.PL_START, "cycle", "first cycle"),
    "cycles": (K.PL_CYCLES, "cycles", "length: the slowest stage plus the transfer"),
    "slowest_stage": (K.PL_SLOWEST, "1", "stage that set the length (-1 for the all-reduce)"),
    "transfer_cycles": (K.PL_TRANSFER, "cycles", "IPU-Link transfer (or all-reduce) cycles in it"),
}

#: name -> (dtype, units, description) of the templates/ table.
TEMPLATES = {
    "stage": (np.int32, "1", "IPU (pipeline stage)"),
    "direction": (np.int8, "1", "0 forward, 1 backward, 2 recompute"),
    "kind": (np.int8, "1", "0 GEMM, 1 attention, 2 elementwise, 3 norm, 4 embedding"),
    "layer": (np.int32, "1", "transformer block (-1: the embedding)"),
    "units": (np.int64, "units", "work units (GEMM blocks, attention blocks, slices)"),
    "flops": (np.int64, "FLOPs", "FLOPs of one instance (one micro-batch)"),
    "compute_cycles": (np.int64, "cycles", "compute phase: the busiest tile"),
    "sync_cycles": (np.int64, "cycles", "sync phase"),
    "exchange_cycles": (np.int64, "cycles", "exchange phase"),
    "sent_max_bytes": (np.int64, "bytes", "most bytes a tile sends in the exchange"),
    "received_max_bytes": (np.int64, "bytes", "most bytes a tile receives in the exchange"),
    "li": (np.float64, "1", "LI (mean/max busy cycles) across the stage's tiles"),
}

# Seconds between flushes of the result file.
FLUSH_SECONDS = 1.0


class IpuResultWriter(ResultFile):
    """Writes one ipu run's HDF5 file incrementally (see meshsim.output.ResultFile for its life)."""

    def __init__(self, final_path, scenario, prog: IpuProgram, *, threads: int, compression_level: int):
        super().__init__(final_path, scenario, "ipu", threads, 0, compression_level)
        f = self.f
        n, tiles = prog.stages, prog.spec.tiles
        f.attrs["stages"] = n
        self.n_ss = 0
        self.n_pl = 0
        self.n_lat = 0
        self.stage = self._scale(f, "stage", np.arange(n, dtype=np.int32), "1", "IPU (pipeline stage) of a replica")
        self.tile = self._scale(f, "tile", np.arange(tiles, dtype=np.int32), "1", "tile of an IPU")
        self.template = self._scale(f, "template", np.arange(len(prog.templates), dtype=np.int64), "1",
                                    "superstep template (row of templates/)")
        g = f.create_group("supersteps")
        g.attrs["description"] = ("one row per superstep instance, in order of step, direction, pipeline step, stage "
                                  "and position: the ipu's series along time")
        self.ss_row = self._scale(g, "superstep", np.zeros(0, np.int64), "1", "superstep instance", grow=True,
                                  chunk=65536)
        self.ss = {}
        for name, (_, units, desc) in SUPERSTEPS.items():
            dtype = np.int64 if units != "1" else np.int32
            ds = g.create_dataset(name, shape=(0,), maxshape=(None,), dtype=dtype, chunks=(65536,), **self.comp)
            describe(ds, units, desc)
            ds.dims[0].attach_scale(self.ss_row)
            self.ss[name] = ds
        g = f.create_group("pipeline")
        g.attrs["description"] = "one row per pipeline step (and gradient all-reduce), in order"
        self.pl_row = self._scale(g, "pipeline_row", np.zeros(0, np.int64), "1", "pipeline step", grow=True)
        self.pl = {}
        for name, (_, units, desc) in PIPELINE.items():
            ds = g.create_dataset(name, shape=(0,), maxshape=(None,), dtype=np.int64, chunks=(8192,), **self.comp)
            describe(ds, units, desc)
            ds.dims[0].attach_scale(self.pl_row)
            self.pl[name] = ds
        g = f.create_group("latency")
        g.attrs["description"] = "latency of every micro-batch (docs/ipu.md, \"Observables and metrics\")"
        self.lat_row = self._scale(g, "microbatch", np.zeros(0, np.int64), "1", "micro-batch, step by step",
                                   grow=True)
        self.lat = g.create_dataset("microbatch_latency", shape=(0,), maxshape=(None,), dtype=np.int64,
                                    chunks=(8192,), **self.comp)
        describe(self.lat, "cycles", "from the pipeline step IPU 0 starts it to the end of its last superstep")
        self.lat.dims[0].attach_scale(self.lat_row)
        self._write_templates(prog)
        u = f.create_group("units")
        u.attrs["description"] = "per-tile totals over the steps done (units = the tiles of every IPU of a replica)"
        ds = u.create_dataset("memory_bytes", data=prog.memory, chunks=True, **self.comp)
        describe(ds, "bytes", "SRAM each tile uses: code, weights (and gradients) and activations")
        ds.dims[0].attach_scale(self.stage)
        ds.dims[1].attach_scale(self.tile)
        # written in place at every flush (a running file takes no new datasets)
        self.tile_busy = u.create_dataset("tile_busy_cycles", data=np.zeros(prog.memory.shape, np.int64), chunks=True,
                                          **self.comp)
        describe(self.tile_busy, "cycles", "cycles each tile computed over the steps done")
        self.tile_busy.dims[0].attach_scale(self.stage)
        self.tile_busy.dims[1].attach_scale(self.tile)
        f.create_group("summary").attrs["description"] = "the run's figures (DESIGN.md section 5)"

    def _write_templates(self, prog: IpuProgram) -> None:
        g = self.f.create_group("templates")
        g.attrs["description"] = ("one row per superstep template: stage by stage, its forward list, then its "
                                  "backward list")
        for name, (dtype, units, desc) in TEMPLATES.items():
            key = {"compute_cycles": "compute", "sync_cycles": "sync", "exchange_cycles": "exchange",
                   "sent_max_bytes": "sent_max", "received_max_bytes": "received_max"}.get(name, name)
            ds = g.create_dataset(name, data=np.array([getattr(t, key) for t in prog.templates], dtype=dtype),
                                  chunks=True, **self.comp)
            describe(ds, units, desc)
            ds.dims[0].attach_scale(self.template)
        ds = g.create_dataset("name", data=np.array([t.name for t in prog.templates], dtype=h5py.string_dtype()),
                              chunks=True, **self.comp)
        describe(ds, "1", "operator (\"layer<i>.<op>\", with .backward or .recompute; \"embedding\")")
        ds.dims[0].attach_scale(self.template)
        occ = self.f.create_group("occupancy")
        occ.attrs["description"] = "busy cycles of every tile in one instance of each superstep template"
        rows = min(len(prog.templates), max(1, 65536 // prog.spec.tiles))
        ds = occ.create_dataset("tile_busy_cycles", data=prog.busy, chunks=(rows, prog.spec.tiles), **self.comp)
        describe(ds, "cycles", "busy cycles of each tile of the template's stage in one instance (the same in every "
                               "instance)")
        ds.dims[0].attach_scale(self.template)
        ds.dims[1].attach_scale(self.tile)

    def append(self, ss, pl, lat) -> None:
        """Rows of the steps just run, after those written before. The counts move only once all
        three tables are written, so a write cut short is written again over the same rows."""
        n0, p0, l0 = self.n_ss, self.n_pl, self.n_lat
        self._put(self.ss_row, n0, np.arange(n0, n0 + len(ss), dtype=np.int64))
        for name, (col, _, _) in SUPERSTEPS.items():
            self._put(self.ss[name], n0, ss[:, col])
        self._put(self.pl_row, p0, np.arange(p0, p0 + len(pl), dtype=np.int64))
        for name, (col, _, _) in PIPELINE.items():
            self._put(self.pl[name], p0, pl[:, col])
        self._put(self.lat_row, l0, np.arange(l0, l0 + len(lat), dtype=np.int64))
        self._put(self.lat, l0, lat)
        self.n_ss, self.n_pl, self.n_lat = n0 + len(ss), p0 + len(pl), l0 + len(lat)

    def write_totals(self, tile_busy) -> None:
        self.tile_busy[...] = np.asarray(tile_busy, np.int64)

    def finish(self, summary: dict, cycles_done: int, complete: bool) -> Path:
        """As ResultFile.finish; a complete run also records its length as the cycles requested."""
        self._finishing()
        if complete:
            self.f.attrs["cycles_requested"] = cycles_done
        return super().finish(summary, cycles_done, complete)


class IpuSim:
    """The schedule's state between kernel calls: steps done, the clock, and the sums."""

    def __init__(self, prog: IpuProgram):
        self.prog = prog
        self.steps_done = 0
        self.cycle = 0
        self.count = np.zeros(len(prog.templates), np.int64)
        self.shares = np.zeros(K.N_SH, np.int64)
        self.latencies = []

    @property
    def finished(self) -> bool:
        return self.steps_done >= self.prog.spec.steps

    def advance(self, max_steps: int):
        """Run up to `max_steps` more steps; returns their (superstep rows, pipeline rows, latencies)."""
        k = min(max_steps, self.prog.spec.steps - self.steps_done)
        # the kernel adds to copies: the state moves all at once, after it returns (a Ctrl-C in
        # between leaves the state of the steps before)
        count, shares = self.count.copy(), self.shares.copy()
        end, rows = run_steps(self.prog, self.steps_done, k, self.cycle, count, shares)
        self.cycle, self.count, self.shares, self.steps_done = end, count, shares, self.steps_done + k
        self.latencies.append(rows[2])
        return rows

    def tile_busy(self) -> np.ndarray:
        """Every tile's busy cycles over the steps done, int64[stages, tiles]."""
        p = self.prog
        out = np.zeros((p.stages, p.spec.tiles), np.int64)
        stage = np.array([t.stage for t in p.templates], np.int64)
        for s in range(p.stages):
            rows = np.flatnonzero(stage == s)
            out[s] = self.count[rows] @ p.busy[rows]
        return out


def run_steps(prog: IpuProgram, first: int, k: int, start: int, count, shares):
    """Steps first .. first + k - 1 of the schedule from cycle `start` (kernels.ipu.run_steps, adding
    to `count` and `shares`); returns (end cycle, (superstep rows, pipeline rows, latencies))."""
    ss = np.zeros((k * prog.rows_per_step, K.N_SS), np.int64)
    pl = np.zeros((k * prog.pipeline_rows_per_step, K.N_PL), np.int64)
    lat = np.zeros(k * prog.spec.microbatches, np.int64)
    end = K.run_steps(first, k, start, prog.stages, prog.spec.microbatches, prog.spec.training, prog.fwd_ptr,
                      prog.fwd_idx, prog.bwd_ptr, prog.bwd_idx, prog.t_comp, prog.t_sync, prog.t_exch, prog.io0,
                      prog.transfer, prog.allreduce, count, ss, pl, lat, shares)
    return int(end), (ss, pl, lat)


def stage_times(prog: IpuProgram) -> np.ndarray:
    """Each stage's cycles per micro-batch, forward plus backward (token ids included), int64[stages]."""
    out = prog.stage_cycles(0) + (prog.stage_cycles(1) if prog.spec.training else 0)
    out[0] += prog.io0
    return out


def summarise(prog: IpuProgram, sim: IpuSim, wall: float, kernel_seconds: float, threads: int) -> dict:
    """The run's figures (DESIGN.md section 5's stable names, and the ipu's of docs/ipu.md)."""
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
    samples = spec.model.batch * done
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
        "latency_mean_cycles": la["mean"],
        "latency_var_cycles2": la["var"],
        "latency_p50_cycles": la["p50"],
        "latency_p90_cycles": la["p90"],
        "latency_p99_cycles": la["p99"],
        "latency_max_cycles": la["max"],
        "injected": started,
        "refused": 0,
        "completed": started,
        "in_system_at_end": 0,
        "migrated": 0,
        "preset": spec.preset,
        "ipus": n * spec.replicas,
        "stages": n,
        "replicas": spec.replicas,
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
        "pipeline_bubble_fraction": (n - 1) / (m + n - 1),
        # an HDF5 attribute holds 64-bit integers; a run past them keeps its FLOPs as a float
        "flops": flops if flops < 2**63 else float(flops),
        "clock_ghz": spec.clock_ghz,
        "simulated_seconds": seconds,
        "step_seconds": seconds / done if done else nan,
        "time_per_sample_seconds": seconds / samples if samples else nan,
        "samples_per_second": samples / seconds if cycles else nan,
        "achieved_tflops": flops / n / seconds / 1e12 if cycles else nan,
        "memory_max_bytes": int(mem.max()),
        "memory_mean_bytes": float(mem.mean()),
        "memory_min_bytes": int(mem.min()),
        "memory_max_fraction": int(mem.max()) / cap,
        "wall_seconds": wall,
        "kernel_seconds": kernel_seconds,
        "pe_cycles_per_second": n_units * cycles / kernel_seconds if kernel_seconds else nan,
        "threads": threads,
    }


def run_ipu(scenario, final, *, threads: int, progress: bool, stop_signals, steps_per_call: int = 0):
    """Run a validated ipu scenario into `final` (checked writable); returns (path, summary).
    `steps_per_call`: steps per kernel call (0: as many as keep a call's rows near a million)."""
    from ..engine import RunInterrupted, _StopRequested

    t_start = time.perf_counter()
    prog = compile_scenario(scenario)  # InputError before any file exists
    sim = IpuSim(prog)
    per_call = steps_per_call or max(1, 1_000_000 // max(1, prog.rows_per_step))
    try:
        writer = IpuResultWriter(final, scenario, prog, threads=threads,
                                 compression_level=scenario.get("output", "compression_level"))
    except OSError as e:
        raise InputError(f"{final}: cannot write the result ({e.strerror or e})") from None
    kernel = 0.0
    last_flush = time.perf_counter()
    bar = tqdm(total=prog.spec.steps, unit="step", disable=not progress, delay=2.0, file=sys.stderr,
               dynamic_ncols=True)

    def finish(complete: bool):
        writer.write_totals(sim.tile_busy())
        summary = summarise(prog, sim, time.perf_counter() - t_start, kernel, threads)
        return writer.finish(summary, sim.cycle, complete=complete), summary

    try:
        with writer, stop_signals:
            try:
                while not sim.finished:
                    t0 = time.perf_counter()
                    rows = sim.advance(per_call)
                    kernel += time.perf_counter() - t0
                    writer.append(*rows)
                    if time.perf_counter() - last_flush >= FLUSH_SECONDS:
                        writer.write_totals(sim.tile_busy())
                        # with the provisional summary: a killed run still has one
                        writer.flush(sim.cycle, summarise(prog, sim, time.perf_counter() - t_start, kernel, threads))
                        last_flush = time.perf_counter()
                    bar.n = sim.steps_done
                    bar.refresh()
                    if stop_signals.requested and not sim.finished:
                        raise _StopRequested
            except (KeyboardInterrupt, _StopRequested):
                if writer.n_lat < sim.steps_done * prog.spec.microbatches:
                    # stopped between the kernel call and its output: the rows are recomputed from the
                    # steps' start (the schedule is a pure function of the program)
                    _rewrite_last(prog, sim, writer)
                path, _ = finish(complete=False)
                raise RunInterrupted(path, sim.cycle) from None
            return finish(complete=True)
    finally:
        bar.close()


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

