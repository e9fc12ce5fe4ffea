"""The mesh's lines of the one-screen summary (meshsim.report.format_summary): tasks and
migration, routed traffic, the layer pipeline, and the regions of a run that has them."""

from __future__ import annotations

import math

from ..errors import InputError
from ..report import fmt as _f
from ..report import step_split
from .regions import BOUNDARY_FIGURES, FIGURES


def summary_lines(s: dict, regions: dict | None = None) -> list:
    """The summary of a mesh run: by its workload, routed packets, the layer pipeline or tasks."""
    if "pipeline_regions" in s:
        return _pipeline_lines(s)
    if "packets_offered" in s:
        return _traffic_lines(s)
    lines = []
    lines += [
        f"cycles        {_f(s['cycles'])} on {_f(s['n_units'])} PEs ({_f(s.get('active_units', 0))} did work)",
        f"LI            {_f(s['li'])}  (mean/max busy; {_f(s['percent_imbalance'], 3)}% imbalance, "
        f"Jain {_f(s['jain_index'])}, CV {_f(s['cv'])})",
        f"busy cycles   min {_f(s.get('busy_min_cycles', 'n/a'))}, "
        f"mean {_f(float(s.get('busy_mean_cycles', math.nan)))}, max {_f(s.get('busy_max_cycles', 'n/a'))}; "
        f"compute-time spread {_f(s.get('compute_time_spread', math.nan))}",
        f"utilisation   {_f(s['utilization'])}",
        f"latency       mean {_f(s['latency_mean_cycles'])}, variance {_f(s['latency_var_cycles2'])}, "
        f"p50 {_f(s['latency_p50_cycles'])}, p99 {_f(s['latency_p99_cycles'])}, "
        f"max {_f(s['latency_max_cycles'])} cycles",
        f"tasks         {_f(s['injected'])} injected, {_f(s['refused'])} refused, {_f(s['completed'])} completed, "
        f"{_f(s['in_system_at_end'])} in the system at the end",
        f"migration     {_f(s['migrated'])} tasks moved, {_f(s.get('hops_per_completed_task', math.nan))} hops per "
        f"completed task",
        f"throughput    {_f(s.get('throughput_tasks_per_cycle', math.nan))} tasks/cycle"
        + (f" = {_f(s['throughput_tasks_per_second'])} tasks/s at {_f(s['clock_ghz'])} GHz "
           f"({_f(s['simulated_seconds'] * 1e6)} us simulated)" if "clock_ghz" in s else ""),
        f"speed         {_f(s['pe_cycles_per_second'] / 1e6, 4)} million PE-cycles/s on {_f(s.get('threads', 0))} "
        f"threads; {_f(s['wall_seconds'], 3)} s wall",
    ]
    if regions is not None:
        lines += _region_lines(regions)
    if s.get("latency_percentile_overflow"):
        lines.append("note          a latency percentile fell in the histogram's overflow bin: reported as the max "
                     "(raise output.latency_histogram_max_cycles)")
    if "trace_events_not_offered" in s and s["trace_events_not_offered"]:
        lines.append(f"note          {_f(s['trace_events_not_offered'])} trace events lie outside the run's cycles "
                     "and were not offered")
    return lines


def read_regions(f, path) -> dict | None:
    """Per-region whole-run figures of a result file (name -> array), or None if it has no regions."""
    if "regions" not in f or "li" not in f["regions"]:
        return None
    g = f["regions"]
    needed = ["name", *FIGURES]
    absent = [k for k in needed if k not in g]
    if absent:
        raise InputError(f"{path}: the regions group lacks {', '.join(absent)}")
    out = {k: g[k][()] for k in needed}
    out["name"] = [n.decode() if isinstance(n, bytes) else str(n) for n in out["name"]]
    # The boundary figures: written by runs with migration on (and absent from older files).
    if all(k in g for k in BOUNDARY_FIGURES):
        out.update({k: g[k][()] for k in BOUNDARY_FIGURES})
    return out


