"""Precision is compute as well as bytes, on every machine: fp32 runs at machine.fp32_rate of the
16-bit peak, tf32 computes as fp32 (none of the machines has tensor cores for it), fp8 at the
16-bit rate with half the bytes (docs/mesh.md via docs/guide.md, docs/rdu.md, docs/ipu.md)."""

from fractions import Fraction

import numpy as np
import pytest

from kernels import mesh as KM
from meshsim.ipu.compiler import compile_program as ipu_compile
from meshsim.ipu.compiler import spec_of
from meshsim.mesh.pipeline import build
from meshsim.rdu.compiler import compile_program, spec_for
from meshsim.roofline import platform_of
from meshsim.scenario import scenario_from_dict
from meshsim.transformer import Model, compute_rate, operators


def test_the_rate_is_the_fp32_rate_for_fp32_and_tf32_alone():
    assert compute_rate("fp32", 0.25) == compute_rate("tf32", 0.25) == Fraction(1, 4)
    assert compute_rate("bf16", 0.25) == compute_rate("fp16", 0.25) == compute_rate("fp8", 0.25) == 1
    assert compute_rate("fp32", 0.3) == Fraction(3, 10)  # exact, from the decimal digits


def _rdu_stages(**kw):
    # a DDR fast enough that no section waits on it: the PCUs go by FLOPs alike at every precision
    spec = spec_for("sn30", hidden_size=1024, n_heads=16, n_layers=1, seq_len=256, batch=2, fusion="o0",
                    elastic_pmus=False, ddr_bandwidth_gbps=1e6, **kw)
    prog = compile_program(spec)
    return spec, {s.op.name: s for sec in prog.sections for s in sec.stages}


def test_rdu_fp32_halves_the_pcus_rate_and_tf32_is_fp32():
    spec16, bf16 = _rdu_stages(precision="bf16")
    spec32, fp32 = _rdu_stages(precision="fp32")
    _, tf32 = _rdu_stages(precision="tf32")
    _, fp8 = _rdu_stages(precision="fp8")
    d = spec16.pcu_stages
    for name, s in bf16.items():
        if s.op.kind == "collective" or not s.c_hi:
            continue
        assert fp32[name].pcus == s.pcus, name
        # c(x) - D: the compute part doubles (to within the ceiling)
        assert fp32[name].c_hi - d in (2 * (s.c_hi - d) - 1, 2 * (s.c_hi - d)), name
        assert (tf32[name].c_hi, tf32[name].c_lo, tf32[name].dur) == (fp32[name].c_hi, fp32[name].c_lo,
                                                                       fp32[name].dur)
        assert fp8[name].c_hi == s.c_hi  # no fp8 units: the 16-bit rate
    assert spec32.peak_flops_per_cycle == spec16.peak_flops_per_cycle / 2
    _, slower = _rdu_stages(precision="fp32", fp32_rate=0.25)
    gemm = next(n for n, s in bf16.items() if s.op.kind == "gemm")
    assert slower[gemm].c_hi > fp32[gemm].c_hi


def test_ipu_fp32_runs_its_gemms_at_a_quarter_of_the_16_bit_rate():
    def values(precision):
        sc = scenario_from_dict({"machine": {"type": "ipu", "preset": "gc200", "gemm_block": 32},
                                 "workload": {"type": "transformer", "hidden_size": 256, "n_layers": 1,
                                              "n_heads": 4, "seq_len": 128, "batch": 2, "precision": precision}})
        return sc.values

    progs = {p: ipu_compile(spec_of(values(p))) for p in ("bf16", "fp32", "tf32")}
    names = [t.name for t in progs["bf16"].templates]
    for i, name in enumerate(names):
        a, b, c = (progs[p].templates[i] for p in ("bf16", "fp32", "tf32"))
        assert b.compute == c.compute  # tf32 computes as fp32
        if "qkv_proj" in name or "ffn_up" in name:
            assert 3.9 * a.compute <= b.compute <= 4 * a.compute + 64, name
    assert platform_of(values("fp32")).peak_flops == pytest.approx(platform_of(values("bf16")).peak_flops / 4)


