"""The rdu's lines of the one-screen summary (meshsim.report.format_summary)."""

from __future__ import annotations

import math

from ..report import fmt as _f
from ..report import step_split


def summary_lines(s: dict, regions: dict | None = None) -> list:
    """The summary of an rdu run: the step's time, PCU/PMU/DDR use and load balance."""
    return [
        f"step          {_f(s['step_seconds'] * 1e3)} ms ({step_split(s)}{_f(s['cycles'])} cycles at "
        f"{_f(s['clock_ghz'])} GHz); {_f(s['time_per_sample_seconds'] * 1e3)} ms per sample, "
        f"{_f(s['samples_per_second'])} samples/s; {_f(s['achieved_tflops'])} TFLOP/s per chip",
        f"chips         {_f(s['chips'])} ({s['parallelism']}; {_f(s['chips_simulated'])} simulated); fusion "
        f"{s['fusion']}: {_f(s['sections'])} sections, {_f(s['section_instances'])} run, "
        f"{_f(s['sections_spilled'])} spill weights to DDR",
        f"allocation    sections hold {_f(s.get('pcu_alloc_mean', math.nan))} of the PCUs on average (weighted by "
        f"cycles), {_f(s.get('pcu_alloc_max', math.nan))} at most",
        f"LI            {_f(s.get('li_occupied', math.nan))} over the PCUs each section holds; "
        f"{_f(s['li'])} over all {_f(s['n_units'])} PCUs and the step (mean/max busy; "
        f"{_f(s['percent_imbalance'], 3)}% imbalance, Jain {_f(s['jain_index'])}, CV {_f(s['cv'])}); operators: "
        f"min {_f(s['operator_li_min'])}, mean {_f(s['operator_li_mean'])}; chips {_f(s['chip_li'])}",
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
