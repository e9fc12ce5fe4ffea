"""Reading a result file's summary and printing it (DESIGN.md sections 5 and 6).

`read_summary` checks that a file is a meshsim result before trusting it; `format_summary` is the
one-screen summary shown at the end of a run and by `meshsim report`.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from .errors import InputError
from .output import SCHEMA_VERSION, open_result_file, read_provisional

#: Attributes of /summary that every result has (DESIGN.md section 5); scripts rely on them.
STABLE_SUMMARY_KEYS = ("cycles", "n_units", "li", "percent_imbalance", "jain_index", "cv", "utilization",
                       "latency_mean_cycles", "latency_var_cycles2", "latency_p50_cycles", "latency_p99_cycles",
                       "latency_max_cycles", "injected", "refused", "completed", "in_system_at_end", "migrated",
                       "wall_seconds", "pe_cycles_per_second")


def read_summary(path) -> tuple[dict, dict]:
    """(root attributes, /summary attributes) of a result file, as plain Python values.

    Raises InputError naming the file when it is missing, not HDF5, or not a meshsim result.
    """
    p = Path(path)
    if not p.exists():
        raise InputError(f"{p}: no such result file")
    try:
        f = open_result_file(p)
    except OSError as e:
        raise InputError(f"{p}: not a readable HDF5 file ({e.__class__.__name__}: {str(e).splitlines()[0]})") from None
    with f:
        root = {k: _plain(v) for k, v in f.attrs.items()}
        if "schema_version" not in root or "summary" not in f:
            raise InputError(f"{p}: not a meshsim result file (no schema_version attribute or /summary group)")
        version = root["schema_version"]
        if not isinstance(version, int) or isinstance(version, bool):
            raise InputError(f"{p}: not a meshsim result file (schema_version = {version!r} is not an integer)")
        if version > SCHEMA_VERSION:
            raise InputError(f"{p}: schema version {version} is newer than this meshsim reads "
                             f"(up to {SCHEMA_VERSION}); upgrade meshsim")
        summary = {k: _plain(v) for k, v in f["summary"].attrs.items() if k != "description"}
        if not summary:  # a killed run: the summary of its last flush
            summary = read_provisional(f) or {}
    missing = [k for k in STABLE_SUMMARY_KEYS if k not in summary]
    if missing:
        done = root.get("cycles_done", 0)
        raise InputError(f"{p}: the run stopped before it wrote a summary ({done} cycles done; missing "
                         f"{', '.join(missing[:3])}{' ...' if len(missing) > 3 else ''}); its per-cycle series "
                         "up to the last flush are in the file")
    return root, summary


def read_regions(path) -> dict | None:
    """Per-region whole-run figures of a result file (name -> array), or None if it has no regions."""
    from .mesh.regions import FIGURES

    with open_result_file(path) as f:
        if "regions" not in f or "li" not in f["regions"]:
            return None
        g = f["regions"]
        needed = ["name", *FIGURES]
        absent = [k for k in needed if k not in g]
        if absent:
            raise InputError(f"{path}: the regions group lacks {', '.join(absent)}")
        out = {k: g[k][()] for k in needed}
        out["name"] = [n.decode() if isinstance(n, bytes) else str(n) for n in out["name"]]
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
    return lines


def _plain(v):
    if isinstance(v, np.generic):
        return v.item()
    if isinstance(v, bytes):
        return v.decode()
    if isinstance(v, np.ndarray):
        return v.tolist()
    return v


def _f(x, digits=4):
    if isinstance(x, float) and math.isnan(x):
        return "n/a"
    if isinstance(x, float):
        return f"{x:.{digits}g}"
    return f"{x:,}" if isinstance(x, int) else str(x)


def format_summary(summary: dict, root: dict | None = None, path=None, regions: dict | None = None) -> str:
    """The one-screen summary of a run (with per-region lines when the run has regions)."""
    s = summary
    lines = []
    if root is not None:
        state = "complete" if root.get("complete") else f"INCOMPLETE ({root.get('cycles_done', 0):,} cycles done)"
        lines.append(f"{root.get('scenario_name', '')}: {root.get('machine', '')}, {state}")
    if path is not None:
        lines.append(f"result        {path}")
    if "fusion" in s:  # an rdu run's summary
        return "\n".join(lines + _rdu_lines(s))
    if "stage_li" in s:  # an ipu run's summary
        return "\n".join(lines + _ipu_lines(s))
    if "pipeline_regions" in s:
        return "\n".join(lines + _pipeline_lines(s))
    if "packets_offered" in s:
        return "\n".join(lines + _traffic_lines(s))
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
    return "\n".join(lines)


def _pipeline_lines(s: dict) -> list:
    """The summary of a layer_pipeline run: throughput, chunk latency, load balance, bottleneck."""
    return [
        f"cycles        {_f(s['cycles'])} on {_f(s['n_units'])} PEs: {_f(s['pipeline_regions'])} regions in "
        f"{_f(s['pipeline_replicas'])} replica(s) on {_f(s['active_pes'])} PEs "
        f"({_f(s['active_fraction'], 3)}), {_f(s['inactive_pes'])} inactive",
        f"throughput    {_f(s['samples_per_second_steady'])} samples/s in the steady state "
        f"({_f(s['chunks_per_cycle_steady'])} chunks/cycle); {_f(s['step_seconds_steady'])} s per step; "
        f"{_f(s['samples_finished'])} samples ({_f(s['chunks_finished'])} chunks) finished",
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
        f"tasks         latency mean {_f(s['latency_mean_cycles'])}, p99 {_f(s['latency_p99_cycles'])} cycles; "
        f"{_f(s['completed'])} completed",
        f"packets       {_f(s['packets_delivered'])} delivered, latency mean {_f(s['packet_latency_mean_cycles'])}, "
        f"max {_f(s['packet_latency_max_cycles'])} cycles, {_f(s['packet_hops_mean'])} hops",
        f"speed         {_f(s['pe_cycles_per_second'] / 1e6, 4)} million PE-cycles/s on {_f(s.get('threads', 0))} "
        f"threads; {_f(s['wall_seconds'], 3)} s wall",
    ]


def _rdu_lines(s: dict) -> list:
    """The summary of an rdu run: the step's time, PCU/PMU/DDR use and load balance."""
    return [
        f"step          {_f(s['step_seconds'] * 1e3)} ms ({_f(s['cycles'])} cycles at {_f(s['clock_ghz'])} GHz); "
        f"{_f(s['time_per_sample_seconds'] * 1e3)} ms per sample, {_f(s['samples_per_second'])} samples/s; "
        f"{_f(s['achieved_tflops'])} TFLOP/s per chip",
        f"chips         {_f(s['chips'])} ({s['parallelism']}; {_f(s['chips_simulated'])} simulated); fusion "
        f"{s['fusion']}: {_f(s['sections'])} sections, {_f(s['section_instances'])} run, "
        f"{_f(s['sections_spilled'])} spill weights to DDR",
        f"LI            {_f(s['li'])} over {_f(s['n_units'])} PCUs (mean/max busy; {_f(s['percent_imbalance'], 3)}% "
        f"imbalance, Jain {_f(s['jain_index'])}, CV {_f(s['cv'])}); operators: min {_f(s['operator_li_min'])}, "
        f"mean {_f(s['operator_li_mean'])}; chips {_f(s['chip_li'])}",
        f"PCUs          busy {_f(s['utilization'])} of PCU-cycles; FLOP utilisation {_f(s['pcu_utilization'])}",
        f"PMUs          in use {_f(s['pmu_utilization'])} of PMU-cycles",
        f"DDR           {_f(s['ddr_bytes'] / 1e9)} GB moved, busy {_f(s['ddr_busy_fraction'], 3)}, effective "
        f"{_f(s['ddr_effective_gbps'])} GB/s per chip ({_f(s['ddr_utilization'], 3)} of the cap); waiting on DDR "
        f"{_f(s['ddr_wait_fraction'], 3)} of the time",
        f"pipeline      bubble (waiting for another chip, or done before it) {_f(s['pipeline_bubble_fraction'], 3)} "
        "of chip-cycles",
        f"tiles         {_f(s['completed'])} of {_f(s['injected'])} done; latency mean {_f(s['latency_mean_cycles'])}, "
        f"p99 {_f(s['latency_p99_cycles'])}, max {_f(s['latency_max_cycles'])} cycles",
        f"speed         {_f(s['cycles'] / s['kernel_seconds'] if s.get('kernel_seconds') else math.nan, 3)} "
        f"simulated cycles/s ({_f(s['pe_cycles_per_second'], 3)} PCU-cycles/s; the kernel jumps between "
        f"{_f(s['intervals'])} intervals); {_f(s['wall_seconds'], 3)} s wall",
    ]


