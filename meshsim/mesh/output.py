"""The mesh's result file: its per-cycle series, per-PE totals, windows, frames, regions and the
layer pipeline's tables (docs/design.md, "Result files"; the file's life is meshsim.output.ResultFile's).
"""

from __future__ import annotations

import h5py
import numpy as np

from kernels import mesh as K

from ..output import ResultFile, describe
from .pipeline import BOUNDS
from .regions import BOUNDARY_FIGURES, FIGURES

# name -> (series column, units, description)
SERIES = {
    "busy": (K.S_BUSY, "PEs", "PEs that did one cycle of work in the cycle"),
    "queued": (K.S_QUEUED, "tasks", "tasks waiting in queues at the end of the cycle"),
    "in_service": (K.S_IN_SERVICE, "tasks", "tasks in service at the end of the cycle"),
    "injected": (K.S_INJECTED, "tasks", "tasks offered by the workload in the cycle"),
    "refused": (K.S_REFUSED, "tasks", "offered tasks refused because the queue was full"),
    "completed": (K.S_COMPLETED, "tasks", "tasks completed in the cycle"),
    "migrated": (K.S_MIGRATED, "tasks", "tasks sent to a neighbour in the cycle"),
    "received": (K.S_RECEIVED, "tasks", "tasks received from a neighbour in the cycle"),
    "in_flight": (K.S_IN_FLIGHT, "messages", "messages on links (sent, not yet received) at the end of the cycle"),
    "latency_sum": (K.S_LATENCY_SUM, "cycles", "sum of the latencies of the tasks completed in the cycle"),
    "latency_sq_sum": (K.S_LATENCY_SQ_SUM, "cycles^2", "sum of the squared latencies of the tasks completed"),
    "hops_sum": (K.S_HOPS_SUM, "hops", "sum of the hops of the tasks completed in the cycle"),
    "latency_max": (K.S_LATENCY_MAX, "cycles", "largest latency of a task completed in the cycle (0: none)"),
    "link_sent": (K.S_LINK_SENT, "messages", "messages (tasks, packets, control messages) sent on links in the cycle"),
    "link_received": (K.S_LINK_RECEIVED, "messages",
                      "messages (tasks, packets, control messages) taken off links in the cycle"),
    "control_sent": (K.S_CONTROL_SENT, "messages",
                     "control messages (work_stealing's requests and refusals) sent on links in the cycle"),
    "control_received": (K.S_CONTROL_RECEIVED, "messages", "control messages taken off links in the cycle"),
}

# Routed traffic only: name -> (series column, units, description).
PACKET_SERIES = {
    "packets_offered": (K.S_PKT_OFFERED, "packets", "packets offered (joined a source queue) in the cycle"),
    "packets_injected": (K.S_PKT_INJECTED, "packets", "packets that left a source queue into the network"),
    "packets_delivered": (K.S_PKT_DELIVERED, "packets", "packets delivered at their destination in the cycle"),
    "packets_in_source": (K.S_PKT_IN_SOURCE, "packets", "packets waiting in source queues at the end of the cycle"),
    "packets_in_router": (K.S_PKT_IN_ROUTER, "packets", "packets in router output queues at the end of the cycle"),
    "measured_injected": (K.S_MEAS_INJECTED, "packets", "measured packets that left their source queue"),
    "measured_source_wait_sum": (K.S_MEAS_SOURCE_WAIT_SUM, "cycles",
                                 "sum of the source-queue waits of the measured packets that left it"),
    "measured_hops_sum": (K.S_MEAS_HOPS_SUM, "hops", "sum of the XY hop counts of the measured packets that left "
                          "their source queue"),
    "measured_delivered": (K.S_MEAS_DELIVERED, "packets", "measured packets (born in the window) delivered"),
    "measured_latency_sum": (K.S_MEAS_LATENCY_SUM, "cycles", "sum of the latencies of measured packets delivered"),
    "measured_latency_sq_sum": (K.S_MEAS_LATENCY_SQ_SUM, "cycles^2",
                                "sum of the squared latencies of measured packets delivered"),
    "measured_latency_max": (K.S_MEAS_LATENCY_MAX, "cycles",
                             "largest latency of a measured packet delivered (0: none)"),
}

