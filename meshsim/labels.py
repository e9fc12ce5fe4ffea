"""Axis labels of the figures: what a quantity is called and its unit (meshsim.plots).

Every axis label (colour bars' included) ends with its unit in parentheses:

- a unit of measure: "(cycles)", "(s)", "(TFLOP/s)", "(GB/s)", "(cycles²)";
- the things counted: "(tasks)", "(PEs)", "(packets)";
- "(index)" for the units numbered along an axis (chip 0, chip 1, ...);
- "(fraction)" for a ratio of like quantities between 0 and 1 (LI, utilisation, shares of time);
- "(dimensionless)" for another number without a unit (a coefficient of variation, a multiplier);
- "(name)" for an axis of names (a policy, a workload), "(true or false)" for one of yes and no.

`column_label` names a sweep table's column so: a swept scenario key from the parameter table
(meshsim.params: its `unit`), or a summary figure (docs/design.md, "Result files"), by the
suffixes the summary's names follow (`_cycles`, `_seconds`, `_per_second`, ...) and a table of
the rest.
"""

from __future__ import annotations

import re

#: A label's unit: its last parenthesised part (what every axis label ends with).
UNIT_AT_END = re.compile(r"\(([^()]+)\)\s*$")

#: Summary figures whose name says neither what they are nor their unit by a suffix: (name, unit).
SUMMARY = {
    "cycles": ("simulated time", "cycles"),
    "simulated_seconds": ("simulated time", "s"),
    "wall_seconds": ("wall-clock time", "s"),
    "kernel_seconds": ("time in the kernel", "s"),
    "first_call_seconds": ("first kernel call, compilation included", "s"),
    "output_seconds": ("time writing the result", "s"),
    "chip_seconds": ("chip time of a step", "s"),
    "host_seconds": ("host time of a step", "s"),
    "step_seconds": ("time of a step", "s"),
    "step_seconds_steady": ("time of a step, steady state", "s"),
    "utilization_active": ("utilisation of the active PEs", "fraction"),
    "utilization_active_steady": ("utilisation of the active PEs, steady state", "fraction"),
    "fusion": ("fusion", "name"),
    "parallelism": ("parallelism", "name"),
    "preset": ("preset", "name"),
    "n_units": ("units", "PEs, PCUs or tiles"),
    "li": ("LI, mean / max busy", "fraction"),
    "li_active": ("LI of the active PEs", "fraction"),
    "li_active_steady": ("LI of the active PEs, steady state", "fraction"),
    "li_occupied": ("LI of the occupied PCUs", "fraction"),
    "chip_li": ("LI across chips", "fraction"),
    "stage_li": ("LI across stages", "fraction"),
    "percent_imbalance": ("imbalance, (max - mean) / mean", "%"),
    "jain_index": ("Jain's fairness index", "fraction"),
    "cv": ("coefficient of variation of busy time", "dimensionless"),
    "compute_time_spread": ("compute-time spread, max / min busy", "dimensionless"),
    "utilization": ("utilisation", "fraction"),
    "injected": ("injected", "tasks"),
    "refused": ("refused", "tasks"),
    "completed": ("completed", "tasks"),
    "in_system_at_end": ("in the system at the end", "tasks"),
    "migrated": ("migrated", "tasks"),
    "refused_share": ("refused share of injected", "fraction"),
    "active_units": ("active units", "PEs, PCUs or tiles"),
    "active_pes": ("active PEs", "PEs"),
    "inactive_pes": ("inactive PEs", "PEs"),
    "hops_per_completed_task": ("hops per completed task", "hops"),
    "packet_hops_mean": ("mean hops of a packet", "hops"),
    "state_bytes_per_pe": ("state per PE", "bytes"),
    "threads": ("threads", "threads"),
    "clock_ghz": ("clock", "GHz"),
    "flops": ("FLOPs of a step", "FLOPs"),
    "achieved_tflops": ("achieved", "TFLOP/s"),
    "chips": ("chips", "chips"),
    "chips_simulated": ("chips simulated", "chips"),
    "data_parallel_degree": ("data-parallel replicas", "replicas"),
    "ipus": ("IPUs", "IPUs"),
    "stages": ("pipeline stages", "stages"),
    "steps": ("steps", "steps"),
    "replicas": ("replicas", "replicas"),
    "tensor_parallel": ("tensor-parallel IPUs", "IPUs"),
    "microbatches": ("micro-batches", "micro-batches"),
    "microbatch_sequences": ("sequences per micro-batch", "sequences"),
    "sections": ("sections", "sections"),
    "section_instances": ("section instances", "sections"),
    "sections_spilled": ("sections spilled", "sections"),
    "intervals": ("intervals", "intervals"),
    "supersteps": ("supersteps", "supersteps"),
    "superstep_templates": ("superstep templates", "templates"),
    "busiest_stage": ("busiest stage", "index"),
    "pipeline_regions": ("pipeline regions", "regions"),
    "pipeline_replicas": ("pipeline replicas", "replicas"),
    "samples_finished": ("samples finished", "samples"),
    "chunks_finished": ("chunks finished", "chunks"),
    "chunks_per_cycle_steady": ("chunks, steady state", "chunks/cycle"),
    "pcu_alloc_max": ("most PCUs a section holds", "PCUs"),
    "pcu_alloc_mean": ("mean PCUs a section holds", "PCUs"),
    "ddr_bytes": ("DDR traffic", "bytes"),
    "ddr_effective_gbps": ("DDR effective bandwidth", "GB/s"),
    "packets_offered": ("packets offered", "packets"),
    "packets_delivered": ("packets delivered", "packets"),
    "packets_measured_offered": ("packets offered, measured", "packets"),
    "packets_measured_delivered": ("packets delivered, measured", "packets"),
    "packets_in_router_at_end": ("packets in routers at the end", "packets"),
    "packets_in_source_at_end": ("packets in sources at the end", "packets"),
    "accepted_per_pe_cycle": ("accepted traffic", "packets/PE/cycle"),
    "offered_per_pe_cycle": ("offered traffic", "packets/PE/cycle"),
    "throughput_tasks_per_cycle": ("throughput", "tasks/cycle"),
    "throughput_tasks_per_second": ("throughput", "tasks/s"),
    "pe_cycles_per_second": ("simulation speed", "unit-cycles/s"),
    "samples_per_second": ("samples, chip and host", "samples/s"),
    "chip_samples_per_second": ("samples, the chip alone", "samples/s"),
    "samples_per_second_run": ("samples over the run", "samples/s"),
    "samples_per_second_steady": ("samples, steady state", "samples/s"),
    "time_per_sample_seconds": ("time per sample", "s"),
    "latency_percentile_overflow": ("latency past the histogram", "true or false"),
    # a generation's (docs/decode.md, docs/ipu.md and docs/rdu.md, "Generation")
    "decode_tokens": ("tokens generated", "tokens"),
    "decode_steps": ("generation steps", "steps"),
    "decode_context_start": ("context at the start", "tokens"),
    "decode_context_end": ("context at the end", "tokens"),
    "decode_longest_context": ("longest context the memory holds", "tokens"),
    "decode_cache_full": ("the cache filled", "true or false"),
    "decode_regions": ("regions the layers are split over", "regions"),
    "region": ("side of the decode region", "PEs"),
    "decode_tree_levels": ("levels of the collectives' tree", "levels"),
    "decode_group": ("members of a tree's group", "PEs"),
    "decode_routes": ("routes the collectives need", "routes"),
    "route_budget": ("routes a router holds", "routes"),
    "relayed_levels": ("tree levels relayed", "levels"),
    "pipeline_steps": ("pipeline steps", "steps"),
    "wafers": ("wafers the regions take", "wafers"),
    "wafer_rows": ("rows of the wafer's fabric", "PEs"),
    "wafer_cols": ("columns of the wafer's fabric", "PEs"),
    "prefill_region": ("side of the prefill region", "PEs"),
    "prefill_bytes_per_pe": ("prefill memory of a PE", "bytes"),
    "weight_bytes_per_pe": ("weights of a PE", "bytes"),
    "weight_bytes_per_socket": ("weights of a socket", "bytes"),
    "cycles_per_layer": ("time of a layer", "cycles"),
    "cache_max_row_tokens": ("cache on the fullest row", "tokens"),
    "cache_row_capacity": ("a row's room for the cache", "tokens"),
    "cache_positions": ("positions of the static cache", "tokens"),
    "cache_max_stage": ("IPU holding the most cache", "index"),
    "cache_bytes_max_stage": ("cache filled on the fullest IPU", "bytes"),
    "cache_bytes_buffer_max_tile": ("static cache on the fullest tile", "bytes"),
    "cache_bytes_per_socket": ("cache of a socket", "bytes"),
    "sequences": ("sequences", "sequences"),
    "sockets": ("sockets", "sockets"),
    "tokens_per_second_total": ("tokens, every sequence", "tokens/s"),
    "packet_latency_complete": ("every measured packet delivered", "true or false"),
}

