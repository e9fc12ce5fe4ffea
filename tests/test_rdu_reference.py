"""The RDU kernel against its plain reference (docs/rdu.md), cycle by cycle, and the reference
against counts worked out by hand.

Hand-built programs: unless a test says otherwise the DDR moves 1 byte per cycle
(ddr_bytes_per_kcycle = 1024) in bursts of 100 bytes, so a burst of b bytes takes b cycles.
"""

import re
import types
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kernels import rdu as K
from kernels.reference import rdu_ref
from kernels.reference.rdu_ref import simulate
from meshsim.errors import InputError
from meshsim.rdu import RduSim, compile_program, spec_for

NOD = (0, -1, -1, 0)

LAYOUT = re.compile(r"^(ST|SE|IN|SR|PH|STREAM)_[A-Z0-9_]+$|^N_(ST|SE|IN|SR)$")


def test_the_documented_table_layout_is_the_oracles_and_the_kernels():
    """docs/rdu.md numbers the columns of the program tables and of the observables; the reference
    keeps its own copy of those numbers (it imports nothing of the kernel), so the doc, the
    reference and the kernel must agree, name by name."""
    doc = (Path(__file__).resolve().parents[1] / "docs" / "rdu.md").read_text()
    documented = {name: int(value) for name, value in re.findall(r"`([A-Z][A-Z0-9_]*) = (\d+)`", doc)
                  if LAYOUT.match(name)}
    oracle = {name: getattr(rdu_ref, name) for name in dir(rdu_ref) if LAYOUT.match(name)}
    kernel = {name: getattr(K, name) for name in dir(K) if LAYOUT.match(name)}
    assert len(documented) == 39
    assert oracle == documented
    assert kernel == documented


def stage(kind=0, nhi=4, nlo=0, chi=None, clo=0, dur=10, pcu0=0):
    row = [0] * K.N_ST
    row[K.ST_KIND], row[K.ST_NHI], row[K.ST_NLO] = kind, nhi, nlo
    row[K.ST_CHI] = dur if chi is None else chi
    row[K.ST_CLO], row[K.ST_DUR], row[K.ST_PCU0], row[K.ST_PMUS] = clo, dur, pcu0, 1
    return row


def program(sections, chips, buffer_tiles=1, switch=5, prefetch=0, burst=100, per_kcycle=1024):
    """sections: (stages, M, ld, sd, R, prefetch cap, pmus) each; chips: per chip a list of
    (template, dep chip, dep instance, delay)."""
    stages, table = [], []
    for rows, m, ld, sd, r, cap, pmus in sections:
        table.append([len(stages), len(rows), m, ld, sd, r, cap, pmus])
        stages += rows
    width = max(1, max(len(c) for c in chips))
    inst = np.full((len(chips), width, K.N_IN), -1, np.int64)
    inst[:, :, K.IN_SECTION] = 0
    inst[:, :, K.IN_DELAY] = 0
    for c, items in enumerate(chips):
        for i, item in enumerate(items):
            inst[c, i] = item
    return types.SimpleNamespace(
        stage=np.array(stages, np.int64).reshape(-1, K.N_ST), section=np.array(table, np.int64).reshape(-1, K.N_SE),
        instance=inst, n_instances=np.array([len(c) for c in chips], np.int64), buffer_tiles=buffer_tiles,
        switch_cycles=switch, prefetch=prefetch, burst_bytes=burst, ddr_bytes_per_kcycle=per_kcycle)


ONE = ([stage()], 1, 100, 100, 200, 200, 3)
TWO = ([stage(dur=20), stage(dur=30, nhi=3, nlo=2, chi=25, clo=12, pcu0=4)], 3, 10, 10, 0, 0, 2)
COLLECTIVE = ([stage(kind=1, nhi=0, chi=0, dur=50)], 1, 0, 0, 0, 0, 0)

