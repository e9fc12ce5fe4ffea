"""An rdu run between kernel calls (meshsim.machine.Run): the compiled program stepped chunk by
chunk, its intervals written as they come, its tables and summary (the figures are defined in
docs/rdu.md, "Metrics"). meshsim.run drives it with every machine's file life (docs/results.md:
flushed after the first kernel call, then every FLUSH_SECONDS, with a provisional summary).
"""

from __future__ import annotations

import numpy as np

from kernels import rdu as K

from .. import metrics
from ..machine import Run
from .compiler import RduProgram
from .output import OPERATORS, SECTIONS, RduResultWriter
from .sim import RduSim


def pcu_busy_cycles(prog: RduProgram, sim: RduSim) -> np.ndarray:
    """Busy cycles of every PCU so far, int64[chips, P], from the kernel's per-(chip, instance,
    stage) class totals (the instance under way included)."""
    out = np.zeros((prog.n_chips, prog.spec.pcus), np.int64)
    for c in range(prog.n_chips):
        for k in range(min(int(prog.n_instances[c]), int((sim.finish[c] >= 0).sum()) + 1)):
            _add_instance(prog, sim.busy, c, k, out[c])
    return out


def _add_instance(prog, busy, c, k, row) -> None:
    sec = prog.section[prog.instance[c, k, K.IN_SECTION]]
    for j in range(int(sec[K.SE_NSTAGES])):
        st = prog.stage[sec[K.SE_STAGE0] + j]
        p0, nh, nl = int(st[K.ST_PCU0]), int(st[K.ST_NHI]), int(st[K.ST_NLO])
        row[p0:p0 + nh] += busy[c, k, j, 0]
        row[p0 + nh:p0 + nh + nl] += busy[c, k, j, 1]


def occupied(stages, pcus: int) -> np.ndarray:
    """bool[pcus]: the PCUs a section's operators hold (docs/rdu.md, "Allocation")."""
    held = np.zeros(pcus, bool)
    for s in stages:
        held[s.pcu0:s.pcu0 + s.pcus] = True
    return held


def allocation_figures(prog: RduProgram, secs: dict) -> dict:
    """The allocation a compiler reports and the balance within it (docs/rdu.md, "Metrics"), over
    the instances of the model's sections in `secs` (the gradient all-reduce and the optimiser
    update, microbatch -1, left out): pcu_alloc_max, the largest share of the chip's PCUs one holds;
    pcu_alloc_mean, the share held, weighted by cycles; li_occupied, the busy-time LI over the PCUs
    each holds, weighted by its cycles."""
    model = np.asarray(secs["microbatch"], np.int64) >= 0
    span = np.asarray(secs["end_cycle"], np.int64) - np.asarray(secs["start_cycle"], np.int64) + 1
    return metrics.weighted_allocation(span[model], np.asarray(secs["pcus"], np.int64)[model],
                                       np.asarray(secs["li_occupied"], np.float64)[model], prog.spec.pcus)


def tables(prog: RduProgram, sim: RduSim) -> tuple[dict, dict]:
    """The sections and operators tables of the result (meshsim.rdu.output SECTIONS, OPERATORS) for
    every instance that has finished."""
    secs = {k: [] for k in ("name", *SECTIONS)}
    ops = {k: [] for k in ("name", *OPERATORS)}
    for c in range(prog.n_chips):
        start = 0
        for k in range(int(prog.n_instances[c])):
            end = int(sim.finish[c, k])
            if end < 0:
                break
            x = int(prog.instance[c, k, K.IN_SECTION])
            sec = prog.sections[x]
            row = np.zeros(prog.spec.pcus, np.int64)
            _add_instance(prog, sim.busy, c, k, row)
            span = end - start + 1
            lb = metrics.load_balance(row)
            held = occupied(sec.stages, prog.spec.pcus)
            li_held = metrics.load_balance(row[held])["li"] if held.any() else float("nan")
            secs["name"].append(sec.name)
            for key, v in (("chip", c), ("instance", k), ("template", x),
                           ("microbatch", int(prog.instance_microbatch[c, k])), ("start_cycle", start),
                           ("end_cycle", end), ("tiles", sec.tiles), ("operators", len(sec.stages)),
                           ("pcus", sum(s.pcus for s in sec.stages)), ("pmus", sec.pmus), ("flops", sec.flops),
                           ("weight_bytes", sec.weight_bytes), ("spilled_bytes", sec.spilled_bytes),
                           ("load_bytes_per_tile", sec.load_bytes), ("store_bytes_per_tile", sec.store_bytes),
                           ("li", lb["li"]), ("li_occupied", li_held),
                           ("utilization", metrics.utilization(int(row.sum()), row.size, span))):
                secs[key].append(v)
            for j, s in enumerate(sec.stages):
                bh, bl = int(sim.busy[c, k, j, 0]), int(sim.busy[c, k, j, 1])
                n = s.n_hi + s.n_lo
                top = max(bh if s.n_hi else 0, bl if s.n_lo else 0)
                li = (s.n_hi * bh + s.n_lo * bl) / (n * top) if n and top else float("nan")
                ops["name"].append(s.op.name)
                for key, v in (("section_row", len(secs["name"]) - 1), ("kind", int(s.op.kind == "collective")),
                               ("pcu0", s.pcu0), ("pcus", s.pcus), ("pcus_hi", s.n_hi), ("pcus_lo", s.n_lo),
                               ("column_groups", s.groups), ("cycles_hi", s.c_hi), ("cycles_lo", s.c_lo),
                               ("cycles_per_tile", s.dur), ("pmus", s.pmus), ("flops", s.op.flops), ("busy_hi", bh),
                               ("busy_lo", bl), ("li", li)):
                    ops[key].append(v)
            start = end + 1
    return secs, ops


