"""The IPU compiler: a transformer mapped onto the tiles of pipeline stages (docs/ipu.md).

`compile_scenario` turns a validated ipu scenario into an `IpuProgram`: per stage its superstep
templates (forward, and backward with training) with every tile's busy cycles and the phases'
lengths, every tile's memory (an InputError naming the IPU when a tile overflows), and the
pipeline's transfer costs. `kernels.ipu.run_steps` then runs the schedule.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from kernels import ipu as K

from ..errors import InputError
from ..topology import node_link
from ..transformer import (
    FINAL_NORM,
    HEAD,
    NORMS,
    PHASES,
    TP_ALLREDUCE_AFTER,
    Model,
    Operator,
    backward_of,
    compute_rate,
    model_from_workload,
    operators,
    tensor_split,
    update_cost,
)

#: Template kinds (docs/ipu.md, "Result file": templates/kind).
KINDS = ("gemm", "attention", "elementwise", "norm", "embedding")
#: Bytes per token id streamed in on IPU 0.
TOKEN_ID_BYTES = 4


@dataclass(frozen=True)
class IpuSpec:
    """The resolved machine and workload of an ipu scenario (names as in docs/ipu.md)."""

    tiles: int
    tile_sram_kib: int
    clock_ghz: float
    macs_per_cycle: int
    worker_threads: int
    exchange_bytes_per_cycle: int
    ipu_link_gbps: float
    streaming_memory_gbps: float
    sync_cycles: int
    ipu_sync_cycles: int
    exchange_latency_cycles: int
    vector_flops_per_cycle: int
    gemm_block: int
    code_kib_per_tile: int
    preset: str
    fp32_rate: float
    model: Model  # batch = the whole step's sequences over every replica
    micro: Model  # batch = one micro-batch's sequences
    layers_per_stage: tuple[int, ...]
    replicas: int
    microbatches: int
    vocab_size: int
    training: bool
    recompute: bool
    steps: int
    tensor_parallel: int = 1
    optimizer: str = "none"
    master_weights: str = "same"
    ipus_per_node: int = 16
    node_link_gbps: float = 6.25
    node_sync_cycles: int = 20000
    host_seconds: float = 0.0  # the host's part of every step, outside the chips
    # training: "interleaved" (the key's default) or "grouped" (GPipe); a scenario written before the key
    # (an older result file's) ran grouped
    pipeline_schedule: str = "grouped"
    # generation (workload.type "decode", docs/ipu.md, "Generation"): the micro model is one step of one
    # token a sequence over a static cache of `cache_tokens` positions, and IPU 0 holds the output head
    decode: bool = False
    cache_tokens: int = 0

    @property
    def interleaved(self) -> bool:
        """Whether a training step's forward and backward pipeline steps interleave (docs/ipu.md)."""
        return self.training and self.pipeline_schedule == "interleaved"

    def in_flight(self, s: int) -> int:
        """Micro-batches whose activations stage s keeps at once in training (docs/ipu.md, "Memory"):
        every one grouped; interleaved, those between its forward and its backward, min(m, 2 (n - 1 - s) + 1)."""
        if not self.interleaved:
            return self.microbatches
        return min(self.microbatches, 2 * (self.stages - 1 - s) + 1)

    def link(self, groups) -> tuple[float, int]:
        """(GB/s, sync cycles) of a movement every group of IPUs in `groups` makes at once: the
        IPU-Links when each group lies in one node, else the links between nodes (docs/ipu.md,
        "Topology"). IPU (ti, s, ri) is number (ri n + s) t + ti."""
        return node_link(groups, self.ipus_per_node, (self.ipu_link_gbps, self.ipu_sync_cycles),
                         (self.node_link_gbps, self.node_sync_cycles))

    def ipu_number(self, ti: int, s: int, ri: int) -> int:
        return (ri * self.stages + s) * self.tensor_parallel + ti

    def tensor_link(self, s: int) -> tuple[float, int]:
        t = self.tensor_parallel
        return self.link([[self.ipu_number(ti, s, ri) for ti in range(t)] for ri in range(self.replicas)])

    def stage_link(self) -> tuple[float, int]:
        t = self.tensor_parallel
        return self.link([[self.ipu_number(ti, s, ri), self.ipu_number(ti, s + 1, ri)]
                          for s in range(self.stages - 1) for ti in range(t) for ri in range(self.replicas)])

    def replica_link(self) -> tuple[float, int]:
        t = self.tensor_parallel
        return self.link([[self.ipu_number(ti, s, ri) for ri in range(self.replicas)]
                          for s in range(self.stages) for ti in range(t)])

    @property
    def stages(self) -> int:
        return len(self.layers_per_stage)

    @property
    def rate(self):
        """The MACs' rate at the model's precision as an exact fraction of the 16-bit rate."""
        return compute_rate(self.model.precision, self.fp32_rate)

    @property
    def peak_flops_per_cycle(self) -> float:
        """FLOPs one IPU can do per cycle at the model's precision: tiles x MACs x 2 x rate."""
        return float(self.tiles * self.macs_per_cycle * 2 * self.rate)


