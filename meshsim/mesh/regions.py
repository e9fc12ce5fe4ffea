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
