"""The mesh machine on the Python side: scenario -> kernel inputs, and a stepper over the kernel.

docs/design.md, "Machines"; cycle semantics in docs/mesh.md. The mesh's run (`meshsim.mesh.run`) and
the tests drive the kernel only through `MeshSim`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from kernels import mesh as K
from kernels.workload import lognormal_rates, rate_thresholds

from .. import threads
from ..compiled import call
from ..errors import InputError
from ..threads import available_cores  # noqa: F401 (meshsim.mesh exports it)
from . import policies
from . import state as S
from .trace import load_trace

# The fields of the kernel's int64 configuration vector, in index order (defined with the kernel:
# kernels.mesh.CFG_FIELDS and its CFG_* indices; the vector is built by kernels.mesh.mesh_config).
CFG_FIELDS = K.CFG_FIELDS
PATTERNS = {"uniform": K.PATTERN_UNIFORM, "transpose": K.PATTERN_TRANSPOSE, "bit_complement": K.PATTERN_BIT_COMPLEMENT,
            "neighbor": K.PATTERN_NEIGHBOR, "hotspot": K.PATTERN_HOTSPOT}


@dataclass
class MeshInputs:
    """Everything the kernel needs besides its state, built once from a scenario."""

    rows: int
    cols: int
    queue_capacity: int
    link_buffer_messages: int
    history: int
    cfg: np.ndarray  # int64[len(CFG_FIELDS)], indices kernels.mesh.CFG_*
    seed: int
    rates: np.ndarray | None  # float64[R, C] Bernoulli rates, None for a trace
    geo_log: float
    ev_cycle: np.ndarray  # int64[n] trace events, sorted by (cycle, unit)
    ev_unit: np.ndarray  # int64[n]
    ev_work: np.ndarray  # uint16[n]
    latency_bins: int
    traffic: bool = False
    pipeline: object = None  # meshsim.mesh.pipeline.Pipeline for layer_pipeline, else None
    regions: bool = False  # whether the run reports per-region figures (a hotspot workload)

    @property
    def routed(self) -> bool:
        """Whether the run carries routed packets (router queues, per-link totals)."""
        return self.traffic or self.pipeline is not None

    @property
    def sheds(self) -> bool:
        """Whether a PE keeps a shedding flag (migration with hysteresis, docs/mesh.md step 4)."""
        return int(self.cfg[K.CFG_HYSTERESIS]) > 0

    @property
    def migrating(self) -> bool:
        """Whether a migration policy is on."""
        return int(self.cfg[K.CFG_POLICY]) != K.POLICY_NONE

    @property
    def counts_directions(self) -> bool:
        """Whether the kernel counts each PE's migrations per direction: with a policy on, where the
        run has regions whose boundary crossings it reports (docs/mesh.md, "Regions and the boundary
        bound"). Elsewhere nothing reads them, and a migration then costs one counter, not two."""
        return self.migrating and self.regions

    @property
    def policy(self) -> str:
        """The migration policy's name (meshsim.mesh.policies)."""
        return policies.by_kernel_id(int(self.cfg[K.CFG_POLICY])).name

    @property
    def gradient(self) -> bool:
        """Whether the policy is gradient (the pressures are kept)."""
        return self.policy == "gradient"

    @property
    def stealing(self) -> bool:
        """Whether the policy is work_stealing (the steal states are kept)."""
        return self.policy == "work_stealing"


def injection_rates(sc) -> np.ndarray:
    """Per-PE Bernoulli rates, float64[R, C], for the uniform, hotspot and skewed workloads."""
    rows, cols = sc.get("machine", "rows"), sc.get("machine", "cols")
    kind = sc.get("workload", "type")
    base = float(sc.get("workload", "injection_rate"))
    if kind in ("uniform", "traffic"):
        return np.full((rows, cols), base)
    if kind == "hotspot":
        rates = np.full((rows, cols), base)
        for r0, c0, r1, c1 in sc.hot_regions():
            rates[r0:r1, c0:c1] = float(sc.get("workload", "hot_rate"))
        return rates
    if kind == "skewed":
        sigma = float(sc.get("workload", "sigma"))
        return lognormal_rates(n_units=rows * cols, injection_rate=base, sigma=sigma,
                               seed=np.uint64(sc.get("run", "seed"))).reshape(rows, cols)
    raise ValueError(f"no rate map for workload type {kind!r}")


def diffusion_units(rate: float) -> int:
    """diffusion's rate alpha in the kernel's units of 2^-16: floor(alpha x 65536 + 0.5) (docs/mesh.md, step 4)."""
    return int(math.floor(rate * K.DIFFUSION_ONE + 0.5))


def compile_scenario(sc) -> MeshInputs:
    """Kernel inputs for a validated scenario. Raises InputError for a bad trace file."""
    m, mig, wl = sc.values["machine"], sc.values["migration"], sc.values["workload"]
    rows, cols = m["rows"], m["cols"]
    history = S.history_length(m["hop_latency_cycles"], m["credit_delay_cycles"], mig["info_delay_cycles"])
    is_trace = wl["type"] == "trace"
    is_traffic = wl["type"] == "traffic"
    pipe = None
    if wl["type"] == "layer_pipeline":
        from .pipeline import build

        pipe = build(sc)
    cfg = K.mesh_config(
        queue_capacity=m["queue_capacity"],
        hop_latency_cycles=m["hop_latency_cycles"],
        link_messages_per_cycle=m["link_messages_per_cycle"],
        link_buffer_messages=m["link_buffer_messages"],
        credit_delay_cycles=m["credit_delay_cycles"],
        policy=policies.BY_NAME[mig["policy"]].kernel_id,
        threshold=mig["threshold"],
        hysteresis=mig["hysteresis"] if mig["policy"] != "none" else 0,
        diffusion_rate=diffusion_units(mig["diffusion_rate"]),
        info_delay_cycles=mig["info_delay_cycles"],
        max_per_cycle=mig["max_per_cycle"],
        work_kind=S.WORK_KINDS[wl["work_distribution"]],
        work_cycles=wl["work_cycles"],
        work_min_cycles=wl["work_min_cycles"],
        work_max_cycles=wl["work_max_cycles"],
        is_trace=int(is_trace),
        history_mask=history - 1,
        is_traffic=int(is_traffic),
        pattern=PATTERNS[wl["pattern"]],
        hot_threshold=int(math.floor(wl["hot_fraction"] * 4294967296.0)),  # 2^32 for 1: always the hot PE
        hot_row=rows // 2,
        hot_col=cols // 2,
        warmup_cycles=wl["warmup_cycles"] if is_traffic else 0,
        # layer_pipeline: every packet is measured.
        measure_end=wl["warmup_cycles"] + wl["measure_cycles"] if is_traffic else (2**62 if pipe else 0),
        router_queue_packets=m["router_queue_packets"],
        is_pipeline=int(pipe is not None),
        chunks_in_flight=pipe.chunks_in_flight if pipe else 1,
        weight_streaming=int(bool(pipe and pipe.streaming)),
        chunks_per_pass=pipe.chunks_per_pass if pipe and pipe.streaming else 1,
        load_cycles=pipe.load_cycles if pipe and pipe.streaming else 1,
        # (With migration a queued task may move while every server counts down.)
        fast_forward=int(mig["policy"] == "none"),
    )
    geo_log = 0.0
    if not is_trace and wl["work_distribution"] == "geometric" and wl["work_cycles"] > 1:
        geo_log = math.log(1.0 - 1.0 / float(wl["work_cycles"]))
    if is_trace:
        ev_cycle, ev_unit, ev_work = load_trace(sc.trace_path, rows, cols)
    else:
        ev_cycle = np.zeros(0, np.int64)
        ev_unit = np.zeros(0, np.int64)
        ev_work = np.zeros(0, np.uint16)
    # Per-PE rates for the Bernoulli and traffic workloads; a trace or a pipeline brings its own tasks.
    rates = None if is_trace or pipe is not None else injection_rates(sc)
    return MeshInputs(
        rows=rows, cols=cols, queue_capacity=m["queue_capacity"], link_buffer_messages=m["link_buffer_messages"],
        history=history, cfg=cfg, seed=sc.get("run", "seed"),
        rates=rates, geo_log=geo_log, ev_cycle=ev_cycle, ev_unit=ev_unit, ev_work=ev_work,
        latency_bins=sc.get("output", "latency_histogram_max_cycles") + 1, traffic=is_traffic, pipeline=pipe,
        regions=wl["type"] == "hotspot")


#: The name the mesh's tests and tools have long used for compile_scenario.
build_inputs = compile_scenario


def check_memory(inputs: MeshInputs, max_chunk: int, n_blocks: int) -> None:
    """InputError if the state and the run's buffers would not fit in the memory available now
    (instead of the run being killed by the operating system part-way). Python, Numba and HDF5
    need a few hundred MiB more, which MemAvailable must also cover; container limits that
    /proc/meminfo does not show are not seen."""
    layout = S.mesh_layout(inputs.rows, inputs.cols, inputs.queue_capacity, inputs.link_buffer_messages,
                           inputs.history, inputs.routed,
                           int(inputs.cfg[K.CFG_ROUTER_QUEUE_PACKETS]), S.pipeline_dims(inputs.pipeline), inputs.sheds,
                           inputs.counts_directions, inputs.policy)
    buffers = 8 * (max_chunk * (K.N_SERIES + inputs.queue_capacity + 1) + n_blocks * inputs.latency_bins)
    need = S.layout_bytes(layout) + buffers
    have = S.available_memory_bytes()
    if have is not None and need > have:
        raise InputError(
            f"machine.rows x machine.cols = {inputs.rows} x {inputs.cols} with machine.queue_capacity = "
            f"{inputs.queue_capacity}: the state and buffers need {need / 2**30:.1f} GiB and {have / 2**30:.1f} GiB "
            "of memory is available; use a smaller grid, queue, link buffer or router queue, or a smaller "
            "output.flush_every_cycles or output.latency_histogram_max_cycles")


class MeshSim:
    """The mesh's state plus the kernel, advanced `n` cycles at a time.

    After `advance(n)`, `series[:n]` and `depth_series[:n]` hold the cycles just run; the latency
    histogram accumulates in `lat_hist_blocks` until `take_latency_histogram()`.
    """

    def __init__(self, inputs: MeshInputs, max_chunk: int):
        self.inputs = inputs
        check_memory(inputs, max_chunk, len(S.row_blocks(inputs.rows)) - 1)
        thr = rate_thresholds(np.ascontiguousarray(inputs.rates)) if inputs.rates is not None else \
            np.zeros((inputs.rows, inputs.cols), np.uint32)
        self.state = S.allocate_mesh(inputs.rows, inputs.cols, inputs.queue_capacity, inputs.link_buffer_messages,
                                     inputs.history, thr, inputs.geo_log, traffic=inputs.routed,
                                     router_queue_packets=int(inputs.cfg[K.CFG_ROUTER_QUEUE_PACKETS]),
                                     pipeline=inputs.pipeline, hysteresis=inputs.sheds,
                                     direction_counts=inputs.counts_directions, policy=inputs.policy)
        self.blocks = S.row_blocks(inputs.rows)
        self.max_chunk = max_chunk
        self.series = np.zeros((max_chunk, K.N_SERIES), np.int64)
        self.depth_series = np.zeros((max_chunk, inputs.queue_capacity + 1), np.int64)
        self.lat_hist_blocks = np.zeros((len(self.blocks) - 1, inputs.latency_bins), np.int64)
        # tasks injected + packets offered, refused, completed, messages in flight, delivered, control
        # messages in flight
        self.cum = np.zeros(6, np.int64)
        self.cycle = 0
        self._ev_lo = np.zeros(max_chunk + 1, np.int64)

    def advance(self, n: int) -> None:
        """Run the next n cycles (n <= max_chunk). Raises RuntimeError if conservation fails."""
        if not 0 < n <= self.max_chunk:
            raise ValueError(f"advance({n}) outside 1..{self.max_chunk}")
        t0 = self.cycle
        inp = self.inputs
        if inp.ev_cycle.size:
            self._ev_lo[: n + 1] = np.searchsorted(inp.ev_cycle, np.arange(t0, t0 + n + 1))
        else:
            self._ev_lo[: n + 1] = 0
        bad = call(K.run_cycles, st=self.state, cfg=inp.cfg, seed=np.uint64(inp.seed), t0=t0, n_cycles=n,
                   ev_cycle_lo=self._ev_lo, ev_unit=inp.ev_unit, ev_work=inp.ev_work, block_rows=self.blocks,
                   series=self.series, depth_series=self.depth_series, lat_hist_blocks=self.lat_hist_blocks,
                   cum=self.cum)
        if bad >= 0:
            raise RuntimeError(f"conservation of tasks violated at cycle {bad}: this is a bug in meshsim")
        self.cycle = t0 + n

    def take_latency_histogram(self) -> np.ndarray:
        """The latency histogram accumulated since the last call (int64[bins]), and reset it."""
        h = self.lat_hist_blocks.sum(axis=0)
        self.lat_hist_blocks[:] = 0
        return h

    def audit(self) -> None:
        """Check the kernel's in-flight count against the link state (a bug if they differ)."""
        counted = S.in_flight_from_links(self.state, self.cycle, self.inputs.link_buffer_messages)
        if counted != int(self.cum[3]):
            raise RuntimeError(f"in-flight messages: links hold {counted}, the running count says {int(self.cum[3])} "
                               f"after cycle {self.cycle - 1}: this is a bug in meshsim")
        if self.inputs.pipeline is not None:
            staged = int(self.state.out_left.sum(dtype=np.int64))
            running = int(self.state.lp_ctl[K.CTL_IN_SOURCE])
            if staged != running:
                raise RuntimeError(f"output stages hold {staged} packets, the running count says {running} after "
                                   f"cycle {self.cycle - 1}: this is a bug in meshsim")

    def unoffered_events(self, cycles: int) -> int:
        """Trace events a run of `cycles` cycles does not offer (cycle outside [0, cycles))."""
        return int(self.inputs.ev_cycle.size - np.count_nonzero(self.inputs.ev_cycle < cycles))


#: PEs each thread needs before one more pays for the barrier it adds to every cycle (docs/mesh.md,
#: "Threads"): a grid of fewer runs on one thread when run.threads = 0.
PES_PER_THREAD = 32_768


def default_threads(n_pes: int) -> int:
    """Threads for run.threads = 0: one per PES_PER_THREAD PEs, at least one, at most the cores."""
    return max(1, min(available_cores(), n_pes // PES_PER_THREAD))


def set_threads(threads_: int, n_pes: int = 0) -> int:
    """Use `threads_` Numba threads, at most the cores; 0: as many as a grid of `n_pes` PEs can use
    (`default_threads`). Returns the number in use (meshsim.threads.set_threads for any machine)."""
    return threads.set_threads(threads_, default_threads(n_pes))
