"""The boundary bound (docs/mesh.md, "Regions and the boundary bound"): load that leaves a region
crosses only its boundary links, so a hot region must refuse at least its excess over its capacity
and that bound. Checked here against runs, as the network saturation tests check the channel-load
bound: the best policy reaches the bound when the excess is above it, and nothing is refused when
the excess is well below it."""

import h5py
import numpy as np
import pytest
from mesh_compare import small_scenario

from meshsim.mesh.regions import Regions, boundary_figures, link_rate, mean_work
from meshsim.report import format_summary, read_regions, read_summary
from meshsim.run import run_scenario

POLICIES = ("least_loaded", "random_lower", "diffusion", "gradient")


def hot_square(policy, hot_rate, path):
    """A 40 x 40 grid, cold but for an 8 x 8 region in its middle; fixed work of 8 cycles, so the
    region completes 8 tasks a cycle, and its 32 boundary links carry at most 32 out."""
    return small_scenario(40, 40, workload="hotspot", path=path, run__cycles=3000, migration__policy=policy,
                          migration__threshold=1, migration__max_per_cycle=2, machine__queue_capacity=16,
                          workload__injection_rate=0.0, workload__hot_rate=hot_rate,
                          workload__hot_regions=[[16, 16, 24, 24]], workload__work_distribution="fixed",
                          workload__work_cycles=8)


def hot_region_figures(tmp_path, policy, hot_rate) -> dict:
    out = tmp_path / f"{policy}_{hot_rate}.h5"
    run_scenario(hot_square(policy, hot_rate, tmp_path / "s.toml"), out, progress=False)
    with h5py.File(out, "r") as f:
        g = f["regions"]
        return {k: float(g[k][1]) for k in ("crossed_out", "crossed_in", "boundary_bound", "boundary_links",
                                            "offered_rate", "capacity", "least_refusal_rate", "injected",
                                            "refused")}


@pytest.fixture(scope="module")
def saturated(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("saturated")
    return {p: hot_region_figures(tmp, p, 1.0) for p in POLICIES}


def test_the_bound_of_a_hot_square(saturated):
    f = saturated["least_loaded"]
    assert f["boundary_links"] == 32 and f["boundary_bound"] == 32.0
    assert f["capacity"] == 8.0 and f["offered_rate"] == pytest.approx(64.0, abs=1e-6)
    # 64 offered, 8 completed, 32 out: 24 of 64 must be refused.
    assert f["least_refusal_rate"] == pytest.approx(0.375)


def test_the_best_policy_reaches_the_bound_when_the_excess_exceeds_it(saturated):
    best = max(saturated.values(), key=lambda f: f["crossed_out"])
    assert best["crossed_out"] >= 0.75 * best["boundary_bound"]
    for policy, f in saturated.items():
        # No policy does better than the bound allows (the queues' one-off fill is under 1% here).
        assert f["refused"] / f["injected"] >= f["least_refusal_rate"] - 0.01, policy
        assert f["crossed_out"] <= f["boundary_bound"] + 1e-9, policy


def test_nothing_is_refused_when_the_excess_is_well_below_the_bound(tmp_path):
    # 16 offered, 8 completed: an excess of 8 against a bound of 32.
    f = hot_region_figures(tmp_path, "least_loaded", 0.25)
    assert f["least_refusal_rate"] == 0.0 and f["refused"] == 0
    assert f["crossed_out"] == pytest.approx(8.0, rel=0.05)


def test_the_report_shows_the_boundary(tmp_path):
    out = tmp_path / "r.h5"
    run_scenario(hot_square("least_loaded", 1.0, tmp_path / "s.toml"), out, progress=False)
    root, summary = read_summary(out)
    text = format_summary(summary, root, out, read_regions(out))
    assert "out/bound" in text
    hot = next(line for line in text.splitlines()[text.splitlines().index(next(
        line for line in text.splitlines() if line.startswith("boundary"))):] if line.startswith("hot_1"))
    out_, in_, bound, ratio = (float(x) for x in hot.split()[1:5])
    assert out_ == pytest.approx(32, abs=0.1) and in_ == 0 and bound == 32 and ratio >= 0.99


def test_the_bound_counts_each_pes_links_its_sends_and_the_links_rate():
    labels = np.zeros((6, 6), np.int32)
    labels[1:5, 1:5] = 1
    rg = Regions(labels, ["background", "hot"])
    none = np.zeros((6, 6, 4), np.int64)
    # 16 boundary links; a corner PE has two of them and sends one task a cycle with M = 1.
    f1 = boundary_figures(rg, none, 10, 1, 1.0)
    f2 = boundary_figures(rg, none, 10, 2, 1.0)
    assert f1["boundary_links"][1] == f2["boundary_links"][1] == 16
    assert f1["boundary_bound"][1] == 12.0 and f2["boundary_bound"][1] == 16.0
    # Credits that come back late slow each link: K / (L + Lc) = 2 / 4 messages a cycle.
    slow = link_rate(link_messages_per_cycle=1, link_buffer_messages=2, hop_latency_cycles=2, credit_delay_cycles=2)
    assert slow == 0.5 and boundary_figures(rg, none, 10, 2, slow)["boundary_bound"][1] == 8.0
    # The background's boundary: the same links seen from outside, and the grid's edge has none.
    assert f2["boundary_links"][0] == 16
    # Moves out of and into the hot region across its edge, and one inside it that crosses nothing.
    mig = none.copy()
    mig[1, 1, 0] = 5  # (1, 1) north to (0, 1): out
    mig[0, 2, 2] = 3  # (0, 2) south to (1, 2): in
    mig[2, 2, 1] = 7  # (2, 2) east to (2, 3): inside
    f = boundary_figures(rg, mig, 10, 2, 1.0)
    assert f["crossed_out"].tolist() == [0.3, 0.5] and f["crossed_in"].tolist() == [0.5, 0.3]


def test_the_mean_work_of_each_distribution():
    assert mean_work("fixed", 8, 1, 1) == 8.0
    assert mean_work("uniform", 8, 2, 9) == 5.5
    assert mean_work("geometric", 1, 1, 100) == 1.0
    # Geometric of mean 4 capped at 3: work 1, 2, 3 with P(work > k) = (3/4)^k.
    assert mean_work("geometric", 4, 1, 3) == pytest.approx(1 + 0.75 + 0.75**2)