def _ipu_lines(s: dict) -> list:
    """The summary of an ipu run: throughput, where the time goes, load balance and memory."""
    return [
        f"steps         {_f(s['steps'])} of {_f(s['step_seconds'] * 1e3)} ms ({_f(s['cycles'])} cycles at "
        f"{_f(s['clock_ghz'])} GHz); {_f(s['samples_per_second'])} samples/s, "
        f"{_f(s['time_per_sample_seconds'] * 1e3)} ms per sample; {_f(s['achieved_tflops'])} TFLOP/s per IPU",
        f"IPUs          {_f(s['ipus'])} ({s['preset']}): {_f(s['stages'])} pipeline stages x {_f(s['replicas'])} "
        f"replica(s); {_f(s['microbatches'])} micro-batches of {_f(s['microbatch_sequences'])} sequence(s) per step",
        f"time          compute {_f(s['compute_fraction'], 3)}, sync {_f(s['sync_fraction'], 3)}, exchange "
        f"{_f(s['exchange_fraction'], 3)}, transfer {_f(s['transfer_fraction'], 3)}; pipeline bubble "
        f"{_f(s['pipeline_bubble_fraction'], 3)}",
        f"stages        LI {_f(s['stage_li'])} (mean/max time per micro-batch); the busiest is IPU "
        f"{_f(s['busiest_stage'])}: {_f(s['stage_cycles_max'])} cycles, the lightest {_f(s['stage_cycles_min'])}",
        f"LI            {_f(s['li'])} over {_f(s['n_units'])} tiles (mean/max busy; {_f(s['percent_imbalance'], 3)}% "
        f"imbalance, Jain {_f(s['jain_index'])}, CV {_f(s['cv'])}); supersteps: min {_f(s['superstep_li_min'])}, "
        f"mean {_f(s['superstep_li_mean'])} over {_f(s['superstep_templates'])} templates",
        f"tiles         busy {_f(s['utilization'])} of tile-cycles; FLOP utilisation {_f(s['flop_utilization'])}",
        f"memory        per tile max {_f(s['memory_max_bytes'])} bytes ({_f(s['memory_max_fraction'], 3)} of the "
        f"SRAM), mean {_f(round(s['memory_mean_bytes']))}, min {_f(s['memory_min_bytes'])}",
        f"micro-batches {_f(s['completed'])} done; latency mean {_f(s['latency_mean_cycles'])}, variance "
        f"{_f(s['latency_var_cycles2'])}, p99 {_f(s['latency_p99_cycles'])}, max {_f(s['latency_max_cycles'])} cycles",
        f"speed         {_f(s['supersteps'])} supersteps; {_f(s['pe_cycles_per_second'], 3)} tile-cycles/s; "
        f"{_f(s['wall_seconds'], 3)} s wall",
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


def to_json(data) -> str:
    """JSON text of nested dicts and lists, numpy scalars as plain numbers, NaN and infinities as
    null."""
    def clean(v):
        if isinstance(v, dict):
            return {k: clean(x) for k, x in v.items()}
        if isinstance(v, (list, tuple)):
            return [clean(x) for x in v]
        v = _plain(v)
        return None if isinstance(v, float) and not math.isfinite(v) else v

    return json.dumps(clean(data), indent=2, sort_keys=False)


def summary_json(summary: dict, root: dict, regions: dict | None = None) -> str:
    """The summary as JSON (NaN written as null), with the file's provenance and any regions."""
    keep = ("schema_version", "meshsim_version", "machine", "scenario_name", "seed", "threads", "cycles_requested",
            "cycles_done", "complete")
    out = {"file": {k: root[k] for k in keep if k in root}, "summary": summary}
    if regions is not None:
        names = regions["name"]
        out["regions"] = {name: {k: v[i] for k, v in regions.items() if k != "name"} for i, name in enumerate(names)}
    return to_json(out)
