"""The mesh's figures recomputed from its result file (meshsim.analysis): per-PE busy cycles, the
latency histogram, windows, regions and links."""

from __future__ import annotations

import math

import numpy as np

from .. import metrics
from ..analysis import require_datasets
from ..errors import InputError


def analyse(f, values, cycles, window, path) -> dict:
    require_datasets(f, ["units/busy_cycles", "latency/histogram", "units/completed", "units/injected",
                         "units/refused"], path)
    busy = f["units/busy_cycles"][()].astype(np.int64)
    whole = metrics.balance_figures(busy, cycles)
    lg = f["latency/histogram"]
    la = f["latency"].attrs
    lat = metrics.latency_stats(lg[()], int(la["count"]), int(la["sum"]), int(la["sum_sq"]), int(la["max"]))
    # The histogram holds measured packets for routed traffic, completed tasks otherwise.
    units = lg.attrs.get("units", "tasks")
    kind = "packet_latency" if (units.decode() if isinstance(units, bytes) else str(units)) == "packets" else "latency"
    whole.update(n_units=int(busy.size), idle_units=int((busy == 0).sum()),
                 injected=int(f["units/injected"][()].sum(dtype=np.int64)),
                 refused=int(f["units/refused"][()].sum(dtype=np.int64)),
                 completed=int(f["units/completed"][()].sum(dtype=np.int64)),
                 migrated=int(f["units/migrated_out"][()].sum(dtype=np.int64)) if "units/migrated_out" in f else 0)
    whole.update({f"{kind}_{k}_cycles": lat[k] for k in ("mean", "p50", "p90", "p99", "max")})
    whole[f"{kind}_var_cycles2"] = lat["var"]
    if kind == "packet_latency":
        whole["packets_delivered"] = int(f["units/packets_delivered"][()].sum(dtype=np.int64))
        whole["packets_measured_delivered"] = int(la["count"])
    whole["throughput_tasks_per_cycle"] = whole["completed"] / cycles if cycles else math.nan
    run_window = values["run"]["window_cycles"]
    out = dict(whole=whole, windows=_mesh_windows(f, busy.shape, cycles, run_window, window, path))
    if "regions/region_map" in f and "regions/name" in f:
        labels = f["regions/region_map"][()]
        names = [n.decode() if isinstance(n, bytes) else str(n) for n in f["regions/name"][()]]
        rows = []
        for k, name in enumerate(names):
            part = busy[labels == k]
            lb = metrics.load_balance(part)
            rows.append(dict(name=name, n_units=int(part.size), li=lb["li"],
                             utilization=metrics.utilization(int(part.sum()), part.size, cycles),
                             idle_units=int((part == 0).sum())))
        out["regions"] = rows
        if "pipeline" in f:
            # a layer pipeline: the PEs in its regions (not "idle") are the ones meant to work
            idle = names.index("idle") if "idle" in names else -1
            active = busy[labels != idle]
            whole["active_units_in_regions"] = int(active.size)
            whole["li_active"] = metrics.load_balance(active)["li"]
            whole["utilization_active"] = metrics.utilization(int(active.sum()), active.size, cycles)
            whole["idle_units"] = int((active == 0).sum())
            whole.update(_steady(f, labels != idle, cycles))
    if "units/link_messages" in f:
        util = metrics.link_utilization(f["units/link_messages"][()].astype(np.int64),
                                        values["machine"]["link_messages_per_cycle"], cycles)
        whole["link_utilization_max"] = float(util.max())
        whole["link_utilization_mean"] = float(util.mean())
    elif "series/link_sent" in f and cycles:
        rows_, cols_ = busy.shape
        n_links = 2 * (rows_ * (cols_ - 1) + cols_ * (rows_ - 1))
        bw = values["machine"]["link_messages_per_cycle"]
        sent = int(f["series/link_sent"][()].sum(dtype=np.int64))
        whole["link_utilization_mean"] = sent / (n_links * bw * cycles) if n_links else 0.0
    return out


def _mesh_windows(f, shape, cycles, run_window, window, path) -> dict:
    """Per-window figures: from every PE's busy cycles per window when the file keeps them (and at
    any multiple of the run's window), else the figures the run stored."""
    n = run_window if window is None else window
    if "windows/busy_cycles" not in f:
        if n != run_window:
            raise InputError(f"{path}: --window {n}: this file keeps no per-window busy cycles (run with "
                             f"output.window_busy = true); only its own window of {run_window} cycles is available")
        w = f["windows"]
        starts = w["window_start"][()]
        rows = [dict(start=int(s), end=int(e), li=float(li), utilization=float(u), source="stored")
                for s, e, li, u in zip(starts, w["window_end"][()], w["li"][()], w["utilization"][()], strict=True)]
        return dict(window_cycles=n, source="stored figures (windows/li)", rows=rows)
    if n % run_window:
        raise InputError(f"--window {n}: must be a multiple of the run's run.window_cycles = {run_window}")
    k = n // run_window
    ds = f["windows/busy_cycles"]
    starts = f["windows/window_start"][()]
    ends = f["windows/window_end"][()]
    rows = []
    for i in range(0, ds.shape[0], k):
        acc = np.zeros(shape, np.int64)
        for j in range(i, min(i + k, ds.shape[0])):
            acc += ds[j]
        start, end = int(starts[i]), int(ends[min(i + k, ds.shape[0]) - 1])
        lb = metrics.load_balance(acc)
        rows.append(dict(start=start, end=end, li=lb["li"], percent_imbalance=lb["percent_imbalance"],
                         jain_index=lb["jain_index"], cv=lb["cv"], busy_min=lb["min"], busy_max=lb["max"],
                         utilization=metrics.utilization(int(acc.sum()), acc.size, end - start)))
    return dict(window_cycles=n, source="windows/busy_cycles", rows=rows)


def _steady(f, active, cycles: int) -> dict:
    """A layer pipeline's load balance in its steady state, apart from the fill (docs/mesh.md,
    "Dataflow"): over the active PEs, from the first window that starts at or after the cycle the
    run took the steady state to start (its first stop after the first chunk finished), from the
    per-window busy cycles; and over the fill before it. {} when the file keeps no per-window busy
    cycles or the run never reached its steady state."""
    start = f["summary"].attrs.get("steady_from_cycle", math.nan)
    if "windows/busy_cycles" not in f or not np.isfinite(start):
        return {}
    starts = f["windows/window_start"][()]
    ends = f["windows/window_end"][()]
    first = int(np.searchsorted(starts, start))
    if first >= len(starts):
        return {}
    ds = f["windows/busy_cycles"]
    steady = np.zeros(ds.shape[1:], np.int64)
    fill = np.zeros(ds.shape[1:], np.int64)
    for i in range(ds.shape[0]):
        (steady if i >= first else fill)[...] += ds[i]
    from_cycle, span = int(starts[first]), int(ends[-1]) - int(starts[first])
    out = dict(steady_from_cycle=from_cycle, li_active_steady=metrics.load_balance(steady[active])["li"],
               utilization_active_steady=metrics.utilization(int(steady[active].sum()), int(active.sum()), span))
    if first > 0:
        out["li_fill"] = metrics.load_balance(fill[active])["li"]
    return out