# (name, program, cycles worked out by hand)
HAND = [
    # switch 5; weights burst 100 (5..104); the load (105..204) comes before the second weights
    # burst by round robin (205..304); the stage (305..314); the store (315..414).
    ("one stage", program([ONE], [[NOD]]), 415),
    ("two stages, one buffer", program([TWO], [[NOD]], switch=0), 170),
    ("two stages, double buffer", program([TWO], [[NOD]], buffer_tiles=2, switch=0), 130),
    ("collective, no DDR", program([COLLECTIVE], [[NOD]], switch=3), 54),
    ("two instances", program([ONE], [[NOD, NOD]], switch=10), 840),
    ("two instances, prefetch", program([ONE], [[NOD, NOD]], switch=10, prefetch=1), 810),
    # chip 0 finishes at 50 (its tile loads in cycle 0, the stage runs 1..50); chip 1 may run from
    # 50 + 7 + 1 = 58 and finishes at 108.
    ("dependency", program([COLLECTIVE], [[NOD], [(0, 0, 0, 7)]], switch=0), 109),
    # chip 0 finishes instance 0 at 55 (switch 0..4, its tile loads in 5, the stage runs 6..55) and
    # its next switch ends at 60, an event of the kernel at cycle 61 = 55 + 6; chip 1 may run only
    # from 62 (finish 112).
    ("dependency ready after another event", program([COLLECTIVE], [[NOD, NOD], [(0, 0, 0, 6)]]), 113),
    ("dependency, DDR", program([ONE], [[NOD], [(0, 0, 0, 7)]]), 832),
    ("dependency, mixed", program([ONE, COLLECTIVE], [[(1, -1, -1, 0)], [(0, 0, 0, 7)]]), 473),
    # a prefetch burst for the next instance lands after the switch and counts for it
    ("prefetch across the switch", program([([stage(dur=50)], 1, 0, 0, 100, 100, 1)], [[NOD, NOD]], switch=0,
                                           prefetch=1), 250),
    ("no prefetch across the switch", program([([stage(dur=50)], 1, 0, 0, 100, 100, 1)], [[NOD, NOD]], switch=0),
     300),
    ("bursts of a tile", program([([stage(dur=10)], 2, 250, 150, 0, 0, 1)], [[NOD]], buffer_tiles=2, switch=0),
     810),
]


@pytest.mark.parametrize("name, prog, cycles", HAND, ids=[h[0] for h in HAND])
def test_the_reference_gives_the_hand_counted_cycles(name, prog, cycles):
    assert simulate(prog)["cycles"] == cycles


def test_the_reference_counts_busy_wait_and_latency_of_one_stage():
    r = simulate(program([ONE], [[NOD]]))
    s = r["series"][:, 0]
    assert r["busy"][0, 0, 0].tolist() == [10, 0]
    assert s[:, K.SR_BUSY_PCUS].sum() == 40  # 4 PCUs for 10 cycles
    assert s[:, K.SR_DDR_BUSY].sum() == 400 and r["ddr_bytes"].tolist() == [400]
    assert s[:, K.SR_DDR_WAIT].sum() == 400  # weights, load and store, while no stage computes
    # WAIT ends in step A of cycle 5 (no dependency), so no cycle is observed in it.
    assert np.bincount(s[:, K.SR_PHASE]).tolist() == [5, 0, 410]
    assert r["tile_latency"].tolist() == [414 - 105]


def test_a_program_without_instances_has_no_cycles():
    assert simulate(program([ONE], [[], []]))["cycles"] == 0
    sim = RduSim(program([ONE], [[], []]))
    assert sim.run()[0].size == 0 and sim.cycle == 0


def compare(prog, chunk=7):
    """Run the kernel in chunks of `chunk` intervals and the reference; assert every output equal."""
    sim = RduSim(prog, chunk=chunk)
    starts, cycles, series, stage_busy = sim.run()
    ref = simulate(prog)
    assert sim.cycle == ref["cycles"]
    assert starts.tolist() == (np.cumsum(cycles) - cycles).tolist()
    assert np.array_equal(np.repeat(series, cycles, axis=0), ref["series"])
    assert np.array_equal(np.repeat(stage_busy, cycles, axis=0), ref["stage_busy"][:, :, :stage_busy.shape[2]])
    assert np.array_equal(sim.finish, ref["finish"])
    assert np.array_equal(sim.busy, ref["busy"][:, :, :sim.busy.shape[2]])
    assert np.array_equal(sim.ddr_bytes, ref["ddr_bytes"])
    assert np.array_equal(sim.tile_latency, ref["tile_latency"])
    return sim


