"""Compilation of a transformer for the RDU (docs/rdu.md, "Compilation") and rdu scenarios."""

import dataclasses
import math
from fractions import Fraction

import pytest

from kernels import rdu as K
from meshsim.errors import InputError
from meshsim.rdu.compiler import (
    MACHINE_KEYS,
    MODEL_KEYS,
    _cycles_for,
    build_section,
    chip_ops,
    compile_program,
    form_sections,
    layer_groups,
    parse_parallelism,
    spec_for,
    spec_from_scenario,
)
from meshsim.rdu.keys import PRESETS as RDU_PRESETS
from meshsim.scenario import load_scenario
from meshsim.transformer import Model, backward_of, edge_operators, operators, totals

RDU = '[machine]\ntype = "rdu"\n[workload]\ntype = "transformer"\n'


def problems(text, *overrides):
    with pytest.raises(InputError) as e:
        load_scenario("s.toml", overrides, text=text)
    return e.value.problems


@pytest.mark.parametrize("preset, tflops, sram_mib", [("sn10", 320, 320), ("sn30", 688, 640), ("sn40l", 638, 520)])
def test_a_preset_peaks_at_its_published_rate(preset, tflops, sram_mib):
    p = RDU_PRESETS[preset]
    peak = p["pcus"] * p["pcu_lanes"] * p["pcu_stages"] * 2 * p["clock_ghz"] * 1e9
    assert peak == pytest.approx(tflops * 1e12, rel=1e-3)
    assert p["pmus"] * p["pmu_kib"] * 1024 == sram_mib * 2**20


def test_the_preset_fills_the_keys_the_scenario_leaves_out():
    sc = load_scenario("s.toml", ["machine.preset=sn10", "machine.ddr_bandwidth_gbps=50"], text=RDU)
    m = sc.values["machine"]
    assert (m["pcus"], m["pmus"], m["clock_ghz"]) == (640, 640, RDU_PRESETS["sn10"]["clock_ghz"])
    assert m["ddr_bandwidth_gbps"] == 50.0  # the scenario wins over the preset
    again = load_scenario("r.toml", text=sc.resolved_toml())
    assert again.values == sc.values


def test_rdu_scenarios_are_checked_key_by_key():
    assert problems('[machine]\ntype = "rdu"\n') == [
        's.toml: workload.type = "uniform" (default): must be "transformer" or "decode" when machine.type is "rdu" '
        "(the rdu runs a compiled model, or generates tokens with one)"]
    assert problems('[workload]\ntype = "transformer"\n') == [
        's.toml: workload.type = "transformer": applies only when machine.type is "rdu" or "ipu"; the mesh runs a '
        'transformer as "layer_pipeline"']
    assert problems(RDU + "fusion = \"o2\"\n") == [
        's.toml: workload.fusion = "o2": must be one of "o0", "o1", "o3"']
    assert problems(RDU, "machine.rows=8") == [
        'override machine.rows=8: machine.rows = 8: applies only when machine.type is "mesh" (it is "rdu")']
    assert problems(RDU, "workload.parallelism=T4P2") == [
        'override workload.parallelism=T4P2: workload.parallelism = "T4P2": must be written '
        'T<tensor>P<pipeline>D<data> with degrees >= 1; did you mean "T4P2D1"?']
    assert problems(RDU, "workload.parallelism=T1P1D3") == [
        "override workload.parallelism=T1P1D3: workload.batch = 8 (default): must be a multiple of data degree 3 x "
        "workload.microbatches = 1 (default) = 3"]
    assert problems(RDU, "workload.tile_tokens=100") == [
        "override workload.tile_tokens=100: workload.tile_tokens = 100: must divide the 8,192 tokens of a "
        "microbatch (workload.batch / (data degree 1 x workload.microbatches) x workload.seq_len)"]
    assert problems(RDU, "workload.parallelism=T8P1D1") == [
        'override workload.parallelism=T8P1D1: workload.parallelism = "T8P1D1": has tensor degree 8, which must '
        "divide workload.n_heads = 12 (default) (each chip of a tensor group holds whole heads)"]
    # one slip, one message: an rdu given the mesh's transformer workload is told only that
    assert problems(RDU, "workload.type=layer_pipeline") == [
        'override workload.type=layer_pipeline: workload.type = "layer_pipeline": must be "transformer" or "decode" '
        'when machine.type is "rdu" (the rdu runs a compiled model, or generates tokens with one)']
    assert problems(RDU, "workload.parallelism=T1P13D1") == [
        'override workload.parallelism=T1P13D1: workload.parallelism = "T1P13D1": has pipeline degree 13 but '
        "workload.n_layers = 12 (default): at most one stage per layer"]