class _Sums:
    """Whole-run sums over the recorded intervals, per chip (exact integers)."""

    def __init__(self, chips: int):
        self.pmu_cycles = np.zeros(chips, np.int64)
        self.ddr_busy_cycles = np.zeros(chips, np.int64)
        self.ddr_wait_cycles = np.zeros(chips, np.int64)
        self.wait_cycles = np.zeros(chips, np.int64)
        self.done_cycles = np.zeros(chips, np.int64)

    def add(self, cycles, series) -> None:
        w = cycles[:, None]
        self.pmu_cycles += (series[:, :, K.SR_PMUS] * w).sum(axis=0)
        self.ddr_busy_cycles += (series[:, :, K.SR_DDR_BUSY] * w).sum(axis=0)
        self.ddr_wait_cycles += (series[:, :, K.SR_DDR_WAIT] * w).sum(axis=0)
        self.wait_cycles += ((series[:, :, K.SR_PHASE] == K.PH_WAIT) * w).sum(axis=0)
        self.done_cycles += ((series[:, :, K.SR_PHASE] == K.PH_DONE) * w).sum(axis=0)


def summarise(prog: RduProgram, sim: RduSim, sums: _Sums, wall: float, kernel_seconds: float, threads: int,
              tabs: tuple | None = None) -> dict:
    """The run's figures: the stable names (docs/design.md, "Result files") and the rdu's (docs/rdu.md).
    tabs: `tables(prog, sim)` when the caller has them."""
    spec = prog.spec
    chips = prog.n_chips
    cycles = sim.cycle
    done_inst = (sim.finish >= 0).sum(axis=1)
    busy = pcu_busy_cycles(prog, sim)
    chip_lb = metrics.load_balance(busy.sum(axis=1))
    lat = sim.tile_latency
    completed = int((lat >= 0).sum())
    # tiles whose first load burst has been issued: those of finished instances, and of the one
    # under way those loaded or being loaded
    injected = 0
    for c in range(chips):
        for k in range(int(done_inst[c])):
            injected += int(prog.section[prog.instance[c, k, K.IN_SECTION], K.SE_TILES])
        if done_inst[c] < prog.n_instances[c]:
            injected += int(sim.cs[c, K.CS_LOADED]) + (1 if sim.cs[c, K.CS_LDB] > 0 else 0)
    clock = spec.clock_ghz * 1e9
    seconds = cycles / clock if cycles else float("nan")
    flops = 0
    for c in range(chips):
        for k in range(int(done_inst[c])):
            flops += prog.sections[int(prog.instance[c, k, K.IN_SECTION])].flops
    peak = spec.peak_flops_per_cycle * cycles * chips
    ddr_bytes = int(sim.ddr_bytes.sum())
    eff_gbps = ddr_bytes / chips / seconds / 1e9 if cycles else float("nan")
    chip_cycles = cycles * chips
    _, _, d = spec.degrees
    secs, ops = tabs or tables(prog, sim)  # of the instances that have finished
    ops_li = [v for v in ops["li"] if not np.isnan(v)] if sim.finished else []
    alloc = allocation_figures(prog, secs)
    la = metrics.sample_latency_stats(lat[lat >= 0])
    return {
        "cycles": cycles,
        "n_units": spec.pcus * chips,
        **metrics.balance_figures(busy, cycles),
        "pcu_utilization": flops / peak if peak else float("nan"),
        "pmu_utilization": int(sums.pmu_cycles.sum()) / (spec.pmus * chip_cycles) if cycles else float("nan"),
        **metrics.latency_figures(la),
        "injected": injected,
        "refused": 0,
        "completed": completed,
        "in_system_at_end": injected - completed,
        "migrated": 0,
        "chips": prog.chips_total,
        "chips_simulated": chips,
        "parallelism": spec.parallelism,
        "fusion": spec.fusion,
        "sections": len(prog.sections),
        "section_instances": int(prog.n_instances.sum()),
        "sections_spilled": sum(1 for s in prog.sections if s.spilled_bytes),
        "operator_li_min": float(min(ops_li)) if ops_li else float("nan"),
        "operator_li_mean": float(np.mean(ops_li)) if ops_li else float("nan"),
        "chip_li": chip_lb["li"],
        **alloc,
        "flops": flops,
        "clock_ghz": spec.clock_ghz,
        "simulated_seconds": seconds,
        **metrics.step_figures(seconds if cycles and sim.finished else float("nan"), spec.host_seconds,
                               spec.model.batch),
        # every simulated chip stands for its tensor- and data-parallel copies, which do the same
        "achieved_tflops": flops / chips / seconds / 1e12 if cycles else float("nan"),
        "ddr_bytes": ddr_bytes,
        "ddr_busy_fraction": int(sums.ddr_busy_cycles.sum()) / chip_cycles if cycles else float("nan"),
        "ddr_effective_gbps": eff_gbps,
        "ddr_utilization": eff_gbps / spec.ddr_bandwidth_gbps if cycles else float("nan"),
        "ddr_wait_fraction": int(sums.ddr_wait_cycles.sum()) / chip_cycles if cycles else float("nan"),
        # waiting for another chip, or done while another still works
        "pipeline_bubble_fraction": (int(sums.wait_cycles.sum()) + int(sums.done_cycles.sum())) / chip_cycles
        if cycles else float("nan"),
        "data_parallel_degree": d,
        "intervals": sim.intervals,
        "wall_seconds": wall,
        "kernel_seconds": kernel_seconds,
        "pe_cycles_per_second": spec.pcus * chips * cycles / kernel_seconds if kernel_seconds else float("nan"),
        "threads": threads,
    }