def test_mesh_fp32_doubles_a_pes_work_per_task():
    def table(precision, compute=False, **machine):
        sc = scenario_from_dict({"run": {"cycles": 100}, "machine": {"rows": 20, "cols": 20, **machine},
                                 "migration": {"policy": "none"},
                                 "workload": {"type": "layer_pipeline", "hidden_size": 64, "n_layers": 1,
                                              "n_heads": 2, "seq_len": 16, "batch": 1, "tokens_per_chunk": 4,
                                              "precision": precision, "vocab_size": 0, "accumulate": "same"}})
        p = build(sc)
        return p.table[:, KM.REG_WORK] if not compute else np.array(p.compute_cycles)

    bf16, fp32, tf32 = table("bf16"), table("fp32"), table("tf32")
    assert np.array_equal(fp32, tf32)
    # half the SIMD rate, and twice the operand bytes through the same SRAM ports
    assert np.all(fp32 >= 2 * bf16 - 1) and np.all(fp32 <= 2 * bf16)
    # fp8 computes at 16 bits: a matrix kernel writes 16-bit partial sums as bf16 does, and only the
    # residual adds, which read and write fp8 elements, go faster
    fp8 = table("fp8")
    assert np.all(fp8 <= bf16) and fp8[1] == bf16[1]  # the attention kernel
    # fp32 at the full SIMD rate is still held by the SRAM ports; with ports twice as wide it computes
    # as fast as bf16 (its partial sums, twice the wavelets, may then hold a kernel longer)
    assert np.all(table("fp32", fp32_rate=1.0) >= 1.9 * bf16)  # (LayerNorm and GeLU run at the SIMD rate)
    wide = table("fp32", True, fp32_rate=1.0, sram_read_bytes_per_cycle=32, sram_write_bytes_per_cycle=16)
    assert np.allclose(wide, table("bf16", True))


def test_mesh_fp32_partial_sums_halve_a_gemms_rate_and_double_its_reduction():
    """workload.accumulate = "fp32" (16-bit multiplies, fp32 additions: the WSE's @fmachs): per
    multiply-add a matrix operator reads its 16-bit weight and a 4-byte partial sum and writes 4 bytes,
    so the WSE-2's ports (two 64-bit reads, one 64-bit write a cycle) allow 2 multiply-adds a cycle
    where 16-bit partial sums allow the SIMD's 4; and the partial sums cross the lines at 4 bytes."""
    from meshsim.mesh.pipeline import pe_rate

    qkv = next(op for op in operators(Model(64, 1, 2, 16, 1)) if op.name == "layer0.qkv_proj")
    assert pe_rate(qkv, 2, 2, 8.0, 16, 8) == (8.0, "simd")
    assert pe_rate(qkv, 2, 4, 8.0, 16, 8) == (4.0, "sram_write")

    def pipe(accumulate):
        return build(scenario_from_dict({
            "run": {"cycles": 100}, "machine": {"rows": 20, "cols": 20}, "migration": {"policy": "none"},
            "workload": {"type": "layer_pipeline", "hidden_size": 64, "n_layers": 1, "n_heads": 2, "seq_len": 16,
                         "batch": 1, "tokens_per_chunk": 4, "vocab_size": 0, "accumulate": accumulate}}))

    same, fp32 = pipe("same"), pipe("fp32")
    assert np.array_equal(same.table[:, KM.REG_HEIGHT], fp32.table[:, KM.REG_HEIGHT])  # the same placement
    red_same, red_fp32 = np.array(same.reduce_wavelets), np.array(fp32.reduce_wavelets)
    assert (red_same > 0).any() and np.all(red_fp32 >= 2 * red_same - 1) and np.all(red_fp32 <= 2 * red_same)
    # the first kernel (ln1, then qkv_proj) takes qkv_proj's part twice as long
    ln1 = next(op for op in operators(Model(64, 1, 2, 16, 1)) if op.name == "layer0.ln1")
    n = int(same.table[0, KM.REG_HEIGHT] * same.table[0, KM.REG_WIDTH])
    share = 4 / 16
    assert same.compute_cycles[0] == pytest.approx((ln1.flops / 8 + qkv.flops / 8) * share / n)
    assert fp32.compute_cycles[0] == pytest.approx((ln1.flops / 8 + qkv.flops / 4) * share / n)


# ---- mixed precision: fp32 master weights and the optimiser's update