def test_parallelism_strings():
    assert parse_parallelism("T4P2D1") == (4, 2, 1)
    for bad in ("T0P1D1", "t4p2d1", "T4P2", "T4P2D1x"):
        with pytest.raises(ValueError):
            parse_parallelism(bad)


def test_one_chip_runs_every_flop_of_the_model():
    spec = spec_for("sn30", training=True)
    mb = Model(768, 12, 12, 1024, 8)
    ops = chip_ops(spec, range(12), "forward") + chip_ops(spec, range(12), "backward")
    first, last = edge_operators(mb, 50257)
    forward = first + operators(mb) + last
    whole = forward + [backward_of(op) for op in reversed(forward)]
    assert sum(o.flops for o in ops) == totals(whole)["flops"]
    assert [o.name for o in ops] == [o.name for o in whole]
    assert ops[0].name == "embedding.lookup" and ops[len(forward) - 1].name == "head.loss"
    # the head over GPT-2's vocabulary: 2 T H V FLOPs forward, its weights the token table's
    head = next(o for o in ops if o.name == "head.logits")
    assert head.flops == 2 * 8 * 1024 * 768 * 50257 and head.weight_bytes == 50257 * 768 * 2
    # without a vocabulary, the blocks alone
    blocks = chip_ops(dataclasses.replace(spec, vocab_size=0), range(12), "forward")
    assert [o.name for o in blocks] == [o.name for o in operators(mb)]


def test_tensor_parallelism_splits_gemms_and_adds_all_reduces():
    one = {o.name: o for o in chip_ops(spec_for("sn30", training=True), range(1), "forward")}
    four = chip_ops(spec_for("sn30", training=True, parallelism="T4P1D1"), range(1), "forward")
    by = {o.name: o for o in four}
    assert by["layer0.ffn_up"].flops == math.ceil(one["layer0.ffn_up"].flops / 4)
    assert by["layer0.ffn_up"].width == one["layer0.ffn_up"].width // 4
    assert by["layer0.ln1"].flops == one["layer0.ln1"].flops  # replicated
    assert by["layer0.ffn_up"].output_bytes == one["layer0.ffn_up"].output_bytes // 4  # column-parallel
    assert by["layer0.ffn_up"].input_bytes == one["layer0.ffn_up"].input_bytes
    assert by["layer0.ffn_down"].input_bytes == one["layer0.ffn_down"].input_bytes // 4  # row-parallel
    assert by["layer0.ffn_down"].output_bytes == one["layer0.ffn_down"].output_bytes
    assert by["layer0.gelu"].flops == one["layer0.gelu"].flops // 4
    names = [o.name for o in four]
    assert names[names.index("layer0.out_proj") + 1] == "layer0.out_proj.allreduce"
    assert names[names.index("layer0.ffn_down") + 1] == "layer0.ffn_down.allreduce"
    back = [o.name for o in chip_ops(spec_for("sn30", training=True, parallelism="T4P1D1"), range(1), "backward")]
    assert "layer0.qkv_proj.backward.allreduce" in back and "layer0.ffn_up.backward.allreduce" in back
    assert sum(o.kind == "collective" for o in four) == 2


def test_o1_fuses_by_the_documented_rules():
    spec = spec_for("sn30", fusion="o1", vocab_size=0)
    groups = form_sections(chip_ops(spec, range(1), "forward"), spec)
    short = [[o.name.split(".", 1)[1] for o in g] for g in groups]
    assert short == [["ln1", "qkv_proj"], ["attn_scores_softmax"], ["attn_v"], ["out_proj", "residual1"],
                     ["ln2", "ffn_up", "gelu"], ["ffn_down", "residual2"]]
    assert len(form_sections(chip_ops(spec_for("sn30", fusion="o0", vocab_size=0), range(1), "forward"),
                             spec_for("sn30", fusion="o0"))) == 11


