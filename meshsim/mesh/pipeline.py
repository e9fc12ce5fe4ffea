"""The `layer_pipeline` workload's set-up: a transformer becomes a table of regions for the mesh
kernel (the kernel's side is docs/mesh.md, "Dataflow").

The step's operators (`meshsim.transformer`: the blocks, and with a vocabulary the embedding before
them and the final norm, head and loss after them) become kernels: with `fuse_elementwise` each
LayerNorm, GeLU and residual add is folded into the matrix kernel next to it, as a dataflow
compiler does (a LayerNorm into the projection it feeds, GeLU and a residual add into the
projection that produces their input; the loss into the head's projection); without it every
operator is a kernel of its own. With `fuse_attention` attention's scores, softmax and x V are one
kernel, so the scores stay in its PEs. Each kernel gets a rectangle of PEs in proportion to its
FLOPs, within the bounds of its weights and of the band's turn (`meshsim.mesh.placement`). A PE's task
for one chunk of `tokens_per_chunk` tokens takes (docs/mesh.md, "The PE and the wavelets")

    work_g = max(ceil(sum over the kernel's operators m of FLOPs_m x share / (n_g x rate_m)), reduce_g)

cycles, share = tokens_per_chunk / (batch x seq_len) (FLOPs_m counts the whole batch; computed in
double precision). rate_m, an operator's FLOPs per PE-cycle, is the lowest of its SIMD rate
(machine.pe_flops_per_cycle, times machine.fp32_rate at fp32 and tf32,
`meshsim.transformer.compute_rate`) and what the PE's SRAM ports can feed it
(`operand_bytes_per_flop`, partial sums of `accumulator_bytes`: fp32 by default, workload.accumulate);
reduce_g, for a matrix kernel, the wavelets of partial sums each PE passes on per chunk. A region's
PEs receive their chunk's input as `wavelets_g` wavelets each
(`wavelets`). The weights
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
from ..transformer import (
    FP32_COMPUTE,
    LOSS,
    Model,
    backward_of,
    compute_rate,
    edge_operators,
    model_from_workload,
    operators,
    update_cost,
)
from .placement import place, weight_overflows

# Where each elementwise or norm operator goes when fused: the matrix operator of its layer it
# joins (a LayerNorm feeds the projection after it; GeLU and residual adds follow the one before).
# The loss joins the output head's projection (so a token's logits never cross a link); the final norm
# keeps a region of its own, the first of the head's band (docs/mesh.md, "The whole step").
FUSE_INTO = {"ln1": "qkv_proj", "residual1": "out_proj", "ln2": "ffn_up", "gelu": "ffn_up", "relu": "ffn_up",
             "swiglu": "ffn_up", "geglu": "ffn_up", "residual2": "ffn_down",
             "loss": "logits"}
# With fuse_attention, attention x V joins the scores and softmax: the scores stay in the region's
# PEs, which hold the sequence's keys and values, and never cross a link.
FUSE_ATTENTION = {"attn_v": "attn_scores_softmax"}

MAX_WORK = 65535

#: What bounds an operator's rate on a PE (`pe_rate`), by code as the output file stores it.
BOUNDS = ("simd", "sram_read", "sram_write", "reduction")
#: The machine key that sets each rate bound.
RATE_KEYS = {"simd": "pe_flops_per_cycle", "sram_read": "sram_read_bytes_per_cycle",
             "sram_write": "sram_write_bytes_per_cycle"}
MATRIX_KINDS = ("gemm", "attention")


def operand_bytes_per_flop(kind: str, flops: int, input_bytes: int, output_bytes: int, e: int, acc: int) -> tuple:
    """(bytes read, bytes written) of a PE's SRAM per FLOP of an operator (docs/mesh.md, "The PE and
    the wavelets"). A matrix operator (gemm, attention) keeps one operand stationary in SRAM (the
    weights; the sequence's keys and values) and takes the other from the fabric, one element at a
    time: each multiply-add (2 FLOPs) reads the stationary element (e bytes) and the partial sum (acc
    bytes) and writes the partial sum back. An elementwise or norm operator reads its inputs and
    writes its outputs once: its bytes over its FLOPs."""
    if kind in MATRIX_KINDS:
        return (e + acc) / 2, acc / 2
    return input_bytes / flops, output_bytes / flops


def accumulator_bytes(precision: str, accumulate: str = "same") -> int:
    """Bytes of a partial sum: 4 with accumulate = "fp32" (16-bit multiplies, fp32 additions), else the
    precision the PE computes in, 4 for fp32 and tf32, else 2 (16-bit; fp8 computes at 16 bits)."""
    return 4 if accumulate == "fp32" or precision in FP32_COMPUTE else 2


def pe_rate(op, e: int, acc: int, simd: float, read_bytes: int, write_bytes: int) -> tuple:
    """(FLOPs per PE-cycle, what bounds it: a BOUNDS entry) for an Operator on a PE whose SIMD units do
    `simd` FLOPs a cycle at the model's precision and whose SRAM reads `read_bytes` and writes
    `write_bytes` a cycle; partial sums of acc bytes."""
    rd, wr = operand_bytes_per_flop(op.kind, op.flops, op.input_bytes, op.output_bytes, e, acc)
    limits = (simd, read_bytes / rd if rd else math.inf, write_bytes / wr if wr else math.inf)
    i = min(range(3), key=lambda j: limits[j])
    return limits[i], BOUNDS[i]


def vector_out(kernel, io: dict, forward: list) -> int:
    """Elements per token a kernel sends on: a forward kernel its last operator's output; a backward
    one the gradient of its input, which is what the forward kernel before it sends (its first
    operator's input for the pipeline's first kernel). io: per operator's short name, its forward (input,
    output) elements per token; forward: the forward kernels' member tuples in pipeline order (every
    layer's alike, so the first match stands for all)."""
    if kernel.phase == "forward":
        return io[kernel.members[-1]][1]
    i = forward.index(kernel.members)
    return io[forward[i - 1][-1]][1] if i > 0 else io[kernel.members[0]][0]


