"""Placing a layer-pipelined model's operators on the mesh: one rectangle of PEs per operator, its
area in proportion to the operator's FLOPs (docs/mesh.md, "Dataflow").

The grid is split into `replicas` equal vertical bands (data-parallel copies side by side; columns
left over at the right stay idle). Inside a replica, each group of operators (a layer's forward
operators, and for training its backward ones) gets a horizontal band of rows in proportion to the
group's FLOPs, and inside a band each operator gets a strip of columns in proportion to its
FLOPs. Both splits give every part one row (column) and share the rest in proportion, rounded by
largest remainders: a large operator's area is its FLOP share to within a column or two, a small
one gets at least a column of its band, and `Placement.quantisation` reports the ratios.

Bands alternate direction (a boustrophedon): the first runs west to east, the next east to west,
so each band's last operator sits above the next band's first and data turns down rather than
crossing the wafer back. `Region.flow` is +1 for a region whose data moves east, -1 west; a band's
last region (but the last band's) sends its output from its bottom row (`output = "bottom"`,
else "side"), and the next band's first region takes its input on its top row (`input = "col"`,
else "row"): docs/mesh.md, "Dataflow".
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import InputError


@dataclass(frozen=True)
class Region:
    """One operator's rectangle: rows row0..row1-1, columns col0..col1-1 (half-open); flow: +1
    when its band's data moves east (its input is its west column), -1 when it moves west."""

    name: str
    group: int
    replica: int
    row0: int
    col0: int
    row1: int
    col1: int
    flops: int
    flow: int = 1
    input: str = "row"
    output: str = "side"

    @property
    def n_pes(self) -> int:
        return (self.row1 - self.row0) * (self.col1 - self.col0)


@dataclass(frozen=True)
class Placement:
    """The regions of every replica, and the PEs that hold no operator."""

    rows: int
    cols: int
    regions: tuple
    idle_pes: int

    def labels(self) -> np.ndarray:
        """int32[rows, cols]: the index of each PE's region in `regions`, -1 for an idle PE."""
        out = np.full((self.rows, self.cols), -1, np.int32)
        for i, g in enumerate(self.regions):
            out[g.row0:g.row1, g.col0:g.col1] = i
        return out

    def quantisation(self) -> np.ndarray:
        """Per region of the first replica: its share of the replica's PEs over its share of the
        FLOPs (1 = exactly proportional)."""
        first = [g for g in self.regions if g.replica == 0]
        pes = np.array([g.n_pes for g in first], float)
        flops = np.array([g.flops for g in first], float)
        return (pes / pes.sum()) / (flops / flops.sum())


def split(total: int, weights) -> list:
    """`total` whole units split in proportion to `weights`, at least 1 each, by largest remainders.
    InputError if there are fewer units than weights."""
    w = np.asarray(weights, float)
    n = len(w)
    if total < n:
        raise InputError(f"{total} units cannot give each of {n} parts at least one")
    # One unit each first, then the rest in proportion (largest remainders, ties to the earlier part).
    rest = total - n
    exact = rest * w / w.sum()
    out = np.floor(exact).astype(int)
    left = rest - int(out.sum())
    order = sorted(range(n), key=lambda i: (-(exact[i] - out[i]), i))
    for i in order[:left]:
        out[i] += 1
    return [int(x) + 1 for x in out]


def place(groups, rows: int, cols: int, replicas: int = 1) -> Placement:
    """Regions for operator groups (a list of groups in pipeline order, each a list of (name, flops)
    in order) on a rows x cols grid, `replicas` copies side by side. InputError when the grid cannot
    give every group a row and every operator a column of it."""
    groups = [[(str(n), int(f)) for n, f in g] for g in groups]
    if not groups or any(not g for g in groups) or any(f <= 0 for g in groups for _, f in g):
        raise ValueError("place() needs non-empty groups of operators with positive FLOPs")
    band = cols // replicas if replicas >= 1 else 0
    widest = max(len(g) for g in groups)
    if replicas < 1 or rows < len(groups) or band < widest:
        wrong = []
        if rows < len(groups):
            wrong.append(f"machine.rows = {rows}: the {len(groups)} layer bands (workload.n_layers, twice that with "
                         f"workload.training) need at least {len(groups)} rows")
        if band < widest:
            wrong.append(f"machine.cols = {cols}: {replicas} replica(s) (workload.replicas) of {widest} kernels side "
                         f"by side need at least {widest * replicas} columns")
        raise InputError("; ".join(wrong) + "; use a larger grid, fewer layers or replicas, or "
                         "workload.fuse_elementwise = true and workload.fuse_attention = true (fewer kernels)")
    heights = split(rows, [sum(f for _, f in g) for g in groups])
    regions = []
    for rep in range(replicas):
        r0 = 0
        for gi, (g, h) in enumerate(zip(groups, heights, strict=True)):
            flow = 1 if gi % 2 == 0 else -1
            c0 = rep * band if flow == 1 else (rep + 1) * band
            widths = split(band, [f for _, f in g])
            for oi, ((name, f), w) in enumerate(zip(g, widths, strict=True)):
                io = dict(flow=flow, input="col" if oi == 0 and gi > 0 else "row",
                          output="bottom" if oi == len(g) - 1 and gi + 1 < len(groups) else "side")
                lo = c0 if flow == 1 else c0 - w  # c0: the edge the band has reached, moving with the flow
                regions.append(Region(name, gi, rep, r0, lo, r0 + h, lo + w, f, **io))
                c0 += flow * w
            r0 += h
    used = sum(g.n_pes for g in regions)
    return Placement(rows, cols, tuple(regions), rows * cols - used)


def transformer_groups(ops) -> list:
    """The operators of `meshsim.transformer.operators` grouped by (phase, layer), in order."""
    groups, key = [], None
    for op in ops:
        k = (op.phase, op.layer)
        if k != key:
            groups.append([])
            key = k
        groups[-1].append((op.name, op.flops))
    return groups


def weight_overflows(placement: Placement, weight_bytes: dict, sram_kib: int) -> list:
    """The regions whose operator's weights do not fit the SRAM of their PEs: a list of
    (region, weight bytes, capacity bytes), first replica only (the replicas are copies)."""
    out = []
    for g in placement.regions:
        if g.replica != 0:
            continue
        need = int(weight_bytes.get(g.name, 0))
        have = g.n_pes * sram_kib * 1024
        if need > have:
            out.append((g, need, have))
    return out