def test_o3_fuses_attention_and_computes_the_scores_again_backward():
    spec = spec_for("sn30", fusion="o3", training=True, hidden_size=256, n_heads=4, seq_len=128, batch=2)
    T, H, e, B, A, S = spec.tokens, 256, 2, 2, 4, 128
    fwd = {o.name: o for o in chip_ops(spec, range(1), "forward")}
    bwd = {o.name: o for o in chip_ops(spec, range(1), "backward")}
    assert "layer0.attn_scores_softmax" not in fwd and "layer0.attn_v" not in fwd
    scores = 2 * B * S * S * H + 5 * B * A * S * S
    att = fwd["layer0.attention"]
    # reads Q, K and V, writes the heads' output: the B A S S scores never leave the operator
    assert (att.kind, att.flops, att.weight_bytes) == ("attention", scores + 2 * B * S * S * H, 0)
    assert (att.input_bytes, att.output_bytes, att.width) == (3 * T * H * e, T * H * e, H)
    back = bwd["layer0.attention.backward"]
    assert back.flops == 2 * att.flops + scores
    assert (back.input_bytes, back.output_bytes) == (4 * T * H * e, 3 * T * H * e)
    # o1 keeps the two operators, and the scores go through DDR
    o1 = [o.name for o in chip_ops(spec_for("sn30", fusion="o1", training=True), range(1), "forward")]
    assert "layer0.attn_scores_softmax" in o1 and "layer0.attn_v" in o1


def _need(op, spec):
    """Column groups o3 counts an operator as needing (docs/rdu.md, "Sections")."""
    if op.kind == "collective":
        return 0
    need = math.ceil(op.width / spec.pcu_lanes)
    if op.kind == "gemm" and op.phase == "backward":
        need += math.ceil(op.passes_on / (spec.model.element_bytes * spec.tokens) / spec.pcu_lanes)
    return need


@pytest.mark.parametrize("fill", [0.3, 0.7, 1.0])
def test_o3_merges_o1s_sections_while_their_column_groups_stay_within_the_fill(fill):
    spec = spec_for("sn30", fusion="o3", training=True, hidden_size=768, n_heads=12, n_layers=2, section_fill=fill)

    def pmus(group):
        return sum(max(1, math.ceil((o.weight_bytes + spec.buffer_tiles * math.ceil(o.input_bytes / spec.tiles))
                                    / spec.pmu_bytes)) for o in group)

    def fits(group):
        return (sum(_need(o, spec) for o in group) <= fill * spec.pcus
                and len(group) <= max(2, math.ceil(spec.tiles / 2)) and pmus(group) <= spec.pmus)

    for phase in ("forward", "backward"):
        ops = chip_ops(spec, range(2), phase)
        atoms = form_sections(ops, dataclasses.replace(spec, fusion="o1"))
        groups = form_sections(ops, spec)
        # every o3 section is a run of whole o1 sections, in order
        assert [o for g in groups for o in g] == ops
        bounds = {sum(len(a) for a in atoms[:i]) for i in range(len(atoms) + 1)}
        starts = [sum(len(g) for g in groups[:i]) for i in range(len(groups))]
        assert set(starts) <= bounds
        for i, g in enumerate(groups):
            assert fits(g) or g in atoms  # an o1 section that does not fit alone stays as it is
            if i + 1 < len(groups):
                # the next o1 section did not fit into this one
                nxt = next(a for a in atoms if a[0] is groups[i + 1][0])
                assert not fits(g + nxt)
    counts = [len(compile_program(spec_for("sn30", fusion="o3", training=True, hidden_size=768, n_heads=12,
                                           n_layers=2, section_fill=f)).sections) for f in (0.3, 0.7, 1.0)]
    assert counts[0] > counts[1] > counts[2]


def test_pcus_past_the_column_groups_share_the_tiles_tokens_and_each_reads_the_weights():
    spec = spec_for("sn10", hidden_size=40, n_heads=1, seq_len=64, batch=1, tile_tokens=16, fusion="o0",
                    pcus=16, ddr_bandwidth_gbps=1e6, elastic_pmus=False, pmu_bytes_per_cycle=8, pcu_place_limit=1.0)
    sec = build_section([o for o in chip_ops(spec, range(1), "forward") if o.name == "layer0.out_proj"], spec, "x")
    s = sec.stages[0]
    # 3 column groups x 16 tile tokens = 48 pairs over 16 PCUs: 3 pairs each
    assert (s.groups, s.pcus, s.n_hi, s.n_lo) == (3, 16, 16, 0)
    f = 2 * 64 * 40 * 40
    assert s.c_hi == math.ceil(3 * f / (64 * 40 * 2 * 6)) + 6
    # 16 PCUs share 3 groups: each group's weights are read by ceil(16 / 3) = 6 PCUs
    moved = 6 * s.op.weight_bytes + math.ceil(s.op.input_bytes / 4) + math.ceil(s.op.output_bytes / 4)
    assert s.dur == math.ceil(moved / (max(s.pmus, s.pcus) * spec.pmu_bytes_per_cycle)) > s.c_hi


