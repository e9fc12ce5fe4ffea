"""A mesh run between kernel calls (meshsim.machine.Run): the kernel runs many cycles per call;
between calls the run appends the per-cycle series, takes frames, closes LI windows and keeps the
running totals from which its summary comes (the figures of docs/design.md, "Metrics"). Nothing
here touches a PE.
"""

from __future__ import annotations

import hashlib

import numpy as np

from kernels import mesh as K

from .. import metrics
from ..errors import InputError
from ..machine import Run
from .output import MeshResultWriter
from .regions import boundary_figures, layers_of, link_rate, mean_work, region_figures, regions_of
from .sim import MeshInputs, MeshSim
from .state import busy_cycles, state_arrays, state_bytes_per_pe


def _stops(cycles: int, *periods: int, start: int = 0):
    """The cycle counts after `start` at which a mesh run must stop the kernel, in order: every
    multiple of each period (0 = none) below `cycles`, then `cycles`. Generated lazily: a run may
    be long."""
    done = start
    while done < cycles:
        done = min([cycles] + [(done // p + 1) * p for p in periods if p > 0])
        yield done


class _Totals:
    """Whole-run sums of the per-cycle series, as Python integers (exact whatever the run's length),
    accumulated chunk by chunk, and the latency histogram."""

    SUMMED = {"completed": K.S_COMPLETED, "latency_sum": K.S_LATENCY_SUM, "latency_sq_sum": K.S_LATENCY_SQ_SUM,
              "hops_sum": K.S_HOPS_SUM}

    # Routed traffic: summed over the whole run, and over the cycles of the measurement window.
    PACKETS = {"packets_offered": K.S_PKT_OFFERED, "packets_delivered": K.S_PKT_DELIVERED,
               "measured_delivered": K.S_MEAS_DELIVERED, "measured_latency_sum": K.S_MEAS_LATENCY_SUM,
               "measured_latency_sq_sum": K.S_MEAS_LATENCY_SQ_SUM, "measured_injected": K.S_MEAS_INJECTED,
               "measured_source_wait_sum": K.S_MEAS_SOURCE_WAIT_SUM, "measured_hops_sum": K.S_MEAS_HOPS_SUM}
    IN_WINDOW = {"window_offered": K.S_PKT_OFFERED, "window_delivered": K.S_PKT_DELIVERED}
    # layer_pipeline: chunks finished and their latencies.
    CHUNKS = {"chunks_finished": K.S_CHUNKS_FINISHED, "chunk_latency_sum": K.S_CHUNK_LATENCY_SUM,
              "weight_wait_cycles": K.S_WEIGHT_WAIT}

    def __init__(self, bins: int, window=(0, 0)):
        self.cycles = 0
        self.sums = dict.fromkeys([*self.SUMMED, *self.PACKETS, *self.IN_WINDOW, *self.CHUNKS], 0)
        # Cycles at whose end the first and the latest chunks finished (-1: none yet).
        self.first_finish = -1
        self.last_finish = -1
        self.chunks_at_first_finish = 0
        # Weight streaming: the cycles at whose end a pass's last chunk finished.
        self.per_pass = 0
        self.pass_ends = []
        # layer_pipeline: (cycle, per-PE busy cycles) where the steady state was taken to start.
        self.steady_start = None
        self.latency_max = 0
        self.measured_latency_max = 0
        self.latency_hist = np.zeros(bins, np.int64)
        self.window = window

    def add(self, series: np.ndarray, latency_hist: np.ndarray) -> None:
        finished = np.flatnonzero(series[:, K.S_CHUNKS_FINISHED])
        if finished.size:
            if self.first_finish < 0:
                self.first_finish = self.cycles + int(finished[0])
                self.chunks_at_first_finish = self.sums["chunks_finished"] + int(series[finished[0],
                                                                                        K.S_CHUNKS_FINISHED])
            self.last_finish = self.cycles + int(finished[-1])
            if self.per_pass:
                before = self.sums["chunks_finished"]
                cum = before + np.cumsum(series[:, K.S_CHUNKS_FINISHED])
                for p in range(before // self.per_pass + 1, int(cum[-1]) // self.per_pass + 1):
                    self.pass_ends.append(self.cycles + int(np.searchsorted(cum, p * self.per_pass)))
        for name, col in {**self.SUMMED, **self.PACKETS, **self.CHUNKS}.items():
            self.sums[name] += sum(series[:, col].tolist())
        lo = min(max(self.window[0] - self.cycles, 0), len(series))
        hi = min(max(self.window[1] - self.cycles, 0), len(series))
        for name, col in self.IN_WINDOW.items():
            self.sums[name] += sum(series[lo:hi, col].tolist())
        self.latency_max = max(self.latency_max, int(series[:, K.S_LATENCY_MAX].max(initial=0)))
        self.measured_latency_max = max(self.measured_latency_max,
                                        int(series[:, K.S_MEAS_LATENCY_MAX].max(initial=0)))
        self.latency_hist += latency_hist
        self.cycles += len(series)


class MeshRun(Run):
    """A mesh run between kernel calls: the simulator, the running totals of its per-cycle series,
    the LI window under way. The kernel runs up to `per_call` cycles per call (default
    output.flush_every_cycles), stopping at every window, frame and flush boundary."""

    def __init__(self, scenario, inputs: MeshInputs, per_call: int | None = None):
        self.scenario = scenario
        self.inputs = inputs
        out = scenario.values["output"]
        self.total = self.cycles = scenario.get("run", "cycles")
        self.window = scenario.get("run", "window_cycles")
        self.frame_every = out["frame_every_cycles"]
        self.flush_every = out["flush_every_cycles"]
        chunk = min(self.flush_every, self.cycles) if per_call is None else per_call
        self.per_call = chunk
        self.periods = (self.window, self.frame_every, self.flush_every, chunk)
        self.stops = _stops(self.cycles, *self.periods)
        self.sim = MeshSim(inputs, max_chunk=chunk)  # no stretch between stops is longer than `chunk`
        pipe = inputs.pipeline
        self.regions = regions_of(scenario, pipe)
        self.layers = layers_of(pipe) if pipe is not None else None
        if pipe is not None:
            self.totals = _Totals(inputs.latency_bins, (0, 2**62))
            self.totals.per_pass = pipe.chunks_per_pass if pipe.streaming else 0
        elif inputs.traffic:
            warm = scenario.get("workload", "warmup_cycles")
            self.totals = _Totals(inputs.latency_bins, (warm, warm + scenario.get("workload", "measure_cycles")))
        else:
            self.totals = _Totals(inputs.latency_bins)
        self.window_start = dict(cycle=0, busy=np.zeros((inputs.rows, inputs.cols), np.int64), completed=0,
                                 latency_sum=0)
        if self.regions is not None:  # every PE's completed tasks, for the regions' per-window counts
            self.window_start["pe_completed"] = np.zeros((inputs.rows, inputs.cols), np.int64)
        self._last = 0
        self._digest = None

    def open_writer(self, path, threads: int) -> MeshResultWriter:
        """The result file, laid out for this run (with the pipeline's tables for layer_pipeline)."""
        inputs, sc = self.inputs, self.scenario
        out = sc.values["output"]
        writer = MeshResultWriter(path, sc, rows=inputs.rows, cols=inputs.cols,
                                  queue_capacity=inputs.queue_capacity, latency_bins=inputs.latency_bins,
                                  threads=threads, compression_level=out["compression_level"], regions=self.regions,
                                  traffic=inputs.traffic, pipeline=inputs.pipeline is not None, layers=self.layers,
                                  window_busy_cycles=self.window if out["window_busy"] else 0)
        if inputs.pipeline is not None:
            try:
                writer.write_pipeline(inputs.pipeline, sc.get("machine", "pe_flops_per_cycle"))
            except BaseException:
                writer.close_incomplete()  # the layout alone: removed
                raise
        return writer

    @property
    def finished(self) -> bool:
        return self.sim.cycle >= self.cycles

    @property
    def done(self) -> int:
        return self.sim.cycle

    @property
    def cycle(self) -> int:
        return self.sim.cycle

    def advance(self) -> int:
        n = next(self.stops) - self.sim.cycle
        self.sim.advance(n)
        self._last = n
        return n

    def _record(self, writer, n: int) -> None:
        # The kernel's output for the n cycles just run, written at their own offset (so that doing
        # it twice after an interruption changes nothing) and added to the running totals.
        sim, totals = self.sim, self.totals
        writer.append_cycles(sim.cycle - n, sim.series[:n], sim.depth_series[:n])
        if totals.cycles < sim.cycle:
            totals.add(sim.series[:n], sim.take_latency_histogram())

    def record(self, writer) -> None:
        sim, totals = self.sim, self.totals
        self._record(writer, self._last)
        if self.inputs.pipeline is not None and totals.first_finish >= 0 and totals.steady_start is None:
            # The steady state starts at the first stop after the first chunk finished.
            totals.steady_start = (sim.cycle, busy_cycles(sim.state))
        done = sim.cycle
        if self.frame_every and done % self.frame_every == 0:
            writer.append_frame(done - 1, sim.state.q_len, sim.state.s_rem > 0)
        if done % self.window == 0 or done == self.cycles:
            _close_window(writer, sim, totals, self.window_start, self.regions)

    def catch_up(self, writer) -> None:
        k = self.sim.cycle - self.totals.cycles
        if k > 0:  # stopped between the kernel call and its output
            self._record(writer, k)

    def flush_due(self, seconds_since_flush: float) -> bool:
        return self.sim.cycle % self.flush_every == 0 or self.sim.cycle == self.cycles

    def prepare_flush(self, writer) -> None:
        self.sim.audit()

    def summarise(self, timing) -> dict:
        sim, totals, sc = self.sim, self.totals, self.scenario
        s = _summary(sim, totals, timing)
        if self.inputs.traffic:
            s.update(_traffic_summary(sim, totals, sc))
        _add_clock(s, sc.get("machine", "clock_ghz"))
        if self.inputs.pipeline is not None:
            s.update(_pipeline_summary(sim, totals, sc))
        if sc.get("workload", "type") == "trace":
            s["trace_events_not_offered"] = sim.unoffered_events(sim.cycle)
        return s


    def checkpoint(self) -> tuple:
        sim, t, ws = self.sim, self.totals, self.window_start
        if t.cycles != sim.cycle:
            raise RuntimeError(f"checkpoint at cycle {sim.cycle} with the totals at {t.cycles}: this is a bug in "
                               "meshsim")
        arrays = {f"state.{name}": a for name, a in state_arrays(sim.state).items()}
        arrays.update({"sim.cum": sim.cum, "totals.latency_hist": t.latency_hist, "window.busy": ws["busy"]})
        if "pe_completed" in ws:
            arrays["window.pe_completed"] = ws["pe_completed"]
        if t.steady_start is not None:
            arrays["totals.steady_busy"] = t.steady_start[1]
        values = dict(
            cycle=sim.cycle,
            totals=dict(cycles=t.cycles, sums=t.sums, first_finish=t.first_finish, last_finish=t.last_finish,
                        chunks_at_first_finish=t.chunks_at_first_finish, pass_ends=t.pass_ends,
                        latency_max=t.latency_max, measured_latency_max=t.measured_latency_max,
                        steady_cycle=None if t.steady_start is None else t.steady_start[0]),
            window=dict(cycle=ws["cycle"], completed=ws["completed"], latency_sum=ws["latency_sum"]))
        return values, arrays

    def inputs_digest(self) -> str:
        if self._digest is None:  # the inputs never change: hashed once
            inp = self.inputs
            h = hashlib.sha256()
            for a in (inp.cfg, inp.rates, inp.ev_cycle, inp.ev_unit, inp.ev_work,
                      None if inp.pipeline is None else inp.pipeline.table):
                h.update(b"-" if a is None else np.ascontiguousarray(a).tobytes())
            self._digest = h.hexdigest()
        return self._digest

    def checkpoint_bytes(self) -> int:
        return sum(a.nbytes for a in state_arrays(self.sim.state).values())

    def restore(self, values: dict, arrays: dict, writer) -> None:
        sim, t, ws = self.sim, self.totals, self.window_start
        for name, a in state_arrays(sim.state).items():
            _restore(a, arrays, f"state.{name}")
        _restore(sim.cum, arrays, "sim.cum")
        _restore(t.latency_hist, arrays, "totals.latency_hist")
        _restore(ws["busy"], arrays, "window.busy")
        if "pe_completed" in ws:
            _restore(ws["pe_completed"], arrays, "window.pe_completed")
        sim.cycle = int(values["cycle"])
        v = values["totals"]
        t.cycles, t.first_finish, t.last_finish = v["cycles"], v["first_finish"], v["last_finish"]
        t.chunks_at_first_finish, t.pass_ends = v["chunks_at_first_finish"], list(v["pass_ends"])
        t.latency_max, t.measured_latency_max = v["latency_max"], v["measured_latency_max"]
        t.sums.update(v["sums"])
        if v["steady_cycle"] is not None:
            t.steady_start = (v["steady_cycle"], arrays["totals.steady_busy"].copy())
        ws.update(values["window"])
        self.stops = _stops(self.cycles, *self.periods, start=sim.cycle)
        self._last = 0

    def write_final(self, writer) -> None:
        sim = self.sim
        st = sim.state
        _write_totals(writer, sim, self.inputs, self.totals)
        for group, rg in (("regions", self.regions), ("layers", self.layers)):
            if rg is not None:
                writer.write_regions(region_figures(rg, busy_cycles(st), sim.cycle, st.tot_injected, st.tot_refused,
                                                    st.tot_completed, st.tot_latency), group)
        if self.regions is not None and self.inputs.counts_directions:
            writer.write_boundaries(_boundaries(self.scenario, self.regions, sim, self.inputs))


def _restore(dst: np.ndarray, arrays: dict, name: str) -> None:
    """Copy a checkpoint's array into the live one of the same shape and type."""
    src = arrays.get(name)
    if src is None or src.shape != dst.shape or src.dtype != dst.dtype:
        got = "missing" if src is None else f"{src.dtype}{list(src.shape)}"
        raise InputError(f"checkpoint array {name}: {got}, but this run's is {dst.dtype}{list(dst.shape)}; the "
                         "checkpoint is of another scenario or meshsim, so the run cannot resume")
    dst[...] = src


def _boundaries(sc, regions, sim, inputs: MeshInputs) -> dict:
    """The regions' boundary figures (docs/mesh.md, "Regions and the boundary bound")."""
    m, wl = sc.values["machine"], sc.values["workload"]
    rate = link_rate(m["link_messages_per_cycle"], m["link_buffer_messages"], m["hop_latency_cycles"],
                     m["credit_delay_cycles"])
    bernoulli = inputs.rates is not None and not inputs.traffic
    work = mean_work(wl["work_distribution"], wl["work_cycles"], wl["work_min_cycles"], wl["work_max_cycles"]) \
        if bernoulli else float("nan")
    return boundary_figures(regions, sim.state.tot_mig_dir, sim.cycle, sc.get("migration", "max_per_cycle"), rate,
                            inputs.rates if bernoulli else None, work)


def _close_window(writer, sim, totals, start: dict, regions) -> None:
    """Write the figures of the window that ends now, and start the next."""
    busy_now = busy_cycles(sim.state)
    busy = busy_now - start["busy"]
    end = sim.cycle
    completed = totals.sums["completed"] - start["completed"]
    latency = totals.sums["latency_sum"] - start["latency_sum"]
    lb = metrics.load_balance(busy)
    figures = dict(window_end=end, li=lb["li"], percent_imbalance=lb["percent_imbalance"], jain_index=lb["jain_index"],
                   cv=lb["cv"], busy_min=lb["min"], busy_max=lb["max"],
                   utilization=metrics.utilization(int(busy.sum()), busy.size, end - start["cycle"]),
                   completed=completed, latency_mean=latency / completed if completed else float("nan"))
    by_region = None
    if regions is not None:
        pe_completed = sim.state.tot_completed.astype(np.int64)
        by_region = region_figures(regions, busy, end - start["cycle"], completed=pe_completed - start["pe_completed"])
        start["pe_completed"] = pe_completed
    writer.append_window(start["cycle"], figures, by_region, busy)
    start.update(cycle=end, busy=busy_now, completed=totals.sums["completed"], latency_sum=totals.sums["latency_sum"])


def _traffic_summary(sim, totals: _Totals, scenario) -> dict:
    """Routed-traffic figures (docs/mesh.md, "Routed packets"): offered and accepted load per PE per
    cycle over the measurement window, and the latency of the packets born in it."""
    t = totals.sums
    n_units = sim.state.q_len.size
    warm, end = totals.window
    span = max(0, min(sim.cycle, end) - warm)
    lat = metrics.latency_stats(totals.latency_hist, t["measured_delivered"], t["measured_latency_sum"],
                                t["measured_latency_sq_sum"], totals.measured_latency_max)
    # Utilisation over the whole run, of the links that exist (not those that would leave the grid).
    link_util = metrics.link_utilization(sim.state.link_total, scenario.get("machine", "link_messages_per_cycle"),
                                         sim.cycle)
    return {
        "packets_offered": t["packets_offered"],
        "packets_delivered": t["packets_delivered"],
        "packets_in_source_at_end": int(sim.state.src_pending.sum(dtype=np.int64)),
        "packets_in_router_at_end": int(sim.state.oq_len.sum(dtype=np.int64)),
        "packets_measured_offered": t["window_offered"],
        "packets_measured_delivered": t["measured_delivered"],
        # False when measured packets were still on their way at the end: their latencies are
        # missing from the figures, which then read low (give the run more cycles after the window).
        "packet_latency_complete": t["measured_delivered"] == t["window_offered"],
        "offered_per_pe_cycle": t["window_offered"] / (n_units * span) if span else float("nan"),
        "accepted_per_pe_cycle": t["window_delivered"] / (n_units * span) if span else float("nan"),
        "packet_latency_mean_cycles": lat["mean"],
        "packet_latency_var_cycles2": lat["var"],
        "packet_latency_p50_cycles": lat["p50"],
        "packet_latency_p99_cycles": lat["p99"],
        "packet_latency_max_cycles": lat["max"],
        # In the network: delivery minus leaving the source queue, over the measured packets (exact
        # once all of them are delivered).
        "packet_network_latency_mean_cycles": ((t["measured_latency_sum"] - t["measured_source_wait_sum"])
                                               / t["measured_delivered"]
                                               if t["measured_delivered"] == t["measured_injected"] > 0
                                               else float("nan")),
        "packet_source_wait_mean_cycles": (t["measured_source_wait_sum"] / t["measured_injected"]
                                           if t["measured_injected"] else float("nan")),
        "packet_hops_mean": t["measured_hops_sum"] / t["measured_injected"] if t["measured_injected"] else float("nan"),
        "link_utilization_max": float(link_util.max()),
        "link_utilization_mean": float(link_util.mean()),
    }


def _pipeline_summary(sim, totals: _Totals, scenario) -> dict:
    """layer_pipeline figures (docs/mesh.md, "Dataflow"): chunks and samples finished, their rate
    at the machine's clock (over the whole run, and in the steady state after the first chunk
    finished), the chunk latency, the PEs in regions, the load balance over them, the bottleneck
    region, and the routed packets' latency."""
    pipe = sim.inputs.pipeline
    t = totals.sums
    st = sim.state
    cycles = sim.cycle
    clock = scenario.get("machine", "clock_ghz") * 1e9
    busy = busy_cycles(st)
    active = pipe.region_of >= 0
    lb = metrics.load_balance(busy[active])
    finished = t["chunks_finished"]
    per_sample = pipe.chunks_per_sample
    steady_chunks = finished - totals.chunks_at_first_finish
    steady_cycles = totals.last_finish - totals.first_finish
    steady_rate = steady_chunks / steady_cycles if steady_chunks > 0 and steady_cycles > 0 else float("nan")
    # Per region: utilisation = busy / (PEs x cycles); the bottleneck is the busiest region.
    g = pipe.region_of[active]
    n_pes = np.bincount(g, minlength=pipe.n_regions)
    util = np.bincount(g, weights=busy[active], minlength=pipe.n_regions) / (n_pes * max(cycles, 1))
    worst = int(np.argmax(util))
    lat = metrics.latency_stats(np.zeros(1, np.int64), t["measured_delivered"], t["measured_latency_sum"],
                                t["measured_latency_sq_sum"], totals.measured_latency_max)
    batch = scenario.get("workload", "batch")
    samples_steady = steady_rate * clock / per_sample
    # Load balance over the steady state alone (from the first stop after the first chunk finished).
    li_steady = util_steady = float("nan")
    steady_from = float("nan")
    if totals.steady_start is not None and cycles > totals.steady_start[0]:
        steady_from, busy0 = totals.steady_start
        part = (busy - busy0)[active]
        li_steady = metrics.load_balance(part)["li"]
        util_steady = metrics.utilization(int(part.sum()), int(active.sum()), cycles - steady_from)
    streaming = {}
    if pipe.streaming:
        # A sample is done after every layer's pass; a step is n_layers passes of the batch.
        ends = totals.pass_ends
        pass_cycles = (ends[-1] - ends[0]) / (len(ends) - 1) if len(ends) > 1 else float("nan")
        step_seconds = pipe.n_layers * pass_cycles / clock
        samples_steady = batch / step_seconds if step_seconds > 0 else float("nan")
        streaming = {
            "weight_streaming": True,
            "weight_load_cycles": pipe.load_cycles,
            "layer_weight_bytes": pipe.layer_weight_bytes,
            "weight_wait_cycles": t["weight_wait_cycles"],
            "weight_wait_fraction": t["weight_wait_cycles"] / cycles if cycles else float("nan"),
            "passes_finished": finished // pipe.chunks_per_pass,
            "steps_finished": finished // pipe.chunks_per_pass // pipe.n_layers,
            "pass_cycles_steady": pass_cycles,
        }
        # Samples are done a step (n_layers passes of the batch) at a time; counted in fractions.
        finished_samples = finished / pipe.chunks_per_pass / pipe.n_layers * batch
    else:
        finished_samples = int((st.lp_fin // per_sample).sum())  # whole samples, replica by replica
    slow = pipe.slowest(scenario.get("machine", "link_messages_per_cycle"))
    chip_seconds = batch / samples_steady if samples_steady > 0 else float("nan")
    return {
        "pipeline_regions": pipe.n_regions,
        "pipeline_replicas": pipe.n_replicas,
        "active_pes": int(active.sum()),
        "inactive_pes": int((~active).sum()),
        "active_fraction": float(active.mean()),
        "li_active": lb["li"],
        "utilization_active": metrics.utilization(int(busy[active].sum()), int(active.sum()), cycles),
        "steady_from_cycle": steady_from,
        "li_active_steady": li_steady,
        "utilization_active_steady": util_steady,
        "chunks_finished": finished,
        "samples_finished": finished_samples,
        "chunk_latency_mean_cycles": t["chunk_latency_sum"] / finished if finished else float("nan"),
        "first_chunk_finish_cycle": totals.first_finish if totals.first_finish >= 0 else float("nan"),
        "chunks_per_cycle_steady": steady_rate,
        "samples_per_second_steady": samples_steady,
        # a step as the other machines report it (docs/design.md, "Chip and host"): the chip's time for a
        # batch at the steady rate, the host's part, their sum, and samples/s end to end and on the chip
        **metrics.step_figures(chip_seconds, float(scenario.get("machine", "host_seconds")), batch),
        # the samples finished over the whole run, its fill included
        "samples_per_second_run": finished_samples / (cycles / clock) if cycles else float("nan"),
        "step_seconds_steady": chip_seconds,
        "slowest_region": slow["name"],
        "slowest_region_cycles_per_chunk": slow["cycles"],
        "slowest_region_task_cycles": slow["task"],
        "slowest_region_send_cycles": slow["send"],
        "slowest_region_bound": slow["bound"],
        "bottleneck_region": pipe.names[worst],
        "bottleneck_utilization": float(util[worst]),
        "region_utilization_min": float(util.min()),
        "packets_offered": t["packets_offered"],
        "packets_delivered": t["packets_delivered"],
        "packet_latency_mean_cycles": lat["mean"],
        "packet_latency_var_cycles2": lat["var"],
        "packet_latency_max_cycles": lat["max"],
        "packet_hops_mean": t["measured_hops_sum"] / t["measured_injected"] if t["measured_injected"] else float("nan"),
        **streaming,
    }


def _add_clock(summary: dict, clock_ghz: float) -> None:
    """Figures at the machine's clock: the simulated time and the task throughput per second."""
    seconds = summary["cycles"] / (clock_ghz * 1e9)
    summary["clock_ghz"] = clock_ghz
    summary["simulated_seconds"] = seconds
    summary["throughput_tasks_per_second"] = summary["completed"] / seconds if seconds else float("nan")


def _write_totals(writer, sim, inputs, totals: _Totals) -> None:
    st = sim.state
    rates = inputs.rates if inputs.rates is not None else np.full((inputs.rows, inputs.cols), np.nan)
    units = dict(busy_cycles=busy_cycles(st), injected=st.tot_injected, refused=st.tot_refused,
                 completed=st.tot_completed, migrated_out=st.tot_migrated_out, migrated_in=st.tot_migrated_in,
                 latency_sum=st.tot_latency, injection_rate=rates, queue_depth_end=st.q_len)
    if inputs.routed:
        units.update(packets_offered=st.tot_pkt_offered, packets_delivered=st.tot_pkt_delivered,
                     link_messages=st.link_total)
    if inputs.traffic:
        t = totals.sums
        latency = dict(count=t["measured_delivered"], sum=t["measured_latency_sum"],
                       sum_sq=t["measured_latency_sq_sum"], max=totals.measured_latency_max)
    else:
        latency = dict(count=totals.sums["completed"], sum=totals.sums["latency_sum"],
                       sum_sq=totals.sums["latency_sq_sum"], max=totals.latency_max)
    writer.write_totals(units, totals.latency_hist, latency, packets=inputs.traffic)


def _summary(sim, totals: _Totals, timing) -> dict:
    """The run's figures (the stable names of docs/design.md, "Result files", and more), from the kernel state
    and the running totals of the per-cycle series."""
    st = sim.state
    cycles = sim.cycle
    n_units = st.q_len.size
    busy = busy_cycles(st)
    injected = int(st.tot_injected.sum(dtype=np.int64))
    refused = int(st.tot_refused.sum(dtype=np.int64))
    completed = int(st.tot_completed.sum(dtype=np.int64))
    t = totals.sums
    lat = metrics.latency_stats(totals.latency_hist, t["completed"], t["latency_sum"], t["latency_sq_sum"],
                                totals.latency_max)
    # Simulation speed over the kernel calls after the first, which carries compilation.
    first = timing.first_call or 0.0
    ran = cycles - timing.start_cycle  # in this process (a resumed run started at start_cycle)
    if timing.kernel > 0:
        speed = n_units * (ran - timing.first_call_units) / timing.kernel
    else:
        speed = n_units * ran / first if first else float("nan")
    return {
        "cycles": cycles,
        "n_units": n_units,
        **metrics.balance_figures(busy, cycles),
        **metrics.latency_figures(lat),
        "latency_percentile_overflow": lat["percentile_overflow"],
        "injected": injected,
        "refused": refused,
        "completed": completed,
        "in_system_at_end": injected - refused - completed,
        "refused_share": refused / injected if injected else float("nan"),
        "migrated": int(st.tot_migrated_out.sum(dtype=np.int64)),
        "hops_per_completed_task": t["hops_sum"] / completed if completed else float("nan"),
        "throughput_tasks_per_cycle": completed / cycles if cycles else float("nan"),
        "wall_seconds": timing.wall,
        "kernel_seconds": timing.kernel + first,
        "first_call_seconds": first,
        "output_seconds": timing.output,
        "pe_cycles_per_second": speed,
        "threads": timing.threads,
        "state_bytes_per_pe": state_bytes_per_pe(st),
    }
