"""Network studies on the mesh: the analytic figures a routed-traffic run is checked against, and
measurements of one offered load (docs/design.md, "Correctness"; docs/mesh.md, "Routed packets").

Channel loads are counted exactly, by enumerating every (source, destination) pair of a pattern and
the XY route between them, so the bounds hold for any grid, not only the textbook k x k ones.
"""

from __future__ import annotations

import numpy as np

from kernels import mesh as K

from .sim import MeshSim, build_inputs


def destinations(rows: int, cols: int, pattern: str, hot_fraction: float = 0.0) -> np.ndarray:
    """P[u, v]: the probability that a draw at PE u offers a packet for PE v (float64[n, n]), for the
    patterns of docs/mesh.md. A row sums to less than 1 where some draws offer nothing (zero for a
    transpose diagonal, 1 - hot_fraction for the hot PE)."""
    n = rows * cols
    p = np.zeros((n, n))
    for u in range(n):
        r, c = divmod(u, cols)
        if pattern == "uniform":
            if n > 1:
                p[u, :] = 1.0 / (n - 1)
                p[u, u] = 0.0
        elif pattern == "transpose":
            if r != c:
                p[u, c * cols + r] = 1.0
        elif pattern == "bit_complement":
            v = (rows - 1 - r) * cols + (cols - 1 - c)
            if v != u:
                p[u, v] = 1.0
        elif pattern == "neighbor":
            nbs = [(r + dr) * cols + (c + dc) for dr, dc in ((-1, 0), (0, 1), (1, 0), (0, -1))
                   if 0 <= r + dr < rows and 0 <= c + dc < cols]
            for v in nbs:
                p[u, v] = 1.0 / len(nbs)
        elif pattern == "hotspot":
            hot = (rows // 2) * cols + cols // 2
            if n > 1:
                p[u, :] = (1.0 - hot_fraction) / (n - 1)
                p[u, u] = 0.0
                if u != hot:  # the hot PE's own hot draws offer nothing
                    p[u, hot] += hot_fraction
        else:
            raise ValueError(f"unknown pattern {pattern!r}")
    return p


def xy_loads(rows: int, cols: int, pattern: str, hot_fraction: float = 0.0):
    """Expected messages per cycle on every link, per unit of offered rate (one packet per PE per
    cycle, scaled by each PE's chance of offering one), under XY routing.

    Returns (links float64[rows, cols, 4] indexed by source PE and direction, ejection float64[n],
    injection float64[n], mean_hops float): the loads of the mesh links, of each PE's ejection and
    injection, and the mean XY hop count of the packets offered.
    """
    p = destinations(rows, cols, pattern, hot_fraction)
    links = np.zeros((rows, cols, 4))
    hops_total = 0.0
    for u in range(rows * cols):
        r0, c0 = divmod(u, cols)
        for v in np.nonzero(p[u])[0]:
            w = p[u, v]
            r1, c1 = divmod(int(v), cols)
            r, c = r0, c0
            while c != c1:  # X first
                d = 1 if c1 > c else 3
                links[r, c, d] += w
                c += 1 if d == 1 else -1
            while r != r1:
                d = 2 if r1 > r else 0
                links[r, c, d] += w
                r += 1 if d == 2 else -1
            hops_total += w * (abs(r1 - r0) + abs(c1 - c0))
    offered = p.sum()
    return links, p.sum(axis=0), p.sum(axis=1), hops_total / offered if offered else float("nan")


def saturation_bound(rows: int, cols: int, pattern: str, hot_fraction: float = 0.0, bandwidth: int = 1) -> float:
    """The largest offered rate (packets per PE per cycle) at which no link, ejection or injection
    port of XY routing is loaded beyond `bandwidth` messages a cycle: 1 / (largest load)."""
    links, eject, inject, _ = xy_loads(rows, cols, pattern, hot_fraction)
    worst = max(links.max(), eject.max(), inject.max())
    return bandwidth / worst if worst > 0 else float("inf")


def measure(scenario) -> dict:
    """Run a traffic scenario without writing a file and return its load and latency figures:
    offered and accepted packets per PE per cycle over the measurement window, the mean latency of
    the measured packets, whether every measured packet was delivered by the end, and the longest
    source queue at the end of the window (a source falling behind shows there first)."""
    wl = scenario.values["workload"]
    warm, span = wl["warmup_cycles"], wl["measure_cycles"]
    cycles = scenario.get("run", "cycles")
    sim = MeshSim(build_inputs(scenario), max_chunk=min(cycles, 4096))
    offered = delivered = measured = measured_latency = hops = injected = 0
    backlog_max = 0
    while sim.cycle < cycles:
        t0 = sim.cycle
        n = min(sim.max_chunk, cycles - t0)
        if t0 < warm + span < t0 + n:
            n = warm + span - t0  # stop at the window's end to look at the source queues
        sim.advance(n)
        s = sim.series[:n]
        lo, hi = min(max(warm - t0, 0), n), min(max(warm + span - t0, 0), n)
        offered += int(s[lo:hi, K.S_PKT_OFFERED].sum())
        delivered += int(s[lo:hi, K.S_PKT_DELIVERED].sum())
        measured += int(s[:, K.S_MEAS_DELIVERED].sum())
        measured_latency += int(s[:, K.S_MEAS_LATENCY_SUM].sum())
        hops += int(s[:, K.S_MEAS_HOPS_SUM].sum())
        injected += int(s[:, K.S_MEAS_INJECTED].sum())
        if sim.cycle == warm + span:
            backlog_max = int(sim.state.src_pending.max())
    sim.audit()
    n_pe = sim.inputs.rows * sim.inputs.cols
    return dict(offered=offered / (n_pe * span), accepted=delivered / (n_pe * span),
                measured_offered=offered, measured_delivered=measured,
                latency_mean=measured_latency / measured if measured else float("nan"),
                hops_mean=hops / injected if injected else float("nan"),
                all_delivered=measured == offered, backlog_max=backlog_max)


def sustains(scenario, zero_load_latency: float) -> bool:
    """Whether the mesh sustains the scenario's offered load: every measured packet delivered by the
    end, accepted within 2% of offered, the mean latency below 10x the zero-load latency, and no
    source queue at the window's end longer than 2 + 1% of what one source offers in the window
    (an overloaded link makes the sources behind it fall further behind every cycle)."""
    got = measure(scenario)
    wl = scenario.values["workload"]
    per_source = wl["injection_rate"] * wl["measure_cycles"]
    return (got["all_delivered"] and got["accepted"] >= 0.98 * got["offered"]
            and got["latency_mean"] < 10 * max(zero_load_latency, 1.0)
            and got["backlog_max"] <= 2 + 0.01 * per_source)


def saturation_throughput(make_scenario, upper: float, zero_load_latency: float, steps: int = 7) -> float:
    """Bisection over the offered rate (not the accepted rate under overload, which unfair
    arbitration can inflate): the highest rate in [0, upper] the mesh sustains, to upper / 2^steps.
    make_scenario(rate) builds the traffic scenario of one offered rate."""
    lo, hi = 0.0, upper
    for _ in range(steps):
        mid = (lo + hi) / 2
        if sustains(make_scenario(mid), zero_load_latency):
            lo = mid
        else:
            hi = mid
    return lo
