"""The rdu's figures recomputed from its result file (meshsim.analysis): per-PCU busy cycles, tile
latencies, sections, operators and the run-length encoded series."""

from __future__ import annotations

import math

import numpy as np

from .. import metrics
from ..analysis import MAX_WINDOWS, require_datasets
from ..errors import InputError


def analyse(f, values, cycles, window, path) -> dict:
    require_datasets(f, ["units/pcu_busy_cycles", "latency/tile_latency"], path)
    busy = f["units/pcu_busy_cycles"][()].astype(np.int64)
    chips, pcus = busy.shape
    whole = metrics.balance_figures(busy, cycles)
    lat = f["latency/tile_latency"][()]
    done = lat[lat >= 0]
    whole.update(n_units=int(busy.size), idle_units=int((busy == 0).sum()), tiles=int(lat.size),
                 tiles_done=int(done.size), chip_li=metrics.load_balance(busy.sum(axis=1))["li"])
    if done.size:
        la = metrics.sample_latency_stats(done)
        whole.update({f"latency_{k}_cycles": la[k] for k in ("mean", "p50", "p90", "p99", "max")},
                     latency_var_cycles2=la["var"])
    ic = f["series/interval_cycles"][()].astype(np.int64)
    series = {name: f[f"series/{name}"][()].astype(np.int64)
              for name in ("busy_pcus", "pmus_in_use", "ddr_busy", "ddr_wait", "phase")}
    chip_cycles = cycles * chips
    m = values["machine"]
    if chip_cycles:
        whole["pmu_utilization"] = int((series["pmus_in_use"] * ic[:, None]).sum()) / (m["pmus"] * chip_cycles)
        whole["ddr_busy_fraction"] = int((series["ddr_busy"] * ic[:, None]).sum()) / chip_cycles
        whole["ddr_wait_fraction"] = int((series["ddr_wait"] * ic[:, None]).sum()) / chip_cycles
        idle = (series["phase"] == 1) | (series["phase"] == 3)  # waiting for another chip, or done
        whole["pipeline_bubble_fraction"] = int((idle * ic[:, None]).sum()) / chip_cycles
        ddr = int(f["units/ddr_bytes"][()].sum())
        seconds = cycles / (m["clock_ghz"] * 1e9)
        whole["ddr_effective_gbps"] = ddr / chips / seconds / 1e9
    out = dict(whole=whole)
    out["chips"] = [dict(name=f"chip {c}", li=metrics.load_balance(busy[c])["li"],
                         utilization=metrics.utilization(int(busy[c].sum()), pcus, cycles),
                         busy_pcu_cycles=int(busy[c].sum()), idle_units=int((busy[c] == 0).sum()))
                    for c in range(chips)]
    # Sections: every PCU's busy cycles in the instance, from its operators' hi and lo classes.
    if "sections" in f and "pcu0" not in f["operators"]:
        # written before operators kept their first PCU: the run's own section figures
        s = f["sections"]
        names = [n.decode() if isinstance(n, bytes) else str(n) for n in s["name"][()]]
        out["sections"] = [dict(name=name, chip=int(s["chip"][r]), start=int(s["start_cycle"][r]),
                                end=int(s["end_cycle"][r]), li=float(s["li"][r]),
                                utilization=float(s["utilization"][r]), spilled_bytes=int(s["spilled_bytes"][r]))
                           for r, name in enumerate(names)]
    elif "sections" in f:
        s, o = f["sections"], f["operators"]
        names = [n.decode() if isinstance(n, bytes) else str(n) for n in s["name"][()]]
        srow = o["section_row"][()]
        cols = {k: o[k][()].astype(np.int64) for k in ("pcu0", "pcus_hi", "pcus_lo", "busy_hi", "busy_lo")}
        rows = []
        for r, name in enumerate(names):
            per = np.zeros(pcus, np.int64)
            held = np.zeros(pcus, bool)
            for j in np.flatnonzero(srow == r):
                p0, nh, nl = cols["pcu0"][j], cols["pcus_hi"][j], cols["pcus_lo"][j]
                per[p0:p0 + nh] += cols["busy_hi"][j]
                per[p0 + nh:p0 + nh + nl] += cols["busy_lo"][j]
                held[p0:p0 + nh + nl] = True
            span = int(s["end_cycle"][r]) - int(s["start_cycle"][r]) + 1
            rows.append(dict(name=name, chip=int(s["chip"][r]), start=int(s["start_cycle"][r]),
                             end=int(s["end_cycle"][r]), li=metrics.load_balance(per)["li"],
                             li_occupied=metrics.load_balance(per[held])["li"] if held.any() else math.nan,
                             pcus=int(held.sum()), utilization=metrics.utilization(int(per.sum()), pcus, span),
                             spilled_bytes=int(s["spilled_bytes"][r])))
        out["sections"] = rows
        # the allocation over the model's sections (the gradient all-reduce and the optimiser
        # update, microbatch -1, left out) and the balance within it
        model = [x for x, mb in zip(rows, s["microbatch"][()], strict=True) if mb >= 0]
        whole.update(metrics.weighted_allocation(np.array([x["end"] - x["start"] + 1 for x in model], np.int64),
                                                 np.array([x["pcus"] for x in model], np.int64),
                                                 np.array([x["li_occupied"] for x in model], np.float64), pcus))
        op_li = o["li"][()]
        out["operators_li_min"] = float(np.nanmin(op_li)) if np.isfinite(op_li).any() else math.nan
        out["operators_below_0_9"] = int((op_li < 0.9).sum())
    out["windows"] = _rdu_windows(f, ic, series, cycles, chips, pcus, window)
    return out


