"""The ipu's figures recomputed from its result file (meshsim.analysis): per-tile totals, templates,
superstep and pipeline rows; and its findings."""

from __future__ import annotations

import math

import numpy as np

from .. import metrics
from ..analysis import require_datasets

#: Datasets `_ipu` reads.
_IPU_NEEDS = ["units/tile_busy_cycles", "latency/microbatch_latency",
              *(f"templates/{k}" for k in ("stage", "name", "li", "compute_cycles", "sync_cycles", "exchange_cycles")),
              *(f"supersteps/{k}" for k in ("template", "stage", "direction", "step", "pipeline_step", "microbatch",
                                            "start_cycle")),
              *(f"pipeline/{k}" for k in ("step", "direction", "index", "start_cycle", "cycles", "slowest_stage",
                                          "transfer_cycles"))]

#: Superstep rows read at a time (a long run has tens of millions).
_IPU_CHUNK = 1 << 20


def analyse(f, values, cycles, path) -> dict:
    """An ipu file's figures from its per-tile totals, templates and superstep and pipeline rows
    (docs/ipu.md, "Observables and metrics")."""
    require_datasets(f, _IPU_NEEDS, path)
    busy = f["units/tile_busy_cycles"][()].astype(np.int64)
    stages, tiles = busy.shape
    whole = metrics.balance_figures(busy, cycles)
    whole.update(n_units=int(busy.size), idle_units=int((busy == 0).sum()))
    t = {k: f[f"templates/{k}"][()] for k in ("stage", "li", "compute_cycles", "sync_cycles", "exchange_cycles")}
    names = [n.decode() if isinstance(n, bytes) else str(n) for n in f["templates/name"][()]]
    pipe = {k: f[f"pipeline/{k}"][()].astype(np.int64) for k in ("step", "direction", "index", "start_cycle",
                                                                  "cycles", "slowest_stage", "transfer_cycles")}
    lat = f["latency/microbatch_latency"][()].astype(np.int64)
    if lat.size:
        la = metrics.sample_latency_stats(lat)
        whole.update({f"latency_{k}_cycles": la[k] for k in ("mean", "p50", "p90", "p99", "max")},
                     latency_var_cycles2=la["var"])
    phase = np.stack([t["compute_cycles"], t["sync_cycles"], t["exchange_cycles"]], axis=1).astype(np.int64)
    # each pipeline step is its slowest stage's supersteps plus its transfer; what is left is the token
    # ids IPU 0 streams in, counted as transfer. Pipeline rows are keyed (step, direction, index).
    width = int(pipe["index"].max()) + 1 if pipe["index"].size else 1
    keys = (pipe["step"] * 4 + pipe["direction"]) * width + pipe["index"]
    order = np.argsort(keys, kind="stable")  # already in order in a file meshsim wrote
    keys, slowest = keys[order], pipe["slowest_stage"][order]
    shares = np.zeros(4, np.int64)
    st = np.zeros(stages, np.int64)
    g = f["supersteps"]
    n = g["template"].shape[0]
    for a in range(0, n, _IPU_CHUNK):
        c = {k: g[k][a:a + _IPU_CHUNK].astype(np.int64) for k in ("template", "stage", "direction", "step",
                                                                   "pipeline_step", "microbatch")}
        k = (c["step"] * 4 + c["direction"]) * width + c["pipeline_step"]
        at = np.clip(np.searchsorted(keys, k), 0, max(len(keys) - 1, 0))
        found = keys[at] == k if len(keys) else np.zeros(len(k), bool)
        slow = np.where(found, slowest[at], -2)
        shares[:3] += phase[c["template"][c["stage"] == slow]].sum(axis=0)
        # stage times per micro-batch: step 0's rows of micro-batch 0
        first = (c["step"] == 0) & (c["microbatch"] == 0)
        np.add.at(st, c["stage"][first], phase[c["template"][first]].sum(axis=1))
    shares[3] = int(pipe["cycles"].sum()) - int(shares[:3].sum())
    if cycles:
        whole.update(compute_fraction=int(shares[0]) / cycles, sync_fraction=int(shares[1]) / cycles,
                     exchange_fraction=int(shares[2]) / cycles, transfer_fraction=int(shares[3]) / cycles)
    # and IPU 0's token ids: the gap between the first pipeline step's start and its first superstep
    if n and len(pipe["start_cycle"]):
        st[0] += int(g["start_cycle"][0]) - int(pipe["start_cycle"][0])
    whole["stage_li"] = metrics.load_balance(st)["li"] if st.any() else math.nan
    li = t["li"].astype(np.float64)
    whole["superstep_li_min"] = float(np.nanmin(li)) if np.isfinite(li).any() else math.nan
    out = dict(whole=whole)
    out["stages"] = [dict(name=f"IPU {s}", li=metrics.load_balance(busy[s])["li"],
                          utilization=metrics.utilization(int(busy[s].sum()), tiles, cycles),
                          stage_cycles=int(st[s]), idle_units=int((busy[s] == 0).sum())) for s in range(stages)]
    # a superstep's compute phase: its tiles' busy cycles over tiles x the phase, which is its LI
    out["supersteps"] = [dict(name=f"IPU {int(t['stage'][i])} {names[i]}", li=float(li[i]), utilization=float(li[i]))
                         for i in range(len(names))]
    return out


def findings(a: dict, add) -> None:
    w = a["whole"]
    st = a.get("stages", [])
    if len(st) > 1 and w.get("stage_li", 1) < 0.9:
        top = max(st, key=lambda r: r["stage_cycles"])
        low = min(st, key=lambda r: r["stage_cycles"])
        add(f"pipeline stages are uneven (stage LI {w['stage_li']:.3g}): {top['name']} takes "
            f"{top['stage_cycles']:,} cycles per micro-batch, {low['name']} {low['stage_cycles']:,}; move layers "
            "from the busiest (workload.layers_per_stage)", f"stage LI = {w['stage_li']:.4g}")
    sup = [r for r in a.get("supersteps", []) if not math.isnan(r["li"])]
    below = [r for r in sup if r["li"] < 0.5]
    if below:
        worst = min(below, key=lambda r: r["li"])
        add(f"{len(below)} superstep templates keep fewer than half their tiles' time busy (lowest: {worst['name']}, "
            f"LI {worst['li']:.3g}): too few work units for the tiles (machine.gemm_block)",
            f"templates/li < 0.5 at {len(below)}")
    if w.get("exchange_fraction", 0) > 0.2:
        add(f"exchange takes {w['exchange_fraction']:.3g} of the time", "supersteps/exchange_cycles of the slowest "
            f"stages = {w['exchange_fraction']:.4g} of the cycles")
