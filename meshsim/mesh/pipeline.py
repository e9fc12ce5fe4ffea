"""The `layer_pipeline` workload's set-up: a transformer becomes a table of regions for the mesh
kernel (the kernel's side is docs/mesh.md, "Dataflow").

The model's operators (`meshsim.transformer`) become kernels: with `fuse_elementwise` each
LayerNorm, GeLU and residual add is folded into the matrix kernel next to it, as a dataflow
compiler does (a LayerNorm into the projection it feeds, GeLU and a residual add into the
projection that produces their input); without it every operator is a kernel of its own. Each
kernel gets a rectangle of PEs in proportion to its FLOPs (`meshsim.mesh.placement`), and a PE's task
for one chunk of `tokens_per_chunk` tokens takes

    work_g = ceil(FLOPs_g x tokens_per_chunk / (batch x seq_len) / (n_g x pe_flops_per_cycle x r))

cycles (FLOPs_g counts the whole batch; computed in double precision), with r = 1 at 16 and 8
bits and r = machine.fp32_rate at fp32 and tf32 (`meshsim.transformer.compute_rate`). The weights
of a kernel must fit the SRAM of its region's PEs; in training with an optimizer a backward
kernel's region also keeps its parameters' fp32 master weights and optimiser state
(`meshsim.transformer.update_cost`, "held"). The update itself is not timed: the layer pipeline
streams chunks without a step's end.

With weight streaming the regions are one layer's kernels over the whole grid, and each pass of
the chunks through them runs the next layer; a layer's weights take

    load_cycles = max(1, ceil(layer weight bytes x clock_ghz / weight_bandwidth_gbps))

cycles to stream in, and two layers' weights must fit the region's SRAM (one in use, one loading).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from kernels import mesh as K

from ..errors import InputError
from ..transformer import Model, compute_rate, operators, update_cost
from .placement import place, weight_overflows

# Where each elementwise or norm operator goes when fused: the matrix operator of its layer it
# joins (a LayerNorm feeds the projection after it; GeLU and residual adds follow the one before).
FUSE_INTO = {"ln1": "qkv_proj", "residual1": "out_proj", "ln2": "ffn_up", "gelu": "ffn_up", "residual2": "ffn_down"}

MAX_WORK = 65535


@dataclass(frozen=True)
class Kernel:
    """One region's work: a name ("layer0.ln1+qkv_proj", ".backward" for the backward phase), its
    layer and phase, FLOPs and weight bytes over the whole batch, and the operators it holds."""

    name: str
    layer: int
    phase: str
    flops: int
    weight_bytes: int
    members: tuple


@dataclass
class Pipeline:
    """The regions of a layer-pipelined run, as the kernel and the reports need them.

    table: int64[G, kernels.mesh.N_REG], one row per region in pipeline order per replica;
    replica_ends: int64[P, 2], first and last region of each replica; region_of: int32[rows, cols]
    region of each PE (-1: idle); names: per region; kernels: the Kernels of one replica in
    pipeline order.
    """

    table: np.ndarray
    replica_ends: np.ndarray
    region_of: np.ndarray
    chunks_in_flight: int
    tokens_per_chunk: int
    chunks_per_sample: int
    names: list
    kernels: list
    idle_pes: int
    quantisation: np.ndarray
    streaming: bool = False
    chunks_per_pass: int = 0  # weight streaming: chunks of one pass (batch x seq_len / tokens_per_chunk)
    load_cycles: int = 0  # weight streaming: cycles one layer's weights take to stream in
    layer_weight_bytes: int = 0
    n_layers: int = 0

    @property
    def n_regions(self) -> int:
        return int(self.table.shape[0])

    @property
    def n_replicas(self) -> int:
        return int(self.replica_ends.shape[0])


def model_of(wl: dict) -> Model:
    """The transformer of a layer_pipeline workload section."""
    return Model(hidden_size=wl["hidden_size"], n_layers=wl["n_layers"], n_heads=wl["n_heads"], seq_len=wl["seq_len"],
                 batch=wl["batch"], ffn_multiplier=wl["ffn_multiplier"], precision=wl["precision"])


def kernels(model: Model, training: bool, fuse: bool) -> list:
    """The model's kernels grouped by (phase, layer) in execution order: a list of lists of Kernel."""
    groups, key = [], None
    for op in operators(model, training):
        k = (op.phase, op.layer)
        if k != key:
            groups.append([])
            key = k
        groups[-1].append(op)
    out = []
    for ops in groups:
        base = {op.name.split(".")[1]: op for op in ops}
        order = [op.name.split(".")[1] for op in ops]
        members = {}  # host operator -> the operators it holds
        for name in order:
            host = FUSE_INTO.get(name, name) if fuse else name
            members.setdefault(host, []).append(name)
        kept = []
        for host in order:
            if host not in members:
                continue
            # Named in forward order in both phases (the backward runs its members last to first).
            names = members[host] if ops[0].phase == "forward" else members[host][::-1]
            first = base[host]
            suffix = ".backward" if first.phase == "backward" else ""
            kept.append(Kernel(name=f"layer{first.layer}.{'+'.join(names)}{suffix}", layer=first.layer,
                               phase=first.phase, flops=sum(base[n].flops for n in names),
                               weight_bytes=sum(base[n].weight_bytes for n in names), members=tuple(names)))
        out.append(kept)
    return out


