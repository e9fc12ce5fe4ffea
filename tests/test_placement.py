"""Operator regions on the mesh (meshsim.mesh.placement): rectangles that tile each replica, areas in
proportion to FLOPs up to whole rows and columns, and clear errors when the grid is too small."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from meshsim.errors import InputError
from meshsim.mesh.placement import place, split, transformer_groups, weight_overflows
from meshsim.transformer import Model, operators


def test_split_gives_each_part_one_then_the_rest_by_largest_remainder():
    assert split(10, [1, 1]) == [5, 5]
    assert split(10, [3, 1]) == [7, 3]  # 8 in proportion 3:1 after one each: 6 and 2
    assert split(7, [1, 1, 1]) == [3, 2, 2]  # 4 left: 1.33 each; the remainder goes to the first
    assert split(3, [1000, 1, 1]) == [1, 1, 1]


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 500), st.lists(st.integers(1, 10**6), min_size=1, max_size=40))
def test_split_sums_to_the_total_keeps_one_each_and_is_within_one_of_proportional(extra, weights):
    total = len(weights) + extra
    parts = split(total, weights)
    assert sum(parts) == total and min(parts) >= 1
    rest = total - len(weights)
    exact = np.array(weights) / sum(weights) * rest
    assert np.all(np.abs(np.array(parts) - 1 - exact) < 1)


def test_split_refuses_fewer_units_than_parts():
    with pytest.raises(InputError, match="2 units cannot give each of 3 parts at least one"):
        split(2, [1, 1, 1])


@pytest.mark.parametrize("replicas", [1, 2, 3])
@pytest.mark.parametrize("training", [False, True])
def test_gpt2_small_tiles_each_replica_with_one_rectangle_per_operator(replicas, training):
    ops = operators(Model(hidden_size=768, n_layers=12, n_heads=12, seq_len=1024, batch=1), training)
    p = place(transformer_groups(ops), 757, 996, replicas)
    assert len(p.regions) == len(ops) * replicas
    labels = p.labels()
    band = 996 // replicas
    # Every PE of the replicas' bands belongs to exactly one region; the columns left over are idle.
    assert (labels[:, :band * replicas] >= 0).all() and (labels[:, band * replicas:] == -1).all()
    assert sum(g.n_pes for g in p.regions) == 757 * band * replicas
    assert p.idle_pes == 757 * (996 - band * replicas)
    for i, g in enumerate(p.regions):
        assert (labels[g.row0:g.row1, g.col0:g.col1] == i).all()
    # The big GEMMs get their FLOP share to within rounding: whole rows per band, whole columns per
    # operator, and the one column each tiny operator takes (measured: 0.975-1.037).
    q = p.quantisation()
    first = [g for g in p.regions if g.replica == 0]
    gemms = [i for i, g in enumerate(first) if g.name.split(".")[1] in ("qkv_proj", "ffn_up", "ffn_down")]
    assert all(abs(q[i] - 1) < 0.05 for i in gemms)
    # Replicas are the same layout shifted by a band.
    for g, h in zip(first, [g for g in p.regions if g.replica == replicas - 1], strict=True):
        assert (h.row0, h.row1, h.col0 - g.col0, h.col1 - g.col1) == (g.row0, g.row1, band * (replicas - 1),
                                                                       band * (replicas - 1))


def test_operators_of_a_layer_share_its_band_in_pipeline_order():
    ops = operators(Model(hidden_size=64, n_layers=2, n_heads=4, seq_len=32, batch=2))
    p = place(transformer_groups(ops), 40, 200)
    layer0 = [g for g in p.regions if g.group == 0]
    assert [g.name for g in layer0] == [op.name for op in ops if op.layer == 0]
    assert len({(g.row0, g.row1) for g in layer0}) == 1
    assert all(a.col1 == b.col0 for a, b in zip(layer0, layer0[1:], strict=False))


def test_a_grid_too_small_for_the_operators_is_an_input_error():
    ops = operators(Model(hidden_size=64, n_layers=4, n_heads=4, seq_len=32, batch=2))
    with pytest.raises(InputError, match=r"^machine.cols = 10: 2 replica\(s\) \(workload.replicas\) of 11 kernels "
                                         r"side by side need at least 22 columns; use a larger grid"):
        place(transformer_groups(ops), 8, 10, replicas=2)
    with pytest.raises(InputError, match=r"^machine.rows = 3: the 4 bands .* need at least 4 rows; use"):
        place(transformer_groups(ops), 3, 30)


def test_weights_that_overflow_their_region_are_named():
    ops = operators(Model(hidden_size=4096, n_layers=32, n_heads=32, seq_len=2048, batch=1))
    p = place(transformer_groups(ops), 757, 996)
    over = weight_overflows(p, {op.name: op.weight_bytes for op in ops}, sram_kib=48)
    # GEMM regions get PEs for their FLOPs, which grow with tokens, but hold the weights: with
    # 2,048 tokens every GEMM's weights fit its region on the 757 x 996 fabric.
    assert over == []
    few = place(transformer_groups(ops), 100, 200)
    over = weight_overflows(few, {op.name: op.weight_bytes for op in ops}, sram_kib=48)
    assert over and all(need > have for _, need, have in over)
    assert {g.name.split(".")[1] for g, _, _ in over} <= {"qkv_proj", "out_proj", "ffn_up", "ffn_down"}


def test_split_gives_a_part_its_bounds_and_the_others_the_rest_in_proportion():
    # unbounded, or bounds the shares meet: the plain split
    assert split(10, [3, 1], [1, 1], [None, None]) == split(10, [3, 1]) == [7, 3]
    assert split(10, [3, 1], [2, 3], [7, None]) == [7, 3]
    # a part short of its least gets it; the others share the rest (9 - 4 = 5: 1 each, then 3 by 2:1)
    assert split(9, [1, 2, 1], [4, 1, 1]) == [4, 3, 2]
    # a part over its most is cut to it, and what it leaves goes to the others
    assert split(12, [4, 1, 1], None, [3, None, None]) == [3, 5, 4]
    # least wins where the two cross
    assert split(10, [1, 1], [6, 1], [2, None]) == [6, 4]
    with pytest.raises(InputError, match="cannot give 2 parts the units they need"):
        split(5, [1, 1], [3, 3])


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 300), st.lists(st.tuples(st.integers(1, 10**5), st.integers(1, 30),
                                                st.one_of(st.none(), st.integers(1, 60))), min_size=2, max_size=12))
def test_split_within_bounds_sums_to_the_total(extra, parts):
    weights = [w for w, _, _ in parts]
    least = [lo for _, lo, _ in parts]
    most = [None] + [hi for _, _, hi in parts[1:]]  # one part unbounded above takes what is left
    total = sum(least) + extra
    got = split(total, weights, least, most)
    assert sum(got) == total
    assert all(g >= lo for g, lo in zip(got, least, strict=True))
    assert all(hi is None or g <= max(hi, lo) for g, lo, hi in zip(got, least, most, strict=True) if g > lo)


def test_a_region_gets_the_columns_its_weights_need():
    # b's FLOP share is 1 column of 10, but its 3 KiB need 3 columns of two 512-byte PEs
    p = place([[("a", 100), ("b", 1)]], 2, 10, need={"b": 3 * 1024}, pe_bytes=512)
    widths = {g.name: g.col1 - g.col0 for g in p.regions}
    assert widths == {"a": 7, "b": 3}
    assert not weight_overflows(p, {"b": 3 * 1024}, 0.5)
    plain = place([[("a", 100), ("b", 1)]], 2, 10).regions[1]
    assert plain.col1 - plain.col0 == 1  # without the need, its FLOP share


def test_a_turn_never_fans_out_and_a_kernel_without_a_matrix_takes_the_width_above():
    # band 0 ends with "y" (4 of 12 columns); band 1's first, "big", would take 10 by its FLOPs
    p = place([[("x", 2), ("y", 1)], [("big", 9), ("z", 1)]], 4, 12)
    w = {g.name: g.col1 - g.col0 for g in p.regions}
    assert w["y"] == 4 and w["big"] == 4 and w["z"] == 8
    # "n" (a norm, say) would take one column by its FLOPs; aligned, it takes the 4 of "y" above it
    q = place([[("x", 2), ("y", 1)], [("n", 1), ("m", 100)]], 4, 12, aligned={"n"})
    w = {g.name: g.col1 - g.col0 for g in q.regions}
    assert w["n"] == 4 and w["m"] == 8
    # both sit at the band's end (the east end: band 1 flows west), output row over input row
    y, n = q.regions[1], q.regions[2]
    assert y.col1 == n.col1 == 12 and y.output == "bottom" and n.input == "col"