def test_o3_packs_sections_within_the_chip():
    spec = spec_for("sn10", fusion="o3", tile_tokens=64)
    prog = compile_program(spec)
    tiles = prog.sections[0].tiles
    assert len(prog.sections) < len(compile_program(spec_for("sn10", fusion="o1")).sections)
    for sec in prog.sections:
        assert len(sec.stages) <= math.ceil(tiles / 2)
        assert sec.spilled_bytes == 0 and sec.pmus <= spec.pmus


def _pcus_by_the_doc(ops, per_tile, spec):
    """n_j of docs/rdu.md, "Allocation", from the section's operators and its DDR bytes per tile."""
    compute = [o for o in ops if o.kind != "collective"]
    groups = [math.ceil(o.width / spec.pcu_lanes) for o in compute]
    cap = [g * spec.tile_tokens for g in groups]
    # the place limit: at most floor(pcu_place_limit x P) PCUs, never fewer than one per operator
    usable = max(len(compute), math.floor(Fraction(str(spec.pcu_place_limit)) * spec.pcus))
    # the DDR floor: the section's bytes per tile at the DDR's rate
    tau = _cycles_for(per_tile, spec.ddr_bandwidth_gbps, spec.clock_ghz) - spec.pcu_stages
    if tau > 0:
        enough = []
        for o, g, c in zip(compute, groups, cap, strict=True):
            # the most pairs x with c(x) <= tau + D
            x = 0
            per_pair = Fraction(o.flops) / spec.rate / (spec.tokens * o.width * 2 * spec.pcu_stages)
            while x < c and math.ceil((x + 1) * per_pair) <= tau:
                x += 1
            enough.append(max(g, math.ceil(c / x)) if x else c)
        if sum(enough) <= usable:
            return enough
    total = sum(o.flops for o in compute)
    n = [min(c, 1 + (usable - len(compute)) * o.flops // total) for o, c in zip(compute, cap, strict=True)]
    while sum(n) < usable:
        below = [j for j in range(len(n)) if n[j] < cap[j]]
        if not below:
            break
        j = max(below, key=lambda j: (Fraction(compute[j].flops, n[j]), -j))
        n[j] += 1
    return n


@pytest.mark.parametrize("placement", ["packed", "spread"])
@pytest.mark.parametrize("fusion, hidden, heads, ddr", [("o0", 256, 4, 100.0), ("o1", 256, 4, 100.0),
                                                        ("o3", 256, 4, 100.0), ("o3", 2048, 1, 100.0),
                                                        ("o0", 256, 4, 1e5), ("o3", 256, 4, 1e5)])
def test_pcus_go_by_the_ddr_floor_else_by_flops(fusion, hidden, heads, ddr, placement):
    # at 100 GB/s every section here waits on DDR and holds only the PCUs its floor asks for; a DDR
    # of 100 TB/s leaves no time to hide compute in, so the PCUs go by FLOPs, and in o3's sections
    # of many operators the one-PCU floor must come out of the chip's PCUs, not on top of them
    spec = spec_for("sn10", fusion=fusion, hidden_size=hidden, n_heads=heads, n_layers=4, placement=placement,
                    ddr_bandwidth_gbps=ddr)
    for sec in compile_program(spec).sections:
        compute = [s for s in sec.stages if s.op.kind != "collective"]
        assert [s.pcus for s in compute] == _pcus_by_the_doc([s.op for s in sec.stages],
                                                             sec.load_bytes + sec.store_bytes, spec)
        used = sum(s.pcus for s in compute)
        assert used <= spec.pcus
        if ddr > 1e4:
            usable = max(len(compute), math.floor(Fraction(str(spec.pcu_place_limit)) * spec.pcus))
            assert used == usable or all(s.pcus == s.groups * spec.tile_tokens for s in compute)
        p0 = 0
        for j, s in enumerate(compute):
            assert s.groups == math.ceil(s.op.width / spec.pcu_lanes)
            assert 1 <= s.pcus <= s.groups * spec.tile_tokens
            # whole column groups while the PCUs are at most the groups, else (group, token) pairs
            units = s.groups if s.pcus <= s.groups else s.groups * spec.tile_tokens
            q = units // s.pcus
            assert s.n_hi + s.n_lo == s.pcus
            assert s.n_hi * (q + (1 if s.n_lo else 0)) + s.n_lo * q == units
            # packed from PCU 0; spread with the free PCUs as k + 1 equal gaps (docs/rdu.md)
            gap = (j + 1) * (spec.pcus - used) // (len(compute) + 1) if placement == "spread" else 0
            assert s.pcu0 == p0 + gap
            p0 += s.pcus
        held = [p for s in compute for p in range(s.pcu0, s.pcu0 + s.pcus)]
        assert len(set(held)) == used and max(held, default=0) < spec.pcus  # no PCU twice, none off the chip


def test_a_pcu_is_busy_for_its_column_groups_and_fills_its_pipeline():
    spec = spec_for("sn10", hidden_size=40, n_heads=1, seq_len=64, batch=1, tile_tokens=16, fusion="o0",
                    pcus=2, elastic_pmus=False, pcu_place_limit=1.0)
    sec = build_section([o for o in chip_ops(spec, range(1), "forward") if o.name == "layer0.out_proj"], spec, "x")
    s = sec.stages[0]
    # width 40 over 16 lanes: 3 column groups on 2 PCUs, one with 2 and one with 1
    assert (s.groups, s.pcus, s.n_hi, s.n_lo) == (3, 2, 1, 1)
    f = 2 * 64 * 40 * 40  # out_proj FLOPs over the microbatch
    assert s.c_hi == math.ceil(2 * 16 * f / (64 * 40 * 2 * 6)) + 6
    assert s.c_lo == math.ceil(1 * 16 * f / (64 * 40 * 2 * 6)) + 6


def test_a_section_that_does_not_fit_spills_its_weights_to_ddr():
    spec = spec_for("sn10", hidden_size=8192, n_heads=64, n_layers=1, seq_len=1024, batch=4, fusion="o0")
    prog = compile_program(spec)
    spilled = [s for s in prog.sections if s.spilled_bytes]
    assert spilled, "ffn_up and ffn_down of hidden 8192 (512 MiB each) cannot fit 320 MiB of PMUs"
    for sec in spilled:
        assert sec.pmus == spec.pmus
        assert sec.resident_bytes + sec.spilled_bytes == sec.weight_bytes
        assert sec.load_bytes > sec.spilled_bytes
    row = prog.section[prog.sections.index(spilled[0])]
    assert row[K.SE_WEIGHTS] == spilled[0].resident_bytes and row[K.SE_PREFETCH_CAP] == 0


def test_elastic_pmus_go_to_gemms_and_leave_room_for_prefetch():
    kw = dict(fusion="o1", hidden_size=1024, n_heads=16)
    off = compile_program(spec_for("sn30", elastic_pmus=False, **kw)).sections
    on = compile_program(spec_for("sn30", elastic_pmus=True, prefetch=False, **kw)).sections
    pre = compile_program(spec_for("sn30", elastic_pmus=True, prefetch=True, **kw)).sections
    for a, b, c in zip(off, on, pre, strict=True):
        for sa, sb in zip(a.stages, b.stages, strict=True):
            assert sb.pmus >= sa.pmus if sa.op.kind == "gemm" else sb.pmus == sa.pmus
        if any(s.op.kind == "gemm" for s in a.stages):
            # all that is left goes to the GEMMs, but for the room of what is handed over on chip
            assert b.pmus + math.ceil((b.held_in + b.held_out) / 2**19) == 1280 and b.pmus > a.pmus
            assert a.pmus <= c.pmus < 1280 and c.prefetch_cap > 0  # but room is kept to prefetch into


def test_layers_split_evenly_over_pipeline_stages():
    assert [len(r) for r in layer_groups(10, 4)] == [3, 3, 2, 2]
    assert [r.start for r in layer_groups(10, 4)] == [0, 3, 6, 8]


def test_an_uneven_split_gives_each_stage_its_layers_and_moves_the_chips_balance():
    """workload.layers_per_stage: the stages hold the blocks it lists, in order; the chips' load
    follows, and a bad list is refused by name before anything compiles."""
    assert [(r.start, len(r)) for r in layer_groups(12, 3, (2, 4, 6))] == [(0, 2), (2, 4), (6, 6)]
    even = spec_for("sn30", vocab_size=0, hidden_size=256, n_heads=4, n_layers=12, seq_len=128, batch=4,
                    parallelism="T1P2D1", microbatches=2)
    uneven = spec_for("sn30", vocab_size=0, hidden_size=256, n_heads=4, n_layers=12, seq_len=128, batch=4,
                      parallelism="T1P2D1", microbatches=2, layers_per_stage=(3, 9))

    def chip_flops(spec):
        prog = compile_program(spec)
        return [sum(prog.sections[int(prog.instance[c, k, K.IN_SECTION])].flops
                    for k in range(int(prog.n_instances[c]))) for c in range(prog.n_chips)]

    a, b = chip_flops(even), chip_flops(uneven)
    assert a[0] == a[1] and b[1] == pytest.approx(3 * b[0], rel=0.01) and sum(a) == sum(b)
    text = RDU + 'n_layers = 12\nparallelism = "T1P2D1"\n'
    assert any("workload.layers_per_stage = [3, 4, 5]: has 3 entries; must have one per pipeline stage: 2" in x
               for x in problems(text, "workload.layers_per_stage=[3, 4, 5]"))
    assert any("workload.layers_per_stage = [3, 4]: sums to 7 layers; must sum to workload.n_layers = 12" in x
               for x in problems(text, "workload.layers_per_stage=[3, 4]"))
    assert any("workload.layers_per_stage = [0, 12]: entry 0 is 0: every pipeline stage of an rdu holds at least "
               "one layer" in x for x in problems(text, "workload.layers_per_stage=[0, 12]"))
    assert load_scenario("s.toml", ["workload.layers_per_stage=[5, 7]"], text=text).values["workload"][
        "layers_per_stage"] == [5, 7]


def test_gpipe_programs_and_their_dependencies():
    spec = spec_for("sn30", training=True, parallelism="T1P2D2", microbatches=2, n_layers=2, fusion="o1",
                    vocab_size=0)
    prog = compile_program(spec)
    n = prog.n_instances.tolist()
    assert prog.chips_total == 4 and prog.n_chips == 2 and n[0] == n[1]
    inst, mbs = prog.instance, prog.instance_microbatch
    per_mb_f = sum(1 for k in range(n[0]) if mbs[0, k] == 0) // 2
    assert mbs[0, : 2 * per_mb_f].tolist() == [0] * per_mb_f + [1] * per_mb_f
    # chip 1's first forward section of microbatch j waits for chip 0's last of j
    deps = [(k, inst[1, k, K.IN_DEP_CHIP], inst[1, k, K.IN_DEP_INST]) for k in range(n[1]) if inst[1, k, 1] >= 0]
    assert deps[0] == (0, 0, per_mb_f - 1) and deps[1] == (per_mb_f, 0, 2 * per_mb_f - 1)
    # the gradient all-reduce over the data-parallel pair closes every chip's program
    last = prog.sections[inst[0, n[0] - 1, K.IN_SECTION]]
    assert last.name.endswith("gradient.allreduce") and mbs[0, n[0] - 1] == -1
    # backward: microbatch 1 first, then 0 (GPipe), the first backward section of chip 0 waiting for
    # chip 1's last backward section of the same microbatch
    back = [k for k in range(n[0]) if inst[0, k, K.IN_DEP_CHIP] == 1]
    assert [mbs[0, k] for k in back] == [1, 0]
    for k in back:
        j = inst[0, k, K.IN_DEP_INST]
        assert mbs[1, j] == mbs[0, k] and (j + 1 == n[1] - 1 or mbs[1, j + 1] != mbs[1, j])


def test_layouts_the_chip_cannot_hold_are_refused_by_name():
    with pytest.raises(InputError, match="machine.pcus = 2"):
        compile_program(spec_for("sn10", fusion="o1", pcus=2))
    with pytest.raises(InputError, match="lower workload.tile_tokens"):
        compile_program(spec_for("sn10", pmus=2, pmu_kib=1, tile_tokens=1024))


def test_spec_from_scenario_reads_every_key():
    sc = load_scenario("s.toml", ["workload.hidden_size=1024", "workload.n_heads=16", "workload.fusion=o3",
                                  "machine.buffer_tiles=3", "machine.preset=sn10", "workload.precision=fp32"],
                       text=RDU)
    spec = spec_from_scenario(sc)
    m, w = sc.values["machine"], sc.values["workload"]
    for key in MACHINE_KEYS:
        assert getattr(spec, key) == m[key], key
    for key in MODEL_KEYS:
        assert getattr(spec.model, key) == w[key], key
    for key in ("training", "fusion", "tile_tokens", "parallelism", "microbatches", "prefetch"):
        assert getattr(spec, key) == w[key], key
    assert spec.layers_per_stage == tuple(w["layers_per_stage"]) == ()
    assert (spec.model.hidden_size, spec.fusion, spec.buffer_tiles, spec.pcus) == (1024, "o3", 3, 640)


def test_sections_hand_over_on_chip_what_fits():
    spec = spec_for("sn30", fusion="o1", vocab_size=0)
    prog = compile_program(spec)
    secs = prog.sections
    assert secs[0].held_in == 0  # the first reads the model's input from DDR
    pairs = list(zip(secs, secs[1:], strict=False))
    assert all(a.held_out == b.held_in for a, b in pairs)
    a, b = secs[0], secs[1]  # [ln1 qkv_proj] -> [attn_scores_softmax]: Q, K and V stay on chip
    assert a.held_out == min(a.stages[-1].op.output_bytes, b.stages[0].op.input_bytes) > 0
    assert a.store_bytes == math.ceil((a.stages[-1].op.output_bytes - a.held_out) / a.tiles)
    assert b.load_bytes == math.ceil((b.stages[0].op.input_bytes - b.held_in) / b.tiles)
    assert a.prefetch_cap == (spec.pmus - a.pmus) * 2**19 - a.held_out
    # a forward section of a training step still stores what it hands over (saved for backward)
    train = compile_program(spec_for("sn30", fusion="o1", training=True)).sections[0]
    assert train.held_out > 0 and train.store_bytes == math.ceil(
        sum(s.op.output_bytes for s in train.stages) / train.tiles)
    # nothing fits beside a section that spills: it hands nothing over
    big = compile_program(spec_for("sn10", hidden_size=8192, n_heads=64, n_layers=1, fusion="o0")).sections
    assert all(s.held_in == s.held_out == 0 for s in big if s.spilled_bytes)


def test_collectives_stay_with_their_operator_in_every_mode():
    for fusion in ("o0", "o1", "o3"):
        spec = spec_for("sn30", fusion=fusion, parallelism="T4P1D1", training=True, n_layers=2, tile_tokens=4096,
                        vocab_size=0)
        for sec in compile_program(spec).sections:
            kinds = [s.op.kind for s in sec.stages]
            assert kinds[0] != "collective", (fusion, sec.name)
            for a, b in zip(sec.stages, sec.stages[1:], strict=False):
                if b.op.kind == "collective":
                    assert b.op.name == a.op.name + ".allreduce"
    o0 = compile_program(spec_for("sn30", fusion="o0", parallelism="T4P1D1", n_layers=1, vocab_size=0)).sections
    assert len(o0) == 11  # 11 operators, two of them with their all-reduce


def test_backward_hands_over_gradients_and_stores_weight_gradients():
    spec = spec_for("sn30", fusion="o1", training=True, n_layers=2)
    prog = compile_program(spec)
    back = [s for s in prog.sections if s.phase == "backward"]
    assert any(s.held_out for s in back)
    for a, b in zip(back, back[1:], strict=False):
        last, first = a.stages[-1].op, b.stages[0].op
        assert a.held_out <= last.passes_on < last.output_bytes or last.weight_bytes == 0
        # the weight gradient of a section's last operator always goes to DDR
        assert a.store_bytes * a.tiles >= last.output_bytes - a.held_out >= last.weight_bytes
        # the saved forward input of the next section's first operator always comes from DDR
        assert b.load_bytes * b.tiles >= first.input_bytes - b.held_in >= first.input_bytes - first.reads_from_before


def test_the_residual_stream_is_stored_even_when_handed_over():
    secs = compile_program(spec_for("sn30", fusion="o1", n_layers=2)).sections
    ends = [s for s in secs if s.stages[-1].op.name.endswith("residual2") and s.held_out]
    assert ends
    for s in ends:
        assert s.store_bytes == math.ceil(s.stages[-1].op.output_bytes / s.tiles)


def test_saved_activations_count_partial_sums_once():
    spec = spec_for("sn30", fusion="o1", training=True, parallelism="T2P1D1", n_layers=1)
    sec = next(s for s in compile_program(spec).sections if s.stages[0].op.name == "layer0.out_proj")
    names = [s.op.name for s in sec.stages]
    assert names == ["layer0.out_proj", "layer0.out_proj.allreduce", "layer0.residual1"]
    o = [s.op.output_bytes for s in sec.stages]
    assert sec.store_bytes == math.ceil((o[1] + o[2]) / sec.tiles)


def _collective_durs(prog):
    return [s.dur for sec in prog.sections for s in sec.stages if s.op.kind == "collective"]


def test_chips_fill_nodes_tensor_first_and_a_group_across_nodes_takes_the_slower_link():
    """docs/rdu.md, "Topology": chip (ti, pi, di) is number (di p + pi) t + ti; a tensor group inside a
    node all-reduces over the node's links, one split over two nodes over the links between nodes."""
    kw = dict(hidden_size=256, n_heads=8, n_layers=2, seq_len=128, batch=4, training=True)
    spec = spec_for("sn30", parallelism="T2P2D2", chips_per_node=4, **kw)
    assert [spec.chip_index(ti, pi, di) for di in range(2) for pi in range(2) for ti in range(2)] == list(range(8))
    intra = (spec.interconnect_gbps, spec.interconnect_latency_cycles)
    inter = (spec.node_interconnect_gbps, spec.node_interconnect_latency_cycles)
    # T2 groups and the P2 hand-over stay in a node of 4; the D2 replicas are 4 chips apart
    assert spec.tensor_link(0) == spec.tensor_link(1) == spec.pipeline_link(0) == intra
    assert spec.data_link(0) == spec.data_link(1) == inter
    assert spec_for("sn30", parallelism="T2P2D2", chips_per_node=8, **kw).data_link(0) == intra
    # a tensor group of 8 split over two nodes of 4: every all-reduce slows down
    wide, narrow = (compile_program(spec_for("sn30", parallelism="T8P1D1", chips_per_node=n, **kw)) for n in (4, 8))
    assert all(a > b for a, b in zip(_collective_durs(wide), _collective_durs(narrow), strict=True))
    g = (wide.chips_total - 1) * 2  # 2 (t - 1) steps of the ring
    tb = wide.spec.tile_tokens * 256 * 2
    assert _collective_durs(wide)[0] == g * (inter[1] + _cycles_for(-(-tb // 8), inter[0], wide.spec.clock_ghz))


def test_a_pipeline_split_over_two_nodes_waits_longer_at_the_node_boundary():
    kw = dict(hidden_size=256, n_heads=8, n_layers=4, seq_len=128, batch=4, training=False, microbatches=2)
    spec = spec_for("sn30", parallelism="T2P4D1", chips_per_node=4, **kw)
    # stages 0, 1 on node 0 and 2, 3 on node 1: only the hand-over from stage 1 to 2 crosses nodes
    links = [spec.pipeline_link(i) for i in range(3)]
    assert links[0] == links[2] == (spec.interconnect_gbps, spec.interconnect_latency_cycles)
    assert links[1] == (spec.node_interconnect_gbps, spec.node_interconnect_latency_cycles)
    prog = compile_program(spec)
    delays = {int(prog.instance[c, k, K.IN_DEP_CHIP]): int(prog.instance[c, k, K.IN_DELAY])
              for c in range(4) for k in range(int(prog.n_instances[c])) if prog.instance[c, k, K.IN_DEP_CHIP] >= 0}
    assert delays[1] > delays[0] == delays[2]


def test_no_section_is_placed_on_more_pcus_than_the_place_limit():
    """docs/rdu.md, "Allocation": at most floor(pcu_place_limit x P) PCUs a section, never fewer than one per
    operator; the limit moves the highest share the compiler reports."""
    tops = []
    for limit in (1.0, 0.8, 0.5):
        spec = spec_for("sn30", training=True, fusion="o3", n_layers=2, pcu_place_limit=limit)
        prog = compile_program(spec)
        held = [sum(s.pcus for s in sec.stages if s.op.kind != "collective") for sec in prog.sections
                if not sec.name.endswith(("optimizer", "allreduce"))]
        assert max(held) == math.floor(Fraction(str(limit)) * spec.pcus)  # the head fills what it may
        tops.append(max(held))
    assert tops == [1280, 1024, 640]
    # a limit below one PCU per operator leaves each operator one
    tiny = spec_for("sn30", fusion="o3", n_layers=1, pcus=8, pcu_place_limit=0.01, vocab_size=0, tile_tokens=4096)
    for sec in compile_program(tiny).sections:
        compute = [s for s in sec.stages if s.op.kind != "collective"]
        assert all(s.pcus >= 1 for s in compute)
        assert sum(s.pcus for s in compute) <= max(len(compute), math.floor(0.01 * 8))