#: Name suffixes saying a summary figure's or a scenario key's unit: (suffix, unit, whether the suffix's
#: words stay in the label), tried longest first.
SUFFIXES = (("_cycles2", "cycles²", False), ("_cycles", "cycles", False), ("_cycle", "cycles", False),
            ("_seconds", "s", False), ("_ms", "ms", False), ("_bytes", "bytes", False), ("_gbps", "GB/s", False),
            ("_ghz", "GHz", False),
            ("_kib", "KiB", False), ("_fraction", "fraction", False), ("_utilization", "fraction", True),
            ("_utilization_max", "fraction", True), ("_utilization_mean", "fraction", True),
            ("_utilization_min", "fraction", True), ("_li", "fraction", True), ("_li_mean", "fraction", True),
            ("_li_min", "fraction", True), ("_bound", "name", True), ("_region", "name", True))

#: Words of a key's name written otherwise in a label.
WORDS = {"li": "LI", "ddr": "DDR", "pcu": "PCU", "pmu": "PMU", "pcus": "PCUs", "pmus": "PMUs", "pe": "PE",
         "pes": "PEs", "ipu": "IPU", "ipus": "IPUs", "ffn": "FFN", "qkv": "QKV", "sram": "SRAM", "kv": "KV",
         "gemm": "GEMM", "utilization": "utilisation", "var": "variance", "flops": "FLOPs", "macs": "MACs",
         "kib": "KiB", "mlp": "MLP", "n": ""}


