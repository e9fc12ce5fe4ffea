"""Every metric of a run recomputed from its result file alone (docs/design.md, "Metrics"), and a
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

from . import machine as machines
from . import metrics
from .errors import InputError
from .output import open_result_file
from .report import read_summary
from .roofline import kernels_of, model_of, platform_of, values_of_file


class MissingData(InputError):
    """The file lacks datasets a recomputation needs (a run killed before it wrote its totals)."""


#: At most this many windows in one report (a window of a few cycles over a billion-cycle step
#: would be a table nobody reads).
MAX_WINDOWS = 100_000

#: Throughput figures of a transformer run as the run reported them (`meshsim report A B C` puts the
#: machines side by side): the rdu's and ipu's per step, the mesh layer pipeline's in its steady state.
MODEL_FIGURES = ("samples_per_second", "samples_per_second_steady", "time_per_sample_seconds", "achieved_tflops",
                 "flop_utilization", "pcu_utilization")

#: The load balances a file can show, named as in an analysis's "whole" (docs/design.md, "Metrics").
LI_FIGURES = ("li", "li_occupied", "li_active", "li_active_steady", "li_fill", "stage_li")

_WHOLE = ("li", "percent_imbalance", "jain_index", "cv", "busy_min_cycles", "busy_max_cycles", "busy_mean_cycles",
          "compute_time_spread", "active_units", "utilization")


def analyse(path, window: int | None = None, target: float | None = None) -> dict:
    """The figures of a result file, recomputed from its datasets, and the diagnosis against the
    target LI (default: its machine's target_li, meshsim.machine.Machine). `window`: the window
    length in cycles (mesh: a multiple of the run's window_cycles; rdu: any), default the run's."""
    root, summary = read_summary(path)  # a meshsim result with a summary, or InputError
    machine = root.get("machine")
    m = machines.get(machine)
    values = values_of_file(path)
    with open_result_file(path) as f:
        if "provisional" in f["summary"]:
            raise MissingData(f"{path}: the run was killed: its figures are those of its last flush "
                              f"({int(f.attrs.get('cycles_done', 0)):,} cycles), and its per-unit totals were never "
                              "written")
        out = dict(file=str(path), machine=machine, scenario=root.get("scenario_name", ""),
                   complete=bool(root.get("complete")), cycles=int(root.get("cycles_done", 0)))
        own = m.analyse(f, values, out["cycles"], window, path)
        out.update(busy_only(f, m.busy_dataset, out["cycles"], path) if own is None else own)
    out["model"] = {k: summary[k] for k in MODEL_FIGURES if k in summary}
    out["settings"] = {f"{sec}.{k}": v for sec, table in values.items() if isinstance(table, dict)
                       for k, v in table.items() if not isinstance(v, dict)}
    goal = m.target_li if target is None else target
    if not (0 < goal <= 1):
        raise InputError(f"--target {goal}: must be a number in (0, 1] (an LI)")
    judged = m.judged(out)
    li = out["whole"].get(judged["figure"], math.nan)
    # the other load balances the file shows, each named, beside the one judged
    others = {k: out["whole"][k] for k in LI_FIGURES if k in out["whole"] and k != judged["figure"]}
    base = dict(target_li=goal, li=li, figure=judged["figure"], what=judged["what"], others=others)
    if math.isnan(li):  # no unit did any work: a traffic run, say; balance does not apply
        out["diagnosis"] = dict(base, meets=None, findings=[], note="LI does not apply: no unit did any compute work")
    else:
        found = _findings(out, values, goal, m, li, judged["figure"])
        out["diagnosis"] = dict(base, meets=bool(li >= goal), findings=found)
    return out


def require_datasets(f, names, path):
    missing = [n for n in names if n not in f]
    if missing:
        raise MissingData(f"{path}: not a complete meshsim result: it lacks {', '.join(missing)}")


def _findings(a: dict, values: dict, goal: float, machine, li: float, figure: str) -> list[dict]:
    """Likely causes of an LI below the target, each with the figure it rests on. Thresholds: a
    region busy more than 1.5 times the mean, a link above 0.9 of its capacity, links more than
    half busy with migration on, a window below the target, DDR waits above 0.1 of the time, a
    pipeline bubble above 0.05, operators with LI below 0.9; memory-bound kernels only where the
    DDR waits show it; and always the busiest unit against the mean, which is what LI measures."""
    w = a["whole"]
    out = []

    def add(text, figure):
        out.append(dict(finding=text, figure=figure))

    if math.isnan(li) or li >= goal:
        return out
    unit = machine.unit_label
    busy_ds = machine.busy_dataset
    if w.get("idle_units"):
        where = "of the pipeline's " if "active_units_in_regions" in w else "of "
        total = w.get("active_units_in_regions", w["n_units"])
        add(f"{w['idle_units']:,} {where}{total:,} {unit} never worked",
            f"{busy_ds} == 0 at {w['idle_units']:,}")
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
    if w.get("migrated") and w.get("link_utilization_mean", 0) > 0.5:
        add(f"migration keeps the links {w['link_utilization_mean']:.3g} busy on average",
            f"series/link_sent / (links x cycles) = {w['link_utilization_mean']:.4g}")
    rows = [r for r in a.get("windows", {}).get("rows", []) if "li" in r and not math.isnan(r["li"])]
    if figure == "li_active_steady":  # judged in the steady state: its windows only
        rows = [r for r in rows if r["start"] >= w["steady_from_cycle"]]
    if len(rows) > 1 and min(r["li"] for r in rows) < goal:
        worst = min(rows, key=lambda r: r["li"])
        add(f"the lowest window LI is {worst['li']:.3g}, in cycles {worst['start']:,}-{worst['end']:,}",
            f"windows [{worst['start']}, {worst['end']}) li = {worst['li']:.4g}")
    # what LI measures, stated: how far the busiest unit is above the mean, and how spread they are
    add(f"the busiest {unit[:-1]} worked {w['busy_max_cycles']:,} cycles, {w['percent_imbalance']:.3g}% above the "
        f"mean of {w['busy_mean_cycles']:.4g} (CV {w['cv']:.3g}, compute-time spread "
        f"{w['compute_time_spread']:.3g})",
        f"{busy_ds}: max {w['busy_max_cycles']:,}, "
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
    machine.findings(a, add)
    plat = platform_of(values) if model_of(values) is not None and waits else None
    if plat is not None:
        mem = [k for k in kernels_of(values, plat) if k["bound"] == "memory"]
        if mem:
            names = ", ".join(k["name"] for k in mem[:4]) + (" ..." if len(mem) > 4 else "")
            add(f"{len(mem)} kernels per layer are memory-bound on {plat.name} (ridge {plat.ridge:.3g} FLOP/B), "
                f"which the DDR waits bear out: {names}", f"roofline: arithmetic intensity < {plat.ridge:.4g}")
    return out


def format_report(a: dict) -> str:
    """A readable table of one analysis."""
    w = a["whole"]
    lines = [f"{a['scenario']}: {a['machine']}, {'complete' if a['complete'] else 'INCOMPLETE'}, "
             f"{a['cycles']:,} cycles ({a['file']})",
             "recomputed from the file's datasets:"]
    for k in (*_WHOLE, "n_units", "idle_units", "li_active", "utilization_active", "li_active_steady",
              "utilization_active_steady", "steady_from_cycle", "li_fill", "latency_mean_cycles",
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
    lines.append(f"  judged: {d['figure']}, {d['what']}")
    if d["others"]:
        lines.append("  also: " + ", ".join(f"{k} {_fmt(v)}" for k, v in d["others"].items()))
    for item in d["findings"]:
        lines.append(f"  - {item['finding']}  [{item['figure']}]")
    return "\n".join(lines)


def format_comparison(items: list[dict]) -> str:
    """Whole-run figures of several analyses side by side: every column as wide as its widest cell
    and two spaces more, so that no two cells run together."""
    keys = [k for k in dict.fromkeys(k for a in items for k in a["whole"])]
    verdicts = [f"{ {True: 'yes', False: 'no', None: 'n/a'}[a['diagnosis']['meets']]} "
                f"({a['diagnosis']['target_li']:g})" for a in items]
    top = [("", [Path(a["file"]).name for a in items]), ("machine", [a["machine"] for a in items]),
           ("cycles", [f"{a['cycles']:,}" for a in items])]
    top += [(k, [_fmt(a["whole"].get(k, math.nan)) for a in items]) for k in keys]
    top += [("judged LI", [a["diagnosis"]["figure"] for a in items]),
            ("", [_fmt(a["diagnosis"]["li"]) for a in items]), ("meets target LI", verdicts)]
    model_keys = [k for k in MODEL_FIGURES if any(k in a.get("model", {}) for a in items)]
    model = [(k, [_fmt(a.get("model", {}).get(k, math.nan)) for a in items]) for k in model_keys]
    rows = top + model
    label = max(28, *(len(k) + 2 for k, _ in rows))
    width = max(14, *(len(c) + 2 for _, cells in rows for c in cells))

    def line(k, cells):
        return f"{k:<{label}}" + "".join(f"{c:>{width}}" for c in cells)

    lines = [line(k, cells) for k, cells in top]
    lines.extend(lever_notes(items))
    if model:
        lines.append("as the runs reported:")
        lines.extend(line(k, cells) for k, cells in model)
    return "\n".join(lines)


#: An LI that moves by no more than this across runs has not moved (report's lever notes).
LEVER_LI_TOLERANCE = 0.001

#: Settings that name a run, not a lever of the machine.
_NOT_LEVERS = ("run.", "output.", "machine.type", "workload.type")


def lever_notes(items: list[dict]) -> list[str]:
    """Lines for the settings that differ across the compared runs while the LI they are judged on
    does not move (by at most LEVER_LI_TOLERANCE): a user who varied a lever looks at a figure it
    cannot move, and the machine says which it does (meshsim.machine.Machine.lever_note)."""
    if len(items) < 2 or len({a["machine"] for a in items}) > 1 or len({a["diagnosis"]["figure"] for a in items}) > 1:
        return []
    figure = items[0]["diagnosis"]["figure"]
    vals = [a["diagnosis"]["li"] for a in items]
    if any(math.isnan(v) for v in vals) or max(vals) - min(vals) > LEVER_LI_TOLERANCE:
        return []
    settings = [a.get("settings", {}) for a in items]
    keys = sorted({k for s in settings for k in s if not k.startswith(_NOT_LEVERS)})
    differ = [k for k in keys if len({repr(s.get(k)) for s in settings}) > 1]
    m = machines.get(items[0]["machine"])
    out = []
    for k in differ:
        shown = " / ".join(_fmt(s.get(k, "(unset)")) for s in settings)
        why = m.lever_note(k, figure)
        out.append(f"note: {k} differs ({shown}) but {figure} moves by {max(vals) - min(vals):.2g} at most"
                   + (f"; {why}" if why else ""))
    return out


def _fmt(v) -> str:
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, int):
        return f"{v:,}"
    if isinstance(v, float):
        return "n/a" if math.isnan(v) else f"{v:.4g}"
    return str(v)


def busy_only(f, busy_dataset: str, cycles: int, path) -> dict:
    """The figures any machine's file allows: the load balance of its units' busy cycles."""
    require_datasets(f, [busy_dataset], path)
    busy = f[busy_dataset][()].astype(np.int64)
    whole = metrics.balance_figures(busy, cycles)
    whole.update(n_units=int(busy.size), idle_units=int((busy == 0).sum()))
    return dict(whole=whole, windows={})