def _region_lines(r: dict) -> list:
    """A few lines on the regions: each one when there are few, else the first and the rest together."""
    head = f"{'region':<14}{'PEs':>10}{'LI':>12}{'util':>8}{'refused':>12}{'latency':>10}"

    def line(name, n, li, util, refused, lat):
        return f"{name:<14}{_f(int(n)):>10}{li:>12}{util:>8}{_f(int(refused)):>12}{lat:>10}"

    n = len(r["name"])
    lines = ["regions       (per-PE busy cycles within each region; latency of tasks completed there)", head]
    shown = range(n) if n <= 6 else [0]
    for k in shown:
        lines.append(line(r["name"][k], r["n_units"][k], _f(float(r["li"][k]), 3), _f(float(r["utilization"][k]), 3),
                          r["refused"][k], _f(float(r["latency_mean"][k]), 4)))
    if n > 6:
        rest = slice(1, n)
        done = r["completed"][rest]
        lat = float((r["latency_mean"][rest] * done).sum() / done.sum()) if done.sum() else math.nan
        li = r["li"][rest]
        lines.append(line(f"{r['name'][1]}..{n - 1}", r["n_units"][rest].sum(),
                          f"{float(li.min()):.3f}-{float(li.max()):.3f}",
                          _f(float((r["utilization"][rest] * r["n_units"][rest]).sum() / r["n_units"][rest].sum()), 3),
                          r["refused"][rest].sum(), _f(lat, 4)))
    if "boundary_bound" in r:
        lines += _boundary_lines(r, shown, n)
    return lines


def _boundary_lines(r: dict, shown, n: int) -> list:
    """Tasks a cycle across each region's boundary against the most it can carry, and the refusals
    against the least the offered load, the capacity and that bound allow."""
    head = f"{'region':<14}{'out':>10}{'in':>8}{'bound':>8}{'out/bound':>11}{'refused':>10}{'least':>8}"

    def pct(x):
        return "n/a" if math.isnan(x) else f"{100 * x:.1f}%"

    def line(k):
        bound, out = float(r["boundary_bound"][k]), float(r["crossed_out"][k])
        injected = int(r["injected"][k])
        refused = int(r["refused"][k]) / injected if injected else math.nan
        return (f"{r['name'][k]:<14}{_f(out, 4):>10}{_f(float(r['crossed_in'][k]), 4):>8}{_f(bound, 4):>8}"
                f"{(_f(out / bound, 3) if bound else 'n/a'):>11}{pct(refused):>10}"
                f"{pct(float(r['least_refusal_rate'][k])):>8}")

    lines = ["boundary      (tasks a cycle across each region's edge, out and in; the most its edge carries out; "
             "the share of offered tasks refused, and the least that must be)", head]
    lines += [line(k) for k in shown]
    if n > 6:
        ratio = r["crossed_out"][1:] / r["boundary_bound"][1:]
        lines.append(f"{r['name'][1]}..{n - 1}: out/bound {float(ratio.min()):.3f}-{float(ratio.max()):.3f}")
    return lines


#: What a region's bound means, as the report words it (meshsim/mesh/pipeline.py, BOUNDS).
BOUND_WORDS = {"simd": "its SIMD units", "sram_read": "its SRAM reads", "sram_write": "its SRAM writes",
               "reduction": "its partial sums' wavelets", "wavelets": "its input's wavelets"}