def integral_at(values: np.ndarray, lengths: np.ndarray, t: np.ndarray) -> np.ndarray:
    """A run-length encoded series (value i for lengths[i] cycles) summed over cycles [0, t) for
    each t, exactly (values int64 [intervals, ...])."""
    ends = np.cumsum(lengths)
    area = np.concatenate([np.zeros((1,) + values.shape[1:], np.int64),
                           np.cumsum(values * lengths.reshape((-1,) + (1,) * (values.ndim - 1)), axis=0)])
    i = np.minimum(np.searchsorted(ends, t, side="right"), len(lengths) - 1)
    before = ends[i] - lengths[i]
    part = np.clip(t - before, 0, lengths[i]).reshape((-1,) + (1,) * (values.ndim - 1))
    return area[i] + values[i] * part


def _rdu_windows(f, ic, series, cycles, chips, pcus, window) -> dict:
    """Utilisation, DDR busy and DDR wait per window of `window` cycles (default: ten windows), exact
    from the run-length encoded series. (LI per window needs per-PCU busy per window, which the
    rdu keeps per section instead.)"""
    n = window or max(1, -(-cycles // 10))
    if -(-cycles // n) > MAX_WINDOWS:
        raise InputError(f"--window {n}: {-(-cycles // n):,} windows over {cycles:,} cycles; at most "
                         f"{MAX_WINDOWS:,}, so a window of at least {-(-cycles // MAX_WINDOWS):,} cycles")
    if cycles == 0 or ic.size == 0:
        return dict(window_cycles=n, source="series (run-length encoded)", rows=[])
    edges = np.append(np.arange(0, cycles, n), cycles)
    span = np.diff(edges) * chips
    sums = {k: np.diff(integral_at(series[k], ic, edges), axis=0).sum(axis=1)
            for k in ("busy_pcus", "ddr_busy", "ddr_wait")}
    rows = [dict(start=int(edges[i]), end=int(edges[i + 1]), utilization=int(sums["busy_pcus"][i]) / (pcus * span[i]),
                 ddr_busy=int(sums["ddr_busy"][i]) / span[i], ddr_wait=int(sums["ddr_wait"][i]) / span[i])
            for i in range(len(span))]
    return dict(window_cycles=n, source="series (run-length encoded)", rows=rows)
