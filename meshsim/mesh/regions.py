"""Regions of the mesh for per-region figures (docs/design.md, "Metrics": LI over the whole run and per
region).

A hotspot workload has one region per hot rectangle plus the background (the PEs in no hot
rectangle; where rectangles overlap, the later one wins). A layer_pipeline workload has one region
per kernel of each replica, plus "idle" for the PEs that hold no kernel, and its layers (every
replica's regions of one layer and phase together) are a second set. Other workloads have no
regions beyond the whole grid, and their result files carry no `regions` group.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .. import metrics


@dataclass
class Regions:
    """labels: int16[R, C] region index of every PE; names: one name per region."""

    labels: np.ndarray
    names: list

    def __post_init__(self):
        flat = self.labels.ravel()
        self.index = [np.flatnonzero(flat == k) for k in range(len(self.names))]

    @property
    def count(self) -> int:
        return len(self.names)


def regions_of(scenario, pipeline=None) -> Regions | None:
    """The scenario's regions, or None when the whole grid is the only one. `pipeline` is the
    layer_pipeline's meshsim.mesh.pipeline.Pipeline."""
    if pipeline is not None:
        labels = pipeline.region_of.astype(np.int32)
        names = list(pipeline.names)
        if pipeline.idle_pes:
            labels = np.where(labels < 0, len(names), labels).astype(np.int32)
            names.append("idle")
        return Regions(labels, names)
    if scenario.get("workload", "type") != "hotspot":
        return None
    rows, cols = scenario.get("machine", "rows"), scenario.get("machine", "cols")
    labels = np.zeros((rows, cols), np.int16)
    hot = scenario.hot_regions()
    for k, (r0, c0, r1, c1) in enumerate(hot, start=1):
        labels[r0:r1, c0:c1] = k
    names = ["background"] + [f"hot_{k}" for k in range(1, len(hot) + 1)]
    return Regions(labels, names)


def layers_of(pipeline) -> Regions:
    """A layer_pipeline's layers as regions: "layer<i>" and "layer<i>.backward", over all replicas
    (the idle PEs belong to none)."""
    names, index = [], {}
    per_region = []
    for name in pipeline.names:
        head, _, rest = name.split("/")[-1].partition(".")
        layer = head + (".backward" if rest.endswith(".backward") else "")
        if layer not in index:
            index[layer] = len(names)
            names.append(layer)
        per_region.append(index[layer])
    lut = np.array(per_region + [-1], np.int32)
    return Regions(lut[pipeline.region_of], names)


# name -> (dtype, units, description) of the per-region figures.
FIGURES = {
    "n_units": (np.int64, "PEs", "PEs in the region"),
    "li": (np.float64, "1", "load-balance efficiency mean/max of the region's per-PE busy cycles"),
    "percent_imbalance": (np.float64, "%", "(max/mean - 1) x 100 of the region's per-PE busy cycles"),
    "jain_index": (np.float64, "1", "Jain's index of the region's per-PE busy cycles"),
    "cv": (np.float64, "1", "coefficient of variation of the region's per-PE busy cycles"),
    "utilization": (np.float64, "1", "busy PE-cycles / (PEs x cycles) in the region"),
    "injected": (np.int64, "tasks", "tasks offered to the region's PEs"),
    "refused": (np.int64, "tasks", "tasks refused at the region's PEs"),
    "completed": (np.int64, "tasks", "tasks completed by the region's PEs"),
    "latency_mean": (np.float64, "cycles", "mean latency of the tasks completed by the region's PEs"),
}


# name -> (dtype, units, description) of the per-region boundary figures (docs/mesh.md, "Regions and
# the boundary bound"): whole-run figures, written with a migration policy on.
BOUNDARY_FIGURES = {
    "boundary_links": (np.int64, "links", "links from a PE of the region to a PE outside it"),
    "boundary_bound": (np.float64, "tasks/cycle", "the most tasks that can leave the region in a cycle: over its PEs, "
                       "the least of migration.max_per_cycle and its boundary links x a link's rate"),
    "crossed_out": (np.float64, "tasks/cycle", "tasks migrated out of the region across its boundary, per cycle"),
    "crossed_in": (np.float64, "tasks/cycle", "tasks migrated into the region across its boundary, per cycle"),
    "offered_rate": (np.float64, "tasks/cycle", "tasks the workload offers the region's PEs a cycle, expected "
                     "(NaN where the workload has no rates)"),
    "capacity": (np.float64, "tasks/cycle", "tasks the region's PEs can complete a cycle: PEs / mean work"),
    "least_refusal_rate": (np.float64, "1", "the least share of the offered tasks the region must refuse in the long "
                           "run: max(0, offered - capacity - boundary bound) / offered"),
}


def link_rate(link_messages_per_cycle: int, link_buffer_messages: int, hop_latency_cycles: int,
              credit_delay_cycles: int) -> float:
    """Messages a link carries a cycle at most, on average: min(B, K / (L + Lc)) (docs/mesh.md, "One cycle")."""
    return min(float(link_messages_per_cycle), link_buffer_messages / (hop_latency_cycles + credit_delay_cycles))