def _pipeline_lines(s: dict) -> list:
    """The summary of a layer_pipeline run: throughput, chunk latency, load balance, bottleneck."""
    return [
        f"cycles        {_f(s['cycles'])} on {_f(s['n_units'])} PEs: {_f(s['pipeline_regions'])} regions in "
        f"{_f(s['pipeline_replicas'])} replica(s) on {_f(s['active_pes'])} PEs "
        f"({_f(s['active_fraction'], 3)}), {_f(s['inactive_pes'])} inactive",
        f"throughput    {_f(s['samples_per_second_steady'])} samples/s in the steady state "
        f"({_f(s['chunks_per_cycle_steady'])} chunks/cycle); {_f(s['samples_finished'])} samples "
        f"({_f(s['chunks_finished'])} chunks) finished",
        *([f"step          {step_split(s)}{_f(s['samples_per_second'])} samples/s end to end (a batch at the "
           "steady rate)"] if "chip_seconds" in s else
          [f"step          {_f(s['step_seconds_steady'])} s at the steady rate"]),
        f"chunk latency mean {_f(s['chunk_latency_mean_cycles'])} cycles; the first chunk finished at cycle "
        f"{_f(s['first_chunk_finish_cycle'])}",
        *([f"weights       streamed: {_f(s['weight_load_cycles'])} cycles per layer; waited "
           f"{_f(s['weight_wait_fraction'], 3)} of the time; {_f(s['passes_finished'])} layer passes "
           f"({_f(s['pass_cycles_steady'])} cycles each), {_f(s['steps_finished'])} steps"]
          if s.get("weight_streaming") else []),
        f"LI            {_f(s['li_active'])} over the active PEs ({_f(s['li'])} over all); utilisation "
        f"{_f(s['utilization_active'])} of the active PEs",
        f"steady state  from cycle {_f(s.get('steady_from_cycle', math.nan))}: "
        f"LI {_f(s.get('li_active_steady', math.nan))}, "
        f"utilisation {_f(s.get('utilization_active_steady', math.nan))} of the active PEs",
        f"bottleneck    {s['bottleneck_region']} (utilisation {_f(s['bottleneck_utilization'], 3)}; the least "
        f"busy region {_f(s['region_utilization_min'], 3)})",
        *([f"slowest stage {s['slowest_region']}: {_f(s['slowest_region_cycles_per_chunk'])} cycles a chunk by the "
           f"table (its task {_f(s['slowest_region_task_cycles'])}, then {_f(s['slowest_region_send_cycles'])} "
           f"sending its output); " + ("the stage is" if s["slowest_region_bound"] == "wavelets" else "the task is")
           + f" bound by {BOUND_WORDS.get(s['slowest_region_bound'], s['slowest_region_bound'])}"]
          if "slowest_region" in s else []),
        f"tasks         latency mean {_f(s['latency_mean_cycles'])}, p99 {_f(s['latency_p99_cycles'])} cycles; "
        f"{_f(s['completed'])} completed",
        f"packets       {_f(s['packets_delivered'])} delivered, latency mean {_f(s['packet_latency_mean_cycles'])}, "
        f"max {_f(s['packet_latency_max_cycles'])} cycles, {_f(s['packet_hops_mean'])} hops",
        f"speed         {_f(s['pe_cycles_per_second'] / 1e6, 4)} million PE-cycles/s on {_f(s.get('threads', 0))} "
        f"threads; {_f(s['wall_seconds'], 3)} s wall",
    ]


def _traffic_lines(s: dict) -> list:
    """The summary of a routed-traffic run: load, packet latency, links."""
    note = []
    if not s.get("packet_latency_complete", True):
        note = ["note          measured packets were still undelivered at the end: the latency figures miss "
                "them and read low; give the run more cycles after the measurement window"]
    return note + [
        f"cycles        {_f(s['cycles'])} on {_f(s['n_units'])} PEs",
        f"load          offered {_f(s['offered_per_pe_cycle'])}, accepted {_f(s['accepted_per_pe_cycle'])} "
        "packets/PE/cycle over the measurement window",
        f"packets       {_f(s['packets_offered'])} offered, {_f(s['packets_delivered'])} delivered, "
        f"{_f(s['packets_in_source_at_end'])} in source queues at the end; measured "
        f"{_f(s['packets_measured_delivered'])} of {_f(s['packets_measured_offered'])} delivered",
        f"latency       mean {_f(s['packet_latency_mean_cycles'])}, variance {_f(s['packet_latency_var_cycles2'])}, "
        f"p50 {_f(s['packet_latency_p50_cycles'])}, p99 {_f(s['packet_latency_p99_cycles'])}, "
        f"max {_f(s['packet_latency_max_cycles'])} cycles (measured packets)",
        f"              in the network {_f(s.get('packet_network_latency_mean_cycles', math.nan))}, "
        f"in the source queue {_f(s.get('packet_source_wait_mean_cycles', math.nan))} cycles on average; "
        f"{_f(s.get('packet_hops_mean', math.nan))} hops",
        f"links         utilisation mean {_f(s['link_utilization_mean'])}, max {_f(s['link_utilization_max'])} "
        "(whole run)",
        f"speed         {_f(s['pe_cycles_per_second'] / 1e6, 4)} million PE-cycles/s on {_f(s.get('threads', 0))} "
        f"threads; {_f(s['wall_seconds'], 3)} s wall",
    ]
