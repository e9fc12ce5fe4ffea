"""What only the rdu asks of a scenario, beyond each key's own range (meshsim.scenario calls it
through meshsim.machine.Machine.check_scenario; docs/rdu.md, "Operators")."""

from __future__ import annotations

import re

_PARALLELISM = re.compile(r"^T(\d+)P(\d+)D(\d+)$")


def parse_parallelism(text: str) -> tuple[int, int, int]:
    """(tensor, pipeline, data) degrees of "T<t>P<p>D<d>"; ValueError if it is not of that form
    with degrees >= 1."""
    m = _PARALLELISM.match(text)
    if not m or min(int(g) for g in m.groups()) < 1:
        raise ValueError(text)
    return tuple(int(g) for g in m.groups())


def check_scenario(ok, get, add, shown) -> None:
    """Problems of an rdu scenario that involve several keys, each reported through `add`."""
    mtype, wtype, reps = "machine.type", "workload.type", "workload.replicas"
    if not ok(wtype):
        return
    if get(wtype) not in ("transformer", "decode"):
        add(wtype, [mtype], 'must be "transformer" or "decode" when machine.type is "rdu" (the rdu runs a compiled '
                            'model, or generates tokens with one)')
        return
    if ok("machine.hbm_gib", "machine.hbm_bandwidth_gbps") and get("machine.hbm_gib") \
            and not get("machine.hbm_bandwidth_gbps"):
        add("machine.hbm_bandwidth_gbps", ["machine.hbm_gib"], "must be above 0 when machine.hbm_gib is: the HBM "
                                                               "has a bandwidth")
    if get(wtype) == "decode":
        _check_decode(ok, get, add, shown)
        return
    if ok(reps) and get(reps) != 1:
        add(reps, [mtype], 'must be 1 when machine.type is "rdu"; its data-parallel copies are the D of '
                           'workload.parallelism')
    _check_transformer(ok, get, add, shown)
    _check_tiles(ok, get, add, shown)


def _check_decode(ok, get, add, shown) -> None:
    """A generation's own rules (docs/rdu.md, "Generation")."""
    from .. import params

    wtype, par = "workload.type", "workload.parallelism"
    degrees = _check_degrees(ok, get, add, shown)
    if degrees is not None:
        t, p, d = degrees
        if p != 1:
            add(par, [wtype], f"has pipeline degree {p}; must be 1 for decode on the rdu (tensor and data degrees "
                              "only: a pipelined generation is not modelled)")
        elif ok("workload.batch") and get("workload.batch") % d:
            add("workload.batch", [par], f"must be a multiple of data degree {d} (each replica generates for whole "
                                         "sequences)")
    if ok("workload.context") and get("workload.context") < 1:
        add("workload.context", [wtype], "must be at least 1 for decode on the rdu: the prompt gives the first "
                                         "output token")
    if ok("workload.training") and get("workload.training"):
        add("workload.training", [wtype], "must be false for decode, which generates tokens")
    from ..params import refuse_mesh_decode_keys

    refuse_mesh_decode_keys(ok, get, add)
    for key in ("workload.microbatches", "workload.layers_per_stage", "machine.num_tiles"):
        if ok(key) and get(key) != params.param(*key.split(".")).default_value():
            add(key, [wtype], "does not apply to decode on the rdu, which runs one fused kernel call a layer on "
                              "the whole chip (docs/rdu.md, \"Generation\")")


def _check_tiles(ok, get, add, shown) -> None:
    """machine.num_tiles: at most the chip's tiles, and a share of whole PCUs and PMUs."""
    n, of = "machine.num_tiles", "machine.chip_tiles"
    if not ok(n, of) or not get(n):
        return
    if get(n) > get(of):
        add(n, [of], f"must be at most {of} = {shown(of)} (0: the whole chip)")
        return
    for units in ("machine.pcus", "machine.pmus"):
        if ok(units) and get(units) * get(n) % get(of):
            add(n, [of, units], f"must give a whole share of {units} = {shown(units)}: {units} x num_tiles / "
                                f"chip_tiles is {get(units) * get(n) / get(of):g}")
            return


