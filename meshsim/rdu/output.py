"""HDF5 result files of rdu runs (docs/design.md, "Result files"; docs/rdu.md, "Result file").

The same file life as the mesh's (`meshsim.output`): written as NAME.incomplete.h5, renamed when
complete. The per-cycle observables are run-length encoded: one row per interval over which every
observable is constant, `interval_start` and `series/interval_cycles` giving where and how long.
"""

from __future__ import annotations

from pathlib import Path

import h5py
import numpy as np

from kernels import rdu as K

from ..output import ResultFile, describe

# name -> (series column, units, description), one value per interval and chip.
SERIES = {
    "busy_pcus": (K.SR_BUSY_PCUS, "PCUs", "PCUs computing in every cycle of the interval"),
    "busy_stages": (K.SR_BUSY_STAGES, "stages", "compute stages working on a tile"),
    "collective_busy": (K.SR_COLLECTIVE, "stages", "collective (all-reduce) stages under way"),
    "pmus_in_use": (K.SR_PMUS, "PMUs", "PMUs held by the running section (0 outside RUN)"),
    "ddr_busy": (K.SR_DDR_BUSY, "1", "1 while a DDR burst is in flight"),
    "phase": (K.SR_PHASE, "1", "0 switching sections, 1 waiting for another chip, 2 running, 3 done"),
    "instance": (K.SR_INSTANCE, "1", "section instance the chip is at (its program order)"),
    "ddr_wait": (K.SR_DDR_WAIT, "1", "1 while running with no compute stage busy and the DDR busy"),
}

# name -> (dtype, units, description), one row per section instance (all chips, chip by chip).
SECTIONS = {
    "chip": (np.int32, "1", "chip (pipeline stage) the instance ran on"),
    "instance": (np.int32, "1", "position in the chip's program"),
    "template": (np.int32, "1", "section template (compiled section) it ran"),
    "microbatch": (np.int32, "1", "microbatch it processed (-1: the gradient all-reduce or the optimiser update)"),
    "start_cycle": (np.int64, "cycle", "first cycle after the previous instance (switch and wait included)"),
    "end_cycle": (np.int64, "cycle", "cycle at whose end its last tile was stored"),
    "tiles": (np.int64, "tiles", "tiles streamed through it"),
    "operators": (np.int32, "operators", "stages (operators and collectives)"),
    "pcus": (np.int32, "PCUs", "PCUs allocated"),
    "pmus": (np.int32, "PMUs", "PMUs held"),
    "flops": (np.int64, "FLOPs", "FLOPs of the instance"),
    "weight_bytes": (np.int64, "bytes", "weights of its operators"),
    "spilled_bytes": (np.int64, "bytes", "weights that did not fit the PMUs, streamed with every tile"),
    "load_bytes_per_tile": (np.int64, "bytes", "DDR bytes loaded per tile (spilled weights included)"),
    "store_bytes_per_tile": (np.int64, "bytes", "DDR bytes stored per tile"),
    "li": (np.float64, "1", "LI (mean/max) of all the chip's PCUs' busy cycles over the instance"),
    "li_occupied": (np.float64, "1", "LI (mean/max) of the busy cycles of the PCUs its operators hold"),
    "utilization": (np.float64, "1", "busy PCU-cycles / (PCUs x cycles of the instance)"),
}

# name -> (dtype, units, description), one row per stage of every section instance.
OPERATORS = {
    "section_row": (np.int64, "1", "row of the instance in the sections group"),
    "kind": (np.int8, "1", "0 compute, 1 collective"),
    "pcu0": (np.int32, "1", "first PCU of the operator (its PCUs are consecutive, class hi first)"),
    "pcus": (np.int32, "PCUs", "PCUs of the operator"),
    "pcus_hi": (np.int32, "PCUs", "PCUs with one more unit of work: a column group, or past the column "
                "groups a (group, token) pair (class hi)"),
    "pcus_lo": (np.int32, "PCUs", "PCUs with one fewer (class lo)"),
    "column_groups": (np.int32, "1", "column groups of lanes the operator's output splits into"),
    "cycles_hi": (np.int64, "cycles", "busy cycles per tile of a class-hi PCU"),
    "cycles_lo": (np.int64, "cycles", "busy cycles per tile of a class-lo PCU"),
    "cycles_per_tile": (np.int64, "cycles", "cycles per tile of the stage (compute or PMU bandwidth)"),
    "pmus": (np.int32, "PMUs", "PMUs of the operator"),
    "flops": (np.int64, "FLOPs", "FLOPs of the operator over the microbatch"),
    "busy_hi": (np.int64, "cycles", "cycles the class-hi PCUs were busy"),
    "busy_lo": (np.int64, "cycles", "cycles the class-lo PCUs were busy"),
    "li": (np.float64, "1", "operator-level LI: mean/max busy cycles over the operator's PCUs"),
}