def wavelets(elements: int, pes: int, tokens: int, e: int, wavelet_bytes: int) -> int:
    """Wavelets each of `pes` PEs gets when a vector of `elements` per token is split among them, for
    `tokens` tokens: its slice ceil(elements / pes) elements a token (at least one), e bytes each, in
    wavelets of wavelet_bytes."""
    return max(1, math.ceil(max(1, math.ceil(elements / pes)) * tokens * e / wavelet_bytes))


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
    compute_cycles: list  # per region of one replica: its task's arithmetic and SRAM cycles, unrounded
    reduce_wavelets: list  # per region of one replica: wavelets of partial sums a PE passes on per chunk
    bounds: list  # per region of one replica: what bounds its task, a BOUNDS entry
    streaming: bool = False
    chunks_per_pass: int = 0  # weight streaming: chunks of one pass (batch x seq_len / tokens_per_chunk)
    load_cycles: int = 0  # weight streaming: cycles one layer's weights take to stream in
    layer_weight_bytes: int = 0
    n_layers: int = 0

    def slowest(self, link_messages_per_cycle: int = 1) -> dict:
        """The region of one replica that takes longest per chunk by the table (docs/mesh.md, "The PE
        and the wavelets"): an output-edge PE does its task, then sends its output's wavelets before it
        starts the next, B a cycle (the next starts in the cycle the last leaves); a PE of a line
        cannot take chunks faster than their wavelets arrive, B a cycle. A dict: name, cycles (per
        chunk), task (its work), send (cycles sending), bound: what bounds its task (a BOUNDS entry),
        or "wavelets" when its input does."""
        best = None
        n = len(self.kernels)
        for i in range(n):
            row = self.table[i]
            work, wv = int(row[K.REG_WORK]), int(row[K.REG_WAVELETS])
            send = 0
            nxt = int(row[K.REG_NEXT])
            if nxt >= 0:
                n_out = int(row[K.REG_HEIGHT] if row[K.REG_OUTPUT] == K.OUTPUT_SIDE else row[K.REG_WIDTH])
                nr = self.table[nxt]
                n_in = int(nr[K.REG_HEIGHT] if nr[K.REG_INPUT] == K.INPUT_ROW else nr[K.REG_WIDTH])
                send = math.ceil(math.ceil(n_in / n_out) * int(nr[K.REG_WAVELETS]) / link_messages_per_cycle)
            # the last wavelet leaves in the cycle the next task starts
            busy = work + max(send - 1, 0)
            receive = math.ceil(wv / link_messages_per_cycle)
            cand = dict(name=self.names[i], cycles=max(busy, receive), task=work, send=send,
                        bound="wavelets" if receive > busy else self.bounds[i])
            if best is None or cand["cycles"] > best["cycles"]:
                best = cand
        return best

    @property
    def n_regions(self) -> int:
        return int(self.table.shape[0])

    @property
    def n_replicas(self) -> int:
        return int(self.replica_ends.shape[0])


def model_of(wl: dict) -> Model:
    """The transformer of a layer_pipeline workload section."""
    return model_from_workload(wl)


def step_operators(model: Model, training: bool, vocab_size: int = 0) -> list:
    """The operators of a layer-pipelined step in execution order: the embedding, the blocks, the final
    norm and the output head (and in training the loss), then in training the backward of all of them
    in reverse (`meshsim.transformer.operators` and `edge_operators`; vocab_size 0: the blocks alone)."""
    first, last = edge_operators(model, vocab_size)
    if not training:
        last = [op for op in last if op.name != LOSS]  # inference gives the logits
    forward = first + operators(model, False) + last
    return forward + ([backward_of(op) for op in reversed(forward)] if training else [])