def words(name: str) -> str:
    """`name` (snake case) as words: hop_latency -> "hop latency", ddr_busy -> "DDR busy"."""
    return " ".join(w for w in (WORDS.get(x, x) for x in name.split("_")) if w) or name


def _suffixed(name: str) -> tuple[str, str] | None:
    """(words, unit) of a name whose suffix says its unit (latency_mean_cycles: "latency mean",
    cycles; compute_fraction: "compute share", fraction), else None."""
    for suffix, unit, kept in sorted(SUFFIXES, key=lambda s: -len(s[0])):
        if name.endswith(suffix) and len(name) > len(suffix):
            if kept:
                return words(name), unit
            return words(name[: -len(suffix)]) + (" share" if unit == "fraction" else ""), unit
    m = re.fullmatch(r"(\w+?)_(cycles|seconds|ms)_(\w+)", name)  # stage_cycles_max: "stage max", cycles
    if m:
        return f"{words(m.group(1))} {words(m.group(3))}", {"cycles": "cycles", "seconds": "s", "ms": "ms"}[m.group(2)]
    m = re.fullmatch(r"(\w+?)_per_(second|cycle)", name)
    if m:
        return words(m.group(1)), f"{words(m.group(1)).split(' ')[-1]}/{'s' if m.group(2) == 'second' else 'cycle'}"
    return None


def summary_label(name: str) -> tuple[str, str] | None:
    """(words, unit) of a summary figure, or None when neither the table nor a suffix knows it."""
    if name in SUMMARY:
        return SUMMARY[name]
    return _suffixed(name)


def param_label(path: str) -> tuple[str, str] | None:
    """(words, unit) of a scenario key `section.name` from the parameter table, or None when it is no key."""
    from .params import PARAMS

    p = PARAMS.by_path().get(tuple(path.split(".", 1))) if "." in path else None
    if p is None:
        return None
    unit = p.unit if p.unit not in ("", "1") else None
    if unit is None:
        if p.type == "str" or p.type == "regions":
            unit = "name"
        elif p.type == "bool":
            unit = "true or false"
        elif p.range is not None and 0 <= p.range[0] and p.range[1] <= 1:
            unit = "fraction"
        else:
            unit = "dimensionless"
    name = p.name
    found = _suffixed(name)
    if found is not None and found[1] == unit:  # hop_latency_cycles (cycles): "hop latency"
        name_words = found[0]
    else:
        per = re.fullmatch(r"(\w+?)_per_cycle", name)
        name_words = words(per.group(1)) if per and unit.endswith("/cycle") else words(name)
    return f"{p.section} {name_words}", unit


def column_label(column: str) -> str:
    """A sweep table's column as an axis label: its words and its unit in parentheses. Columns joined by
    "+" (zipped keys) are each named, their units listed together; a column neither the parameter
    table nor the summary knows keeps its name, "(as in the table)"."""
    found, section = [], None
    for c in column.split("+"):
        w, unit = param_label(c) or summary_label(c) or (c, "as in the table")
        if section and c.startswith(f"{section}.") and w.startswith(f"{section} "):
            w = w[len(section) + 1:]  # workload type + hot rate
        section = c.split(".", 1)[0] if "." in c else None
        found.append((w, unit))
    units = list(dict.fromkeys(u for _, u in found))
    return " + ".join(w for w, _ in found) + f" ({', '.join(units)})"


def has_unit(label: str) -> bool:
    """Whether `label` ends with a unit in parentheses (the convention above)."""
    return UNIT_AT_END.search(label) is not None
