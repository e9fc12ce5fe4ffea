"""Placing a layer-pipelined model's operators on the mesh: one rectangle of PEs per operator, its
area in proportion to the operator's FLOPs (docs/mesh.md, "Dataflow").

The grid is split into `replicas` equal vertical bands (data-parallel copies side by side; columns
left over at the right stay idle). Inside a replica, each group of operators (a layer's forward
operators, and for training its backward ones) gets a horizontal band of rows in proportion to the
group's FLOPs, and inside a band each operator gets a strip of columns in proportion to its
FLOPs. Both splits give every part one row (column) and share the rest in proportion, rounded by
largest remainders: a large operator's area is its FLOP share to within a column or two, a small
one gets at least a column of its band, and `Placement.quantisation` reports the ratios. An operator
whose strip would not hold its bytes (`need`: its weights) gets the columns that do; at a turn a
band's first operator is no wider than the band above's last, and as wide where it holds no matrix
operator (`aligned`); the others share the rest the same way (docs/mesh.md, "Dataflow").

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


def _shares(total: int, w) -> list:
    """`total` units in proportion to weights `w`: one each, then the rest by largest remainders (ties
    to the earlier part)."""
    n = len(w)
    rest = total - n
    exact = rest * w / w.sum()
    out = np.floor(exact).astype(int)
    left = rest - int(out.sum())
    order = sorted(range(n), key=lambda i: (-(exact[i] - out[i]), i))
    for i in order[:left]:
        out[i] += 1
    return [int(x) + 1 for x in out]


def split(total: int, weights, least=None, most=None) -> list:
    """`total` whole units split in proportion to `weights`, at least 1 each, by largest remainders.
    least, most: per part, the units it needs at the least (its memory) and may have at the most (None:
    no bound; least wins where they cross). A part whose share is above its most gets its most and
    the others share the rest the same way, until none is; then likewise a part below its least.
    InputError if there are too few units."""
    w = np.asarray(weights, float)
    n = len(w)
    if total < n:
        raise InputError(f"{total} units cannot give each of {n} parts at least one")
    lo = [1] * n if least is None else [max(1, int(x)) for x in least]
    hi = [None] * n if most is None else [None if x is None else max(int(x), lo[i]) for i, x in enumerate(most)]
    if total < sum(lo):
        raise InputError(f"{total} units cannot give {n} parts the units they need")
    fixed = {}
    for kind in ("most", "least"):
        while True:
            free = [i for i in range(n) if i not in fixed]
            left = total - sum(fixed.values())
            if not free or left < len(free):
                break
            got = dict(zip(free, _shares(left, w[free]), strict=True))
            if kind == "most":
                out = {i: hi[i] for i in free if hi[i] is not None and got[i] > hi[i]}
            else:
                out = {i: lo[i] for i in free if got[i] < lo[i]}
            if not out:
                break
            fixed.update(out)
    free = [i for i in range(n) if i not in fixed]
    left = total - sum(fixed.values())
    shares = [fixed.get(i, 0) for i in range(n)]
    if free and left >= len(free):
        for i, x in zip(free, _shares(left, w[free]), strict=True):
            shares[i] = x
        return shares
    for i in free:
        shares[i] = lo[i]
    # The needs took more than a part held to its most left: parts above their least give back, the
    # one with the most to spare first; units left over go to the first part without a most.
    over = sum(shares) - total
    for i in sorted(range(n), key=lambda j: (-(shares[j] - lo[j]), j)):
        if over <= 0:
            break
        give = min(over, shares[i] - lo[i])
        shares[i] -= give
        over -= give
    unbounded = [i for i in range(n) if hi[i] is None]
    if over > 0 or (over < 0 and not unbounded):
        raise InputError(f"{total} units cannot give {n} parts the units they need")
    if over < 0:
        shares[unbounded[0]] -= over
    return shares


def place(groups, rows: int, cols: int, replicas: int = 1, need=None, pe_bytes: int = 0,
          aligned=frozenset()) -> Placement:
    """Regions for operator groups (a list of groups in pipeline order, each a list of (name, flops)
    in order) on a rows x cols grid, `replicas` copies side by side. need: bytes each operator's
    region must hold, by name (its weights): an operator gets at least the columns of its band whose
    PEs of pe_bytes each hold them, then its share of the rest. At a turn, a band's first operator is
    no wider than the band above's last (a turn never fans out), and as wide where it is in
    `aligned` (a kernel without a matrix operator, whose FLOP share would leave its input row
    narrow). InputError when the grid cannot give every group a row and every operator a column of
    it (or the columns its bytes need)."""
    groups = [[(str(n), int(f)) for n, f in g] for g in groups]
    if not groups or any(not g for g in groups) or any(f <= 0 for g in groups for _, f in g):
        raise ValueError("place() needs non-empty groups of operators with positive FLOPs")
    band = cols // replicas if replicas >= 1 else 0
    widest = max(len(g) for g in groups)
    if replicas < 1 or rows < len(groups) or band < widest:
        wrong = []
        if rows < len(groups):
            wrong.append(f"machine.rows = {rows}: the {len(groups)} bands (one a layer, workload.n_layers, and the "
                         f"head's with workload.vocab_size; twice that with workload.training) need at least "
                         f"{len(groups)} rows")
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
            least, most = [1] * len(g), [None] * len(g)
            if need:
                least = [max(1, -(-int(need.get(name, 0)) // (h * pe_bytes))) for name, _ in g]
                if sum(least) > band:
                    least = [1] * len(g)  # cannot be met: the regions keep their FLOP shares, and the
                    # caller's memory check names what does not fit
            if gi > 0 and len(g) > 1:
                above = regions[-1].col1 - regions[-1].col0  # the band above's last region
                most[0] = above
                if g[0][0] in aligned:
                    least[0] = max(least[0], min(above, band - sum(least[1:])))
            widths = split(band, [f for _, f in g], least, most)
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
