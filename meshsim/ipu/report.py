"""The ipu's lines of the one-screen summary (meshsim.report.format_summary)."""

from __future__ import annotations

from ..report import fmt as _f
from ..report import step_split


def summary_lines(s: dict, regions: dict | None = None) -> list:
    """The summary of an ipu run: throughput, where the time goes, load balance and memory."""
    return [
        f"steps         {_f(s['steps'])} of {_f(s['step_seconds'] * 1e3)} ms ({step_split(s)}"
        f"{_f(s['cycles'])} cycles at "
        f"{_f(s['clock_ghz'])} GHz); {_f(s['samples_per_second'])} samples/s, "
        f"{_f(s['time_per_sample_seconds'] * 1e3)} ms per sample; {_f(s['achieved_tflops'])} TFLOP/s per IPU",
        f"IPUs          {_f(s['ipus'])} ({s['preset']}): {_f(s['stages'])} pipeline stages x "
        f"{_f(s.get('tensor_parallel', 1))} tensor-parallel x {_f(s['replicas'])} "
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
