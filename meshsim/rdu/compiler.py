"""The RDU machine on the Python side: a transformer compiled into sections, PCUs and PMUs
allocated, and the chips' programs as tables for the kernel (docs/rdu.md).

Every rule here is written out in docs/rdu.md, "Compilation"; the kernel (`kernels/rdu.py`) and its
reference only run the tables. All sizes are exact Python integers until they go into the tables.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from fractions import Fraction

import numpy as np

from kernels import rdu as K

from ..errors import InputError
from ..params import param
from ..topology import node_link
from ..transformer import (
    HEAD,
    MODEL_KEYS,
    TP_ALLREDUCE_AFTER,
    Model,
    Operator,
    backward_of,
    cached_kv_bytes,
    compute_rate,
    edge_operators,
    model_from_workload,
    operators,
    tensor_split,
    update_cost,
)
from .checks import parse_parallelism
from .keys import PRESETS as RDU_PRESETS

ANCHOR_KINDS = ("gemm", "attention")


@dataclass(frozen=True)
class RduSpec:
    """Everything compilation reads: the chip, the model and how it is run (docs/rdu.md)."""

    pcus: int
    pcu_lanes: int
    pcu_stages: int
    pmus: int
    pmu_kib: int
    pmu_bytes_per_cycle: int
    ddr_bandwidth_gbps: float
    ddr_burst_kib: int
    clock_ghz: float
    section_switch_cycles: int
    buffer_tiles: int
    elastic_pmus: bool
    interconnect_gbps: float
    interconnect_latency_cycles: int
    model: Model
    training: bool
    fusion: str
    tile_tokens: int
    parallelism: str
    microbatches: int
    prefetch: bool
    layers_per_stage: tuple = ()  # blocks per pipeline stage; () = as even as can be
    placement: str = "spread"  # where a section's operators sit on the PCUs: "spread" or "packed"
    section_fill: float = 0.7  # o3: the share of the PCUs a section's column groups may need
    fp32_rate: float = 0.5  # compute rate at fp32 and tf32, a fraction of the 16-bit peak
    chips_per_node: int = 8
    node_interconnect_gbps: float = 25.0
    node_interconnect_latency_cycles: int = 20000
    optimizer: str = "none"  # the update at the end of a training step: none, sgd or adam
    master_weights: str = "same"  # "fp32": fp32 master weights beside the weights computed with
    host_seconds: float = 0.0  # the host's part of every step, outside the chip
    vocab_size: int = 0  # the embedding and the output head (0: the blocks alone)
    pcu_place_limit: float = 1.0  # the largest share of the PCUs one section is placed on

    @property
    def degrees(self) -> tuple[int, int, int]:
        return parse_parallelism(self.parallelism)

    def chip_index(self, ti: int, pi: int, di: int) -> int:
        """The number of chip (tensor ti, pipeline stage pi, data replica di): tensor first, then
        pipeline, then data (docs/rdu.md, "Topology")."""
        t, p, _ = self.degrees
        return (di * p + pi) * t + ti

    def link(self, groups) -> tuple[float, int]:
        """(GB/s, latency cycles) of a collective or transfer run by every group of chips in `groups`
        at once: the node's links when each group lies in one node, else the links between nodes
        (a ring is as fast as its slowest hop, and the step waits for the slowest group)."""
        return node_link(groups, self.chips_per_node, (self.interconnect_gbps, self.interconnect_latency_cycles),
                         (self.node_interconnect_gbps, self.node_interconnect_latency_cycles))

    def tensor_link(self, pi: int) -> tuple[float, int]:
        """The link of stage pi's tensor all-reduces, over its data-parallel copies."""
        t, _, d = self.degrees
        return self.link([[self.chip_index(ti, pi, di) for ti in range(t)] for di in range(d)])

    def pipeline_link(self, pi: int) -> tuple[float, int]:
        """The link from stage pi to stage pi + 1, over the chips that hand over."""
        t, _, d = self.degrees
        return self.link([[self.chip_index(ti, pi, di), self.chip_index(ti, pi + 1, di)]
                          for ti in range(t) for di in range(d)])

    def data_link(self, pi: int) -> tuple[float, int]:
        """The link of stage pi's gradient all-reduce over the data-parallel replicas."""
        t, _, d = self.degrees
        return self.link([[self.chip_index(ti, pi, di) for di in range(d)] for ti in range(t)])

    @property
    def tokens(self) -> int:
        """T, tokens of one microbatch: batch / (data degree x microbatches) x seq_len."""
        return self.model.batch // (self.degrees[2] * self.microbatches) * self.model.seq_len

    @property
    def tiles(self) -> int:
        """M, tiles a section streams per microbatch: T / tile_tokens."""
        return self.tokens // self.tile_tokens

    @property
    def pmu_bytes(self) -> int:
        """Qb, bytes of one PMU."""
        return self.pmu_kib * 1024

    @property
    def rate(self):
        """r, the compute rate at the model's precision as an exact fraction of the 16-bit peak."""
        return compute_rate(self.model.precision, self.fp32_rate)

    @property
    def peak_flops_per_cycle(self) -> float:
        """Peak FLOPs of one chip per cycle at the model's precision: PCUs x lanes x stages x 2 (a
        multiply-add is 2) x r."""
        return float(self.pcus * self.pcu_lanes * self.pcu_stages * 2 * self.rate)


