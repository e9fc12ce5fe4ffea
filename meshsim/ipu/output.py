"""The ipu's result file: its tables and writer (docs/ipu.md, "Result file"; the file's life is
meshsim.output.ResultFile's)."""

from __future__ import annotations

from pathlib import Path

import h5py
import numpy as np

from kernels import ipu as K

from ..output import ResultFile, describe
from .compiler import IpuProgram

#: name -> (column, units, description) of the supersteps/ table.
SUPERSTEPS = {
    "step": (K.SS_STEP, "1", "step the superstep belongs to"),
    "direction": (K.SS_DIRECTION, "1", "0 forward, 1 backward, 3 interleaved pipeline step (recompute runs in "
                  "backward ones)"),
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
    "direction": (K.PL_DIRECTION, "1", "0 forward, 1 backward pipeline step, 2 the end row (gradient all-reduce, "
                  "optimiser update), 3 interleaved pipeline step"),
    "index": (K.PL_INDEX, "1", "pipeline step of its direction"),
    "start_cycle": (K.PL_START, "cycle", "first cycle"),
    "cycles": (K.PL_CYCLES, "cycles", "length: the slowest stage plus the transfer"),
    "slowest_stage": (K.PL_SLOWEST, "1", "stage that set the length (-1 for the end row)"),
    "transfer_cycles": (K.PL_TRANSFER, "cycles", "transfer between stages (or gradient all-reduce) cycles in it"),
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
        g.attrs["description"] = ("one row per pipeline step (and end row: gradient all-reduce and optimiser "
                                  "update), in order")
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
        write_templates(self, prog)
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

    def _resumed(self) -> None:
        self.n_ss, self.n_pl, self.n_lat = (int(d.shape[0]) for d in (self.ss_row, self.pl_row, self.lat_row))

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


def write_templates(w, prog: IpuProgram) -> None:
    """The templates/ table and occupancy/tile_busy_cycles of writer `w` (an ipu run's, or a generation's,
    meshsim.ipu.decode): one row per superstep template, with every tile's busy cycles in one instance."""
    g = w.f.create_group("templates")
    g.attrs["description"] = ("one row per superstep template: stage by stage, its forward list, then its "
                              "backward list")
    for name, (dtype, units, desc) in TEMPLATES.items():
        key = {"compute_cycles": "compute", "sync_cycles": "sync", "exchange_cycles": "exchange",
               "sent_max_bytes": "sent_max", "received_max_bytes": "received_max"}.get(name, name)
        ds = g.create_dataset(name, data=np.array([getattr(t, key) for t in prog.templates], dtype=dtype),
                              chunks=True, **w.comp)
        describe(ds, units, desc)
        ds.dims[0].attach_scale(w.template)
    ds = g.create_dataset("name", data=np.array([t.name for t in prog.templates], dtype=h5py.string_dtype()),
                          chunks=True, **w.comp)
    describe(ds, "1", "operator (\"layer<i>.<op>\", with .backward or .recompute; \"embedding\")")
    ds.dims[0].attach_scale(w.template)
    occ = w.f.create_group("occupancy")
    occ.attrs["description"] = "busy cycles of every tile in one instance of each superstep template"
    rows = min(len(prog.templates), max(1, 65536 // prog.spec.tiles))
    ds = occ.create_dataset("tile_busy_cycles", data=prog.busy, chunks=(rows, prog.spec.tiles), **w.comp)
    describe(ds, "cycles", "busy cycles of each tile of the template's stage in one instance (the same in every "
                           "instance)")
    ds.dims[0].attach_scale(w.template)
    ds.dims[1].attach_scale(w.tile)