def test_the_update_holds_and_moves_what_its_optimiser_and_master_weights_need():
    from meshsim.transformer import update_cost

    # bf16 compute, fp32 master weights, Adam: 4 + 8 bytes held beside the 2-byte weights; the
    # gradient (2), master (4) and moments (8) read; master, moments and the bf16 copy written
    assert update_cost("bf16", "fp32", "adam") == dict(held=12, read=14, written=14, flops=12)
    assert update_cost("bf16", "same", "adam") == dict(held=8, read=12, written=10, flops=12)
    assert update_cost("bf16", "same", "sgd") == dict(held=0, read=4, written=2, flops=2)
    assert update_cost("fp32", "same", "sgd") == dict(held=0, read=8, written=4, flops=2)
    assert update_cost("bf16", "fp32", "none") == dict(held=0, read=0, written=0, flops=0)


@pytest.mark.parametrize("workload, says", [
    (dict(optimizer="adam"), "workload.optimizer = \"adam\": applies only with training"),
    (dict(training=True, master_weights="fp32"), "workload.master_weights = \"fp32\": needs an optimizer"),
    (dict(training=True, optimizer="adam", master_weights="fp32", precision="fp32"), "is 4 bytes already"),
    (dict(precision="bf16-mixed"), "workload.master_weights = \"fp32\" with an optimizer"),
])
def test_a_mixed_precision_setting_that_cannot_be_is_refused_by_name(workload, says):
    from meshsim.errors import InputError

    with pytest.raises(InputError) as e:
        scenario_from_dict({"machine": {"type": "rdu"}, "workload": {"type": "transformer", **workload}})
    assert says in "\n".join(e.value.problems)


def test_the_rdu_ends_a_training_step_with_the_update_streamed_through_ddr():
    """docs/rdu.md, "The chip programs": one update section per chip, its tiles' bytes and PCU cycles
    by hand; fp32 master weights move more bytes and compute at the fp32 rate."""
    from meshsim.rdu.sim import RduSim

    kw = dict(hidden_size=256, n_heads=4, n_layers=2, seq_len=128, batch=2, training=True, fusion="o1",
              vocab_size=0)
    runs = {}
    for opt, master in (("none", "same"), ("adam", "same"), ("adam", "fp32")):
        spec = spec_for("sn10", optimizer=opt, master_weights=master, **kw)
        prog = compile_program(spec)
        sim = RduSim(prog)
        sim.run()
        runs[opt, master] = (spec, prog, sim.cycle)
    spec, prog, _ = runs["adam", "fp32"]
    sec = prog.sections[-1]
    assert sec.name == "chip0:optimizer" and prog.instance[0, prog.n_instances[0] - 1, 0] == len(prog.sections) - 1
    weights = sum(op.weight_bytes for op in operators(Model(256, 2, 4, 128, 2), training=False))
    params = -(-weights // 2)
    tiles = -(-params // (spec.tile_tokens * 256))
    per = -(-params // tiles)
    assert (sec.tiles, sec.load_bytes, sec.store_bytes) == (tiles, -(-14 * params // tiles), -(-14 * params // tiles))
    d, p = spec.pcu_stages, spec.pcus
    # fp32 arithmetic at fp32_rate = 1/2 of the PCUs' 16-bit rate
    assert sec.stages[0].c_hi == -(-12 * per * 2 // (p * spec.pcu_lanes * 2 * d)) + d
    assert runs["none", "same"][2] < runs["adam", "same"][2] < runs["adam", "fp32"][2]


def test_the_wafer_keeps_the_master_weights_and_state_in_the_pes_sram():
    from meshsim.errors import InputError

    def sc(**w):
        return scenario_from_dict({"run": {"cycles": 100}, "machine": {"rows": 60, "cols": 60},
                                   "migration": {"policy": "none"},
                                   "workload": {"type": "layer_pipeline", "hidden_size": 768, "n_layers": 2,
                                                "n_heads": 4, "seq_len": 64, "batch": 1, "training": True,
                                                "vocab_size": 0, **w}})

    plain = build(sc())
    # SGD keeps no state and no master copy: the wafer is laid out as without an update
    assert np.array_equal(build(sc(optimizer="sgd")).table, plain.table)
    with pytest.raises(InputError, match="12 bytes a parameter of master weights and state"):
        build(sc(optimizer="adam", master_weights="fp32"))