def _check_degrees(ok, get, add, shown) -> tuple | None:
    """workload.parallelism's degrees (t, p, d), each problem with them or with the tensor split reported
    through `add`; None when it cannot be read."""
    par, nh = "workload.parallelism", "workload.n_heads"
    if not ok(par):
        return None
    try:
        t, p, d = parse_parallelism(get(par))
    except ValueError:
        meant = _parallelism_meant(get(par))
        add(par, [], "must be written T<tensor>P<pipeline>D<data> with degrees >= 1" +
            (f'; did you mean "{meant}"?' if meant else ', e.g. "T4P2D1"'))
        return None
    if t * p * d > 4096:
        add(par, [], f"asks for {t * p * d} chips; at most 4096")
        return None
    if ok(nh) and get(nh) % t != 0:
        add(par, [nh], f"has tensor degree {t}, which must divide {nh} = {shown(nh)} (each chip of a tensor group "
                       "holds whole heads)")
    elif ok("workload.n_kv_heads") and get("workload.n_kv_heads") % t != 0:
        add(par, ["workload.n_kv_heads"], f"has tensor degree {t}, which must divide workload.n_kv_heads = "
                                          f"{shown('workload.n_kv_heads')} (each chip of a tensor group holds whole "
                                          "key and value heads)")
    elif ok("workload.ffn_width") and get("workload.ffn_width") % t != 0:
        add(par, ["workload.ffn_width"], f"has tensor degree {t}, which must divide workload.ffn_width = "
                                         f"{shown('workload.ffn_width')} (each chip of a tensor group holds whole "
                                         "columns of the MLP)")
    return t, p, d


def _check_transformer(ok, get, add, shown) -> None:
    """Problems of an rdu scenario that involve several keys (docs/rdu.md, "Operators"), each
    reported through `add`."""
    par, mb, batch, seq = "workload.parallelism", "workload.microbatches", "workload.batch", "workload.seq_len"
    tile, layers = "workload.tile_tokens", "workload.n_layers"
    degrees = _check_degrees(ok, get, add, shown)
    if degrees is None:
        return
    t, p, d = degrees
    if ok(layers) and p > get(layers):
        add(par, [layers], f"has pipeline degree {p} but {layers} = {shown(layers)}: at most one stage per layer")
    lps = "workload.layers_per_stage"
    if ok(lps, layers) and get(lps):
        split = get(lps)
        zero = [i for i, x in enumerate(split) if x == 0]
        if zero:
            add(lps, [], f"entry {zero[0]} is 0: every pipeline stage of an rdu holds at least one layer")
        elif len(split) != p:
            add(lps, [par], f"has {len(split)} entries; must have one per pipeline stage: {p} ({par} = {shown(par)})")
        elif sum(split) != get(layers):
            add(lps, [layers], f"sums to {sum(split)} layers; must sum to {layers} = {shown(layers)}")
    if ok(batch, mb):
        if get(batch) % (d * get(mb)) != 0:
            add(batch, [mb, par], f"must be a multiple of data degree {d} x {mb} = {shown(mb)} "
                                  f"= {d * get(mb)}")
        elif ok(seq, tile):
            tokens = get(batch) // (d * get(mb)) * get(seq)
            if tokens % get(tile) != 0:
                add(tile, [batch, seq, mb, par],
                    f"must divide the {tokens:,} tokens of a microbatch ({batch} / (data degree {d} x "
                    f"{mb}) x {seq})")


# The usual other spellings of parallelism degrees: TP8, PP4, DP2, TP8PP2, tp=8 pp=2, tensor8, t4p2.
_DEGREE = r"(tensor|pipeline|data|tp|pp|dp|t|p|d)\s*[=:]?\s*(\d+)"
_DEGREE_SEPARATOR = r"[\s,;_\-x*/+]*"
_PARALLELISM_OTHERWISE = re.compile(rf"{_DEGREE_SEPARATOR}(?:{_DEGREE}{_DEGREE_SEPARATOR})+", re.IGNORECASE)


def _parallelism_meant(text: str) -> str | None:
    """The T<t>P<p>D<d> spelling of degrees written another way (a degree left out is 1), or None."""
    if not _PARALLELISM_OTHERWISE.fullmatch(text):
        return None
    degrees = {}
    for m in re.finditer(_DEGREE, text, re.IGNORECASE):
        kind = m.group(1)[0].upper()
        if kind in degrees:
            return None  # the same degree twice: no guess
        degrees[kind] = int(m.group(2))
    t, p, d = (degrees.get(k, 1) for k in "TPD")
    if min(t, p, d) < 1:
        return None
    return f"T{t}P{p}D{d}"