def mean_work(distribution: str, work_cycles: int, work_min_cycles: int, work_max_cycles: int) -> float:
    """Mean work of a Bernoulli workload's task (docs/mesh.md, "Workloads"). Geometric work is capped
    at the maximum: P(work > k) = q^k with q = 1 - 1/m, so its mean is sum_{k < cap} q^k."""
    if distribution == "fixed":
        return float(work_cycles)
    if distribution == "uniform":
        return (work_min_cycles + work_max_cycles) / 2.0
    m = float(work_cycles)
    if m <= 1.0:
        return 1.0
    return m * (1.0 - (1.0 - 1.0 / m) ** work_max_cycles)


def boundary_figures(regions: Regions, mig_dir, cycles: int, max_per_cycle: int, rate: float,
                     rates=None, work: float = float("nan")) -> dict:
    """Per-region boundary figures (keys of BOUNDARY_FIGURES) from the per-PE, per-direction migration
    totals `mig_dir` (int[R, C, 4], directions N, E, S, W), a link's rate (link_rate), the per-PE
    Bernoulli rates (float[R, C], or None) and the mean work of a task."""
    labels = np.asarray(regions.labels)
    rows, cols = labels.shape
    n = regions.count
    # outside[d]: the label of the neighbour in direction d, -1 off the grid.
    # (A PE in no region, label -1, counts as region n, dropped at the end.)
    own = np.where(labels >= 0, labels, n).astype(np.int64)
    padded = np.pad(own, 1, constant_values=-1)
    nb = [padded[:-2, 1:-1], padded[1:-1, 2:], padded[2:, 1:-1], padded[1:-1, :-2]]
    n += 1
    mig = np.asarray(mig_dir, dtype=np.int64).reshape(rows, cols, 4)
    n_out = np.zeros((rows, cols), np.int64)
    out = np.zeros(n, np.int64)
    into = np.zeros(n, np.int64)
    for d in range(4):
        crossing = (nb[d] >= 0) & (nb[d] != own)
        n_out += crossing
        out += np.bincount(own[crossing], weights=mig[..., d][crossing], minlength=n).astype(np.int64)
        into += np.bincount(nb[d][crossing], weights=mig[..., d][crossing], minlength=n).astype(np.int64)
    per_pe = np.minimum(float(max_per_cycle), n_out * rate)
    n -= 1
    f = {k: np.zeros(n, dtype=v[0]) for k, v in BOUNDARY_FIGURES.items()}

    def per_region(weights):
        return np.bincount(own.ravel(), weights=np.asarray(weights, np.float64).ravel(), minlength=n + 1)[:n]

    f["boundary_links"][:] = per_region(n_out).astype(np.int64)
    f["boundary_bound"][:] = per_region(per_pe)
    f["crossed_out"][:] = out[:n] / cycles if cycles else np.nan
    f["crossed_in"][:] = into[:n] / cycles if cycles else np.nan
    f["capacity"][:] = per_region(np.ones(own.shape)) / work
    if rates is None:
        f["offered_rate"][:] = np.nan
        f["least_refusal_rate"][:] = np.nan
    else:
        offered = per_region(rates)
        f["offered_rate"][:] = offered
        with np.errstate(invalid="ignore", divide="ignore"):
            f["least_refusal_rate"][:] = np.where(
                offered > 0, np.maximum(0.0, offered - f["capacity"] - f["boundary_bound"]) / offered, 0.0)
    return f


def region_figures(regions: Regions, busy, cycles: int, injected=None, refused=None, completed=None,
                   latency_sum=None) -> dict:
    """Per-region figures (keys of FIGURES, one array entry per region) from per-PE totals."""
    out = {k: np.zeros(regions.count, dtype=v[0]) for k, v in FIGURES.items()}
    b = np.asarray(busy).ravel()
    per_pe = {"injected": injected, "refused": refused, "completed": completed, "latency_sum": latency_sum}
    flat = {k: (np.asarray(v).ravel() if v is not None else None) for k, v in per_pe.items()}
    for k, idx in enumerate(regions.index):
        lb = metrics.load_balance(b[idx])
        out["n_units"][k] = idx.size
        for key in ("li", "percent_imbalance", "jain_index", "cv"):
            out[key][k] = lb[key]
        out["utilization"][k] = metrics.utilization(int(b[idx].sum()), idx.size, cycles)
        for key in ("injected", "refused", "completed"):
            if flat[key] is not None:
                out[key][k] = int(flat[key][idx].sum())
        if flat["latency_sum"] is not None and flat["completed"] is not None:
            n = int(flat["completed"][idx].sum())
            out["latency_mean"][k] = int(flat["latency_sum"][idx].sum()) / n if n else float("nan")
        else:
            out["latency_mean"][k] = float("nan")
    return out