class RduResultWriter(ResultFile):
    """Writes one rdu run's HDF5 file incrementally (see meshsim.output.ResultFile for its life)."""

    def __init__(self, final_path, scenario, *, n_chips: int, pcus: int, slots: int, threads: int,
                 compression_level: int):
        # cycles_requested: a step runs as long as it takes; set to the cycles done when complete
        super().__init__(final_path, scenario, "rdu", threads, 0, compression_level)
        f = self.f
        self.n = 0
        f.attrs["chips_simulated"] = n_chips
        self.start = self._scale(f, "interval_start", np.zeros(0, np.int64), "cycle",
                                 "first cycle of the interval", grow=True, chunk=65536)
        self.chip = self._scale(f, "chip", np.arange(n_chips, dtype=np.int32), "1", "chip (pipeline stage)")
        self.slot = self._scale(f, "slot", np.arange(slots, dtype=np.int32), "1", "stage of the running section")
        self.pcu = self._scale(f, "pcu", np.arange(pcus, dtype=np.int32), "1", "PCU index")
        g = f.create_group("series")
        g.attrs["description"] = ("observables per interval and chip, run-length encoded: the value holds for every "
                                  "cycle of [interval_start, interval_start + interval_cycles)")
        self.cycles = g.create_dataset("interval_cycles", shape=(0,), maxshape=(None,), dtype=np.int64,
                                       chunks=(65536,), **self.comp)
        describe(self.cycles, "cycles", "length of the interval")
        self.cycles.dims[0].attach_scale(self.start)
        self.series = {}
        for name, (_, units, desc) in SERIES.items():
            ds = g.create_dataset(name, shape=(0, n_chips), maxshape=(None, n_chips), dtype=np.int32,
                                  chunks=(max(1, 65536 // n_chips), n_chips), **self.comp)
            describe(ds, units, desc)
            ds.dims[0].attach_scale(self.start)
            ds.dims[1].attach_scale(self.chip)
            self.series[name] = ds
        occ = f.create_group("occupancy")
        occ.attrs["description"] = "busy PCUs of every stage slot of the running section, per interval and chip"
        self.stage_busy = occ.create_dataset("stage_busy_pcus", shape=(0, n_chips, slots),
                                             maxshape=(None, n_chips, slots), dtype=np.int32,
                                             chunks=(max(1, 262144 // (n_chips * slots)), n_chips, slots),
                                             **self.comp)
        describe(self.stage_busy, "PCUs", "busy PCUs of each stage slot (the operators of the running section, in "
                                          "order)")
        for i, sc in enumerate((self.start, self.chip, self.slot)):
            self.stage_busy.dims[i].attach_scale(sc)
        for name, desc in (("units", "per-PCU totals over the cycles done"),
                           ("latency", "latency of every tile (first load burst to last store)"),
                           ("summary", "the run's figures (DESIGN.md section 5)")):
            f.create_group(name).attrs["description"] = desc

    def append_intervals(self, starts, cycles, series, stage_busy) -> None:
        """The intervals just recorded, appended after those written before."""
        t0 = self.n
        self._put(self.start, t0, starts)
        self._put(self.cycles, t0, cycles)
        for name, (col, _, _) in SERIES.items():
            self._put(self.series[name], t0, series[:, :, col].astype(np.int32))
        self._put(self.stage_busy, t0, stage_busy.astype(np.int32))
        self.n = t0 + len(starts)

    def _table(self, group: str, description: str, columns: dict, data: dict, scale: str) -> None:
        self._finishing()
        if group in self.f:
            del self.f[group]
        g = self.f.create_group(group)
        g.attrs["description"] = description
        n = len(next(iter(data.values())))
        sc = self._scale(g, scale, np.arange(n, dtype=np.int64), "1", f"{scale} index")
        for name, (dtype, units, desc) in columns.items():
            ds = g.create_dataset(name, data=np.asarray(data[name], dtype=dtype), chunks=True, **self.comp)
            describe(ds, units, desc)
            ds.dims[0].attach_scale(sc)
        names = np.array(data["name"], dtype=h5py.string_dtype())
        ds = g.create_dataset("name", data=names, chunks=True, **self.comp)
        describe(ds, "1", "name")
        ds.dims[0].attach_scale(sc)

    def write_totals(self, pcu_busy, ddr_bytes, tile_latency, sections: dict, operators: dict) -> None:
        """Per-PCU busy cycles, DDR bytes per chip, tile latencies and the section and operator
        tables, replacing any written before."""
        self._finishing()
        u = self.f["units"]
        for name in list(u):
            del u[name]
        ds = u.create_dataset("pcu_busy_cycles", data=np.asarray(pcu_busy, np.int64), chunks=True, **self.comp)
        describe(ds, "cycles", "cycles each PCU computed")
        ds.dims[0].attach_scale(self.chip)
        ds.dims[1].attach_scale(self.pcu)
        ds = u.create_dataset("ddr_bytes", data=np.asarray(ddr_bytes, np.int64), chunks=True, **self.comp)
        describe(ds, "bytes", "bytes each chip moved over DDR")
        ds.dims[0].attach_scale(self.chip)
        lg = self.f["latency"]
        for name in list(lg):
            del lg[name]
        lat = np.asarray(tile_latency, np.int64)
        sc = self._scale(lg, "tile", np.arange(lat.size, dtype=np.int64), "1", "tile, by chip, instance, tile")
        ds = lg.create_dataset("tile_latency", data=lat, chunks=True, **self.comp)
        describe(ds, "cycles", "latency of each tile (-1: not stored yet)")
        ds.dims[0].attach_scale(sc)
        if sections["name"]:
            self._table("sections", "one row per section instance, chip by chip in program order", SECTIONS,
                        sections, "section_row")
            self._table("operators", "one row per stage of every section instance", OPERATORS, operators,
                        "operator_row")

    def finish(self, summary: dict, cycles_done: int, complete: bool) -> Path:
        """As ResultFile.finish; a complete step also records its length as the cycles requested."""
        self._finishing()
        if complete:
            self.f.attrs["cycles_requested"] = cycles_done
        return super().finish(summary, cycles_done, complete)
