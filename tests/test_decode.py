"""The mesh's decode workload (docs/decode.md): the cache's policies, the run, its file and summary,
its refusals, and each token's cycles against the reference."""

import json
import subprocess
import sys
from fractions import Fraction
from pathlib import Path

import h5py
import numpy as np
import pytest

import meshsim
from kernels.reference import decode_ref as R
from meshsim.errors import InputError
from meshsim.mesh.decode import decode_spec, spread
from meshsim.scenario import load_scenario

ROOT = Path(__file__).resolve().parents[1]

#: A small model on a 12 x 12 region: H 96, 4 heads of 24 (2 key-value), a gated MLP of 256, 3 layers; its
#: PEs' 6 KiB fill after a few dozen tokens, and the prompt is prefilled on a 24 x 24 region beside it.
SMALL = ("machine.type=mesh", "machine.rows=12", "machine.cols=12", "migration.policy=none", "workload.type=decode",
         "workload.hidden_size=96", "workload.n_layers=3", "workload.n_heads=4", "workload.n_kv_heads=2",
         "workload.ffn_width=256", "workload.mlp=gated", "workload.bias=false", "workload.batch=1",
         "workload.context=30", "workload.output_tokens=12", "machine.sram_kib=6", "workload.prefill_region=24")


def spec_of(*overrides):
    return decode_spec(load_scenario(None, [*SMALL, *overrides], text=""))


def test_the_prompt_is_spread_evenly_and_shift_keeps_the_rows_within_a_token():
    assert spread(5, 12).tolist() == [2, 2, 2, 3, 3]
    spec = spec_of()
    from meshsim.mesh.decode import add_token

    rows, moved = add_token(spec, spread(12, 30))  # 2 a row, the last 6 rows 3: the new token ends in row 5
    assert rows.tolist() == spread(12, 31).tolist()
    # rows 6-11 each pass one entry up, so every boundary from row 11 up to row 6 carries one token
    assert moved == 6
    three, _ = add_token(spec_of("machine.rows=3", "machine.cols=3", "workload.context=4", "machine.sram_kib=512"),
                         spread(3, 4))
    assert three.tolist() == [1, 2, 2]
    append = spec_of("workload.kv_policy=append")
    rows, moved = add_token(append, spread(12, 30))
    assert rows.tolist() == [2] * 6 + [3] * 5 + [4] and moved == 0


def test_memory_the_row_capacity_and_the_longest_context():
    spec = spec_of()
    # dp 8, qp ceil((96 + 2 x 48) / 12) = 16, fp 22, kp 4, g 2: per layer 8x16 + 64 + 8x2x22 + 22x8 + 16
    assert (spec.dp, spec.qp, spec.fp, spec.kp) == (8, 16, 22, 4)
    assert spec.weight_bytes_per_pe == 3 * (128 + 64 + 352 + 176 + 16) * 2
    assert spec.token_bytes_per_pe == 2 * 4 * 3 * 2
    assert spec.row_capacity == (6144 - spec.weight_bytes_per_pe) // 48 == 36
    assert spec.longest_context() == 12 * 36
    assert spec_of("workload.kv_policy=append").longest_context() == int(spread(12, 30)[:-1].sum()) + 36


def test_a_run_writes_its_tokens_and_each_token_is_the_reference_s(tmp_path):
    res = meshsim.run({}, list(SMALL), out=tmp_path / "d.h5")
    s = res.summary
    assert s["decode_tokens"] == s["completed"] == 12 and s["decode_context_end"] == 42 and not s["decode_cache_full"]
    spec = spec_of()
    rate = Fraction(8, 2)
    with h5py.File(tmp_path / "d.h5") as f:
        t = {k: f[f"tokens/{k}"][()] for k in ("cycles", "layer_cycles", "shift_cycles", "start_cycle", "context")}
        cache = f["occupancy/cache_tokens"][()]
        busy = f["units/busy_cycles"][()]
        assert f.attrs["complete"] and busy.shape == (12, 12)
    assert t["context"].tolist() == list(range(31, 43))
    assert (t["cycles"] == t["layer_cycles"] + t["shift_cycles"]).all()
    assert t["start_cycle"].tolist() == np.concatenate([[0], np.cumsum(t["cycles"])[:-1]]).tolist()
    assert s["cycles"] == int(t["cycles"].sum())
    for i in (0, 5, 11):  # the reference, from the cache's rows of that token
        ref = R.token(12, 96, 96 + 2 * 48, 256, True, 4, 3, cache[i].tolist(), spec.group, 1, 1, spec.phase, rate)
        assert ref["cycles"] == t["layer_cycles"][i]
    assert s["time_per_token_ms_mean"] == pytest.approx(t["cycles"].mean() / 1.1e6)
    assert s["cycles_per_layer"] == pytest.approx(t["layer_cycles"].mean() / 3)
    assert s["cache_li"] == pytest.approx(cache[-1].mean() / cache[-1].max())
    # report judges the LI of the PEs' local work, recomputed from the file
    assert res.report()["whole"]["li"] == pytest.approx(s["li"])


