"""Generation on the rdu: the rdu's `decode` workload (docs/rdu.md, "Generation"). Each decoder layer
is one fused kernel call that streams its weights and its share of the key-value cache from HBM (DDR
on a chip without HBM) while it computes, as the SN40L serves a model; the prompt is one step, each
output token after the first one more.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from fractions import Fraction

import numpy as np

from .. import metrics
from ..errors import InputError
from ..machine import TokenRun
from ..output import TokenTables, describe
from ..transformer import NORMS, TP_ALLREDUCE_AFTER, Model, compute_rate, model_from_workload, operators, tensor_split
from .checks import parse_parallelism

#: Bytes of one (value, index) pair the head's argmax gathers over a tensor group.
ARGMAX_PAIR_BYTES = 8


@dataclass(frozen=True)
class DecodeSpec:
    """What a generation needs, from a validated rdu decode scenario (docs/rdu.md's names)."""

    model: Model  # batch B: one replica's sequences
    t: int
    d: int
    vocab_size: int
    context: int
    output_tokens: int
    pcus: int
    lanes: int
    stages: int
    clock_ghz: float
    fp32_rate: float
    memory_gib: int  # HBM, or DDR without it
    memory_gbps: float
    hbm: bool
    ddr_gib: int
    ddr_gbps: float
    eta: float
    launch: int  # cycles a call's start costs
    link_gbps: float
    link_lat: int
    preset: str

    @property
    def rate(self) -> Fraction:
        return compute_rate(self.model.precision, self.fp32_rate)

    def compute_cycles(self, flops: int) -> int:
        """ceil(FLOPs / peak), peak = P L D 2 r, exactly."""
        r = self.rate
        return -(-flops * r.denominator // (self.pcus * self.lanes * self.stages * 2 * r.numerator))

    def stream_cycles(self, nbytes: int) -> int:
        """ceil(bytes x f / (eta x G)) in rational arithmetic of the decimal values as written."""
        if not nbytes:
            return 0
        return math.ceil(Fraction(nbytes) * Fraction(str(self.clock_ghz))
                         / (Fraction(str(self.eta)) * Fraction(str(self.memory_gbps))))

    def allreduce(self, nbytes: int) -> int:
        """A ring all-reduce of `nbytes` over the tensor group: 2 (t - 1) (lat + ceil(ceil(Tb / t) / bw))."""
        if self.t == 1:
            return 0
        share = -(-nbytes // self.t)
        move = math.ceil(Fraction(share) * Fraction(str(self.clock_ghz)) / Fraction(str(self.link_gbps)))
        return 2 * (self.t - 1) * (self.link_lat + move)

    @property
    def kv_bytes_per_position(self) -> int:
        """A socket's cache bytes per position: 2 n_layers B K' e."""
        m = self.model
        return 2 * m.n_layers * m.batch * (m.kv_size // self.t) * m.element_bytes


def decode_spec(scenario) -> DecodeSpec:
    m, w = scenario.values["machine"], scenario.values["workload"]
    t, _, d = parse_parallelism(w["parallelism"])
    model = model_from_workload(w, batch=w["batch"] // d)
    hbm = m["hbm_gib"] > 0
    launch = m["kernel_launch_cycles"]
    if m["orchestration"] == "software":
        launch += math.ceil(Fraction(str(m["host_launch_us"])) * 1000 * Fraction(str(m["clock_ghz"])))
    from ..topology import node_link

    groups = [[(di * t) + ti for ti in range(t)] for di in range(d)]  # pipeline degree 1: chip (ti, 0, di)
    gbps, lat = node_link(groups, m["chips_per_node"], (m["interconnect_gbps"], m["interconnect_latency_cycles"]),
                          (m["node_interconnect_gbps"], m["node_interconnect_latency_cycles"]))
    spec = DecodeSpec(model=model, t=t, d=d, vocab_size=w["vocab_size"], context=w["context"],
                      output_tokens=w["output_tokens"], pcus=m["pcus"], lanes=m["pcu_lanes"], stages=m["pcu_stages"],
                      clock_ghz=m["clock_ghz"], fp32_rate=m["fp32_rate"],
                      memory_gib=m["hbm_gib"] if hbm else m["ddr_gib"],
                      memory_gbps=m["hbm_bandwidth_gbps"] if hbm else m["ddr_bandwidth_gbps"], hbm=hbm,
                      ddr_gib=m["ddr_gib"], ddr_gbps=m["ddr_bandwidth_gbps"], eta=m["stream_efficiency"],
                      launch=launch, link_gbps=gbps, link_lat=lat, preset=m["preset"])
    _check_memory(spec, scenario)
    return spec


@dataclass(frozen=True)
class Step:
    """One step's cycles and what they are made of (docs/rdu.md, "Generation")."""

    cycles: int
    stream: int  # the calls' stream terms, summed
    compute: int  # the calls' compute terms, summed
    launch: int
    allreduce: int
    bytes: int  # read by its calls
    bound: int  # the calls' max terms, summed (cycles - launch - allreduce)


def _layer_calls(spec: DecodeSpec, seq: int, cached: int) -> list:
    """(bytes, FLOPs, all-reduce cycles after it) of every call of a step of `seq` new tokens a sequence
    over `cached` positions: the layers, then the head."""
    m = replace(spec.model, seq_len=seq, context=cached)
    e, h, t_tok = m.element_bytes, m.hidden_size, m.tokens
    calls = []
    per_layer: dict = {}
    for op in operators(m):
        per_layer.setdefault(op.layer, []).append(tensor_split(op, spec.t))
    kv = 2 * m.batch * cached * (m.kv_size // spec.t) * e  # the cached keys and values the layer reads
    for layer in range(m.n_layers):
        ops = per_layer[layer]
        lookup = t_tok * h * e if layer == 0 and spec.vocab_size else 0  # the embedding's rows, read in call 0
        nbytes = sum(op.weight_bytes for op in ops) + kv + lookup
        flops = sum(op.flops for op in ops)
        ar = sum(spec.allreduce(t_tok * h * e) for op in ops
                 if (op.name.split(".")[-1], "forward") in TP_ALLREDUCE_AFTER)
        calls.append((nbytes, flops, ar))
    if spec.vocab_size:
        b, v = m.batch, -(-spec.vocab_size // spec.t)
        n_flops, n_params = NORMS[m.norm]
        nbytes = n_params * h * e + v * h * e
        flops = n_flops * b * h + 2 * b * h * v + b * v
        calls.append((nbytes, flops, spec.allreduce(ARGMAX_PAIR_BYTES * b)))
    return calls


def step(spec: DecodeSpec, seq: int, cached: int) -> Step:
    """A step of `seq` new tokens a sequence over `cached` positions."""
    total = stream = compute = launch = ar = nbytes = bound = 0
    for b, f, a in _layer_calls(spec, seq, cached):
        s, c = spec.stream_cycles(b), spec.compute_cycles(f)
        total += spec.launch + max(s, c) + a
        stream, compute, launch, ar, nbytes, bound = (stream + s, compute + c, launch + spec.launch, ar + a,
                                                      nbytes + b, bound + max(s, c))
    return Step(total, stream, compute, launch, ar, nbytes, bound)


def weight_bytes(spec: DecodeSpec) -> int:
    """A socket's weights: every call's, and an untied head's token table share."""
    calls = _layer_calls(spec, 1, 0)
    m, e = spec.model, spec.model.element_bytes
    # the calls' bytes at one token without a cache: weights, and layer 0's embedding rows (not weights)
    w = sum(b for b, _, _ in calls) - (m.batch * m.hidden_size * e if spec.vocab_size else 0)
    if spec.vocab_size and not m.tied_head:
        w += -(-spec.vocab_size // spec.t) * m.hidden_size * e
    return w


def _check_memory(spec: DecodeSpec, scenario) -> None:
    w = weight_bytes(spec)
    positions = spec.context + spec.output_tokens - 1
    need = w + positions * spec.kv_bytes_per_position
    cap = spec.memory_gib * 2**30
    key = "machine.hbm_gib" if spec.hbm else "machine.ddr_gib"
    where = scenario.path or "<scenario>"
    if need > cap:
        raise InputError(f"{where}: {key} = {spec.memory_gib}: a socket needs {need:,} bytes ({w:,} of weights, "
                         f"{need - w:,} of key-value cache for {positions:,} positions) of {cap:,}; a shorter "
                         "prompt or generation (workload.context, workload.output_tokens), a smaller batch, or more "
                         "sockets (workload.parallelism's tensor degree)")
    if spec.hbm and w > spec.ddr_gib * 2**30:
        raise InputError(f"{where}: machine.ddr_gib = {spec.ddr_gib}: a socket's {w:,} bytes of weights do not fit "
                         f"its DDR ({spec.ddr_gib * 2**30:,} bytes), which keeps the model to switch to")


def longest_context(spec: DecodeSpec) -> int:
    """The most positions the memory holds beside the weights."""
    return max(0, (spec.memory_gib * 2**30 - weight_bytes(spec)) // spec.kv_bytes_per_position)


def switch_cycles(spec: DecodeSpec) -> int:
    """Copying a socket's weights from DDR to HBM (0 without HBM)."""
    if not spec.hbm:
        return 0
    return math.ceil(Fraction(weight_bytes(spec)) * Fraction(str(spec.clock_ghz)) / Fraction(str(spec.ddr_gbps)))


def roofline_rows(values: dict, platform) -> list[dict]:
    """The first decode step's layer-0 call and head call on the chip's roofline: FLOPs against the bytes
    each streams; the stream reaches stream_efficiency of the memory's bandwidth (docs/rdu.md,
    "Generation")."""
    from types import SimpleNamespace

    spec = decode_spec(SimpleNamespace(values=values, path=None))
    calls = _layer_calls(spec, 1, spec.context)
    named = [("layer0 call", calls[0])] + ([("head call", calls[-1])] if spec.vocab_size else [])
    rows = []
    for name, (nbytes, flops, _) in named:
        ai = flops / nbytes if nbytes else math.inf
        streamed = ai * platform.bandwidth * spec.eta
        rows.append(dict(name=name, kind="kernel call", flops=flops, bytes=nbytes, intensity=ai,
                         attainable_flops=min(platform.peak_flops, streamed),
                         bound="memory" if streamed < platform.peak_flops else "compute"))
    return rows


#: The tokens/ table's columns: name -> (units, description).
TOKEN_COLUMNS = {
    "token": ("1", "output token, from 0"),
    "start_cycle": ("cycle", "cycle its step starts"),
    "cycles": ("cycles", "its step (token 0: the prompt's, the time to first token)"),
    "stream_cycles": ("cycles", "its calls' streams of weights and cache, summed"),
    "compute_cycles": ("cycles", "its calls' compute at the peak, summed"),
    "launch_cycles": ("cycles", "its calls' starts"),
    "allreduce_cycles": ("cycles", "its all-reduces over the tensor group"),
    "context": ("tokens", "cached positions once it is known"),
}


class RduDecodeState:
    """A generation between calls: the tokens done and their steps."""

    def __init__(self, spec: DecodeSpec):
        self.spec = spec
        self.tokens_done = 0
        self.cycle = 0
        self.latencies: list = []  # the steps of the tokens after the first
        self.bytes_read = 0  # by the steps after the prompt's
        self.bound = 0  # their max terms, summed
        self.prompt = step(spec, spec.context, 0)  # the prompt's step, which gives token 0

    def advance(self, n: int) -> tuple:
        spec = self.spec
        rows, caches = [], []
        while len(rows) < n and self.tokens_done < spec.output_tokens:
            k = self.tokens_done
            s = self.prompt if k == 0 else step(spec, 1, spec.context + k - 1)
            rows.append((k, self.cycle, s.cycles, s.stream, s.compute, s.launch, s.allreduce, spec.context + k))
            caches.append(np.full(spec.t, (spec.context + k) * spec.kv_bytes_per_position, np.int64))
            if k:
                self.latencies.append(s.cycles)
                self.bytes_read += s.bytes
                self.bound += s.bound
            self.cycle += s.cycles
            self.tokens_done += 1
        return (np.array(rows, np.int64).reshape(len(rows), len(TOKEN_COLUMNS)),
                np.array(caches, np.int64).reshape(len(rows), spec.t))

    @property
    def finished(self) -> bool:
        return self.tokens_done >= self.spec.output_tokens


class RduDecodeWriter(TokenTables):
    """An rdu generation's file: the tokens/ table, the cache's bytes per socket, the sockets' busy cycles."""

    def __init__(self, final_path, scenario, spec: DecodeSpec, *, threads: int, compression_level: int):
        super().__init__(final_path, scenario, "rdu", threads, 0, compression_level)
        f, t = self.f, spec.t
        self.socket = self._scale(f, "socket", np.arange(t, dtype=np.int32), "1", "socket of a tensor group")
        self._tokens(TOKEN_COLUMNS, "one row per output token, in order (docs/rdu.md, \"Generation\")", "output token")
        occ = f.create_group("occupancy")
        occ.attrs["description"] = "the key-value cache on each socket of a tensor group after each token"
        self.cache = occ.create_dataset("cache_bytes", shape=(0, t), maxshape=(None, t), dtype=np.int64,
                                        chunks=(max(1, 8192 // t), t), **self.comp)
        describe(self.cache, "bytes", "cache bytes each socket holds once each token is known")
        self.cache.dims[0].attach_scale(self.token)
        self.cache.dims[1].attach_scale(self.socket)
        u = f.create_group("units")
        u.attrs["description"] = "per-socket totals over the tokens generated"
        self.busy = u.create_dataset("socket_busy_cycles", data=np.zeros(t, np.int64), **self.comp)
        describe(self.busy, "cycles", "cycles each socket streamed or computed (its calls' max terms)")
        self.busy.dims[0].attach_scale(self.socket)
        f.create_group("summary").attrs["description"] = "the run's figures (docs/rdu.md, \"Generation\")"

    def write_busy(self, busy: int) -> None:
        self.busy[...] = np.full(self.busy.shape, busy, np.int64)


def summarise(spec: DecodeSpec, state: RduDecodeState, wall: float, kernel_seconds: float, threads: int) -> dict:
    """A generation's figures (docs/rdu.md, "Generation")."""
    nan = float("nan")
    hz = spec.clock_ghz * 1e9
    ms = 1e3 / hz
    done, cycles = state.tokens_done, state.cycle
    first = state.prompt
    lat = np.array(state.latencies, np.int64)
    la = metrics.sample_latency_stats(lat)
    decode_cycles = int(lat.sum())
    one = step(spec, 1, spec.context)  # the first decode step, for the shares
    busy_total = first.bound + state.bound if done else 0
    busy = np.full(spec.t, busy_total, np.int64)
    sequences = spec.model.batch * spec.d
    return {
        "cycles": cycles,
        "n_units": spec.t,
        **metrics.balance_figures(busy, cycles),
        **metrics.latency_figures(la),
        "injected": done,
        "refused": 0,
        "completed": done,
        "in_system_at_end": 0,
        "migrated": 0,
        "preset": spec.preset,
        "sockets": spec.t * spec.d,
        "tensor_parallel": spec.t,
        "sequences": sequences,
        "decode_tokens": done,
        "decode_context_start": spec.context,
        "decode_context_end": spec.context + max(0, done - 1),
        "decode_longest_context": longest_context(spec),
        "memory": "hbm" if spec.hbm else "ddr",
        "time_to_first_token_ms": first.cycles * ms,
        "time_per_token_ms_mean": float(lat.mean()) * ms if lat.size else nan,
        "time_per_token_ms_p50": la["p50"] * ms if lat.size else nan,
        "time_per_token_ms_p99": la["p99"] * ms if lat.size else nan,
        "tokens_per_second": lat.size / (decode_cycles / hz) if lat.size else nan,
        "tokens_per_second_total": sequences * lat.size / (decode_cycles / hz) if lat.size else nan,
        "step_cycles_first": one.cycles,
        "step_stream_fraction": one.stream / one.cycles,
        "step_compute_fraction": one.compute / one.cycles,
        "step_launch_fraction": one.launch / one.cycles,
        "step_allreduce_fraction": one.allreduce / one.cycles,
        "step_bound": "stream" if one.stream >= one.compute else "compute",
        "memory_bandwidth_fraction": state.bytes_read / (decode_cycles / hz) / (spec.memory_gbps * 1e9)
        if decode_cycles else nan,
        "cache_bytes_per_socket": (spec.context + max(0, done - 1)) * spec.kv_bytes_per_position,
        "cache_li": 1.0,
        "weight_bytes_per_socket": weight_bytes(spec),
        "memory_max_fraction": (weight_bytes(spec) + (spec.context + spec.output_tokens - 1)
                                * spec.kv_bytes_per_position) / (spec.memory_gib * 2**30),
        "model_switch_ms": switch_cycles(spec) * ms,
        "clock_ghz": spec.clock_ghz,
        "simulated_seconds": cycles / hz,
        "wall_seconds": wall,
        "kernel_seconds": kernel_seconds,
        "pe_cycles_per_second": nan,
        "threads": threads,
    }


class RduDecodeRun(TokenRun):
    """An rdu generation: every token's step at once (each is arithmetic), written in one go."""

    def __init__(self, scenario, spec: DecodeSpec, per_call: int | None = None):
        super().__init__(RduDecodeState(spec), spec.output_tokens, per_call or 1_000_000)
        self.scenario = scenario
        self.spec = spec

    def open_writer(self, path, scenario, threads: int) -> RduDecodeWriter:
        return RduDecodeWriter(path, scenario, self.spec, threads=threads,
                               compression_level=scenario.get("output", "compression_level"))

    def prepare_flush(self, writer) -> None:
        writer.write_busy(self._busy())

    def _busy(self) -> int:
        s = self.state
        return (s.prompt.bound + s.bound) if s.tokens_done else 0

    def summarise(self, timing) -> dict:
        return summarise(self.spec, self.state, timing.wall, timing.kernel_total, timing.threads)

    def write_final(self, writer) -> None:
        writer.write_busy(self._busy())


def summary_lines(s: dict) -> list:
    """The one-screen summary of an rdu generation."""
    from ..report import fmt as _f

    return [
        f"generation    {_f(s['decode_tokens'])} tokens for {_f(s['sequences'])} sequence(s) on {_f(s['sockets'])} "
        f"socket(s) (tensor-parallel over {_f(s['tensor_parallel'])}), context {_f(s['decode_context_start'])} -> "
        f"{_f(s['decode_context_end'])}, weights and cache streamed from {s['memory'].upper()}",
        f"time          first token {_f(s['time_to_first_token_ms'])} ms; per token mean "
        f"{_f(s['time_per_token_ms_mean'])} ms, p50 {_f(s['time_per_token_ms_p50'])}, p99 "
        f"{_f(s['time_per_token_ms_p99'])}; {_f(s['tokens_per_second'])} tokens/s per sequence, "
        f"{_f(s['tokens_per_second_total'])} in all",
        f"a step        {_f(s['step_cycles_first'])} cycles ({s['step_bound']}-bound): streaming "
        f"{_f(s['step_stream_fraction'])}, compute {_f(s['step_compute_fraction'])}, kernel starts "
        f"{_f(s['step_launch_fraction'])}, all-reduces {_f(s['step_allreduce_fraction'])}; "
        f"{_f(s['memory_bandwidth_fraction'])} of the memory's bandwidth reached over the tokens",
        f"cache         {_f(s['cache_bytes_per_socket'])} bytes a socket at the end (LI {_f(s['cache_li'])} over the "
        f"sockets); longest context {_f(s['decode_longest_context'])} positions",
        f"memory        weights {_f(s['weight_bytes_per_socket'])} bytes a socket; with the cache at its fullest "
        f"the generation uses {_f(s['memory_max_fraction'])} of the memory; switching to this model copies the "
        f"weights in {_f(s['model_switch_ms'])} ms",
    ]
