"""Load-balance and latency metrics (docs/design.md, "Metrics"), as plain functions of arrays.

The run computes its summary with these, and `report` recomputes them from a result file with the
same functions, so the two can never disagree about a formula.
"""

from __future__ import annotations

import math

import numpy as np


def load_balance(load) -> dict:
    """Balance figures of per-unit loads L (busy cycles or work over one window).

    li = mean(L) / max(L), in (0, 1], 1 = perfectly balanced; percent_imbalance = (max/mean - 1) x 100;
    jain_index = (sum L)^2 / (n sum L^2); cv = std(L) / mean(L) (population std); min, max, mean.
    With no load at all (max = 0) the ratios are undefined and reported as NaN.
    """
    a = np.asarray(load, dtype=np.int64).ravel()
    n = a.size
    hi = int(a.max()) if n else 0
    lo = int(a.min()) if n else 0
    if n == 0 or hi == 0:
        nan = float("nan")
        return dict(li=nan, percent_imbalance=nan, jain_index=nan, cv=nan, min=lo, max=hi, mean=0.0)
    total = int(a.sum())
    mean = total / n
    # Exact integer sum of squares while it cannot overflow (so an even load gives exactly CV 0).
    sq = int(np.dot(a, a)) if hi * hi * n < 2**63 else float(np.dot(a.astype(np.float64), a))
    var = max(sq / n - mean * mean, 0.0)
    return dict(
        li=mean / hi,
        percent_imbalance=(hi / mean - 1.0) * 100.0,
        jain_index=(total * total) / (n * sq),
        cv=math.sqrt(var) / mean,
        min=lo,
        max=hi,
        mean=mean,
    )


def balance_figures(busy, cycles: int) -> dict:
    """The summary's load-balance figures (docs/design.md, "Metrics") of per-unit busy cycles over
    a run of `cycles` cycles: li, percent_imbalance, jain_index, cv, busy_min/max/mean_cycles,
    compute_time_spread, active_units (units that did any work) and utilization."""
    a = np.asarray(busy, dtype=np.int64)
    lb = load_balance(a)
    return {
        "li": lb["li"],
        "percent_imbalance": lb["percent_imbalance"],
        "jain_index": lb["jain_index"],
        "cv": lb["cv"],
        "busy_min_cycles": lb["min"],
        "busy_max_cycles": lb["max"],
        "busy_mean_cycles": lb["mean"],
        "compute_time_spread": compute_time_spread(a),
        "active_units": int(np.count_nonzero(a)),
        "utilization": utilization(int(a.sum()), a.size, cycles),
    }


def sample_latency_stats(latencies) -> dict:
    """Latency figures from every sample (the rdu's tiles): mean, population variance, nearest-rank
    p50/p90/p99 (the smallest latency with at least q of the samples at or below it) and max; NaN
    when there are none."""
    a = np.asarray(latencies, dtype=np.int64).ravel()
    if a.size == 0:
        nan = float("nan")
        return dict(mean=nan, var=nan, p50=nan, p90=nan, p99=nan, max=nan)
    mean = float(a.mean())
    q = {p: int(np.quantile(a, p / 100, method="inverted_cdf")) for p in (50, 90, 99)}
    return dict(mean=mean, var=float(((a - mean) ** 2).mean()), p50=q[50], p90=q[90], p99=q[99], max=int(a.max()))


def link_utilization(link_messages, messages_per_cycle: int, cycles: int) -> np.ndarray:
    """Utilisation of every link that exists (messages / (bandwidth x cycles)) from per-PE output
    totals int64[rows, cols, 4] (0 N, 1 E, 2 S, 3 W); the outputs that would leave the grid are left
    out. One NaN when there are no links or no cycles."""
    links = np.asarray(link_messages)
    rows, cols = links.shape[:2]
    exists = np.ones(links.shape, bool)
    exists[0, :, 0] = exists[:, cols - 1, 1] = exists[rows - 1, :, 2] = exists[:, 0, 3] = False
    if not cycles or not exists.any():
        return np.full(1, np.nan)
    return links[exists] / (messages_per_cycle * cycles)