MACHINE_KEYS = ("pcus", "pcu_lanes", "pcu_stages", "pmus", "pmu_kib", "pmu_bytes_per_cycle", "ddr_bandwidth_gbps",
                "ddr_burst_kib", "clock_ghz", "section_switch_cycles", "buffer_tiles", "elastic_pmus",
                "interconnect_gbps", "interconnect_latency_cycles", "placement", "section_fill", "fp32_rate",
                "chips_per_node", "node_interconnect_gbps", "node_interconnect_latency_cycles", "host_seconds",
                "pcu_place_limit")
RUN_KEYS = ("training", "fusion", "tile_tokens", "parallelism", "microbatches", "prefetch", "layers_per_stage",
            "optimizer", "master_weights", "vocab_size")


def spec_from_scenario(sc) -> RduSpec:
    """The RduSpec of a validated rdu scenario: with `machine.num_tiles` the run's share of the chip,
    `num_tiles / chip_tiles` of its PCUs, PMUs and DDR bandwidth (docs/rdu.md, "Presets")."""
    m, w = sc.values["machine"], sc.values["workload"]
    run = {k: tuple(w[k]) if isinstance(w[k], list) else w[k] for k in RUN_KEYS}
    chip = {k: m[k] for k in MACHINE_KEYS}
    chip.update(tile_share(m))
    return RduSpec(**chip, **run, model=model_from_workload(w))


