"""The wafer's decode kernel (kernels/decode.py) against its reference (kernels/reference/decode_ref.py),
both written from docs/decode.md: every collective of a line, every layer and token cycle for cycle."""

from fractions import Fraction

import numba
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kernels import decode as K
from kernels.reference import decode_ref as R
from meshsim.mesh.decode import routed_levels

SETTINGS = settings(max_examples=60, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow])


def kernel_line(ready, m, group, hop, add, phase, levels=2, routed=2):
    out = np.zeros(len(ready), np.int64)
    K.line_collective(np.array(ready, np.int64), m, group, levels, routed, hop, add, phase, out)
    return out.tolist()


def test_a_line_worked_out_by_hand():
    # five PEs, one group rooted at position 2: the ends send at 0, their neighbours at 2, the root adds
    # at 4 and is done at 5; phase 2 alone (6), the broadcast leaves at 6 and reaches distance d at 7 + d
    assert kernel_line([0] * 5, 1, 5, 1, 1, 0) == [9, 8, 7, 8, 9]
    assert kernel_line([0] * 4, 2, 2, 2, 1, 1) == [23, 21, 19, 17]
    assert kernel_line([3, 7, 1, 9], 0, 2, 1, 1, 5) == [3, 7, 1, 9]


def test_trees_of_more_levels_and_relayed_levels_worked_out_by_hand():
    # nine PEs, h = c = 1, o = 2, two elements (docs/decode.md, "Routes and relays")
    def line(group, levels, budget, ready=(0,) * 9):
        return kernel_line(list(ready), 2, group, 1, 1, 2, levels, routed_levels(levels, budget))

    # three levels of groups of 3: roots 1, 4, 7, then 4 alone at the top
    assert line(3, 3, 29) == line(3, 3, 24) == [26, 25, 24, 23, 22, 23, 24, 25, 26]
    # groups of 2: the top level joins 3, 7 and 8 at 7; without its routes, 3's sums enter 4, 5 and 6
    assert line(2, 3, 29) == [33, 32, 31, 30, 29, 28, 27, 26, 27]
    assert line(2, 3, 24) == [36, 35, 34, 33, 32, 31, 30, 29, 30]
    # two levels on a budget of 13: level 2 relayed through 2, 3 and 6, 5, each ready when its phase 1 is
    assert line(3, 2, 24) == [22, 21, 20, 19, 18, 19, 20, 21, 22]
    assert line(3, 2, 13) == [24, 23, 22, 21, 20, 21, 22, 23, 24]
    # a relay that is late for its own phase holds the stream back
    assert line(3, 2, 13, (0, 0, 0, 20, 0, 0, 0, 0, 0)) == [38, 37, 36, 35, 34, 35, 36, 37, 38]
    # one level: one chain to the middle
    assert kernel_line([0] * 5, 2, 5, 1, 1, 2, 1, 1) == [14, 13, 12, 13, 14]


@SETTINGS
@given(st.data())
def test_every_line_collective_of_any_tree_and_route_budget_equals_the_reference(data):
    n = data.draw(st.integers(1, 30))
    ready = data.draw(st.lists(st.integers(0, 40), min_size=n, max_size=n))
    m, group = data.draw(st.integers(0, 5)), data.draw(st.integers(1, 8))
    levels, budget = data.draw(st.integers(1, 4)), data.draw(st.integers(13, 45))
    hop, add, phase = data.draw(st.integers(0, 3)), data.draw(st.integers(0, 3)), data.draw(st.integers(0, 6))
    got = kernel_line(ready, m, group, hop, add, phase, levels, routed_levels(levels, budget))
    assert got == R.line_collective(ready, m, group, hop, add, phase, levels=levels, route_budget=budget)


@SETTINGS
@given(st.data())
def test_every_line_collective_equals_the_reference(data):
    n = data.draw(st.integers(1, 12))
    ready = data.draw(st.lists(st.integers(0, 40), min_size=n, max_size=n))
    m, group = data.draw(st.integers(0, 6)), data.draw(st.integers(1, 13))
    hop, add, phase = data.draw(st.integers(1, 3)), data.draw(st.integers(0, 3)), data.draw(st.integers(0, 6))
    assert kernel_line(ready, m, group, hop, add, phase) == R.line_collective(ready, m, group, hop, add, phase)