# layer_pipeline only: name -> (series column, units, description).
PIPELINE_SERIES = {
    "chunks_finished": (K.S_CHUNKS_FINISHED, "chunks", "chunks that left the last region of their pipeline"),
    "chunk_latency_sum": (K.S_CHUNK_LATENCY_SUM, "cycles",
                          "sum of the latencies (finish minus admission) of the chunks finished in the cycle"),
    "weight_wait": (K.S_WEIGHT_WAIT, "1", "1 if the wafer waited for weights in the cycle (weight streaming)"),
}

# name -> (dtype, units, description) of the per-unit totals.
UNITS = {
    "busy_cycles": (np.int64, "cycles", "cycles in which the PE did work"),
    "injected": (np.int32, "tasks", "tasks offered to the PE by the workload"),
    "refused": (np.int32, "tasks", "tasks refused at injection (queue full)"),
    "completed": (np.int32, "tasks", "tasks completed by the PE"),
    "migrated_out": (np.int32, "tasks", "tasks the PE sent to a neighbour"),
    "migrated_in": (np.int32, "tasks", "tasks the PE received from a neighbour"),
    "latency_sum": (np.int64, "cycles", "sum of the latencies of the tasks the PE completed"),
    "injection_rate": (np.float64, "tasks/PE/cycle", "Bernoulli injection rate of the PE (NaN for traces)"),
    "queue_depth_end": (np.uint8, "tasks", "queue depth at the end of the last cycle done"),
}

# Routed traffic only: name -> (dtype, units, description) of per-PE packet totals.
PACKET_UNITS = {
    "packets_offered": (np.int32, "packets", "packets offered at the PE (its source)"),
    "packets_delivered": (np.int32, "packets", "packets delivered at the PE (their destination)"),
}

# name -> (dtype, units, description) of the per-window figures.
WINDOWS = {
    "window_end": (np.int64, "cycle", "last cycle of the window (exclusive end)"),
    "li": (np.float64, "1", "load-balance efficiency mean/max of per-PE busy cycles in the window"),
    "percent_imbalance": (np.float64, "%", "(max/mean - 1) x 100 of per-PE busy cycles"),
    "jain_index": (np.float64, "1", "Jain's fairness index of per-PE busy cycles"),
    "cv": (np.float64, "1", "coefficient of variation of per-PE busy cycles"),
    "busy_min": (np.int64, "cycles", "least busy cycles of a PE in the window"),
    "busy_max": (np.int64, "cycles", "most busy cycles of a PE in the window"),
    "utilization": (np.float64, "1", "busy PE-cycles / (PEs x cycles) in the window"),
    "completed": (np.int64, "tasks", "tasks completed in the window"),
    "latency_mean": (np.float64, "cycles", "mean latency of the tasks completed in the window (NaN: none)"),
}