@pytest.mark.parametrize("name, prog, cycles", HAND, ids=[h[0] for h in HAND])
def test_the_kernel_matches_the_reference_on_hand_programs(name, prog, cycles):
    assert compare(prog).cycle == cycles


TINY = dict(hidden_size=32, n_heads=2, seq_len=16, batch=2, n_layers=2, pcus=16, pmus=16, pmu_kib=4,
            section_switch_cycles=50, ddr_burst_kib=1, tile_tokens=8, interconnect_latency_cycles=20,
            vocab_size=40)


@pytest.mark.parametrize("fusion", ["o0", "o1", "o3"])
@pytest.mark.parametrize("training", [False, True])
@pytest.mark.parametrize("prefetch", [False, True])
def test_the_kernel_matches_the_reference_on_compiled_models(fusion, training, prefetch):
    compare(compile_program(spec_for("sn10", fusion=fusion, training=training, prefetch=prefetch, **TINY)))


@pytest.mark.parametrize("parallelism, microbatches", [("T2P1D1", 1), ("T1P2D1", 2), ("T2P2D2", 2), ("T1P3D1", 3)])
def test_the_kernel_matches_the_reference_on_several_chips(parallelism, microbatches):
    spec = spec_for("sn10", fusion="o1", training=True, parallelism=parallelism, microbatches=microbatches,
                    **{**TINY, "batch": 12, "n_layers": 3})
    compare(compile_program(spec))


def test_the_kernel_matches_the_reference_when_sections_spill():
    spec = spec_for("sn10", fusion="o0", **{**TINY, "pmus": 3, "pmu_kib": 2})
    prog = compile_program(spec)
    assert any(s.spilled_bytes for s in prog.sections)
    compare(prog)


RANDOM_MODELS = st.fixed_dictionaries(dict(
    hidden=st.sampled_from([16, 24, 32, 48]), layers=st.integers(1, 3), seq=st.sampled_from([8, 16]),
    tile=st.sampled_from([4, 8]), fusion=st.sampled_from(["o0", "o1", "o3"]), training=st.booleans(),
    prefetch=st.booleans(), elastic=st.booleans(), pcus=st.integers(2, 24), pmus=st.integers(4, 24),
    buffers=st.integers(1, 3), switch=st.integers(0, 40), burst=st.integers(1, 3),
    bw=st.sampled_from([3.0, 20.0, 150.0]), par=st.sampled_from(["T1P1D1", "T2P1D1", "T1P2D1", "T2P2D2"])))


def compare_random_model(hidden, layers, seq, tile, fusion, training, prefetch, elastic, pcus, pmus, buffers,
                         switch, burst, bw, par):
    p = int(par[3])
    spec = spec_for("sn10", hidden_size=hidden, n_heads=2, seq_len=seq, batch=4, n_layers=max(layers, p),
                    fusion=fusion, training=training, prefetch=prefetch, elastic_pmus=elastic, pcus=pcus,
                    pmus=pmus, pmu_kib=4, buffer_tiles=buffers, section_switch_cycles=switch, ddr_burst_kib=burst,
                    ddr_bandwidth_gbps=bw, tile_tokens=tile, parallelism=par, microbatches=2,
                    interconnect_latency_cycles=10)
    try:
        prog = compile_program(spec)
    except InputError:  # a layout the chip cannot hold is refused, as a run would refuse it
        return
    compare(prog, chunk=5)


# A few random models in the default run (hypothesis draws new ones each run); many under -m slow.
@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(RANDOM_MODELS)
def test_the_kernel_matches_the_reference_on_random_models(model):
    compare_random_model(**model)


@pytest.mark.slow
@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(RANDOM_MODELS)
def test_the_kernel_matches_the_reference_on_many_random_models(model):
    compare_random_model(**model)
