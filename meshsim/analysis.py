"""Every metric of a run recomputed from its result file alone (DESIGN.md sections 3 and 5), and a
diagnosis of a load imbalance from what the file shows.

`analyse(path)` reads the raw datasets (per-unit busy cycles, per-window busy cycles, latency
histogram or tile latencies, the rdu's operators and intervals), never the figures the run stored,
and returns plain data; `meshsim report` prints it as a table or JSON, and compares files side by
side.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from . import metrics
from .errors import InputError
from .output import open_result_file
from .report import read_summary
from .roofline import kernels, model_of, platform_of, values_of_file

#: The LI a platform is expected to reach (DESIGN.md section 3: below 0.9 is notable); report
#: --target overrides it.
TARGET_LI = {"mesh": 0.98, "rdu": 0.85, "ipu": 0.80}

class MissingData(InputError):
    """The file lacks datasets a recomputation needs (a run killed before it wrote its totals)."""


#: At most this many windows in one report (a window of a few cycles over a billion-cycle step
#: would be a table nobody reads).
MAX_WINDOWS = 100_000

#: Throughput figures of a transformer run as the run reported them (`meshsim report A B C` puts the
#: machines side by side): the rdu's and ipu's per step, the mesh layer pipeline's in its steady state.
MODEL_FIGURES = ("samples_per_second", "samples_per_second_steady", "time_per_sample_seconds", "achieved_tflops",
                 "flop_utilization", "pcu_utilization")

_WHOLE = ("li", "percent_imbalance", "jain_index", "cv", "busy_min_cycles", "busy_max_cycles", "busy_mean_cycles",
          "compute_time_spread", "active_units", "utilization")


def analyse(path, window: int | None = None, target: float | None = None) -> dict:
    """The figures of a result file, recomputed from its datasets, and the diagnosis against the
    target LI (default TARGET_LI of its machine). `window`: the window length in cycles (mesh: a
    multiple of the run's window_cycles; rdu: any), default the run's."""
    root, _ = read_summary(path)  # a meshsim result with a summary, or InputError
    machine = root.get("machine")
    if machine not in ("mesh", "rdu", "ipu"):
        raise InputError(f"{path}: machine {machine!r}: report knows mesh, rdu and ipu results")
    values = values_of_file(path)
    with open_result_file(path) as f:
        if "provisional" in f["summary"]:
            raise MissingData(f"{path}: the run was killed: its figures are those of its last flush "
                              f"({int(f.attrs.get('cycles_done', 0)):,} cycles), and its per-unit totals were never "
                              "written")
        out = dict(file=str(path), machine=machine, scenario=root.get("scenario_name", ""),
                   complete=bool(root.get("complete")), cycles=int(root.get("cycles_done", 0)))
        if machine == "mesh":
            out.update(_mesh(f, values, out["cycles"], window, path))
        elif machine == "ipu":
            out.update(_ipu(f, values, out["cycles"], path))
        else:
            out.update(_rdu(f, values, out["cycles"], window, path))
    _, summary = read_summary(path)
    out["model"] = {k: summary[k] for k in MODEL_FIGURES if k in summary}
    goal = TARGET_LI[machine] if target is None else target
    if not (0 < goal <= 1):
        raise InputError(f"--target {goal}: must be a number in (0, 1] (an LI)")
    li = out["whole"]["li"]
    if math.isnan(li):  # no unit did any work: a traffic run, say; balance does not apply
        out["diagnosis"] = dict(target_li=goal, li=li, meets=None, findings=[],
                                note="LI does not apply: no unit did any compute work")
    else:
        out["diagnosis"] = dict(target_li=goal, li=li, meets=bool(li >= goal), findings=_findings(out, values, goal))
    return out


def _need(f, names, path):
    missing = [n for n in names if n not in f]
    if missing:
        raise MissingData(f"{path}: not a complete meshsim result: it lacks {', '.join(missing)}")


def _mesh(f, values, cycles, window, path) -> dict:
    _need(f, ["units/busy_cycles", "latency/histogram", "units/completed", "units/injected", "units/refused"], path)
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


#: Datasets `_ipu` reads.
_IPU_NEEDS = ["units/tile_busy_cycles", "latency/microbatch_latency",
              *(f"templates/{k}" for k in ("stage", "name", "li", "compute_cycles", "sync_cycles", "exchange_cycles")),
              *(f"supersteps/{k}" for k in ("template", "stage", "direction", "step", "pipeline_step", "microbatch",
                                            "start_cycle")),
              *(f"pipeline/{k}" for k in ("step", "direction", "index", "start_cycle", "cycles", "slowest_stage",
                                          "transfer_cycles"))]

#: Superstep rows read at a time (a long run has tens of millions).
_IPU_CHUNK = 1 << 20


def _ipu(f, values, cycles, path) -> dict:
    """An ipu file's figures from its per-tile totals, templates and superstep and pipeline rows
    (docs/ipu.md, "Observables and metrics")."""
    _need(f, _IPU_NEEDS, path)
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
    keys = (pipe["step"] * 3 + pipe["direction"]) * width + pipe["index"]
    order = np.argsort(keys, kind="stable")  # already in order in a file meshsim wrote
    keys, slowest = keys[order], pipe["slowest_stage"][order]
    shares = np.zeros(4, np.int64)
    st = np.zeros(stages, np.int64)
    g = f["supersteps"]
    n = g["template"].shape[0]
    for a in range(0, n, _IPU_CHUNK):
        c = {k: g[k][a:a + _IPU_CHUNK].astype(np.int64) for k in ("template", "stage", "direction", "step",
                                                                   "pipeline_step", "microbatch")}
        k = (c["step"] * 3 + c["direction"]) * width + c["pipeline_step"]
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


def _rdu(f, values, cycles, window, path) -> dict:
    _need(f, ["units/pcu_busy_cycles", "latency/tile_latency"], path)
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
            for j in np.flatnonzero(srow == r):
                p0, nh, nl = cols["pcu0"][j], cols["pcus_hi"][j], cols["pcus_lo"][j]
                per[p0:p0 + nh] += cols["busy_hi"][j]
                per[p0 + nh:p0 + nh + nl] += cols["busy_lo"][j]
            span = int(s["end_cycle"][r]) - int(s["start_cycle"][r]) + 1
            rows.append(dict(name=name, chip=int(s["chip"][r]), start=int(s["start_cycle"][r]),
                             end=int(s["end_cycle"][r]), li=metrics.load_balance(per)["li"],
                             utilization=metrics.utilization(int(per.sum()), pcus, span),
                             spilled_bytes=int(s["spilled_bytes"][r])))
        out["sections"] = rows
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


def _findings(a: dict, values: dict, goal: float) -> list[dict]:
    """Likely causes of an LI below the target, each with the figure it rests on. Thresholds: a
    region busy more than 1.5 times the mean, a link above 0.9 of its capacity, links more than
    half busy with migration on, a window below the target, DDR waits above 0.1 of the time, a
    pipeline bubble above 0.05, operators with LI below 0.9; memory-bound kernels only where the
    DDR waits show it; and always the busiest unit against the mean, which is what LI measures."""
    w = a["whole"]
    out = []

    def add(text, figure):
        out.append(dict(finding=text, figure=figure))

    if math.isnan(w["li"]) or w["li"] >= goal:
        return out
    unit = {"mesh": "PEs", "rdu": "PCUs", "ipu": "tiles"}[a["machine"]]
    busy_ds = {"mesh": "busy_cycles", "rdu": "pcu_busy_cycles", "ipu": "tile_busy_cycles"}[a["machine"]]
    if w.get("idle_units"):
        where = "of the pipeline's " if "active_units_in_regions" in w else "of "
        total = w.get("active_units_in_regions", w["n_units"])
        add(f"{w['idle_units']:,} {where}{total:,} {unit} never worked",
            f"units/{busy_ds} == 0 at {w['idle_units']:,}")
    base = w.get("utilization_active", w["utilization"])
    regions = [r for r in a.get("regions", []) if r["name"] != "idle" and r["n_units"]]
    if regions:
        top = max(regions, key=lambda r: r["utilization"])
        if top["utilization"] > 1.5 * base:
            add(f"region {top['name']} is busy {top['utilization']:.3g} of the time against {base:.3g} "
                "overall: the load is concentrated there",
                f"regions/utilization[{top['name']}] = {top['utilization']:.4g}")
    if w.get("refused"):
        add(f"queues overflowed: {w['refused']:,} tasks refused", f"units/refused sum = {w['refused']:,}")
    if w.get("link_utilization_max", 0) > 0.9:
        add(f"links saturated: the busiest carries {w['link_utilization_max']:.3g} of its capacity",
            f"units/link_messages max / (link_messages_per_cycle x cycles) = {w['link_utilization_max']:.4g}")
    if a["machine"] == "mesh" and w.get("migrated") and w.get("link_utilization_mean", 0) > 0.5:
        add(f"migration keeps the links {w['link_utilization_mean']:.3g} busy on average",
            f"series/link_sent / (links x cycles) = {w['link_utilization_mean']:.4g}")
    rows = [r for r in a.get("windows", {}).get("rows", []) if "li" in r and not math.isnan(r["li"])]
    if len(rows) > 1 and min(r["li"] for r in rows) < goal:
        worst = min(rows, key=lambda r: r["li"])
        add(f"the lowest window LI is {worst['li']:.3g}, in cycles {worst['start']:,}-{worst['end']:,}",
            f"windows [{worst['start']}, {worst['end']}) li = {worst['li']:.4g}")
    # what LI measures, stated: how far the busiest unit is above the mean, and how spread they are
    add(f"the busiest {unit[:-1]} worked {w['busy_max_cycles']:,} cycles, {w['percent_imbalance']:.3g}% above the "
        f"mean of {w['busy_mean_cycles']:.4g} (CV {w['cv']:.3g}, compute-time spread "
        f"{w['compute_time_spread']:.3g})",
        f"units/{busy_ds}: max {w['busy_max_cycles']:,}, "
        f"mean {w['busy_mean_cycles']:.6g}")
    secs = [r for r in a.get("sections", []) if not math.isnan(r["li"])]
    if secs:
        worst = min(secs, key=lambda r: r["li"])
        add(f"section {worst['name']} has the lowest LI, {worst['li']:.3g} (cycles {worst['start']:,}-"
            f"{worst['end']:,})", f"sections/li[{worst['name']}] = {worst['li']:.4g}")
    spilled = [r for r in a.get("sections", []) if r["spilled_bytes"]]
    if spilled:
        add(f"{len(spilled)} section instances spill weights to DDR", "sections/spilled_bytes > 0")
    waits = w.get("ddr_wait_fraction", 0) > 0.1
    if waits:
        add(f"the chips wait on DDR {w['ddr_wait_fraction']:.3g} of the time",
            f"series/ddr_wait (cycle-weighted) = {w['ddr_wait_fraction']:.4g}")
    if w.get("pipeline_bubble_fraction", 0) > 0.05:
        add(f"pipeline bubble: chips idle for another {w['pipeline_bubble_fraction']:.3g} of the time",
            f"series/phase in (1, 3), cycle-weighted = {w['pipeline_bubble_fraction']:.4g}")
    if a.get("operators_below_0_9"):
        add(f"{a['operators_below_0_9']} operators spread unevenly over their PCUs (lanes wasted; LI down to "
            f"{a['operators_li_min']:.3g})", f"operators/li < 0.9 at {a['operators_below_0_9']}")
    if a["machine"] == "ipu":
        _ipu_findings(a, add)
    found = model_of(values)
    if found is not None and waits:
        plat = platform_of(values)
        mem = [k for k in kernels(*found, plat) if k["bound"] == "memory"]
        if mem:
            names = ", ".join(k["name"] for k in mem[:4]) + (" ..." if len(mem) > 4 else "")
            add(f"{len(mem)} kernels per layer are memory-bound on {plat.name} (ridge {plat.ridge:.3g} FLOP/B), "
                f"which the DDR waits bear out: {names}", f"roofline: arithmetic intensity < {plat.ridge:.4g}")
    return out


def _ipu_findings(a: dict, add) -> None:
    w = a["whole"]
    st = a.get("stages", [])
    if len(st) > 1 and w.get("stage_li", 1) < 0.9:
        top = max(st, key=lambda r: r["stage_cycles"])
        low = min(st, key=lambda r: r["stage_cycles"])
        add(f"pipeline stages are uneven (stage LI {w['stage_li']:.3g}): {top['name']} takes "
            f"{top['stage_cycles']:,} cycles per micro-batch, {low['name']} {low['stage_cycles']:,}; move layers "
            "from the busiest (workload.layers_per_ipu)", f"stage LI = {w['stage_li']:.4g}")
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


def format_report(a: dict) -> str:
    """A readable table of one analysis."""
    w = a["whole"]
    lines = [f"{a['scenario']}: {a['machine']}, {'complete' if a['complete'] else 'INCOMPLETE'}, "
             f"{a['cycles']:,} cycles ({a['file']})",
             "recomputed from the file's datasets:"]
    for k in (*_WHOLE, "n_units", "idle_units", "li_active", "utilization_active", "latency_mean_cycles",
              "latency_var_cycles2", "latency_p50_cycles", "latency_p99_cycles", "latency_max_cycles",
              "packet_latency_mean_cycles", "packet_latency_var_cycles2", "packet_latency_p50_cycles",
              "packet_latency_p99_cycles", "packet_latency_max_cycles", "packets_delivered", "chip_li",
              "pmu_utilization", "ddr_busy_fraction", "ddr_wait_fraction", "ddr_effective_gbps",
              "pipeline_bubble_fraction", "link_utilization_max", "link_utilization_mean",
              "throughput_tasks_per_cycle", "stage_li", "superstep_li_min", "compute_fraction", "sync_fraction",
              "exchange_fraction", "transfer_fraction"):
        if k in w:
            lines.append(f"  {k:<28}{_fmt(w[k])}")
    win = a.get("windows", {})
    rows = win.get("rows", [])
    if rows:
        lines.append(f"windows of {win['window_cycles']:,} cycles ({len(rows)}; from {win['source']}):")
        keys = [k for k in ("li", "utilization", "ddr_busy", "ddr_wait") if k in rows[0]]
        lines.append(f"  {'start':>14}{'end':>14}" + "".join(f"{k:>14}" for k in keys))
        shown = rows if len(rows) <= 12 else rows[:6] + [None] + rows[-5:]
        for r in shown:
            if r is None:
                lines.append(f"  {'...':>14}")
                continue
            lines.append(f"  {r['start']:>14,}{r['end']:>14,}" + "".join(f"{_fmt(r[k]):>14}" for k in keys))
    for group in ("regions", "sections", "chips", "stages", "supersteps"):
        rows = a.get(group, [])
        if rows:
            lines.append(f"{group} ({len(rows)}):")
            shown = rows if len(rows) <= 12 else sorted(rows, key=lambda r: (math.isnan(r["li"]), r["li"]))[:12]
            if len(rows) > 12:
                lines[-1] = f"{group} ({len(rows)}; the 12 with the lowest LI):"
            for r in shown:
                lines.append(f"  {r['name'][:44]:<46}LI {_fmt(r['li']):>8}  utilisation {_fmt(r['utilization']):>8}")
    d = a["diagnosis"]
    if d["meets"] is None:
        lines.append(f"diagnosis: {d['note']}")
        return "\n".join(lines)
    verdict = "meets" if d["meets"] else "falls short of"
    lines.append(f"diagnosis: LI {_fmt(d['li'])} {verdict} the target {d['target_li']:g}")
    for item in d["findings"]:
        lines.append(f"  - {item['finding']}  [{item['figure']}]")
    return "\n".join(lines)


def format_comparison(items: list[dict]) -> str:
    """Whole-run figures of several analyses side by side."""
    names = [Path(a["file"]).name for a in items]
    width = max(14, *(len(n) + 2 for n in names))
    keys = [k for k in dict.fromkeys(k for a in items for k in a["whole"])]
    lines = [f"{'':<28}" + "".join(f"{n:>{width}}" for n in names)]
    lines.append(f"{'machine':<28}" + "".join(f"{a['machine']:>{width}}" for a in items))
    lines.append(f"{'cycles':<28}" + "".join(f"{a['cycles']:>{width},}" for a in items))
    for k in keys:
        lines.append(f"{k:<28}" + "".join(f"{_fmt(a['whole'].get(k, math.nan)):>{width}}" for a in items))
    verdicts = [f"{ {True: 'yes', False: 'no', None: 'n/a'}[a['diagnosis']['meets']]} "
                f"({a['diagnosis']['target_li']:g})" for a in items]
    lines.append(f"{'meets target LI':<28}" + "".join(f"{v:>{width}}" for v in verdicts))
    model_keys = [k for k in MODEL_FIGURES if any(k in a.get("model", {}) for a in items)]
    if model_keys:
        lines.append("as the runs reported:")
        for k in model_keys:
            lines.append(f"{k:<28}" + "".join(f"{_fmt(a.get('model', {}).get(k, math.nan)):>{width}}" for a in items))
    return "\n".join(lines)


def _fmt(v) -> str:
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, int):
        return f"{v:,}"
    if isinstance(v, float):
        return "n/a" if math.isnan(v) else f"{v:.4g}"
    return str(v)