class MeshResultWriter(ResultFile):
    """Writes one mesh run's HDF5 file incrementally (see ResultFile for its life)."""

    def __init__(self, final_path, scenario, *, rows: int, cols: int, queue_capacity: int, latency_bins: int,
                 threads: int, compression_level: int, regions=None, traffic: bool = False,
                 pipeline: bool = False, layers=None, window_busy_cycles: int = 0):
        super().__init__(final_path, scenario, "mesh", threads, scenario.get("run", "cycles"), compression_level)
        f = self.f
        self.rows, self.cols, self.q = rows, cols, queue_capacity
        self.latency_bins = latency_bins
        self.n_cycles = 0

        self.cycle = self._scale(f, "cycle", np.arange(0, dtype=np.int64), "cycle", "cycle number", grow=True)
        self.row = self._scale(f, "row", np.arange(rows, dtype=np.int32), "PE", "PE row")
        self.col = self._scale(f, "col", np.arange(cols, dtype=np.int32), "PE", "PE column")

        g = f.create_group("series")
        g.attrs["description"] = "one value per cycle, summed over all PEs"
        self.series = {}
        self.series_columns = dict(SERIES)
        if traffic or pipeline:
            self.series_columns.update(PACKET_SERIES)
        if pipeline:
            self.series_columns.update(PIPELINE_SERIES)
        for name, (_, units, desc) in self.series_columns.items():
            ds = g.create_dataset(name, shape=(0,), maxshape=(None,), dtype=np.int64, chunks=(8192,), **self.comp)
            describe(ds, units, desc)
            ds.dims[0].attach_scale(self.cycle)
            self.series[name] = ds

        occ = f.create_group("occupancy")
        depth = self._scale(occ, "depth", np.arange(queue_capacity + 1, dtype=np.int32), "tasks", "queue depth")
        self.depth_hist = occ.create_dataset("depth_histogram", shape=(0, queue_capacity + 1),
                                             maxshape=(None, queue_capacity + 1), dtype=np.int32,
                                             chunks=(max(1, min(4096, 2**20 // (queue_capacity + 1))),
                                                     queue_capacity + 1), **self.comp)
        describe(self.depth_hist, "PEs", "PEs with each queue depth at the end of each cycle")
        self.depth_hist.dims[0].attach_scale(self.cycle)
        self.depth_hist.dims[1].attach_scale(depth)
        self.frame_cycle = self._scale(occ, "frame_cycle", np.arange(0, dtype=np.int64), "cycle",
                                       "cycle at whose end the frame was taken", grow=True)
        self.frames = {}
        for name, desc in (("queue_depth", "queue depth of every PE at the end of the frame's cycle"),
                           ("in_service", "1 where the PE holds a task in service at the end of the frame's cycle")):
            ds = occ.create_dataset(name, shape=(0, rows, cols), maxshape=(None, rows, cols), dtype=np.uint8,
                                    chunks=(1, rows, cols), **self.comp)
            describe(ds, "tasks", desc)
            ds.dims[0].attach_scale(self.frame_cycle)
            ds.dims[1].attach_scale(self.row)
            ds.dims[2].attach_scale(self.col)
            self.frames[name] = ds

        w = f.create_group("windows")
        w.attrs["description"] = "load balance per window of run.window_cycles cycles (the last may be shorter)"
        self.window_start = self._scale(w, "window_start", np.arange(0, dtype=np.int64), "cycle",
                                        "first cycle of the window", grow=True)
        self.windows = {}
        for name, (dtype, units, desc) in WINDOWS.items():
            ds = w.create_dataset(name, shape=(0,), maxshape=(None,), dtype=dtype, chunks=(1024,), **self.comp)
            describe(ds, units, desc)
            ds.dims[0].attach_scale(self.window_start)
            self.windows[name] = ds
        self.window_busy = None
        if window_busy_cycles:
            # the narrowest type that holds a whole window's busy cycles
            dtype = next(t for t in (np.uint8, np.uint16, np.uint32) if window_busy_cycles <= np.iinfo(t).max)
            self.window_busy = w.create_dataset("busy_cycles", shape=(0, rows, cols), maxshape=(None, rows, cols),
                                                dtype=dtype, chunks=(1, rows, cols), **self.comp)
            describe(self.window_busy, "cycles", "cycles each PE did work in the window")
            for i, sc in enumerate((self.window_start, self.row, self.col)):
                self.window_busy.dims[i].attach_scale(sc)
        self.regions = regions
        if regions is not None:
            rg, self.region = self._named_group(
                "regions", "figures per region of the workload (e.g. each hot rectangle and the background)",
                "region", regions.names)
            m = rg.create_dataset("region_map", data=regions.labels, chunks=True, **self.comp)
            describe(m, "1", "region index of every PE")
            m.dims[0].attach_scale(self.row)
            m.dims[1].attach_scale(self.col)
            self.window_regions = {}
            for name, desc, dtype, unit in (
                    ("region_li", "LI of each region's per-PE busy cycles in the window", np.float64, "1"),
                    ("region_utilization", "utilisation of each region in the window", np.float64, "1"),
                    ("region_completed", "tasks completed by each region's PEs in the window", np.int64, "tasks")):
                ds = w.create_dataset(name, shape=(0, regions.count), maxshape=(None, regions.count),
                                      dtype=dtype, chunks=(max(1, 4096 // regions.count), regions.count),
                                      **self.comp)
                describe(ds, unit, desc)
                ds.dims[0].attach_scale(self.window_start)
                ds.dims[1].attach_scale(self.region)
                self.window_regions[name] = ds
        self.layers = layers
        if layers is not None:
            _, self.layer = self._named_group(
                "layers", "figures per layer of the pipeline (forward and backward separately)", "layer", layers.names)
        f.create_group("units").attrs["description"] = "per-PE totals over the cycles done"
        f.create_group("latency").attrs["description"] = "latency of completed tasks (completion - birth)"
        f.create_group("summary").attrs["description"] = "the run's figures (DESIGN.md section 5)"

    def _named_group(self, group, description, scale, names):
        """A group of per-item figures: its index scale `scale` (at the root, beside cycle, row and
        col, so that every group can use it as a dimension) and its dataset of item names.
        Returns (the group, the scale)."""
        g = self.f.create_group(group)
        g.attrs["description"] = description
        sc = self._scale(self.f, scale, np.arange(len(names), dtype=np.int32), "1", f"{scale} index")
        ds = g.create_dataset("name", data=np.array(names, dtype=h5py.string_dtype()), chunks=True, **self.comp)
        describe(ds, "1", f"name of each {scale}")
        ds.dims[0].attach_scale(sc)
        return g, sc

    def _resumed(self) -> None:
        self.n_cycles = int(self.cycle.shape[0])

    def append_cycles(self, t0: int, series: np.ndarray, depth_series: np.ndarray) -> None:
        """Per-cycle series and depth histograms of cycles t0 .. t0 + len(series) - 1, written at
        that offset (writing the same cycles again changes nothing)."""
        n = len(series)
        self._put(self.cycle, t0, np.arange(t0, t0 + n, dtype=np.int64))
        for name, (col, _, _) in self.series_columns.items():
            self._put(self.series[name], t0, series[:, col])
        self._put(self.depth_hist, t0, depth_series.astype(np.int32))
        self.n_cycles = t0 + n

    def append_frame(self, cycle: int, queue_depth: np.ndarray, in_service: np.ndarray) -> None:
        """A full per-PE frame at the end of `cycle`."""
        self._append(self.frame_cycle, [cycle])
        self._append(self.frames["queue_depth"], queue_depth[None])
        self._append(self.frames["in_service"], in_service[None].astype(np.uint8))

    def append_window(self, start: int, figures: dict, region_figures: dict | None = None, busy=None) -> None:
        """One window's load-balance figures (keys of WINDOWS), with regions each region's, and
        (when the file keeps them) every PE's busy cycles in it."""
        self._append(self.window_start, [start])
        for name in WINDOWS:
            self._append(self.windows[name], [figures[name]])
        if self.window_busy is not None:
            self._append(self.window_busy, np.asarray(busy)[None].astype(self.window_busy.dtype))
        if self.regions is not None:
            self._append(self.window_regions["region_li"], region_figures["li"][None])
            self._append(self.window_regions["region_utilization"], region_figures["utilization"][None])
            self._append(self.window_regions["region_completed"], region_figures["completed"][None])

    def write_regions(self, figures: dict, group: str = "regions") -> None:
        """Whole-run figures per region (keys of meshsim.mesh.regions.FIGURES), replacing any before;
        group "layers" for the per-layer figures."""
        self._write_per_region(FIGURES, figures, group)

    def write_boundaries(self, figures: dict) -> None:
        """The regions' boundary figures (keys of meshsim.mesh.regions.BOUNDARY_FIGURES), replacing any
        before."""
        self._write_per_region(BOUNDARY_FIGURES, figures, "regions")

    def _write_per_region(self, table: dict, figures: dict, group: str) -> None:
        """One dataset per figure of `table` (name: dtype, units, description) in `group`, each over
        the group's region or layer scale, replacing any before."""
        self._finishing()
        rg = self.f[group]
        scale = self.region if group == "regions" else self.layer
        for name, (dtype, units, desc) in table.items():
            if name in rg:
                del rg[name]
            ds = rg.create_dataset(name, data=np.asarray(figures[name], dtype=dtype), chunks=True, **self.comp)
            describe(ds, units, desc)
            ds.dims[0].attach_scale(scale)

    def write_pipeline(self, pipe, pe_flops_per_cycle: float) -> None:
        """The layer_pipeline's region table (docs/mesh.md, "Dataflow"), one entry per region."""
        self._finishing()  # nothing to do while the layout is built, which is when a run writes it
        g = self.f.create_group("pipeline")
        g.attrs["description"] = "the regions of the layer pipeline, in pipeline order per replica"
        g.attrs["chunks_in_flight"] = pipe.chunks_in_flight
        g.attrs["tokens_per_chunk"] = pipe.tokens_per_chunk
        g.attrs["chunks_per_sample"] = pipe.chunks_per_sample
        g.attrs["pe_flops_per_cycle"] = pe_flops_per_cycle
        t = pipe.table
        # Regions are listed replica by replica, each replica's in the kernels' order.
        def per_region(values):  # a figure of one replica's regions, for every region
            return [values[i % len(pipe.kernels)] for i in range(pipe.n_regions)]

        kernel = per_region(pipe.kernels)
        scale = self._scale(g, "pipeline_region", np.arange(pipe.n_regions, dtype=np.int32), "1",
                            "region index (the regions group adds idle PEs as a last region when there are any)")
        columns = {
            "row0": (t[:, K.REG_ROW0], "PE", "first row of the region"),
            "col0": (t[:, K.REG_COL0], "PE", "first column of the region"),
            "row1": (t[:, K.REG_ROW0] + t[:, K.REG_HEIGHT], "PE", "row after the region's last"),
            "col1": (t[:, K.REG_COL0] + t[:, K.REG_WIDTH], "PE", "column after the region's last"),
            "work_cycles": (t[:, K.REG_WORK], "cycles", "work of one PE's task for one chunk"),
            "flow": (t[:, K.REG_FLOW], "1", "direction data moves along the region's rows: +1 east, -1 west"),
            "input": (t[:, K.REG_INPUT], "1", "input edge: 0 the upstream column, 1 the top row"),
            "output": (t[:, K.REG_OUTPUT], "1", "output edge: 0 the downstream column, 1 the bottom row"),
            "next_region": (t[:, K.REG_NEXT], "1", "successor region (-1: last of its replica)"),
            "replica": (t[:, K.REG_REPLICA], "1", "replica of the region"),
            "flops": (np.array([k.flops for k in kernel], np.int64), "FLOPs",
                      "FLOPs of the region's kernel over the whole batch"),
            "weight_bytes": (np.array([k.weight_bytes for k in kernel], np.int64), "bytes",
                             "weights of the region's kernel"),
            "wavelets": (t[:, K.REG_WAVELETS], "wavelets", "wavelets each PE of the region's lines receives per "
                         "chunk (docs/mesh.md, \"The PE and the wavelets\")"),
            "reduce_wavelets": (per_region(pipe.reduce_wavelets), "wavelets",
                                "wavelets of partial sums each PE passes on per chunk (0: not a matrix kernel)"),
            "compute_cycles": (per_region(pipe.compute_cycles), "cycles",
                               "cycles of a PE's arithmetic and SRAM traffic per chunk, before rounding"),
            "bound": (per_region([BOUNDS.index(b) for b in pipe.bounds]), "1",
                      "what bounds the region's task: " + ", ".join(f"{i} {b}" for i, b in enumerate(BOUNDS))),
        }
        for name, (data, units, desc) in columns.items():
            data = np.asarray(data)
            ds = g.create_dataset(name, data=data if data.dtype.kind == "f" else data.astype(np.int64), chunks=True,
                                  **self.comp)
            describe(ds, units, desc)
            ds.dims[0].attach_scale(scale)

    def write_totals(self, units: dict, latency_hist: np.ndarray, latency: dict, packets: bool = False) -> None:
        """Per-PE totals and the latency histogram (of measured packets when `packets`, a traffic
        run's; else of completed tasks), replacing any written before."""
        self._finishing()
        g = self.f["units"]
        for name, (dtype, unit_name, desc) in {**UNITS, **PACKET_UNITS}.items():
            if name not in units:
                continue
            if name in g:
                del g[name]
            ds = g.create_dataset(name, data=np.asarray(units[name], dtype=dtype), chunks=True, **self.comp)
            describe(ds, unit_name, desc)
            ds.dims[0].attach_scale(self.row)
            ds.dims[1].attach_scale(self.col)
        if "link_messages" in units:
            if "link_messages" in g:
                del g["link_messages"]
            if "direction" not in self.f:
                d = self._scale(self.f, "direction", np.arange(4, dtype=np.int8), "1", "output direction")
                d.attrs["names"] = "N E S W"
            ds = g.create_dataset("link_messages", data=np.asarray(units["link_messages"], np.int64), chunks=True,
                                  **self.comp)
            describe(ds, "messages", "messages sent on each output link (0 N, 1 E, 2 S, 3 W) over the run")
            ds.dims[0].attach_scale(self.row)
            ds.dims[1].attach_scale(self.col)
            ds.dims[2].attach_scale(self.f["direction"])
        lg = self.f["latency"]
        for name in list(lg):
            del lg[name]
        bins = self._scale(lg, "latency_bin", np.arange(self.latency_bins, dtype=np.int64), "cycles",
                           "latency in cycles; the last bin counts every latency at or above it")
        h = lg.create_dataset("histogram", data=np.asarray(latency_hist, np.int64), chunks=True, **self.comp)
        what = "measured packets delivered" if packets else "completed tasks"
        describe(h, "tasks" if what == "completed tasks" else "packets",
                  f"{what} per latency (cycles); last bin: overflow")
        h.dims[0].attach_scale(bins)
        for k, v in latency.items():
            lg.attrs[k] = v