def test_the_policies_move_the_longest_context_and_append_stops_when_the_tail_is_full(tmp_path):
    shift = meshsim.run({}, [*SMALL, "workload.output_tokens=40"], out=tmp_path / "s.h5").summary
    append = meshsim.run({}, [*SMALL, "workload.output_tokens=40", "workload.kv_policy=append"],
                         out=tmp_path / "a.h5").summary
    assert shift["decode_tokens"] == 40 and shift["cache_li"] > 0.9 and shift["migrated"] > 0
    # the last row starts with 3 of its 36 and takes every new token: 33 tokens, then the cache is full
    assert append["decode_tokens"] == 33 and append["decode_cache_full"] and append["refused"] == 7
    assert append["cache_max_row_tokens"] == 36 and append["cache_li"] < 0.5
    assert append["decode_longest_context"] < shift["decode_longest_context"]
    # the tail's growing row lengthens the attention's messages: later tokens take longer
    with h5py.File(tmp_path / "a.h5") as f:
        cycles = f["tokens/layer_cycles"][()]
    assert (np.diff(cycles) >= 0).all() and cycles[-1] > cycles[0]


def test_a_run_is_the_same_on_one_thread_and_two(tmp_path):
    one = meshsim.run({}, [*SMALL, "workload.context=3"], out=tmp_path / "1.h5", threads=1)  # rows without tokens
    two = meshsim.run({}, [*SMALL, "workload.context=3"], out=tmp_path / "2.h5", threads=2)
    with h5py.File(tmp_path / "1.h5") as a, h5py.File(tmp_path / "2.h5") as b:
        assert (a["tokens/cycles"][()] == b["tokens/cycles"][()]).all()
    assert one.summary["cycles"] == two.summary["cycles"]


@pytest.mark.parametrize("override,message", [
    ("machine.cols=13", "machine.cols = 13: must equal machine.rows = 12: decode runs on a square region"),
    ("workload.training=true", "workload.training = true: must be false for decode"),
    ("workload.n_layers=12", "machine.rows = 12: the weights of 12 layer(s) need 17,664 bytes on each PE of a "
                             "12 x 12 region"),
    ("workload.decode_regions=4", "workload.decode_regions = 4: must be at most workload.n_layers = 3"),
    ("workload.context=500", "workload.context = 500: the first token's cache needs 42 tokens on a row, and a "
                             "row has room for 36"),
    ("workload.prefill_region=12", "workload.prefill_region = 12: the prefill needs 6,314 bytes on each PE of a 12 "
                                   "x 12 region"),
    ("machine.route_budget=12", "machine.route_budget = 12: must be an integer in [13, 4096] (routes)"),
    ("workload.decode_tree_levels=0", "workload.decode_tree_levels = 0: must be an integer in [1, 8] (levels)"),
])
def test_bad_decode_scenarios_are_refused_naming_the_key(tmp_path, override, message):
    (tmp_path / "d.toml").write_text("")
    p = subprocess.run([sys.executable, "-m", "meshsim", "validate", "d.toml", *SMALL, override], capture_output=True,
                       text=True, cwd=tmp_path)
    assert p.returncode == 2 and "Traceback" not in p.stderr, p.stderr
    assert message in p.stderr


