"""The formulas of docs/design.md, "Metrics", on loads whose figures can be worked out by hand."""

import math

import numpy as np
import pytest

from meshsim import metrics


def test_perfectly_balanced_load_has_li_1_and_no_imbalance():
    m = metrics.load_balance([5, 5, 5, 5])
    assert m["li"] == 1.0 and m["percent_imbalance"] == 0.0 and m["jain_index"] == 1.0 and m["cv"] == 0.0


def test_one_busy_unit_of_four():
    m = metrics.load_balance([0, 0, 0, 8])
    assert m["li"] == 0.25
    assert m["percent_imbalance"] == 300.0
    assert m["jain_index"] == 0.25  # 8^2 / (4 * 64)
    assert m["cv"] == pytest.approx(math.sqrt(3), rel=1e-12)
    assert (m["min"], m["max"], m["mean"]) == (0, 8, 2.0)


def test_li_below_0_9_for_a_ten_percent_hot_unit():
    m = metrics.load_balance([10] * 9 + [12])
    assert m["li"] == pytest.approx(10.2 / 12, rel=1e-12)
    assert m["li"] < 0.9  # a notable imbalance by the usual rule


def test_no_load_gives_nan_not_an_error():
    m = metrics.load_balance(np.zeros(5, np.int64))
    assert math.isnan(m["li"]) and m["max"] == 0


def test_compute_time_spread_ignores_idle_units():
    assert metrics.compute_time_spread([0, 4, 6, 8]) == pytest.approx((8 - 4) / 6, rel=1e-12)
    assert math.isnan(metrics.compute_time_spread([0, 0]))


def test_latency_stats_nearest_rank_percentiles_and_exact_moments():
    lat = [3] * 50 + [5] * 40 + [9] * 9 + [20]
    hist = np.bincount(lat, minlength=32)
    s = metrics.latency_stats(hist, len(lat), sum(lat), sum(x * x for x in lat), max(lat))
    assert (s["p50"], s["p90"], s["p99"], s["max"]) == (3, 5, 9, 20)
    assert s["mean"] == pytest.approx(np.mean(lat), rel=1e-12)
    assert s["var"] == pytest.approx(np.var(lat), rel=1e-12)
    assert not s["percentile_overflow"]


def test_latency_percentile_in_the_overflow_bin_is_flagged():
    hist = np.zeros(8, np.int64)
    hist[2] = 1
    hist[7] = 9  # nine latencies >= 7
    s = metrics.latency_stats(hist, 10, 2 + 9 * 100, 4 + 9 * 10000, 100)
    assert s["p50"] == 100 and s["percentile_overflow"]


def test_utilization():
    assert metrics.utilization(50, 10, 10) == 0.5