# Seconds between flushes of the result file: an rdu step's chunks of intervals come fast, and a
# flush costs more than writing a chunk (an interruption still writes everything done).
FLUSH_SECONDS = 1.0


class RduRun(Run):
    """An rdu run between kernel calls: the program stepped a chunk of intervals per call (default
    65,536), the intervals written as they come, the file flushed after the first call and then
    every FLUSH_SECONDS (a run of a second or less is flushed before it ends, so a kill leaves a
    summary)."""

    def __init__(self, prog: RduProgram, per_call: int | None = None):
        self.prog = prog
        self.sim = RduSim(prog, chunk=per_call or 65_536)
        self.sums = _Sums(prog.n_chips)
        self.total = int(prog.n_instances.sum())
        self._last = 0
        self.written = 0
        self._tables = (-1, None)  # (instances finished, tables of them): a summary and the totals share them

    def open_writer(self, path, scenario, threads: int) -> RduResultWriter:
        prog = self.prog
        return RduResultWriter(path, scenario, n_chips=prog.n_chips, pcus=prog.spec.pcus, slots=prog.max_stages,
                               threads=threads, compression_level=scenario.get("output", "compression_level"))

    @property
    def finished(self) -> bool:
        return self.sim.finished

    @property
    def done(self) -> int:
        return int((self.sim.finish >= 0).sum())

    @property
    def cycle(self) -> int:
        return self.sim.cycle

    def advance(self) -> int:
        self._last = self.sim.advance()
        return self._last

    def _record(self, writer, n: int) -> None:
        sim = self.sim
        writer.append_intervals(sim.out_start[:n], sim.out_cycles[:n], sim.out_series[:n], sim.out_stage_busy[:n])
        self.sums.add(sim.out_cycles[:n], sim.out_series[:n])

    def record(self, writer) -> None:
        self._record(writer, self._last)

    def record_nothing(self) -> None:
        n, sim = self._last, self.sim
        self.sums.add(sim.out_cycles[:n], sim.out_series[:n])

    def catch_up(self, writer) -> None:
        missing = self.sim.intervals - writer.n  # stopped between the kernel call and its output
        if missing > 0:
            self._record(writer, missing)

    def flush_due(self, seconds_since_flush: float) -> bool:
        return seconds_since_flush >= FLUSH_SECONDS

    def _finished_tables(self) -> tuple:
        if self._tables[0] != self.done:
            self._tables = (self.done, tables(self.prog, self.sim))
        return self._tables[1]

    def summarise(self, timing) -> dict:
        return summarise(self.prog, self.sim, self.sums, timing.wall, timing.kernel_total, timing.threads,
                         self._finished_tables())

    def write_final(self, writer) -> None:
        secs, ops = self._finished_tables()
        writer.write_totals(pcu_busy_cycles(self.prog, self.sim), self.sim.ddr_bytes, self.sim.tile_latency, secs, ops)
