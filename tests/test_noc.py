"""Network validation: the mesh against the textbook results every NoC simulator is held to
(docs/design.md, "Correctness"). k x k meshes, XY routing, single-message packets, link bandwidth 1.

Bounds, by channel load. Under XY routing every packet crosses the links of its route once; the
offered rate at which the busiest link carries one message a cycle is the saturation bound.
- Uniform random (every other PE equally likely): the k links crossing the bisection eastwards
  carry the packets from the k^2/2 western PEs to the k^2/2 eastern ones: k^2/2 x lambda x
  (k^2/2)/(k^2 - 1) over k links, so lambda <= 4/k x (k^2 - 1)/k^2 (4/k as k grows).
- Transpose: (r, c) -> (c, r). The PEs (r, c) with c > r send their packets west along row r and
  then south; the link into the diagonal PE of row r from the east carries the packets of all
  k - 1 - r PEs east of it, and the worst row (r = 0) has k - 1: lambda <= 1/(k - 1).
- Bit complement: (r, c) -> (k-1-r, k-1-c). Every PE sends across the vertical bisection, k^2/2
  packets a cycle per unit rate over k eastward links: lambda <= 2/k.
`meshsim.mesh.noc.saturation_bound` counts the load of every link by enumerating all routes, and the
first test checks it against these formulas.
"""

import pytest

from meshsim.mesh.noc import measure, saturation_bound, saturation_throughput, xy_loads
from meshsim.scenario import scenario_from_dict


def traffic(k, rate, pattern="uniform", hop_latency=1, warmup=1000, measure_cycles=3000, drain=3000, seed=11,
            **machine):
    m = {"rows": k, "cols": k, "hop_latency_cycles": hop_latency, "link_buffer_messages": 8}
    m.update(machine)
    return scenario_from_dict({
        "run": {"cycles": warmup + measure_cycles + drain, "seed": seed},
        "machine": m,
        "migration": {"policy": "none"},
        "workload": {"type": "traffic", "pattern": pattern, "injection_rate": rate, "warmup_cycles": warmup,
                     "measure_cycles": measure_cycles},
        "output": {"frame_every_cycles": 0},
    })


@pytest.mark.parametrize("k", [4, 8, 16])
def test_channel_load_bounds_are_the_textbook_ones(k):
    assert saturation_bound(k, k, "uniform") == pytest.approx(4 / k * (k * k - 1) / (k * k), rel=1e-9)
    assert saturation_bound(k, k, "transpose") == pytest.approx(1 / (k - 1), rel=1e-9)
    assert saturation_bound(k, k, "bit_complement") == pytest.approx(2 / k, rel=1e-9)
    # Mean XY distance between two different PEs: 2 x k^3 (k^2 - 1) / 3 summed over ordered pairs,
    # over k^2 (k^2 - 1) pairs.
    assert xy_loads(k, k, "uniform")[3] == pytest.approx(2 * k / 3, rel=1e-9)


@pytest.mark.parametrize("k", [4, 8, 16])
@pytest.mark.parametrize("hop_latency", [1, 2])
def test_zero_load_latency_is_the_mean_xy_hops_times_the_hop_latency(k, hop_latency):
    """At a load far below saturation a packet never waits: its latency is its XY hop count times
    the hop latency (the router adds no cycles). The mean over ~20,000 packets is within 2% of
    2k/3 x L, the mean XY distance between two different PEs of a k x k mesh times L."""
    rate = 0.004
    cycles = int(20000 / (rate * k * k))
    got = measure(traffic(k, rate, hop_latency=hop_latency, warmup=200, measure_cycles=cycles, drain=200))
    assert got["all_delivered"]
    analytic = xy_loads(k, k, "uniform")[3] * hop_latency
    assert got["latency_mean"] == pytest.approx(analytic, rel=0.02)
    # The same packets' own hops: what is left is contention alone, which a load this low keeps tiny.
    assert got["latency_mean"] == pytest.approx(got["hops_mean"] * hop_latency, rel=0.005)


@pytest.mark.parametrize("k", [4, 8, 16])
@pytest.mark.parametrize("pattern", ["uniform", "transpose", "bit_complement"])
def test_below_saturation_accepted_equals_offered(k, pattern):
    rate = 0.5 * saturation_bound(k, k, pattern)
    got = measure(traffic(k, rate, pattern))
    assert got["all_delivered"]
    assert got["accepted"] == pytest.approx(got["offered"], rel=0.02)


def saturation(k, pattern, hop_latency):
    """The highest offered rate the mesh sustains, by bisection (meshsim.mesh.noc.saturation_throughput)."""
    zero_load = xy_loads(k, k, pattern)[3] * hop_latency
    return saturation_throughput(lambda rate: traffic(k, rate, pattern, hop_latency),
                                 min(1.0, 1.25 * saturation_bound(k, k, pattern)), zero_load)


@pytest.mark.parametrize("k", [4, 8, 16])
@pytest.mark.parametrize("hop_latency", [1, 2])
@pytest.mark.parametrize("pattern", ["uniform", "transpose", "bit_complement"])
def test_saturation_throughput_stays_within_the_channel_load_bound(k, hop_latency, pattern):
    bound = saturation_bound(k, k, pattern)
    sat = saturation(k, pattern, hop_latency)
    assert sat <= bound * 1.02
    if pattern == "uniform":
        assert sat >= 0.75 * bound