def kernel_token(p, h, q, f, gated, heads, n_layers, rows, group, hop, add, phase, rate, batch=1, levels=2, routed=2):
    frac = Fraction(repr(rate))
    layer_done = np.zeros(n_layers, np.int64)
    cycles = K.token(p, -(-h // p), -(-q // p), -(-f // p), 2 if gated else 1, heads, n_layers,
                     np.array(rows, np.int64), group, levels, routed, hop, add, phase, frac.numerator,
                     frac.denominator, layer_done, batch)
    return dict(cycles=int(cycles), layer_done=layer_done.tolist())


@SETTINGS
@given(st.data())
def test_every_token_equals_the_reference_cycle_for_cycle(data):
    p = data.draw(st.integers(2, 6))
    h = data.draw(st.integers(4, 40))
    q = h + 2 * data.draw(st.integers(1, h))
    f, gated, heads = data.draw(st.integers(4, 80)), data.draw(st.booleans()), data.draw(st.integers(1, 4))
    rows = data.draw(st.lists(st.integers(0, 7), min_size=p, max_size=p))
    group, hop = data.draw(st.integers(1, p + 1)), data.draw(st.integers(1, 2))
    add, phase, rate = data.draw(st.integers(0, 2)), data.draw(st.integers(0, 30)), data.draw(st.sampled_from([4.0,
                                                                                                            2.5, 1.0]))
    batch = data.draw(st.sampled_from([1, 1, 2, 5]))
    levels, budget = data.draw(st.sampled_from([(2, 24), (2, 24), (1, 13), (3, 24), (3, 29), (2, 13)]))
    args = (p, h, q, f, gated, heads, 2, rows, group, hop, add, phase)
    assert (kernel_token(*args, rate, batch, levels, routed_levels(levels, budget))
            == R.token(*args, rate, batch=batch, levels=levels, route_budget=budget))


@pytest.mark.parametrize("threads", [1, 2])
def test_a_token_is_the_same_on_any_number_of_threads(threads):
    args = (24, 512, 768, 1376, True, 8, 3, [3 + (y % 5) for y in range(24)], 5, 1, 1, 40, 4.0)
    before = numba.get_num_threads()
    try:
        numba.set_num_threads(1)
        one = kernel_token(*args)
        numba.set_num_threads(min(threads, numba.config.NUMBA_NUM_THREADS))
        assert kernel_token(*args) == one
    finally:
        numba.set_num_threads(before)


def whole_grid(p, h, q, f, gated, heads, n_layers, rows, group, hop, add, phase, rate, batch=1, levels=2, routed=2):
    frac = Fraction(repr(rate))
    done = np.zeros((p, p), np.int64)
    out = []
    for _ in range(n_layers):
        K.layer(done, -(-h // p), -(-q // p), -(-f // p), 2 if gated else 1, heads, np.array(rows, np.int64), group,
                levels, routed, hop, add, phase, frac.numerator, frac.denominator, batch)
        out.append(int(done.max()))
    return dict(cycles=out[-1], layer_done=out)


@pytest.mark.parametrize("p,rows,batch,levels,routed", [(24, [3 + (y % 5) for y in range(24)], 1, 2, 2),
                                                        (37, [9] * 30 + [10] * 7, 1, 3, 2),
                                                        (16, [1] * 15 + [40], 1, 2, 2), (16, [1] * 15 + [40], 3, 2, 1)])
def test_a_token_by_lines_equals_the_whole_grid(p, rows, batch, levels, routed):
    # with a token in every row the kernel computes one line a step (the completion cycles stay a row
    # part plus a column part); the whole grid, every line, must give the same cycles layer by layer
    args = (p, 512, 768, 1376, True, 8, 4, rows, 5, 2, 1, 40, 4.0, batch, levels, routed)
    assert min(rows) >= 1
    assert kernel_token(*args) == whole_grid(*args)