def spec_of(values: dict) -> IpuSpec:
    m, w = values["machine"], values["workload"]
    model = model_from_workload(w)
    mb = w["microbatches"]
    micro = model_from_workload(w, batch=w["batch"] // (w["replicas"] * mb))
    decode = w.get("type") == "decode"
    cache = 0
    if decode:
        # one new token a sequence, attending over the whole static buffer (docs/ipu.md, "Generation")
        cache = w["context"] + w["output_tokens"]
        model = replace(model, seq_len=1, context=cache - 1)
        micro = replace(micro, seq_len=1, context=cache - 1)
    split = tuple(w["layers_per_stage"]) or (w["n_layers"],)
    keys = ("tiles", "tile_sram_kib", "clock_ghz", "macs_per_cycle", "worker_threads", "exchange_bytes_per_cycle",
            "ipu_link_gbps", "streaming_memory_gbps", "sync_cycles", "ipu_sync_cycles", "exchange_latency_cycles",
            "vector_flops_per_cycle", "gemm_block", "code_kib_per_tile", "preset", "fp32_rate")
    return IpuSpec(**{k: m[k] for k in keys}, model=model, micro=micro, layers_per_stage=split,
                   replicas=w["replicas"], microbatches=mb, vocab_size=w["vocab_size"], training=w["training"],
                   recompute=w["recompute"] and w["training"], steps=values["run"]["steps"],
                   tensor_parallel=w.get("tensor_parallel", 1), optimizer=w.get("optimizer", "none"),
                   master_weights=w.get("master_weights", "same"), ipus_per_node=m.get("ipus_per_node", 16),
                   node_link_gbps=m.get("node_link_gbps", 6.25), node_sync_cycles=m.get("node_sync_cycles", 20000),
                   host_seconds=m.get("host_seconds", 0.0),
                   pipeline_schedule=w.get("pipeline_schedule", "grouped"), decode=decode, cache_tokens=cache)


def bytes_cycles(nbytes: int, gbps: float, clock_ghz: float) -> int:
    """Cycles to move `nbytes` at `gbps` GB/s: ceil(bytes x clock / bandwidth) in double precision."""
    return math.ceil(nbytes * clock_ghz / gbps) if nbytes else 0


@dataclass
class _Units:
    """The work units of one forward operator (docs/ipu.md, "Work units")."""

    op: Operator
    kind: str
    cost: np.ndarray  # forward cycles per unit
    cost_backward: np.ndarray
    out_bytes: np.ndarray
    in_bytes: np.ndarray
    offset: int  # the stage's unit count before this operator

    @property
    def even(self) -> bool:
        return self.kind != "attention"


def _ceil_div(a, b):
    return -(-a // b)


def _units(op: Operator, kind: str, spec: IpuSpec) -> tuple:
    """(cost, cost_backward, out_bytes, in_bytes) int64 arrays of one forward operator's units."""
    mdl, e, n = spec.micro, spec.micro.element_bytes, spec.tiles
    t_tokens, b = mdl.tokens, spec.gemm_block
    # M at the precision, M x rate = mac / den exactly: fp32 and tf32 at fp32_rate of the 16-bit MACs
    mac, den = spec.macs_per_cycle * spec.rate.numerator, spec.rate.denominator
    if kind == "gemm":
        k_in, c_out = op.input_bytes // (t_tokens * e), op.output_bytes // (t_tokens * e)
        rows = np.array([min(b, t_tokens - i) for i in range(0, t_tokens, b)], np.int64)
        cols = np.array([min(b, c_out - j) for j in range(0, c_out, b)], np.int64)
        rq = np.outer(rows, cols).ravel()
        cost = _ceil_div(rq * k_in * den, mac)
        back = _ceil_div(2 * rq * k_in * den, mac)  # ceil(2 x 2 r q K / 2M)
        out = rq * e
        inp = np.repeat(rows * k_in * e, len(cols))
        return cost, back, out, inp
    if kind == "attention":
        s_len, heads, bm = mdl.seq_len, mdl.n_heads // spec.tensor_parallel, mdl.batch
        d = bm * heads * s_len
        blocks = np.array([min(b, s_len - i) for i in range(0, s_len, b)], np.int64)
        r = np.tile(blocks, bm * heads)
        # F(o) / D, O(o) / D and I(o) / D are whole numbers for attention (docs/ipu.md), so dividing
        # first keeps the products small
        f_u = (op.flops // d) * r
        cost = _ceil_div(f_u * den, 2 * mac)
        back = _ceil_div(2 * f_u * den, 2 * mac)
        return cost, back, (op.output_bytes // d) * r, (op.input_bytes // d) * r
    # elementwise, norm, embedding: n slices
    elements = op.output_bytes // e
    phi = op.flops // elements
    s = np.full(n, elements // n, np.int64)
    s[: elements % n] += 1
    cost = _ceil_div(s * phi, spec.vector_flops_per_cycle)
    inp = np.zeros(n, np.int64) if kind == "embedding" else (op.input_bytes // elements) * s  # exact per element
    return cost, cost.copy(), s * e, inp


def _embedding(spec: IpuSpec) -> Operator:
    m = spec.micro
    e, th = m.element_bytes, m.tokens * m.hidden_size
    return Operator("embedding", -1, "elementwise", "forward", th, spec.vocab_size * m.hidden_size * e, 0, th * e)


@dataclass
class Template:
    """One superstep template: an operator's superstep on a stage, as every instance runs it."""

    stage: int
    name: str
    direction: int
    kind: int
    units: int
    flops: int
    compute: int
    sync: int
    exchange: int
    sent_max: int
    received_max: int
    li: float
    layer: int


@dataclass
class IpuProgram:
    spec: IpuSpec
    templates: list
    busy: np.ndarray  # int64[templates, tiles]: each tile's busy cycles in one instance
    fwd_ptr: np.ndarray
    fwd_idx: np.ndarray
    bwd_ptr: np.ndarray
    bwd_idx: np.ndarray
    t_comp: np.ndarray
    t_sync: np.ndarray
    t_exch: np.ndarray
    io0: int  # token ids streamed in on IPU 0 per micro-batch
    transfer: int  # per pipeline step (0 with one stage)
    allreduce: int  # per step; -1 for none
    memory: np.ndarray  # int64[stages, tiles]
    memory_parts: dict  # code, weights, activations: int64[stages, tiles] (code a scalar)
    stage_layers: list  # per stage, the block indices it holds
    update: int = 0  # the optimiser update's cycles per step; 0 for none

    @property
    def stages(self) -> int:
        return self.spec.stages

    @property
    def rows_per_step(self) -> int:
        m = self.spec.microbatches
        return m * (len(self.fwd_idx) + (len(self.bwd_idx) if self.spec.training else 0))

    def stage_cycles(self, direction: int) -> np.ndarray:
        """Each stage's supersteps summed, int64[stages]: its forward (0) or backward (1) time per
        micro-batch, without IPU 0's token ids."""
        ptr, idx = (self.fwd_ptr, self.fwd_idx) if direction == 0 else (self.bwd_ptr, self.bwd_idx)
        per = self.t_comp + self.t_sync + self.t_exch
        return np.array([per[idx[ptr[s]:ptr[s + 1]]].sum() for s in range(self.stages)], np.int64)

    @property
    def pipeline_rows_per_step(self) -> int:
        n, m = self.stages, self.spec.microbatches
        end = 1 if self.spec.training and (self.allreduce >= 0 or self.update > 0) else 0
        if self.spec.interleaved:
            return m + 2 * n - 2 + end
        return (m + n - 1) * (2 if self.spec.training else 1) + end


def head_operators(spec: IpuSpec) -> tuple[Operator, list[Operator]]:
    """Generation's operators after the blocks (docs/ipu.md, "Generation"): the final norm (on the last
    IPU), and the output head and the choice of the next token (on IPU 0). With T tokens, H hidden size,
    V vocab_size, n and m the norm's FLOPs and parameters an element and e element bytes:

        op               kind         flops    weights           in       out
        head.final_norm  norm         n T H    m H               T H      T H
        head.logits      gemm         2 T H V  V H (0 if tied)   T H      T V
        head.argmax      elementwise  T V      0                 T V      T V

    A tied head reads the embedding's token table, which IPU 0 holds already; argmax compares every
    logit once and is cut into slices over the logits as every elementwise operator is."""
    m = spec.micro
    e, t, h, v = m.element_bytes, m.tokens, m.hidden_size, spec.vocab_size
    n_flops, n_params = NORMS[m.norm]
    end = m.n_layers
    norm = Operator(FINAL_NORM, end, "norm", "forward", n_flops * t * h, n_params * h * e, t * h * e, t * h * e)
    head = [Operator(HEAD, end, "gemm", "forward", 2 * t * h * v, 0 if m.tied_head else v * h * e, t * h * e,
                     t * v * e),
            Operator(ARGMAX, end, "elementwise", "forward", t * v, 0, t * v * e, t * v * e)]
    return norm, head


#: The operator that picks each sequence's next token from its logits (generation, greedy).
ARGMAX = "head.argmax"


def _stage_ops(spec: IpuSpec) -> list[list[tuple[Operator, str]]]:
    # each stage's t IPUs hold the split operators (docs/ipu.md, "Tensor parallelism")
    ops = [tensor_split(op, spec.tensor_parallel) for op in operators(spec.micro, training=False)]
    out, first = [], 0
    for s, count in enumerate(spec.layers_per_stage):
        layers = range(first, first + count)
        items = [(op, op.kind) for op in ops if op.layer in layers]
        if s == 0 and spec.vocab_size > 0:
            items.insert(0, (_embedding(spec), "embedding"))
        out.append(items)
        first += count
    if spec.decode and spec.vocab_size > 0:
        # generation: the final norm ends the last IPU's list; the head and argmax end IPU 0's, which
        # runs them after the hidden state comes back to it (docs/ipu.md, "Generation")
        norm, head = head_operators(spec)
        out[-1].append((norm, "norm"))
        out[0].extend((op, op.kind) for op in head)
    return out


def cache_bytes(spec: IpuSpec, layers: int, filled: int | None = None, microbatches: int | None = None) -> int:
    """Bytes of the key-value cache an IPU holding `layers` blocks keeps for the sequences of `microbatches`
    micro-batches (every one a replica runs when None): keys and values of `filled` positions (the whole
    static buffer when None), of the n_kv_heads / t heads it holds (docs/ipu.md, "Generation")."""
    m = spec.micro
    positions = spec.cache_tokens if filled is None else filled
    mbs = spec.microbatches if microbatches is None else microbatches
    return layers * 2 * mbs * m.batch * positions * (m.kv_size // spec.tensor_parallel) * m.element_bytes


#: Limits that keep a compile, a run, and report and plot on its file within memory (docs/ipu.md,
#: "Limits"): tile busy counts held (superstep templates x tiles), work units of one stage,
#: superstep rows of one step and of a whole run, and the cycles of a run (int64 with room to spare).
MAX_TEMPLATE_TILES = 50_000_000
MAX_UNITS_PER_STAGE = 20_000_000
MAX_ROWS_PER_STEP = 10_000_000
MAX_RUN_SUPERSTEPS = 50_000_000
MAX_CYCLES = 2**62
# Byte counts past this would wrap int64 in a tile's sums; they are far past any SRAM.
_WRAP = 2**62


def _unit_count(op: Operator, kind: str, spec: IpuSpec) -> int:
    """The units `_units` would cut an operator into, without cutting it."""
    m, b = spec.micro, spec.gemm_block
    if kind == "gemm":
        return _ceil_div(m.tokens, b) * _ceil_div(op.output_bytes // (m.tokens * m.element_bytes), b)
    if kind == "attention":
        return m.batch * (m.n_heads // spec.tensor_parallel) * _ceil_div(m.seq_len, b)
    return spec.tiles


def _check_size(spec: IpuSpec, stage_ops) -> None:
    templates = 0
    for items in stage_ops:
        templates += len(items)
        if spec.training:
            templates += len(items) + (sum(1 for _, kind in items if kind != "embedding") if spec.recompute else 0)
    problems = []
    if templates * spec.tiles > MAX_TEMPLATE_TILES:
        problems.append(f"machine.tiles = {spec.tiles:,}: {templates:,} superstep templates x {spec.tiles:,} tiles is "
                        f"{templates * spec.tiles:,} busy counts; at most {MAX_TEMPLATE_TILES:,} (fewer tiles or "
                        "layers)")
    units = max(sum(_unit_count(op, kind, spec) for op, kind in items) for items in stage_ops)
    if units > MAX_UNITS_PER_STAGE:
        problems.append(f"machine.gemm_block = {spec.gemm_block}: an IPU's operators cut into {units:,} work units; at "
                        f"most {MAX_UNITS_PER_STAGE:,} (larger blocks, fewer sequences per micro-batch, or more IPUs)")
    rows = spec.microbatches * templates
    if rows > MAX_ROWS_PER_STEP:
        problems.append(f"workload.microbatches = {spec.microbatches:,}: {rows:,} supersteps per step "
                        f"({spec.microbatches:,} micro-batches x {templates:,} templates); at most "
                        f"{MAX_ROWS_PER_STEP:,}")
    elif rows * spec.steps > MAX_RUN_SUPERSTEPS:
        problems.append(f"run.steps = {spec.steps:,}: {rows * spec.steps:,} supersteps to record ({rows:,} per "
                        f"step); at most {MAX_RUN_SUPERSTEPS:,}, so at most {MAX_RUN_SUPERSTEPS // rows:,} steps "
                        "of this model (the steps are identical)")
    if problems:
        raise InputError(problems)


def compile_program(spec: IpuSpec) -> IpuProgram:
    """Map every stage (docs/ipu.md, "Mapping", "Memory", "One superstep"); InputError when a tile's
    memory overflows, or the program or a run of it would be too large to hold."""
    n_tiles, threads = spec.tiles, spec.worker_threads
    stage_ops = _stage_ops(spec)
    _check_size(spec, stage_ops)
    templates, busy_rows, fwd, bwd = [], [], [], []
    mem = np.zeros((spec.stages, n_tiles), np.int64)
    weights = np.zeros((spec.stages, n_tiles), np.int64)
    acts = np.zeros((spec.stages, n_tiles), np.int64)
    caches = np.zeros((spec.stages, n_tiles), np.int64)
    code = spec.code_kib_per_tile * 1024
    e, th = spec.micro.element_bytes, spec.micro.tokens * spec.micro.hidden_size
    tp = spec.tensor_parallel
    stage_layers = []
    first_layer = 0
    for s, items in enumerate(stage_ops):
        # a ring all-reduce of one operator's T H e output over the stage's t IPUs (docs/ipu.md)
        gbps, sync = spec.tensor_link(s)
        tp_allreduce = sync + bytes_cycles(_ceil_div(2 * (tp - 1) * th * e, tp), gbps, spec.clock_ghz) if tp > 1 else 0
        stage_layers.append(list(range(first_layer, first_layer + spec.layers_per_stage[s])))
        first_layer += spec.layers_per_stage[s]
        units, offset = [], 0
        for op, kind in items:
            cost, back, out_b, in_b = _units(op, kind, spec)
            units.append(_Units(op, kind, cost, back, out_b, in_b, offset))
            offset += len(cost)
        # every unit's tile: per-tile sums of one operator
        per_tile = []
        for u in units:
            b_f, snt, rcv = (np.zeros(n_tiles, np.int64) for _ in range(3))
            K.deal(cost=u.cost, out_bytes=u.out_bytes, in_bytes=u.in_bytes, offset=u.offset, n_tiles=n_tiles,
                   threads=threads, even=u.even, busy=b_f, sent=snt, recv=rcv)
            b_b = None  # backward busy cycles, only for training
            if spec.training:
                b_b = np.zeros(n_tiles, np.int64)
                K.deal(cost=u.cost_backward, out_bytes=u.out_bytes, in_bytes=u.in_bytes, offset=u.offset,
                       n_tiles=n_tiles, threads=threads, even=u.even, busy=b_b, sent=np.zeros(n_tiles, np.int64),
                       recv=np.zeros(n_tiles, np.int64))
            per_tile.append((b_f, b_b, snt, rcv))  # snt: u_out sums, rcv: u_in sums
        # forward list, then the backward list (docs/ipu.md, "Backward", "Recomputation")
        f_list = [(i, 0) for i in range(len(units))]
        b_list = []
        if spec.training:
            if spec.recompute:
                blocks = sorted({u.op.layer for u in units if u.kind != "embedding"}, reverse=True)
                for layer in blocks:
                    mine = [i for i, u in enumerate(units) if u.op.layer == layer and u.kind != "embedding"]
                    b_list += [(i, 2) for i in mine] + [(i, 1) for i in reversed(mine)]
                b_list += [(i, 1) for i, u in enumerate(units) if u.kind == "embedding"]
            else:
                b_list = [(i, 1) for i in reversed(range(len(units)))]
        for lst, sink in ((f_list, fwd), (b_list, bwd)):
            idx = []
            for pos, (i, d) in enumerate(lst):
                u = units[i]
                b_f, b_b, u_out, u_in = per_tile[i]
                busy = b_b if d == 1 else b_f
                sent = u_in if d == 1 else u_out
                if pos + 1 < len(lst):
                    j, dn = lst[pos + 1]
                    received = per_tile[j][2] if dn == 1 else per_tile[j][3]
                else:
                    received = np.zeros(n_tiles, np.int64)
                top = int(max(sent.max(), received.max()))
                exch = spec.exchange_latency_cycles + _ceil_div(top, spec.exchange_bytes_per_cycle)
                if spec.tensor_parallel > 1 and d < 2 and (u.op.name.split(".")[-1], PHASES[d]) in TP_ALLREDUCE_AFTER:
                    exch += tp_allreduce
                comp = int(busy.max())
                op = u.op
                if u.kind == "embedding":
                    name = "embedding" if d != 1 else "embedding.backward"
                    flops = op.flops
                elif d == 1:
                    name, flops = f"{op.name}.backward", backward_of(op).flops
                else:
                    name, flops = op.name + (".recompute" if d == 2 else ""), op.flops
                li = float(busy.mean() / comp) if comp else float("nan")
                idx.append(len(templates))
                templates.append(Template(s, name, d, KINDS.index(u.kind), len(u.cost), flops, comp,
                                          spec.sync_cycles, exch, int(sent.max()), int(received.max()), li,
                                          op.layer))
                busy_rows.append(busy)
            sink.append(idx)
        # memory (docs/ipu.md, "Memory")
        w = sum(_ceil_div(u.op.weight_bytes, n_tiles) for u in units) * (2 if spec.training else 1)
        outs = np.array([per_tile[i][2] for i in range(len(units))])
        ins = np.array([per_tile[i][3] for i in range(len(units))])
        if not spec.training:
            act = (outs + ins).max(axis=0)
        elif not spec.recompute:
            kept = outs.sum(axis=0)
            if int(kept.max()) * spec.in_flight(s) > _WRAP:  # past any SRAM; int64 would wrap
                _too_big(spec, s, int(kept.max()) * spec.in_flight(s), stage_layers[s])
            act = spec.in_flight(s) * kept + ins.max(axis=0)
        else:
            groups = {}
            for i, u in enumerate(units):
                groups.setdefault(u.op.layer, np.zeros(n_tiles, np.int64))
                groups[u.op.layer] += outs[i]
            inputs = spec.in_flight(s) * _ceil_div(th * e, n_tiles)
            if inputs > _WRAP:
                _too_big(spec, s, inputs, stage_layers[s])
            act = inputs + np.max(np.array(list(groups.values())), axis=0) + ins.max(axis=0)
        weights[s] = w
        acts[s] = act
        # generation: the stage's key-value cache, spread over its tiles (docs/ipu.md, "Generation")
        caches[s] = _ceil_div(cache_bytes(spec, len(stage_layers[s])), n_tiles) if spec.decode else 0
        mem[s] = code + w + act + caches[s]
    _check_memory(spec, mem, weights, acts, code, stage_layers, caches)

    def csr(lists):
        ptr = np.zeros(len(lists) + 1, np.int64)
        ptr[1:] = np.cumsum([len(x) for x in lists])
        return ptr, np.array([i for x in lists for i in x], np.int64)

    fwd_ptr, fwd_idx = csr(fwd)
    bwd_ptr, bwd_idx = csr(bwd)
    n = spec.stages
    gbps, sync = spec.stage_link()
    transfer = sync + bytes_cycles(th * e, gbps, spec.clock_ghz) if n > 1 else 0
    allreduce = -1
    if spec.training and spec.replicas > 1:
        r = spec.replicas
        wst = max(sum(op.weight_bytes for op, _ in items) for items in stage_ops)
        gbps, sync = spec.replica_link()
        allreduce = sync + bytes_cycles(_ceil_div(2 * (r - 1) * wst, r), gbps, spec.clock_ghz)
    update = 0  # the optimiser update that ends a training step (docs/ipu.md, "The pipeline")
    cost = update_cost(spec.model.precision, spec.master_weights, spec.optimizer)
    if spec.training and cost["flops"]:
        for items in stage_ops:
            params = _ceil_div(sum(op.weight_bytes for op, _ in items), e)
            update = max(update, bytes_cycles((cost["read"] + cost["written"]) * params, spec.streaming_memory_gbps,
                                              spec.clock_ghz),
                         _ceil_div(cost["flops"] * params, n_tiles * spec.vector_flops_per_cycle))
    io0 = bytes_cycles(TOKEN_ID_BYTES * spec.micro.tokens, spec.streaming_memory_gbps, spec.clock_ghz)
    prog = IpuProgram(spec=spec, templates=templates, busy=np.array(busy_rows, np.int64).reshape(-1, n_tiles),
                      fwd_ptr=fwd_ptr, fwd_idx=fwd_idx, bwd_ptr=bwd_ptr, bwd_idx=bwd_idx,
                      t_comp=np.array([t.compute for t in templates], np.int64),
                      t_sync=np.array([t.sync for t in templates], np.int64),
                      t_exch=np.array([t.exchange for t in templates], np.int64), io0=io0, transfer=transfer,
                      allreduce=allreduce, update=update, memory=mem,
                      memory_parts=dict(code=code, weights=weights, activations=acts, cache=caches),
                      stage_layers=stage_layers)
    _check_cycles(prog)
    return prog


def _check_cycles(prog: IpuProgram) -> None:
    """InputError when the run's cycles could pass MAX_CYCLES (a bound: every stage as slow as the
    slowest, in every pipeline step)."""
    spec = prog.spec
    steps_per_dir = spec.microbatches + spec.stages - 1
    # Python ints: the bound itself may pass int64
    per_step = (steps_per_dir * (int(prog.stage_cycles(0).max()) + prog.io0 + prog.transfer)
                + max(prog.allreduce, 0) + prog.update)
    if spec.training:
        per_step += steps_per_dir * (int(prog.stage_cycles(1).max()) + prog.transfer)
    if per_step > MAX_CYCLES:
        raise InputError(f"workload: one step of this model could last {per_step:,} cycles, more than {MAX_CYCLES:,} "
                         "(a smaller model, or faster phases)")
    if per_step * spec.steps > MAX_CYCLES:
        raise InputError(f"run.steps = {spec.steps:,}: {spec.steps:,} steps of up to {per_step:,} cycles could pass "
                         f"{MAX_CYCLES:,} cycles; at most {MAX_CYCLES // per_step:,} steps of this model")


def _too_big(spec, s, nbytes, layers) -> None:
    raise InputError(f"machine.tile_sram_kib = {spec.tile_sram_kib}: IPU {s} ({_layers_text(layers)}) does not fit: "
                     f"its tiles would keep {nbytes:,} bytes of activations; fewer or smaller micro-batches "
                     "(workload.microbatches, workload.batch), or workload.recompute")


def _layers_text(layers: list[int]) -> str:
    if not layers:
        return "the embedding only"
    return f"layer {layers[0]}" if len(layers) == 1 else f"layers {layers[0]}-{layers[-1]}"


def _check_memory(spec, mem, weights, acts, code, stage_layers, caches) -> None:
    cap = spec.tile_sram_kib * 1024
    problems = []
    for s in range(spec.stages):
        t = int(np.argmax(mem[s]))
        if mem[s, t] > cap:
            held = _layers_text(stage_layers[s]) + (" and the embedding" if s == 0 and spec.vocab_size and
                                                    stage_layers[s] else "")
            cache = (f", {int(caches[s, t]):,} key-value cache for {spec.cache_tokens:,} positions"
                     if spec.decode else "")
            problems.append(
                f"machine.tile_sram_kib = {spec.tile_sram_kib}: IPU {s} ({held}) does not fit: tile {t} needs "
                f"{int(mem[s, t]):,} bytes ({code:,} code, {int(weights[s, t]):,} weights"
                f"{' and their gradients' if spec.training else ''}, {int(acts[s, t]):,} activations{cache}) of "
                f"{cap:,}; "
                + ("a shorter prompt or generation (workload.context, workload.output_tokens), " if spec.decode else "")
                + "spread the layers over more IPUs (workload.layers_per_stage), "
                + ("use more micro-batches of fewer sequences (workload.microbatches), "
                   if spec.micro.batch > 1 and not spec.decode else "")
                + ("fewer sequences (workload.batch), " if spec.micro.batch > 1 and spec.decode else "")
                + ("smaller GEMM blocks (machine.gemm_block)" if spec.gemm_block > 1
                   else "give each IPU more tiles (machine.tiles)")
                + (", or recompute activations (workload.recompute)" if spec.training and not spec.recompute else ""))
    if problems:
        raise InputError(problems)


def compile_scenario(scenario) -> IpuProgram:
    """The program of a validated ipu scenario; its problems (a tile's memory overflowing, a program
    too large) name the scenario file."""
    try:
        return compile_program(spec_of(scenario.values))
    except InputError as e:
        where = scenario.path or "<scenario>"
        raise InputError([f"{where}: {p}" for p in e.problems]) from None


def roofline_rows(values: dict, platform) -> list[dict]:
    """The supersteps of layer 0 (forward, and backward with training) as compiled, each on the
    IPU's exchange roofline (docs/ipu.md, "Roofline"): its FLOPs over the bytes its exchange phase
    moves at the pace of its busiest tile (tiles x the larger of the most any tile sends or
    receives), and what it attains in the run, FLOPs over its compute, sync and exchange cycles
    (a superstep's phases run one after another); its bound is its longest phase."""
    spec = spec_of(values)
    prog = compile_program(spec)
    hz = spec.clock_ghz * 1e9
    rows = []
    for t in prog.templates:
        if t.layer != 0 or t.direction == 2 or not t.flops:
            continue
        moved = spec.tiles * max(t.sent_max, t.received_max)
        phases = {"compute": t.compute, "sync": t.sync, "exchange": t.exchange}
        rows.append(dict(name=t.name.split(".", 1)[1], kind=KINDS[t.kind], flops=t.flops, bytes=moved,
                         intensity=t.flops / moved if moved else math.inf,
                         attainable_flops=t.flops * hz / sum(phases.values()), bound=max(phases, key=phases.get),
                         stage=t.stage))
    return rows
