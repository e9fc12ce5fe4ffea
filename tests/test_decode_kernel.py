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

SETTINGS = settings(max_examples=60, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow])


def kernel_line(ready, m, group, hop, add, phase):
    out = np.zeros(len(ready), np.int64)
    K.line_collective(np.array(ready, np.int64), m, group, hop, add, phase, out)
    return out.tolist()


def test_a_line_worked_out_by_hand():
    # five PEs, one group rooted at position 2: the ends send at 0, their neighbours at 2, the root adds
    # at 4 and is done at 5; phase 2 alone (6), the broadcast leaves at 6 and reaches distance d at 7 + d
    assert kernel_line([0] * 5, 1, 5, 1, 1, 0) == [9, 8, 7, 8, 9]
    assert kernel_line([0] * 4, 2, 2, 2, 1, 1) == [23, 21, 19, 17]
    assert kernel_line([3, 7, 1, 9], 0, 2, 1, 1, 5) == [3, 7, 1, 9]


@SETTINGS
@given(st.data())
def test_every_line_collective_equals_the_reference(data):
    n = data.draw(st.integers(1, 12))
    ready = data.draw(st.lists(st.integers(0, 40), min_size=n, max_size=n))
    m, group = data.draw(st.integers(0, 6)), data.draw(st.integers(1, 13))
    hop, add, phase = data.draw(st.integers(1, 3)), data.draw(st.integers(0, 3)), data.draw(st.integers(0, 6))
    assert kernel_line(ready, m, group, hop, add, phase) == R.line_collective(ready, m, group, hop, add, phase)


def kernel_token(p, h, q, f, gated, heads, n_layers, rows, group, hop, add, phase, rate, batch=1):
    frac = Fraction(repr(rate))
    layer_done = np.zeros(n_layers, np.int64)
    cycles = K.token(p, -(-h // p), -(-q // p), -(-f // p), 2 if gated else 1, heads, n_layers,
                     np.array(rows, np.int64), group, hop, add, phase, frac.numerator, frac.denominator, layer_done,
                     batch)
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
    args = (p, h, q, f, gated, heads, 2, rows, group, hop, add, phase)
    assert kernel_token(*args, rate, batch) == R.token(*args, rate, batch=batch)


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


def whole_grid(p, h, q, f, gated, heads, n_layers, rows, group, hop, add, phase, rate, batch=1):
    frac = Fraction(repr(rate))
    done = np.zeros((p, p), np.int64)
    out = []
    for _ in range(n_layers):
        K.layer(done, -(-h // p), -(-q // p), -(-f // p), 2 if gated else 1, heads, np.array(rows, np.int64), group,
                hop, add, phase, frac.numerator, frac.denominator, batch)
        out.append(int(done.max()))
    return dict(cycles=out[-1], layer_done=out)


@pytest.mark.parametrize("p,rows,batch", [(24, [3 + (y % 5) for y in range(24)], 1), (37, [9] * 30 + [10] * 7, 1),
                                          (16, [1] * 15 + [40], 1), (16, [1] * 15 + [40], 3)])
def test_a_token_by_lines_equals_the_whole_grid(p, rows, batch):
    # with a token in every row the kernel computes one line a step (the completion cycles stay a row
    # part plus a column part); the whole grid, every line, must give the same cycles layer by layer
    args = (p, 512, 768, 1376, True, 8, 4, rows, 5, 2, 1, 40, 4.0, batch)
    assert min(rows) >= 1
    assert kernel_token(*args) == whole_grid(*args)