def tile_share(m: dict) -> dict:
    """The PCUs, PMUs and DDR bandwidth of the tiles a program is compiled for (`machine.num_tiles` of
    `machine.chip_tiles`; 0: the whole chip). The scenario's checks make the shares whole."""
    n, of = m["num_tiles"], m["chip_tiles"]
    if not n or n == of:
        return {}
    return dict(pcus=m["pcus"] * n // of, pmus=m["pmus"] * n // of, ddr_bandwidth_gbps=m["ddr_bandwidth_gbps"] * n / of)


def compile_scenario(sc) -> RduProgram:
    """compile_program of a validated rdu scenario; its layout problems name the scenario file."""
    try:
        return compile_program(spec_from_scenario(sc))
    except InputError as e:
        where = sc.path or "<scenario>"
        raise InputError([f"{where}: {p}" for p in e.problems]) from None


def spec_for(preset: str = "sn30", **kw) -> RduSpec:
    """An RduSpec from a preset and keyword overrides (model fields by name), every other value the
    parameter table's default: for tests and scripts that do without a scenario."""
    values = {k: param("machine", k).default for k in MACHINE_KEYS}
    values.update({k: param("workload", k).default for k in RUN_KEYS})
    values.update({k: v for k, v in RDU_PRESETS[preset].items() if k in MACHINE_KEYS})
    model = {k: param("workload", k).default for k in MODEL_KEYS}
    model.update({k: kw.pop(k) for k in list(kw) if k in MODEL_KEYS})
    values.update(kw)
    return RduSpec(**values, model=Model(**model))


@dataclass(frozen=True)
class Op:
    """One operator (or collective stage) as a chip sees it, for one microbatch (docs/rdu.md)."""

    name: str
    kind: str  # an OPERATOR_KINDS kind, or "collective"
    phase: str
    layer: int
    flops: int  # F'
    weight_bytes: int  # W'
    input_bytes: int  # I
    output_bytes: int  # O
    width: int  # N', output elements per token
    collective_cycles: int = 0
    in_act: int = -1  # bytes of the input that the operator before wrote (-1: all of input_bytes)
    out_act: int = -1  # bytes of the output the operator after reads (-1: all of output_bytes)

    @property
    def reads_from_before(self) -> int:
        """Input bytes the previous operator produced: all of them forward, the output gradient
        backward (the saved forward input comes from DDR)."""
        return self.input_bytes if self.in_act < 0 else self.in_act

    @property
    def passes_on(self) -> int:
        """Output bytes the next operator consumes: all of them forward, the input gradient
        backward (a weight gradient goes to DDR)."""
        return self.output_bytes if self.out_act < 0 else self.out_act


@dataclass
class Stage:
    """An operator placed in a section: its PCUs and PMUs and its time per tile."""

    op: Op
    pcus: int = 0
    pcu0: int = 0
    groups: int = 0
    n_hi: int = 0
    n_lo: int = 0
    c_hi: int = 0
    c_lo: int = 0
    pmus: int = 0
    dur: int = 0


@dataclass
class Section:
    """A section template: its stages, tiles, DDR traffic per tile and PMUs (docs/rdu.md)."""

    name: str
    phase: str
    stages: list
    tiles: int
    load_bytes: int = 0  # per tile, spilled weights included
    store_bytes: int = 0  # per tile
    weight_bytes: int = 0  # Wsec
    resident_bytes: int = 0  # R
    spilled_bytes: int = 0  # E, streamed with every tile
    pmus: int = 0
    prefetch_cap: int = 0
    held_in: int = 0  # bytes of its input handed over on chip by the section before
    held_out: int = 0  # bytes of its output handed over on chip to the section after

    @property
    def flops(self) -> int:
        """FLOPs of one pass of the section over its microbatch."""
        return sum(s.op.flops for s in self.stages)


@dataclass
class RduProgram:
    """The tables the kernel runs (docs/rdu.md, "The program tables") and what reports need."""

    spec: RduSpec
    stage: np.ndarray
    section: np.ndarray
    instance: np.ndarray
    n_instances: np.ndarray
    buffer_tiles: int
    switch_cycles: int
    prefetch: int
    burst_bytes: int
    ddr_bytes_per_kcycle: int
    sections: list  # Section templates, in the order of the section table
    instance_microbatch: np.ndarray | None = None  # [chip, instance], -1 for the gradient all-reduce
    chips_total: int = 1

    @property
    def n_chips(self) -> int:
        return self.instance.shape[0]

    @property
    def max_stages(self) -> int:
        return max(1, int(self.section[:, K.SE_NSTAGES].max())) if len(self.section) else 1


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def _cycles_for(nbytes: int, gbps: float, clock_ghz: float) -> int:
    """Cycles to move nbytes at gbps: ceil(nbytes x clock_ghz / gbps), in exact rational arithmetic
    of the two decimal values as written."""
    return math.ceil(Fraction(nbytes) * Fraction(str(clock_ghz)) / Fraction(str(gbps)))


def chip_ops(spec: RduSpec, layers: range, phase: str, stage: int = 0) -> list[Op]:
    """The operators of `layers` in one phase as the chips of pipeline stage `stage` run them for one
    microbatch, with the tensor-parallel split and all-reduce stages (docs/rdu.md, "Operators"): the
    embedding before block 0 and the final norm, head and loss after the last block (edge_operators,
    whole on every chip of a tensor group)."""
    t, p, d = spec.degrees
    model = spec.model
    b = model.batch // (d * spec.microbatches)  # sequences per microbatch
    mb = replace(model, batch=b)
    tokens = mb.tokens
    e = mb.element_bytes
    forward = []
    for op in operators(mb, training=False):
        if op.layer not in layers:
            continue
        forward.append(tensor_split(op, t))
    first, last = edge_operators(mb, spec.vocab_size)
    if layers.start == 0:
        forward = first + forward
    if layers.stop == model.n_layers:
        forward = forward + last
    recompute = {}
    if spec.fusion == "o3":
        forward, recompute = fuse_attention(forward)
    chosen = forward if phase == "forward" else [_backward(op, recompute) for op in reversed(forward)]
    act = tokens * model.hidden_size * e
    out = []
    for op in chosen:
        short = op.name.split(".")[1]
        # width: output elements per token of the forward operator (the backward one's mirror it);
        # backward, the output gradient comes from the operator before and the input gradient goes
        # to the one after
        f = op if phase == "forward" else next(f for f in forward if f.name == op.name[: -len(".backward")])
        out.append(Op(op.name, op.kind, op.phase, op.layer, op.flops, op.weight_bytes, op.input_bytes,
                      op.output_bytes, max(1, ceil_div(f.output_bytes, e * tokens)),
                      in_act=_from_before(op, mb, t) if phase == "forward" else f.output_bytes,
                      out_act=-1 if phase == "forward" else f.input_bytes))
        if t > 1 and (short, op.phase) in TP_ALLREDUCE_AFTER:
            tb = spec.tile_tokens * model.hidden_size * e
            gbps, lat = spec.tensor_link(stage)
            cyc = 2 * (t - 1) * (lat + _cycles_for(ceil_div(tb, t), gbps, spec.clock_ghz))
            out.append(Op(f"{op.name}.allreduce", "collective", op.phase, op.layer, 0, 0, act, act,
                          model.hidden_size, cyc))
    return out


def _from_before(op, model, t: int) -> int:
    """A forward operator's in_act: -1 (all of its input is what the operator before wrote), or, for
    attention with a key-value cache, its input less the cached keys and values, which come from
    memory (transformer.cached_kv_bytes; a chip of a tensor group of t holds 1 / t of the heads)."""
    cached = -(-cached_kv_bytes(model, op.name) // t)
    return max(0, op.input_bytes - cached) if cached else -1


def fuse_attention(forward: list) -> tuple[list, dict]:
    """o3's attention: each layer's attn_scores_softmax and attn_v as one operator,
    "layer<i>.attention", that reads Q, K and V and writes the heads' output and never the scores
    (docs/rdu.md, "Operators"); with the FLOPs of the scores and softmax, by name, that its backward
    computes again."""
    out, recompute = [], {}
    for op in forward:
        short = op.name.split(".")[1]
        if short == "attn_v" and out and out[-1].name.split(".")[1] == "attn_scores_softmax":
            s = out.pop()
            name = f"layer{op.layer}.attention"
            out.append(Operator(name, op.layer, "attention", "forward", s.flops + op.flops, 0,
                                s.input_bytes + op.input_bytes - s.output_bytes, op.output_bytes))
            recompute[name] = s.flops
        else:
            out.append(op)
    return out, recompute


def _backward(op, recompute: dict):
    """backward_of, plus the forward FLOPs a fused operator computes again (fuse_attention)."""
    b = backward_of(op)
    return replace(b, flops=b.flops + recompute[op.name]) if op.name in recompute else b


def _buffer_bytes(op: Op, spec: RduSpec) -> int:
    """Bytes of an operator's input buffer: B tiles of its input."""
    return spec.buffer_tiles * ceil_div(op.input_bytes, spec.tiles)


def _pmu_need(op: Op, spec: RduSpec) -> int:
    """PMUs an operator needs without spilling: its weights and its input buffer."""
    return max(1, ceil_div(op.weight_bytes + _buffer_bytes(op, spec), spec.pmu_bytes))


def form_sections(ops: list[Op], spec: RduSpec) -> list[list[Op]]:
    """Cut one phase's operators into sections by the fusion mode (docs/rdu.md, "Sections")."""
    groups: list[list[Op]] = []
    for op in ops:
        anchored = bool(groups) and any(o.kind in ANCHOR_KINDS for o in groups[-1])
        if op.kind == "collective" and groups:
            groups[-1].append(op)  # a collective rides along with its operator
        elif spec.fusion == "o0" or not groups or op.kind == "norm" or (op.kind in ANCHOR_KINDS and anchored):
            groups.append([op])
        else:
            groups[-1].append(op)
    if spec.fusion in ("o0", "o1"):
        return groups
    # o3: merge o1's sections, in order, while the merged section fits
    max_ops = max(2, ceil_div(spec.tiles, 2))
    fill = Fraction(str(spec.section_fill))
    merged: list[list[Op]] = []
    for group in groups:
        if merged:
            cur = merged[-1] + group
            need = sum(_pcu_need(o, spec) for o in cur)
            pmus = sum(_pmu_need(o, spec) for o in cur)
            if need <= fill * spec.pcus and len(cur) <= max_ops and pmus <= spec.pmus:
                merged[-1] = cur
                continue
        merged.append(list(group))
    return merged


def _pcu_need(op: Op, spec: RduSpec) -> int:
    """PCUs o3 counts an operator as needing: one per column group of its output, ceil(N' / L); a
    backward GEMM computes two products, the input gradient (as wide as the forward input) and the
    weight gradient (as wide as the forward output), and needs the column groups of both; a
    collective stage needs none."""
    if op.kind == "collective":
        return 0
    need = ceil_div(op.width, spec.pcu_lanes)
    if op.kind == "gemm" and op.phase == "backward":
        need += ceil_div(ceil_div(op.passes_on, spec.model.element_bytes * spec.tokens), spec.pcu_lanes)
    return need


def _pcus_for_ddr(compute: list[Stage], per_tile: int, spec: RduSpec) -> list[int] | None:
    """PCUs per compute operator that bring its compute per tile within the section's DDR time per
    tile (per_tile bytes, ld + sd), and never below its column groups (docs/rdu.md, "Allocation"):
    more would only wait on DDR. None when that time is no longer than a PCU's pipeline fill."""
    d, r = spec.pcu_stages, spec.rate
    tau = _cycles_for(per_tile, spec.ddr_bandwidth_gbps, spec.clock_ghz) - d
    if tau <= 0:
        return None
    enough = []
    for s in compute:
        cap = s.groups * spec.tile_tokens
        if not s.op.flops:
            enough.append(s.groups)
            continue
        # pairs one PCU takes within tau cycles: the largest x with x F r_d <= tau T N' 2 D r_n
        per = tau * spec.tokens * s.op.width * 2 * d * r.numerator // (s.op.flops * r.denominator)
        enough.append(max(s.groups, min(cap, ceil_div(cap, per))) if per else cap)
    return enough


def _allocate_pcus(stages: list[Stage], spec: RduSpec, per_tile: int) -> None:
    """n_j, the PCUs of each compute operator of a section that moves per_tile DDR bytes a tile, and
    where they sit (docs/rdu.md, "Allocation")."""
    compute = [s for s in stages if s.op.kind != "collective"]
    for s in compute:
        s.groups = ceil_div(s.op.width, spec.pcu_lanes)
    enough = _pcus_for_ddr(compute, per_tile, spec)
    usable = place_limit(spec, len(compute))
    if enough is not None and sum(enough) <= usable:
        for s, n in zip(compute, enough, strict=True):
            s.pcus = n
        _place(compute, spec)
        return
    # an operator can use one PCU per (column group, tile token) pair: PCUs past its column groups
    # share the tile's tokens
    tt = spec.tile_tokens
    total = sum(s.op.flops for s in compute)
    spare = usable - len(compute)  # every operator has one PCU; these are shared by FLOPs
    for s in compute:
        share = (spare * s.op.flops) // total if total else 0
        s.pcus = min(s.groups * tt, 1 + share)
    left = usable - sum(s.pcus for s in compute)
    while left > 0:
        best = None
        for s in compute:
            # largest F/n first; compare F_a n_b > F_b n_a exactly; ties keep the earlier stage
            if s.pcus < s.groups * tt and (best is None or s.op.flops * best.pcus > best.op.flops * s.pcus):
                best = s
        if best is None:
            break
        best.pcus += 1
        left -= 1
    _place(compute, spec)


def place_limit(spec: RduSpec, operators: int) -> int:
    """The PCUs a section's operators may be placed on: floor(pcu_place_limit x pcus), never fewer than
    one per operator (docs/rdu.md, "Allocation")."""
    return max(operators, math.floor(Fraction(str(spec.pcu_place_limit)) * spec.pcus))


def _place(compute: list[Stage], spec: RduSpec) -> None:
    """Placement: packed from PCU 0, or spread with the free PCUs as k + 1 equal gaps (floor of the
    running share), before, between and after the k operators."""
    free = spec.pcus - sum(s.pcus for s in compute)
    gaps = len(compute) + 1 if spec.placement == "spread" else 0
    pcu0 = 0
    for j, s in enumerate(compute):
        s.pcu0 = pcu0 + ((j + 1) * free // gaps if gaps else 0)
        pcu0 += s.pcus
    assert pcu0 + (len(compute) * free // gaps if gaps else 0) <= spec.pcus, (pcu0, spec.pcus)


def _pcu_cycles(x: int, op: Op, spec: RduSpec, tokens: int) -> int:
    """c(x) of docs/rdu.md: cycles per tile of a PCU holding x (column group, tile token) pairs."""
    if x == 0:
        return 0
    d, r = spec.pcu_stages, spec.rate
    return ceil_div(x * op.flops * r.denominator, tokens * op.width * 2 * d * r.numerator) + d


def lay_out_section(ops: list[Op], spec: RduSpec, name: str) -> Section:
    """The PMUs each operator needs (spilling weights when they do not fit) for one section
    (docs/rdu.md, "Allocation"); `finish_section` completes it, PCUs included."""
    tiles, qb = spec.tiles, spec.pmu_bytes
    stages = [Stage(op) for op in ops]
    n_compute = sum(1 for op in ops if op.kind != "collective")
    if n_compute > spec.pcus:
        raise InputError(f"section {name}: {n_compute} compute operators but machine.pcus = {spec.pcus}: a section "
                         "needs at least one PCU per operator (raise machine.pcus, or fuse less with "
                         "workload.fusion)")
    need = [_pmu_need(s.op, spec) for s in stages]
    w_sec = sum(s.op.weight_bytes for s in stages)
    sec = Section(name=name, phase=ops[0].phase, stages=stages, tiles=tiles, weight_bytes=w_sec)
    if sum(need) > spec.pmus:
        buffers = [max(1, ceil_div(_buffer_bytes(s.op, spec), qb)) for s in stages]
        q_w = spec.pmus - sum(buffers)
        if q_w < 0:
            raise InputError(f"section {name}: its tile buffers alone need {sum(buffers)} PMUs but machine.pmus = "
                             f"{spec.pmus} (of machine.pmu_kib = {spec.pmu_kib} KiB); lower workload.tile_tokens = "
                             f"{spec.tile_tokens} or machine.buffer_tiles = {spec.buffer_tiles}, raise machine.pmus "
                             "or machine.pmu_kib, or fuse less with workload.fusion")
        sec.resident_bytes = min(w_sec, q_w * qb)
        sec.spilled_bytes = w_sec - sec.resident_bytes
        # The weights' PMUs are shared out like the bytes: each stage keeps its buffers plus its
        # share of the weight PMUs, in proportion to its weights (for its PMU bandwidth).
        shares = _proportional(q_w, [s.op.weight_bytes for s in stages])
        for s, buf, extra in zip(stages, buffers, shares, strict=True):
            s.pmus = buf + extra
        sec.pmus = spec.pmus
    else:
        sec.resident_bytes = w_sec
        for s, n in zip(stages, need, strict=True):
            s.pmus = n
        sec.pmus = sum(need)
    return sec


def finish_section(sec: Section, spec: RduSpec, held_in: int = 0, held_out: int = 0, reserve: int = 0) -> Section:
    """Elastic PMUs, prefetch room, DDR traffic per tile, then the PCUs (which depend on that
    traffic), their classes and the stage times of a laid-out section.

    held_in, held_out: bytes of its input and output that stay on chip, handed over from the
    section before and to the section after; reserve: PMUs kept free for prefetching weights.
    """
    qb, tokens = spec.pmu_bytes, spec.tokens
    tiles = sec.tiles
    stages, ops = sec.stages, [s.op for s in sec.stages]
    if spec.elastic_pmus and not sec.spilled_bytes:
        gemms = [s for s in stages if s.op.kind == "gemm"]
        left = spec.pmus - sec.pmus - reserve - ceil_div(held_in + held_out, qb)
        for s, n in zip(gemms, _proportional(left, [s.op.flops for s in gemms]), strict=True):
            s.pmus += n
        sec.pmus = sum(s.pmus for s in stages)
    sec.held_in, sec.held_out = held_in, held_out
    sec.prefetch_cap = max(0, (spec.pmus - sec.pmus) * qb - held_in - held_out)
    load = ops[0].input_bytes + sum(max(0, b.input_bytes - a.output_bytes) for a, b in zip(ops, ops[1:], strict=False))
    store = ops[-1].output_bytes
    if spec.training and sec.phase == "forward":
        # every activation is saved for the backward pass, handed over or not; an operator's partial
        # sums count once, as the output of the all-reduce that follows it
        store += sum(a.output_bytes for a, b in zip(ops, ops[1:], strict=False) if b.kind != "collective")
    elif not (sec.phase == "forward" and ops[-1].name.split(".")[1].startswith("residual")):
        # the residual stream is read again by the next residual add, from DDR: it is always stored
        store -= held_out
    sec.load_bytes = ceil_div(load - held_in, tiles) + sec.spilled_bytes
    sec.store_bytes = ceil_div(store, tiles)
    _allocate_pcus(stages, spec, sec.load_bytes + sec.store_bytes)
    for s in stages:
        if s.op.kind == "collective":
            s.dur = s.op.collective_cycles
            continue
        # whole column groups while the PCUs are at most the groups, else the tile's tokens of
        # every column group dealt out: u (column group, token) pairs a PCU
        u = spec.tile_tokens if s.pcus <= s.groups else 1
        q, r = divmod(s.groups * spec.tile_tokens // u, s.pcus)
        if r:
            s.n_hi, s.n_lo = r, s.pcus - r
            s.c_hi, s.c_lo = _pcu_cycles((q + 1) * u, s.op, spec, tokens), _pcu_cycles(q * u, s.op, spec, tokens)
        else:
            s.n_hi, s.n_lo = s.pcus, 0
            s.c_hi, s.c_lo = _pcu_cycles(q * u, s.op, spec, tokens), 0
        # PCUs that share a column group's tokens each read its weights
        copies = ceil_div(s.pcus, s.groups) if s.pcus > s.groups else 1
        moved = copies * s.op.weight_bytes + ceil_div(s.op.input_bytes, tiles) + ceil_div(s.op.output_bytes, tiles)
        # Each PCU reads through the PMU it is paired with, so an operator streams through at
        # least as many PMUs as it has PCUs.
        s.dur = max(s.c_hi, ceil_div(moved, max(s.pmus, s.pcus) * spec.pmu_bytes_per_cycle))
    return sec


def build_section(ops: list[Op], spec: RduSpec, name: str, reserve: int = 0) -> Section:
    """A section on its own (nothing handed over on chip): `lay_out_section` then `finish_section`."""
    return finish_section(lay_out_section(ops, spec, name), spec, reserve=reserve)


def hand_over(sections: list[Section], spec: RduSpec) -> list[tuple[int, int]]:
    """(held_in, held_out) per section of one phase of a chip (docs/rdu.md, "On-chip hand-over"):
    the bytes a section reads that the one before wrote (min of what the last operator passes on and
    what the next section's first reads from before) stay in PMUs when the PMUs both sections leave
    free hold them (with the input the first still holds)."""
    qb = spec.pmu_bytes
    held = [[0, 0] for _ in sections]
    for i, (a, b) in enumerate(zip(sections, sections[1:], strict=False)):
        h = min(a.stages[-1].op.passes_on, b.stages[0].op.reads_from_before)
        free_a = (spec.pmus - a.pmus) * qb
        free_b = (spec.pmus - b.pmus) * qb
        if h > 0 and held[i][0] + h <= free_a and h <= free_b:
            held[i][1] = held[i + 1][0] = h
    return [tuple(x) for x in held]


def _proportional(total: int, weights: list[int]) -> list[int]:
    """`total` units shared in proportion to `weights`: floors, then one each by largest remainder
    (ties to the earlier); all to nobody when the weights are all 0."""
    s = sum(weights)
    if total <= 0 or s == 0:
        return [0] * len(weights)
    base = [total * w // s for w in weights]
    rem = sorted(range(len(weights)), key=lambda i: (-(total * weights[i] % s), i))
    for i in rem[: total - sum(base)]:
        base[i] += 1
    return base


def layer_groups(n_layers: int, p: int, split: tuple = ()) -> list[range]:
    """Contiguous layers per pipeline stage: `split[i]` for stage i when given (one entry per stage,
    summing to n_layers), else as even as can be (the first n_layers mod p get one more)."""
    if split:
        if len(split) != p or sum(split) != n_layers or min(split) < 1:
            raise InputError(f"workload.layers_per_stage = {list(split)}: needs {p} entries of at least 1 "
                             f"summing to {n_layers}")
        starts = [sum(split[:i]) for i in range(p)]
        return [range(a, a + n) for a, n in zip(starts, split, strict=True)]
    q, r = divmod(n_layers, p)
    out, start = [], 0
    for i in range(p):
        n = q + (1 if i < r else 0)
        out.append(range(start, start + n))
        start += n
    return out


def compile_program(spec: RduSpec) -> RduProgram:
    """The chips' programs for one step (docs/rdu.md, "The chip programs"). Raises InputError when the
    model cannot be laid out (a section whose buffers do not fit, more operators than PCUs)."""
    t, p, d = spec.degrees
    model = spec.model
    m = spec.microbatches
    if p > model.n_layers or model.batch % (d * m) or model.n_heads % t or model.kv_heads % t or model.ffn_size % t:
        raise InputError(f"parallelism {spec.parallelism} with {m} microbatches does not divide the model: the "
                         f"pipeline degree must be at most n_layers = {model.n_layers}, data degree x "
                         f"microbatches must divide batch = {model.batch}, the tensor degree must divide "
                         f"n_heads = {model.n_heads}, n_kv_heads = {model.kv_heads} and the MLP width "
                         f"{model.ffn_size}")
    tokens = spec.tokens
    e = model.element_bytes
    sections: list[Section] = []
    chip_fwd, chip_bwd = [], []
    chip_weights = []
    for i, layers in enumerate(layer_groups(model.n_layers, p, tuple(spec.layers_per_stage))):
        per_phase = []
        for phase in ("forward", "backward") if spec.training else ("forward",):
            ops = chip_ops(spec, layers, phase, i)
            if phase == "forward":
                # the head shares the token table's weights when one chip holds both (edge_operators)
                tied = any(op.name == HEAD for op in ops) and layers.start == 0
                chip_weights.append(sum(op.weight_bytes for op in ops if not (tied and op.name == HEAD)))
            idx = []
            groups = form_sections(ops, spec)
            laid = [lay_out_section(g, spec, f"chip{i}:" + (g[0].name if len(g) == 1 else f"{g[0].name}..{g[-1].name}"))
                    for g in groups]
            # With prefetch, elastic PMUs leave room for the largest weights of the chip's sections.
            reserve = 0
            if spec.prefetch:
                reserve = max(ceil_div(sec.resident_bytes, spec.pmu_bytes) for sec in laid)
            for sec, (h_in, h_out) in zip(laid, hand_over(laid, spec), strict=True):
                idx.append(len(sections))
                sections.append(finish_section(sec, spec, h_in, h_out, reserve))
            per_phase.append(idx)
        chip_fwd.append(per_phase[0])
        chip_bwd.append(per_phase[1] if spec.training else [])

    def delay(i: int) -> int:  # a microbatch's activations (or gradients) between stages i and i + 1
        gbps, lat = spec.pipeline_link(i)
        return lat + _cycles_for(tokens * model.hidden_size * e, gbps, spec.clock_ghz)

    programs = []
    for i in range(p):
        prog = []  # (template, microbatch, phase "f", "b", "g" or "u", position in the phase)
        for j in range(m):
            for n, x in enumerate(chip_fwd[i]):
                prog.append((x, j, "f", n))
        for j in reversed(range(m)) if spec.training else ():
            for n, x in enumerate(chip_bwd[i]):
                prog.append((x, j, "b", n))
        if spec.training and d > 1:
            gbps, lat = spec.data_link(i)
            cyc = 2 * (d - 1) * (lat + _cycles_for(ceil_div(chip_weights[i], d), gbps, spec.clock_ghz))
            op = Op(f"chip{i}:gradient.allreduce", "collective", "backward", -1, 0, 0, 0, 0, 1, cyc)
            st = Stage(op, dur=cyc)
            sec = Section(name=op.name, phase="backward", stages=[st], tiles=1,
                          prefetch_cap=spec.pmus * spec.pmu_bytes)
            prog.append((len(sections), -1, "g", 0))
            sections.append(sec)
        if spec.training and spec.optimizer != "none":
            prog.append((len(sections), -1, "u", 0))
            sections.append(optimizer_section(spec, i, chip_weights[i]))
        programs.append(prog)
    # Dependencies between chips: first forward section of microbatch j on chip i waits for the
    # last forward section of j on chip i-1; first backward section on i for the last on i+1.
    where = [{(mb, ph, n): k for k, (_, mb, ph, n) in enumerate(prog)} for prog in programs]
    rows = []
    for i, prog in enumerate(programs):
        out = []
        for x, mb, ph, n in prog:
            dep = (-1, -1, 0)
            if ph == "f" and n == 0 and i > 0 and chip_fwd[i - 1]:
                dep = (i - 1, where[i - 1][(mb, "f", len(chip_fwd[i - 1]) - 1)], delay(i - 1))
            if ph == "b" and n == 0 and i < p - 1 and chip_bwd[i + 1]:
                dep = (i + 1, where[i + 1][(mb, "b", len(chip_bwd[i + 1]) - 1)], delay(i))
            out.append((x, *dep, mb))
        rows.append(out)
    n_inst = np.array([len(r) for r in rows], np.int64)
    inst = np.full((p, max(1, int(n_inst.max())), K.N_IN), -1, np.int64)
    inst[:, :, K.IN_DELAY] = 0
    mbs = np.full((p, inst.shape[1]), -1, np.int64)
    for i, r in enumerate(rows):
        for k, (x, dc, di, dl, mb) in enumerate(r):
            inst[i, k] = (x, dc, di, dl)
            mbs[i, k] = mb
    stage_rows, sec_rows = [], []
    for sec in sections:
        sec_rows.append((len(stage_rows), len(sec.stages), sec.tiles, sec.load_bytes, sec.store_bytes,
                         sec.resident_bytes, sec.prefetch_cap, sec.pmus))
        for s in sec.stages:
            stage_rows.append((1 if s.op.kind == "collective" else 0, s.n_hi, s.n_lo, s.c_hi, s.c_lo, s.dur, s.pcu0,
                               s.pmus))
    return RduProgram(
        spec=spec,
        stage=np.array(stage_rows, np.int64).reshape(-1, K.N_ST),
        section=np.array(sec_rows, np.int64).reshape(-1, K.N_SE),
        instance=inst,
        n_instances=n_inst,
        buffer_tiles=spec.buffer_tiles,
        switch_cycles=spec.section_switch_cycles,
        prefetch=int(spec.prefetch),
        burst_bytes=spec.ddr_burst_kib * 1024,
        ddr_bytes_per_kcycle=max(1, round(1024 * spec.ddr_bandwidth_gbps / spec.clock_ghz)),
        sections=sections,
        instance_microbatch=mbs,
        chips_total=t * p * d,
    )


def optimizer_section(spec: RduSpec, chip: int, weight_bytes: int) -> Section:
    """The optimiser update that ends chip `chip`'s training step (docs/rdu.md, "The chip
    programs"): its parameters streamed from DDR and back in tiles of tile_tokens x hidden_size
    parameters, every PCU updating a share of each tile, in fp32 with fp32 master weights."""
    e = spec.model.element_bytes
    cost = update_cost(spec.model.precision, spec.master_weights, spec.optimizer)
    params = ceil_div(weight_bytes, e)
    tiles = max(1, ceil_div(params, spec.tile_tokens * spec.model.hidden_size))
    per_tile = ceil_div(params, tiles)
    r = compute_rate("fp32", spec.fp32_rate) if spec.master_weights == "fp32" else spec.rate
    d = spec.pcu_stages
    c = ceil_div(cost["flops"] * per_tile * r.denominator, spec.pcus * spec.pcu_lanes * 2 * d * r.numerator) + d
    op = Op(f"chip{chip}:optimizer", "optimizer", "backward", -1, cost["flops"] * params, 0,
            cost["read"] * params, cost["written"] * params, 1)
    ld, sd = ceil_div(cost["read"] * params, tiles), ceil_div(cost["written"] * params, tiles)
    pmus = min(spec.pmus, max(1, ceil_div(spec.buffer_tiles * (ld + sd), spec.pmu_bytes)))
    st = Stage(op, pcus=spec.pcus, groups=spec.pcus, n_hi=spec.pcus, c_hi=c, pmus=pmus, dur=c)
    return Section(name=op.name, phase="backward", stages=[st], tiles=tiles, load_bytes=ld, store_bytes=sd,
                   pmus=pmus, prefetch_cap=(spec.pmus - pmus) * spec.pmu_bytes)


def roofline_rows(values: dict, platform) -> list[dict]:
    """The sections of chip 0 that hold an operator of layer 0, each on its own roofline (docs/rdu.md,
    "Roofline"): the FLOPs of one pass over a microbatch against the bytes it moves over DDR (its
    resident weights once, every tile's loads and stores, spilled weights included). Its
    compute roof is what its slowest stage allows, FLOPs over tiles x that stage's cycles per tile;
    the stage is bound by its PCUs ("compute"), its PMUs' bandwidth ("on-chip") or, a tensor
    all-reduce, the interconnect ("interconnect"); the DDR roof
    is intensity x bandwidth ("memory"). The lower roof is the bound, as in the run."""
    from types import SimpleNamespace

    prog = compile_scenario(SimpleNamespace(values=values, path=None))
    clock = prog.spec.clock_ghz * 1e9
    chip0 = {int(prog.instance[0, k, K.IN_SECTION]) for k in range(int(prog.n_instances[0]))}
    rows = []
    for x, sec in enumerate(prog.sections):
        if x not in chip0 or not any(s.op.layer == 0 for s in sec.stages) or not sec.flops:
            continue
        ddr = sec.resident_bytes + sec.tiles * (sec.load_bytes + sec.store_bytes)
        slow = max(sec.stages, key=lambda s: s.dur)
        stage_roof = sec.flops / (sec.tiles * slow.dur / clock)
        ddr_roof = sec.flops / ddr * platform.bandwidth if ddr else math.inf
        bound = ("memory" if ddr_roof < stage_roof else "interconnect" if slow.op.kind == "collective"
                 else "on-chip" if slow.dur > slow.c_hi else "compute")
        rows.append(dict(name=sec.name.split(":", 1)[1], kind="section", flops=sec.flops, bytes=ddr,
                         intensity=sec.flops / ddr if ddr else math.inf, attainable_flops=min(stage_roof, ddr_roof),
                         bound=bound, slowest_stage=slow.op.name, pcus=sum(s.pcus for s in sec.stages)))
    return rows