def test_the_shipped_scenario_is_valid_and_says_what_the_cache_holds(tmp_path):
    p = subprocess.run([sys.executable, "-m", "meshsim", "validate", ROOT / "scenarios" / "wse2_llama3_8b_decode.toml"],
                       capture_output=True, text=True, cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert "region 660 x 660, decode of 128 tokens after 4,095, cache shift; the cache holds at most 28,380" in p.stdout
    with pytest.raises(InputError, match='must be one of "shift", "append"'):
        load_scenario(ROOT / "scenarios" / "wse2_llama3_8b_decode.toml", ["workload.kv_policy=paged"])


@pytest.mark.parametrize("extra", [
    (),
    ("workload.context=0",),
    ("workload.n_layers=5", "workload.decode_regions=2"),
    ("workload.n_layers=5", "workload.decode_regions=0", "machine.sram_kib=5"),
    ("workload.prefill_region=16", "workload.context=50"),
    ("workload.batch=3", "machine.sram_kib=12"),
    ("workload.batch=2", "workload.n_layers=5", "workload.decode_regions=0", "machine.sram_kib=7"),
    ("workload.prefill_region=0", "machine.sram_kib=48", "workload.decode_group=5"),
    ("workload.prefill_region=9", "machine.sram_kib=48", "workload.context=7", "machine.hop_latency_cycles=2",
     "workload.mlp=gelu", "workload.n_kv_heads=4"),
    ("workload.decode_tree_levels=3",),
    ("workload.decode_tree_levels=3", "machine.route_budget=29", "workload.decode_group=2"),
    ("workload.decode_tree_levels=1",),
    ("machine.route_budget=13",),
], ids=["beside", "no-prompt", "two-regions", "fewest-regions", "larger-prompt", "batch", "batch-regions",
        "same-region", "smaller-region", "three-levels-relayed", "three-levels", "one-level", "relayed"])
def test_the_prefill_is_the_reference_s(extra):
    from kernels.reference.prefill_ref import simulate_prefill

    sc = load_scenario(None, [*SMALL, *extra], text="")
    spec = decode_spec(sc)
    pre, ref = spec.prefill, simulate_prefill(sc.values)
    assert pre.pp == ref["pp"] and list(pre.layer_steps) == ref["layer_steps"]
    assert (pre.cycles, pre.reshuffle, pre.ttft, pre.bytes_per_pe) == (
        ref["prefill_cycles"], ref["reshuffle_cycles"], ref["ttft_cycles"], ref["bytes_per_pe"])
    assert (spec.regions, list(spec.region_layers), pre.pass_cycles) == (ref["regions"], ref["layers"],
                                                                         ref["pass_cycles"])
    assert (pre.reshuffle == 0) == (pre.pp == 12 or spec.context == 0)


def test_a_run_gives_its_time_to_first_token_and_the_shipped_prefill_is_the_reference_s(tmp_path):
    from kernels.reference.prefill_ref import simulate_prefill

    s = meshsim.run({}, list(SMALL), out=tmp_path / "d.h5").summary
    pre = decode_spec(load_scenario(None, list(SMALL), text="")).prefill
    assert s["time_to_first_token_ms"] == pytest.approx(pre.ttft / 1.1e6) and s["prefill_region"] == 24
    assert s["prefill_cycles"] == 3 * s["prefill_cycles_per_layer"] and s["reshuffle_cycles"] > 0
    # the timeline: the prefill and the reshuffle, then the tokens after them
    from meshsim.export import export

    events = json.loads(export(tmp_path / "d.h5", out=tmp_path / "d.json").read_text())["traceEvents"]
    slices = {e["name"]: e for e in events if e["ph"] == "X"}
    assert {"prefill", "reshuffle", "token 0", "token 11"} <= set(slices)
    assert slices["token 0"]["ts"] == pytest.approx(round(pre.ttft / 1.1) / 1000)
    shipped = load_scenario(ROOT / "scenarios" / "wse2_llama3_8b_decode.toml")
    assert decode_spec(shipped).prefill.ttft == simulate_prefill(shipped.values)["ttft_cycles"] == 77_569_984


def test_a_model_over_several_regions_runs_them_one_after_another(tmp_path):
    # five layers over two regions: 3 and 2, each region's layers as one region's, a pass between them
    five = [*SMALL, "workload.n_layers=5", "workload.output_tokens=4"]
    spec = decode_spec(load_scenario(None, [*five, "workload.decode_regions=2"], text=""))
    assert spec.region_layers == (3, 2) and spec.pass_cycles == spec.phase + spec.dp + 12
    assert spec.weight_bytes_per_pe == 3 * (128 + 64 + 352 + 176 + 16) * 2  # the fuller region's three layers
    res = meshsim.run({}, [*five, "workload.decode_regions=2"], out=tmp_path / "r.h5")
    with h5py.File(tmp_path / "r.h5") as f:
        layers = f["tokens/layer_cycles"][()]
        cache = f["occupancy/cache_tokens"][()]
        busy = f["units/busy_cycles"][()]
    rate = Fraction(8, 2)
    for i in range(4):
        ref = sum(R.token(12, 96, 96 + 2 * 48, 256, True, 4, n, cache[i].tolist(), spec.group, 1, 1, spec.phase,
                          rate)["cycles"] for n in (3, 2))
        assert layers[i] == ref + spec.pass_cycles
    # a layer's mean time leaves the passes out
    assert res.summary["cycles_per_layer"] == pytest.approx((layers.sum() - 4 * spec.pass_cycles) / (4 * 5))
    # the busy map holds both regions' PEs; the second, with two layers of five, 2/3 of the first's work
    assert busy.shape == (24, 12) and res.summary["n_units"] == 2 * 144
    assert busy[12:].sum() * 3 == busy[:12].sum() * 2
    # 0: the fewest regions that hold the model with room for the first token
    auto = decode_spec(load_scenario(None, [*five, "workload.decode_regions=0"], text=""))
    assert auto.regions == 2
    with pytest.raises(InputError, match="machine.rows = 12: the weights of 5 layer"):
        decode_spec(load_scenario(None, [*five, "workload.decode_regions=1"], text=""))


def test_a_layers_time_splits_into_local_work_set_up_and_the_network(tmp_path):
    a = meshsim.run({}, list(SMALL), out=tmp_path / "a.h5").summary
    b = meshsim.run({}, [*SMALL, "machine.decode_phase_cycles=0"], out=tmp_path / "b.h5").summary
    parts = ("layer_local_fraction", "layer_setup_fraction", "layer_network_fraction")
    assert sum(a[k] for k in parts) == pytest.approx(1) and b["layer_setup_fraction"] == 0
    # the set-up is what the layers lose with it: 30 o a layer, on the path that finishes last
    with h5py.File(tmp_path / "a.h5") as fa, h5py.File(tmp_path / "b.h5") as fb:
        diff = fa["tokens/layer_cycles"][()] - fb["tokens/layer_cycles"][()]
    assert (diff == 3 * 30 * 252).all()
    assert a["layer_local_fraction"] < 0.2  # decode on the wafer waits on its collectives, not on arithmetic
    # K + 1 phases a collective: one level, 20 o a layer
    c = meshsim.run({}, [*SMALL, "workload.decode_tree_levels=1"], out=tmp_path / "c.h5").summary
    d = meshsim.run({}, [*SMALL, "workload.decode_tree_levels=1", "machine.decode_phase_cycles=0"],
                    out=tmp_path / "d.h5").summary
    assert c["cycles_per_layer"] - d["cycles_per_layer"] == 20 * 252
    assert c["layer_setup_fraction"] == pytest.approx(20 * 252 / c["cycles_per_layer"], rel=0.05)


# (the kernel meets the reference on every tree and budget in tests/test_decode_kernel.py; here the run's)
@pytest.mark.parametrize("levels,budget,group", [(3, 24, 2), (1, 24, 0)])
def test_trees_of_other_levels_and_relayed_levels_run_as_the_reference_says(tmp_path, levels, budget, group):
    tree = [f"workload.decode_tree_levels={levels}", f"machine.route_budget={budget}", f"workload.decode_group={group}"]
    s = meshsim.run({}, [*SMALL, *tree, "workload.output_tokens=2"], out=tmp_path / "t.h5").summary
    spec = spec_of(*tree)
    relayed = levels - (min(levels, (budget - 5) // 8))
    assert (s["decode_tree_levels"], s["decode_routes"], s["relayed_levels"]) == (levels, 8 * levels + 5, relayed)
    assert s["decode_group"] == spec.group == (group or 12)
    with h5py.File(tmp_path / "t.h5") as f:
        layers, cache = f["tokens/layer_cycles"][()], f["occupancy/cache_tokens"][()]
    for i in range(2):
        ref = R.token(12, 96, 96 + 2 * 48, 256, True, 4, 3, cache[i].tolist(), spec.group, 1, 1, spec.phase,
                      Fraction(4), levels=levels, route_budget=budget)
        assert layers[i] == ref["cycles"]


def test_a_level_without_routes_is_slower_than_with_them(tmp_path, capsys):
    # the same three-level tree, its top level relayed through the PEs between its members or routed past them
    base = [*SMALL, "workload.decode_tree_levels=3", "workload.decode_group=2", "workload.output_tokens=2"]
    relayed = meshsim.run({}, base, out=tmp_path / "r.h5").summary
    routed = meshsim.run({}, [*base, "machine.route_budget=29"], out=tmp_path / "o.h5").summary
    assert relayed["relayed_levels"] == 1 and routed["relayed_levels"] == 0
    assert relayed["cycles_per_layer"] > routed["cycles_per_layer"]
    # where a token's time goes: the relays' share is what the last token's layers lose to them
    with h5py.File(tmp_path / "r.h5") as fr, h5py.File(tmp_path / "o.h5") as fo:
        lr, lo = fr["tokens/layer_cycles"][-1], fo["tokens/layer_cycles"][-1]
    assert relayed["layer_relay_fraction"] == pytest.approx((lr - lo) / lr) and routed["layer_relay_fraction"] == 0
    parts = ("layer_local_fraction", "layer_setup_fraction", "layer_relay_fraction", "layer_network_fraction")
    assert sum(relayed[k] for k in parts) == pytest.approx(1)
    assert relayed["layer_network_fraction"] == pytest.approx(routed["layer_network_fraction"] * lo / lr)
    from meshsim.cli import main

    said = {}
    for name in ("r", "o"):
        assert main(["report", str(tmp_path / f"{name}.h5")]) == 0
        said[name] = capsys.readouterr().out
    assert f"relays {relayed['layer_relay_fraction']:.4g} (over routes)" in said["r"] and "relays" not in said["o"]


def test_regions_are_placed_in_shelves_on_the_presets_wafer():
    from meshsim.mesh.decode import wafers_needed

    assert wafers_needed([660], 757, 996) == 1
    assert wafers_needed([660, 700], 757, 996) == 2  # neither fits beside or above the other
    assert wafers_needed([420, 420, 660, 660], 757, 996) == 3  # the 420s share one
    assert wafers_needed([360] * 6, 757, 996) == 2  # two shelves of two: 720 rows, then a wafer more
    assert wafers_needed([300] * 6, 757, 996) == 1  # two shelves of three
    assert wafers_needed([800], 757, 996) == 0 and wafers_needed([], 757, 996) == 0
    # WSE-3's wider fabric holds a 660 and a 500 side by side
    assert wafers_needed([660, 500], 762, 1172) == 1 and wafers_needed([660, 500], 757, 996) == 2


def test_a_run_says_how_many_wafers_its_regions_take(tmp_path):
    s = meshsim.run({}, [*SMALL, "workload.output_tokens=1"], out=tmp_path / "a.h5").summary
    assert (s["wafers"], s["wafer_rows"], s["wafer_cols"]) == (1, 757, 996)
    big = [*SMALL, "machine.rows=600", "machine.cols=600", "workload.prefill_region=700", "workload.output_tokens=1",
           "machine.sram_kib=48"]
    s = meshsim.run({}, big, out=tmp_path / "b.h5").summary
    assert s["wafers"] == 2
    s = meshsim.run({}, [*big, "machine.preset=wse3"], out=tmp_path / "c.h5").summary
    assert (s["wafers"], s["wafer_cols"]) == (2, 1172)


def test_sequences_decode_together_each_step_b_times_one_sequences(tmp_path):
    three = [*SMALL, "workload.batch=3", "machine.sram_kib=12", "workload.output_tokens=4"]
    s = meshsim.run({}, three, out=tmp_path / "b.h5").summary
    spec = decode_spec(load_scenario(None, three, text=""))
    assert spec.batch == 3 and spec.token_bytes_per_pe == 3 * 2 * 4 * 3 * 2
    with h5py.File(tmp_path / "b.h5") as f:
        layers, cache = f["tokens/layer_cycles"][()], f["occupancy/cache_tokens"][()]
    for i in range(4):
        ref = R.token(12, 96, 96 + 2 * 48, 256, True, 4, 3, cache[i].tolist(), spec.group, 1, 1, spec.phase,
                      Fraction(4), batch=3)
        assert layers[i] == ref["cycles"]
    assert s["tokens_per_second_total"] == pytest.approx(3 * s["tokens_per_second"]) and s["sequences"] == 3


def test_a_generation_without_a_prompt_has_no_prefill_in_its_timeline(tmp_path):
    from meshsim.export import export

    meshsim.run({}, [*SMALL, "workload.context=0", "workload.output_tokens=3"], out=tmp_path / "z.h5")
    events = json.loads(export(tmp_path / "z.h5", out=tmp_path / "z.json").read_text())["traceEvents"]
    names = [e["name"] for e in events if e["ph"] == "X"]
    assert names == ["token 0", "token 1", "token 2"]