def short_name(op_name: str) -> str:
    """An operator's name without its layer or edge ("layer3.ln1.backward" -> "ln1.backward")."""
    return op_name.split(".", 1)[1]


def kernels(model: Model, training: bool, fuse: bool, fuse_attention: bool = False, vocab_size: int = 0) -> list:
    """The step's kernels grouped by (phase, layer) in execution order, a group a band of the placement:
    a list of lists of Kernel. With vocab_size > 0 the embedding's kernel is the first of the first
    layer's forward group (and its backward the last of that layer's backward group), and the head's
    kernels are a group after the last layer's forward group (their backward one before its backward
    group)."""
    into = {**(FUSE_INTO if fuse else {}), **(FUSE_ATTENTION if fuse_attention else {})}
    groups, key = [], None
    for op in step_operators(model, training, vocab_size):
        # the embedding joins the first layer's group; the head is a group of its own
        k = (op.phase, max(op.layer, 0))
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
            host = into.get(name, name)
            members.setdefault(host, []).append(name)
        kept = []
        for host in order:
            if host not in members:
                continue
            # Named in forward order in both phases (the backward runs its members last to first).
            names = members[host] if ops[0].phase == "forward" else members[host][::-1]
            first = base[host]
            suffix = ".backward" if first.phase == "backward" else ""
            prefix = first.name.split(".")[0]  # layer<i>, embedding or head
            kept.append(Kernel(name=f"{prefix}.{'+'.join(names)}{suffix}", layer=first.layer,
                               phase=first.phase, flops=sum(base[n].flops for n in names),
                               weight_bytes=sum(base[n].weight_bytes for n in names), members=tuple(names)))
        out.append(kept)
    return out


def members_of(k: Kernel, ops_of: dict) -> list:
    """A kernel's operators, from `ops_of` (by short name, as build keeps them)."""
    suffix = ".backward" if k.phase == "backward" else ""
    return [ops_of[f"{name}{suffix}"] for name in k.members]