def build(sc) -> Pipeline:
    """The pipeline of a validated layer_pipeline scenario. InputError when the model does not fit
    the grid (a band per layer, a column per kernel), a task would exceed 65,535 cycles, or a
    kernel's weights do not fit its region's SRAM."""
    m, wl = sc.values["machine"], sc.values["workload"]
    rows, cols = m["rows"], m["cols"]
    model = model_of(wl)
    groups = kernels(model, wl["training"], wl["fuse_elementwise"])
    streaming = bool(wl["weight_streaming"])
    if streaming:
        groups = groups[:1]  # every layer is the same: one layer's kernels, loaded layer by layer
    buffers = 2 if streaming else 1
    placement = place([[(k.name, k.flops) for k in g] for g in groups], rows, cols, wl["replicas"])
    by_name = {k.name: k for g in groups for k in g}
    regions = placement.regions
    n_reg = len(regions)
    tpc = wl["tokens_per_chunk"]
    chunk_share = tpc / (model.batch * model.seq_len)
    # the PEs' FLOPs per cycle at the model's precision (fp32 and tf32 at machine.fp32_rate of the peak)
    rate = float(m["pe_flops_per_cycle"] * compute_rate(wl["precision"], m["fp32_rate"]))
    table = np.zeros((n_reg, K.N_REG), np.int64)
    region_of = np.full((rows, cols), -1, np.int32)
    replica_ends = np.zeros((wl["replicas"], 2), np.int64)
    too_long = []
    sram = m["sram_kib"] * 1024
    for i, g in enumerate(regions):
        k = by_name[g.name]
        n = g.n_pes
        work = math.ceil(k.flops * chunk_share / (n * rate))
        if work > MAX_WORK:
            too_long.append((g.name, work))
        last = i + 1 == n_reg or regions[i + 1].replica != g.replica
        first = i == 0 or regions[i - 1].replica != g.replica
        table[i] = (g.row0, g.col0, g.col1 - g.col0, g.row1 - g.row0, max(work, 1), -1 if last else i + 1, g.replica,
                    int(first), g.flow, K.INPUT_COL if g.input == "col" else K.INPUT_ROW,
                    K.OUTPUT_BOTTOM if g.output == "bottom" else K.OUTPUT_SIDE)
        region_of[g.row0:g.row1, g.col0:g.col1] = i
        if first:
            replica_ends[g.replica, 0] = i
        if last:
            replica_ends[g.replica, 1] = i
    if too_long:
        name, work = max(too_long, key=lambda x: x[1])
        raise InputError(
            f"workload.tokens_per_chunk = {tpc}: a task of region {name} would take {work:,} cycles, more than "
            f"{MAX_WORK:,}; use fewer tokens per chunk, or a larger grid or machine.pe_flops_per_cycle")
    # a backward kernel's region also keeps its parameters' master weights and optimiser state
    held = update_cost(wl["precision"], wl["master_weights"], wl["optimizer"])["held"] if wl["training"] else 0
    e = model.element_bytes
    need = {name: buffers * k.weight_bytes + (k.weight_bytes // e * held if k.phase == "backward" else 0)
            for name, k in by_name.items()}
    no_fit = [(g.name, need_b, have) for g, need_b, have in weight_overflows(placement, need, m["sram_kib"])]
    if no_fit and streaming:
        name, need_b, have = max(no_fit, key=lambda x: x[1] / x[2])
        raise InputError(
            f"workload: with weight streaming two layers' weights must fit the PEs' SRAM (machine.sram_kib = "
            f"{m['sram_kib']}), but region {name} needs {need_b:,} bytes and its PEs hold {have:,}; use a larger "
            "machine.sram_kib or a smaller model")
    if no_fit:
        reps = wl["replicas"]
        total = reps * sum(need[k.name] for g in groups for k in g)
        worst = sorted(no_fit, key=lambda x: x[2] / x[1])[:3]
        listed = "; ".join(f"{name} needs {need_b:,} bytes, its PEs hold {have:,}" for name, need_b, have in worst)
        kept = (f" with the optimiser's {held} bytes a parameter of master weights and state (workload.optimizer = "
                f"\"{wl['optimizer']}\", workload.master_weights = \"{wl['master_weights']}\")" if held else "")
        raise InputError(
            f"workload: the weights{kept} do not fit the PEs' SRAM (machine.sram_kib = {m['sram_kib']}) in "
            f"{len(no_fit)} of the {n_reg // reps} regions of a replica ({listed}); the bytes of {reps} "
            f"replica(s) are {total:,} bytes for "
            f"{rows * cols * sram:,} bytes of SRAM on the grid. Layer-pipelined execution keeps every weight on "
            "the wafer: use a smaller model (workload.hidden_size, workload.n_layers), fewer "
            "workload.replicas or a larger grid, "
            + ("a lighter update (workload.optimizer, workload.master_weights)" if held else
               "or stream the weights in layer by layer (workload.weight_streaming = true)"))
    kernels_one = [by_name[g.name] for g in regions if g.replica == 0]
    # Region names: the kernel's, prefixed by the replica when there are several.
    names = [g.name if wl["replicas"] == 1 else f"r{g.replica}/{g.name}" for g in regions]
    stream = {}
    if streaming:
        layer_bytes = sum(k.weight_bytes for k in groups[0])
        stream = dict(streaming=True, chunks_per_pass=model.batch * (model.seq_len // tpc),
                      load_cycles=max(1, math.ceil(layer_bytes * m["clock_ghz"] / wl["weight_bandwidth_gbps"])),
                      layer_weight_bytes=layer_bytes, n_layers=model.n_layers)
    return Pipeline(table=table, replica_ends=replica_ends, region_of=region_of,
                    chunks_in_flight=wl["chunks_in_flight"], tokens_per_chunk=tpc,
                    chunks_per_sample=model.seq_len // tpc, names=names, kernels=kernels_one,
                    idle_pes=placement.idle_pes, quantisation=placement.quantisation(), **stream)