def compute_time_spread(busy) -> float:
    """(max - min) / mean of per-unit busy time over the active units (busy > 0); NaN if none."""
    a = np.asarray(busy, dtype=np.int64).ravel()
    a = a[a > 0]
    if a.size == 0:
        return float("nan")
    return float((int(a.max()) - int(a.min())) / a.mean())


def utilization(busy_total: int, n_units: int, cycles: int) -> float:
    """Busy unit-cycles / (units x cycles); NaN before the first cycle."""
    if n_units == 0 or cycles == 0:
        return float("nan")
    return busy_total / (n_units * cycles)


def latency_stats(histogram, count: int, total: int, total_sq: int, maximum: int) -> dict:
    """Task latency figures from exact sums and a unit-width histogram (bin i = latency i cycles,
    the last bin holding every latency at or above its index).

    mean and variance (population) come from the exact integer sums; percentiles are nearest-rank
    from the histogram: the smallest latency l with at least q x count tasks at or below l. A
    percentile falling in the overflow bin is reported as the maximum, and `percentile_overflow`
    says so.
    """
    h = np.asarray(histogram, dtype=np.int64)
    out = dict(count=int(count), mean=float("nan"), var=float("nan"), p50=float("nan"), p90=float("nan"),
               p99=float("nan"), max=int(maximum), percentile_overflow=False)
    if count == 0:
        return out
    count, total, total_sq = int(count), int(total), int(total_sq)
    out["mean"] = total / count
    out["var"] = (count * total_sq - total * total) / (count * count)
    cum = np.cumsum(h)
    last = h.size - 1
    for name, q in (("p50", 0.50), ("p90", 0.90), ("p99", 0.99)):
        rank = max(1, math.ceil(q * count))
        i = int(np.searchsorted(cum, rank))
        if i >= last:
            out[name] = int(maximum)
            out["percentile_overflow"] = True
        else:
            out[name] = i
    return out


def latency_figures(stats: dict) -> dict:
    """The summary's latency names (docs/design.md, "Metrics") of `latency_stats` or
    `sample_latency_stats` figures, in the order every machine's summary lists them."""
    return {"latency_mean_cycles": stats["mean"], "latency_var_cycles2": stats["var"],
            "latency_p50_cycles": stats["p50"], "latency_p90_cycles": stats["p90"],
            "latency_p99_cycles": stats["p99"], "latency_max_cycles": stats["max"]}


def weighted_allocation(span, held, li, pcus: int) -> dict:
    """The allocation figures of a machine that runs programs one after another on parts of its
    units (the rdu's sections, docs/rdu.md "Metrics"), from each program instance's cycles `span`,
    units `held` and busy-time LI over them `li`: pcu_alloc_max (the largest share of the units an
    instance holds), pcu_alloc_mean (the share held, weighted by cycles) and li_occupied (the LI over
    the units held, weighted by cycles; instances that hold none left out). NaN without instances."""
    span, held, li = np.asarray(span, np.int64), np.asarray(held, np.int64), np.asarray(li, np.float64)
    ok = held > 0
    t = int(span.sum())
    return dict(pcu_alloc_max=float(held.max()) / pcus if held.size else float("nan"),
                pcu_alloc_mean=float((span * held).sum() / (pcus * t)) if t else float("nan"),
                li_occupied=float((span[ok] * li[ok]).sum() / span[ok].sum()) if span[ok].sum() else float("nan"))


def step_figures(chip_seconds: float, host_seconds: float, samples: float) -> dict:
    """A step's time as the summary gives it (docs/design.md, "Result files"): the chip's time and the
    host's apart, the whole step their sum, and samples per second both ways: end to end
    (`samples_per_second`, over the whole step, what a user of the machine sees) and on the chip alone.
    `samples`: the samples of one step. Not a number where the chip's time is not (an interrupted run)."""
    nan = float("nan")
    ok = math.isfinite(chip_seconds) and chip_seconds > 0
    step = chip_seconds + host_seconds if ok else nan
    return {
        "chip_seconds": chip_seconds if ok else nan,
        "host_seconds": host_seconds,
        "step_seconds": step,
        "time_per_sample_seconds": step / samples if ok else nan,
        "samples_per_second": samples / step if ok else nan,
        "chip_samples_per_second": samples / chip_seconds if ok else nan,
    }