def _needs(by_name: dict, wl: dict, tied: int, e: int, buffers: int) -> tuple:
    """(bytes each kernel's region must hold, by name; the optimiser's bytes a parameter a backward
    region keeps). A backward kernel's region also keeps its parameters' master weights and optimiser
    state. The head's projection is tied to the token table (GPT-2, `tied` bytes): the head's regions
    hold it, and the embedding's (layer -1) only the position table (its lookups of token rows are not
    modelled as traffic)."""
    held = update_cost(wl["precision"], wl["master_weights"], wl["optimizer"])["held"] if wl["training"] else 0
    weights = {name: k.weight_bytes - (tied if k.layer < 0 else 0) for name, k in by_name.items()}
    need = {name: buffers * weights[name] + (weights[name] // e * held if k.phase == "backward" else 0)
            for name, k in by_name.items()}
    return need, held


def build(sc) -> Pipeline:
    """The pipeline of a validated layer_pipeline scenario. InputError when the model does not fit
    the grid (a band per layer, a column per kernel), a task would exceed 65,535 cycles, or a
    kernel's weights do not fit its region's SRAM."""
    m, wl = sc.values["machine"], sc.values["workload"]
    rows, cols = m["rows"], m["cols"]
    model = model_of(wl)
    streaming = bool(wl["weight_streaming"])
    # the embedding and the head around the layers; weight streaming runs the blocks alone
    vocab = 0 if streaming else wl["vocab_size"]
    groups = kernels(model, wl["training"], wl["fuse_elementwise"], wl["fuse_attention"], vocab)
    if streaming:
        groups = groups[:1]  # every layer is the same: one layer's kernels, loaded layer by layer
    buffers = 2 if streaming else 1
    by_name = {k.name: k for g in groups for k in g}
    # by short name: layer 0's operators (every layer is alike) and the embedding's and head's
    ops_of = {short_name(op.name): op for op in step_operators(model, wl["training"], vocab)
              if op.layer in (-1, 0, model.n_layers)}
    e = model.element_bytes
    sram = m["sram_kib"] * 1024
    need, held = _needs(by_name, wl, vocab * model.hidden_size * e, e, buffers)
    # kernels without a matrix operator take, at a turn, the width of the region above them
    aligned = {k.name for k in by_name.values() if not any(op.kind in MATRIX_KINDS for op in members_of(k, ops_of))}
    placement = place([[(k.name, k.flops) for k in g] for g in groups], rows, cols, wl["replicas"], need, sram,
                      aligned)
    regions = placement.regions
    n_reg = len(regions)
    tpc = wl["tokens_per_chunk"]
    chunk_share = tpc / (model.batch * model.seq_len)
    # the PEs' SIMD FLOPs per cycle at the model's precision (fp32 and tf32 at machine.fp32_rate of the peak)
    simd = float(m["pe_flops_per_cycle"] * compute_rate(wl["precision"], m["fp32_rate"]))
    wb, acc = m["wavelet_bytes"], accumulator_bytes(wl["precision"], wl["accumulate"])
    per_token = e * model.tokens
    io = {name: (op.input_bytes // per_token, op.output_bytes // per_token)
          for name, op in ops_of.items() if op.phase == "forward"}
    fwd = [k.members for g in groups for k in g if k.phase == "forward"]
    table = np.zeros((n_reg, K.N_REG), np.int64)
    region_of = np.full((rows, cols), -1, np.int32)
    replica_ends = np.zeros((wl["replicas"], 2), np.int64)
    too_long = []
    compute_cycles, reduce_w, bounds = [], [], []
    for i, g in enumerate(regions):
        k = by_name[g.name]
        n = g.n_pes
        members = members_of(k, ops_of)
        cycles, bound, worst = 0.0, "simd", -1.0
        for op in members:
            # the kernel's operators run one after another on every PE of the region
            r_op, b_op = pe_rate(op, e, acc, simd, m["sram_read_bytes_per_cycle"], m["sram_write_bytes_per_cycle"])
            c_op = op.flops * chunk_share / (n * r_op)
            cycles += c_op
            if c_op > worst:
                worst, bound = c_op, b_op
        # Partial sums reduced across the lines: a matrix kernel's output of E elements a token leaves
        # each line-crossing PE as ceil(E / line length) elements a token (docs/mesh.md).
        line = g.col1 - g.col0 if g.input == "row" else g.row1 - g.row0
        red = (wavelets(vector_out(k, io, fwd), line, tpc, acc, wb)
               if any(op.kind in MATRIX_KINDS for op in members) else 0)
        work = max(math.ceil(cycles), red)
        if red > math.ceil(cycles):
            bound = "reduction"
        if g.replica == 0:
            compute_cycles.append(cycles)
            reduce_w.append(red)
            bounds.append(bound)
        first = i == 0 or regions[i - 1].replica != g.replica
        if first:
            wv = 1  # a first region takes its chunks as they are admitted
        else:
            # its input: the predecessor's output vector, split over the input edge
            n_in = g.row1 - g.row0 if g.input == "row" else g.col1 - g.col0
            before = by_name[regions[i - 1].name]
            wv = wavelets(vector_out(before, io, fwd), n_in, tpc, e, wb)
        if work > MAX_WORK:
            too_long.append((g.name, work, bound))
        if wv > MAX_WORK:
            too_long.append((g.name, wv, "wavelets of input"))
        last = i + 1 == n_reg or regions[i + 1].replica != g.replica
        table[i] = (g.row0, g.col0, g.col1 - g.col0, g.row1 - g.row0, max(work, 1), -1 if last else i + 1, g.replica,
                    int(first), g.flow, K.INPUT_COL if g.input == "col" else K.INPUT_ROW,
                    K.OUTPUT_BOTTOM if g.output == "bottom" else K.OUTPUT_SIDE, wv)
        region_of[g.row0:g.row1, g.col0:g.col1] = i
        if first:
            replica_ends[g.replica, 0] = i
        if last:
            replica_ends[g.replica, 1] = i
    if too_long:
        name, work, what = max(too_long, key=lambda x: x[1])
        if what in RATE_KEYS:
            raise InputError(
                f"workload.tokens_per_chunk = {tpc}: a task of region {name} would take {work:,} cycles, more than "
                f"{MAX_WORK:,}; use fewer tokens per chunk, or a larger grid or machine.{RATE_KEYS[what]} (what "
                "bounds it)")
        if what == "reduction":
            raise InputError(
                f"workload.tokens_per_chunk = {tpc}: a task of region {name} would take {work:,} cycles to pass its "
                f"partial sums on, more than {MAX_WORK:,}; use fewer tokens per chunk, a larger grid or a wider "
                "machine.wavelet_bytes")
        raise InputError(
            f"workload.tokens_per_chunk = {tpc}: a chunk's input to region {name} would be {work:,} wavelets for "
            f"each PE of its lines, more than {MAX_WORK:,}; use fewer tokens per chunk, a larger grid or a wider "
            "machine.wavelet_bytes")
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
                    idle_pes=placement.idle_pes, quantisation=placement.quantisation(),
                    compute_cycles=compute_cycles, reduce_wavelets=reduce_w, bounds=bounds, **stream)
