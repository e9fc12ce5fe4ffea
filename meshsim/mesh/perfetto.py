"""The mesh's timeline for Perfetto (meshsim.export; docs/mesh.md, "Result file"): the wafer as one
process with its windows' LI and utilisation and its per-cycle series as counters, and a process per
region (each hot rectangle, each kernel of the layer pipeline) with the region's own figures per
window: LI, utilisation, and the chunks (pipeline) or tasks it completed a cycle."""

from __future__ import annotations

import numpy as np

from ..export import Timeline

WAFER = 1
#: per-cycle series shown as counters on the wafer: (dataset in series/, counter name)
SERIES = (("queued", "queued tasks"), ("busy", "busy PEs"), ("in_flight", "tasks on links"),
          ("migrated", "tasks migrated a cycle"), ("chunks_finished", "chunks finished a cycle"),
          ("packets_in_router", "packets in routers"), ("weight_wait", "PEs waiting for weights"))


def trace_events(f, values: dict, tl: Timeline) -> None:
    rows, cols = values["machine"]["rows"], values["machine"]["cols"]
    tl.process(WAFER, f"wafer {rows} x {cols}")
    w = f["windows"] if "windows" in f else None
    if w is not None and len(w["window_end"]):
        n = len(w["window_end"])
        starts, ends = w["window_start"][:n], w["window_end"][:n]
        tl.counter(WAFER, "LI (window)", starts, w["li"][:n], ends)
        tl.counter(WAFER, "utilisation (window)", starts, w["utilization"][:n], ends)
    if "series" in f and "cycle" in f:
        cycles = f["cycle"][()]
        for key, name in SERIES:
            if key in f["series"] and (key != "migrated" or values["migration"]["policy"] != "none"):
                data = f[f"series/{key}"][: len(cycles)]
                if key in ("chunks_finished", "packets_in_router", "weight_wait") and not data.any():
                    continue
                tl.counter(WAFER, name, cycles, data, cycles + 1)
    if "regions" not in f or w is None or "region_utilization" not in w:
        return
    names = [x.decode() if isinstance(x, bytes) else str(x) for x in f["regions/name"][()]]
    labels = f["regions/region_map"][()]
    n_pes = np.bincount(labels[labels >= 0].ravel(), minlength=len(names))
    pipeline = values["workload"]["type"] == "layer_pipeline"
    n = len(w["window_end"])
    starts, ends = w["window_start"][:n], w["window_end"][:n]
    length = np.maximum(ends - starts, 1)
    for k, name in enumerate(names):
        pid = WAFER + 1 + k
        tl.process(pid, f"region {k}: {name} ({int(n_pes[k]):,} PEs)")
        tl.counter(pid, "LI (window)", starts, w["region_li"][:n, k], ends)
        tl.counter(pid, "utilisation (window)", starts, w["region_utilization"][:n, k], ends)
        if "region_completed" in w:
            done = w["region_completed"][:n, k].astype(np.float64)
            if pipeline:  # every PE of a kernel's region does one task of each chunk
                tl.counter(pid, "chunks a cycle", starts, done / (length * max(int(n_pes[k]), 1)), ends)
            else:
                tl.counter(pid, "tasks completed a cycle", starts, done / length, ends)