#: What each lever of an rdu scenario moves, and why it leaves the rest (docs/rdu.md, "Which lever
#: moves which figure"): key -> (the figures it moves, why it leaves the others where they are).
LEVERS = {
    "workload.fusion": (("pcu_alloc_mean", "li_occupied", "li", "step_seconds", "sections"),
                        "fusion decides which operators share a section, and so every figure of the allocation"),
    "workload.hidden_size": (("pcu_alloc_mean", "step_seconds", "operator_li_min"),
                             "wider operators hold more PCUs; every operator widens alike, so the balance among "
                             "the PCUs a section holds barely moves"),
    "machine.ddr_bandwidth_gbps": (("ddr_wait_fraction", "step_seconds", "pcu_alloc_mean", "li_occupied"),
                                   "a section holds only the PCUs that keep pace with its DDR, so a faster DDR asks "
                                   "for more, and a stage waiting on DDR idles its PCUs; where no section waits on "
                                   "DDR it moves nothing"),
    "workload.parallelism": (("pcu_alloc_mean", "chip_li", "pipeline_bubble_fraction", "step_seconds"),
                             "a tensor split narrows every operator alike; a pipeline split moves work between "
                             "chips"),
    "machine.chips_per_node": (("step_seconds", "pipeline_bubble_fraction"),
                               "it decides which collectives and hand-overs take the slower links between nodes: "
                               "time, not which PCUs work"),
    "workload.batch": (("step_seconds", "samples_per_second", "tiles"),
                       "more sequences stream more tiles through the same sections: the step grows in proportion, "
                       "the allocation stays, and so does the balance within each section once it streams many "
                       "tiles (a pass of a few tiles is mostly fill and drain)"),
    "workload.n_layers": (("step_seconds", "samples_per_second", "sections"),
                          "more layers add sections of the same shapes: the step grows, the balance stays"),
    "workload.tile_tokens": (("latency_mean_cycles", "ddr_wait_fraction"),
                             "a tile of another length changes the fill of each stage and the DDR bursts a little, "
                             "and the PCUs past an operator's column groups a little; not how long a PCU works "
                             "per token"),
    "workload.microbatches": (("pipeline_bubble_fraction", "ddr_bytes"),
                              "microbatches fill a pipeline (parallelism P > 1); on one chip they only cut each "
                              "section's pass into smaller ones"),
    "workload.prefetch": (("step_seconds", "ddr_wait_fraction"),
                          "prefetching hides the next section's weight load behind the running one: time, not "
                          "which PCUs work"),
    "machine.placement": (("li",),
                          "placement moves which PCUs a section holds, not how many or how busy: it moves the LI over "
                          "all the chip's PCUs alone, never li_occupied or the allocation"),
    "machine.elastic_pmus": (("step_seconds", "pmu_utilization"),
                             "free PMUs help only a GEMM limited by its PMU bandwidth"),
    "workload.precision": (("step_seconds", "samples_per_second", "ddr_wait_fraction"),
                           "fp32 slows every PCU alike (machine.fp32_rate) and a narrower type only shrinks the "
                           "bytes: the time moves, the balance among the PCUs a section holds barely"),
    "machine.fp32_rate": (("step_seconds", "samples_per_second"), "it slows every PCU alike at fp32"),
    "workload.optimizer": (("step_seconds", "samples_per_second", "ddr_bytes"),
                           "the update is one more section at the step's end, streamed through DDR"),
    "workload.master_weights": (("step_seconds", "samples_per_second", "ddr_bytes"),
                                "an fp32 master copy adds bytes and fp32 arithmetic to the update alone"),
    "machine.section_fill": (("sections", "pcu_alloc_max", "step_seconds"),
                             "only o3 reads it: it decides how many of o1's sections o3 merges into one"),
    "machine.section_switch_cycles": (("step_seconds",), "reconfiguration is time between sections, when no PCU works"),
    "machine.pcu_place_limit": (("pcu_alloc_max", "pcu_alloc_mean", "step_seconds"),
                                "it caps the PCUs one section is placed on: sections that would take more run on "
                                "fewer; a section that needs fewer does not notice it"),
    "machine.host_seconds": (("host_seconds", "step_seconds", "samples_per_second"),
                             "the host's time is outside the chip: it moves the step and the end-to-end rate, never "
                             "the chip's time or its balance"),
    "machine.num_tiles": (("step_seconds", "pcu_alloc_mean", "ddr_wait_fraction"),
                          "the run gets that share of the PCUs, PMUs and DDR: time and allocation move with it"),
    "workload.vocab_size": (("step_seconds", "flops", "ddr_bytes"),
                            "the head and loss over the vocabulary are a few sections of their own, on the last "
                            "stage, whose balance is theirs"),
    "workload.layers_per_stage": (("chip_li", "pipeline_bubble_fraction"),
                                  "the split moves work between pipeline stages (chips), not within a section"),
}
