"""Allocation of the mesh kernel's state (docs/design.md, "Performance"): kernels.mesh.MeshState, whose
definition (one field per array) lives with the kernel; `allocate_mesh` is the one place that builds it.

The dtypes live here, in one place: the narrowest that hold every legal value.
"""

from __future__ import annotations

import numpy as np

from kernels import mesh as K
from kernels.mesh import MeshState

from . import policies

WORK_KINDS = {"fixed": K.WORK_FIXED, "uniform": K.WORK_UNIFORM, "geometric": K.WORK_GEOMETRIC}
# The views of other fields (no storage of their own).
VIEW_FIELDS = ("sent_h32", "recv_h32", "oq_len64")


def history_length(*delays: int) -> int:
    """Smallest power of two H > every delay, so the slot written at t is never read at t."""
    h = 2
    while h <= max(delays):
        h *= 2
    return h


def mesh_layout(rows: int, cols: int, queue_capacity: int, link_buffer_messages: int, history: int,
                traffic: bool = False, router_queue_packets: int = 1, pipeline=None, hysteresis: bool = False,
                direction_counts: bool = False, policy: str = "none") -> dict:
    """Shape and dtype of every array a mesh run allocates (the views excluded): name -> (shape, dtype).
    The routed-traffic arrays are 1 x 1 placeholders unless `traffic` (or a pipeline); the
    layer_pipeline arrays unless `pipeline`, a (regions, replicas, chunks_in_flight) triple; the
    shedding flags unless `hysteresis` (migration with a hysteresis above 0); the per-direction
    migration counts unless `direction_counts` (a policy on, where the run reports its regions' boundary
    crossings); each migration policy's own state (meshsim.mesh.policies) unless it is `policy`."""
    r, c, q = rows, cols, queue_capacity
    traffic = traffic or pipeline is not None
    pr, pc = (r, c) if traffic else (1, 1)
    n_reg, n_rep, w = pipeline if pipeline is not None else (1, 1, 1)
    lr, lc = (r, c) if pipeline is not None else (1, 1)
    n_seg = -(-c // K.SEG)
    lp = {
        "lp_g": ((lr, lc), np.int32), "lp_reg": ((n_reg, K.N_REG), np.int64), "lp_rep": ((n_rep, 2), np.int64),
        "lp_taken": ((lr, lc), np.int32), "out_left": ((lr, lc), np.int32), "out_birth": ((lr, lc), np.int32),
        "lp_got": ((lr, lc), np.int32),
        "lp_adm": ((n_rep,), np.int64), "lp_fin": ((n_rep,), np.int64), "lp_done": ((n_rep, w), np.int64),
        "lp_admit_t": ((n_rep, w), np.int64), "lp_took": ((n_rep,), np.int64), "lp_ctl": ((K.N_CTL,), np.int64),
    }
    return {
        "q_work": ((q, r, c), np.uint16), "q_birth": ((q, r, c), np.int32), "q_hops": ((q, r, c), np.uint8),
        "q_len": ((r, c), np.uint8), "s_rem": ((r, c), np.uint16), "s_birth": ((r, c), np.int32),
        "s_hops": ((r, c), np.uint8), "link": ((r, c, 4, link_buffer_messages), np.uint64),
        "sent_h": ((history, r, c, 4), np.uint8), "recv_h": ((history, r, c, 4), np.uint8),
        "depth_h": ((history, r, c), np.uint8), "tot_started": ((r, c), np.int64),
        "tot_injected": ((r, c), np.int32), "tot_refused": ((r, c), np.int32), "tot_completed": ((r, c), np.int32),
        "tot_migrated_out": ((r, c), np.int32), "tot_migrated_in": ((r, c), np.int32),
        "tot_latency": ((r, c), np.int64), "thr": ((r, c), np.uint32),
        "src_pending": ((pr, pc), np.int32), "src_scan": ((pr, pc), np.int32),
        "tot_pkt_offered": ((pr, pc), np.int32), "tot_pkt_delivered": ((pr, pc), np.int32),
        "link_total": ((pr, pc, 4), np.int64),
        "oq": ((pr, pc, 5, router_queue_packets if traffic else 1), np.uint64), "oq_len": ((pr, pc, 8), np.uint8),
        **lp,
        "seg_chg": ((2, r, n_seg), np.int64), "seg_idle": ((r, n_seg), np.uint8), "seg_live": ((r, n_seg), np.uint8),
        "shed": ((r, c) if hysteresis else (1, 1), np.uint8),
        "tot_mig_dir": ((r, c, 4) if direction_counts else (1, 1, 4), np.int32),
        **policies.state_layout(policy, r, c, history),
    }


def pipeline_dims(pipeline):
    """mesh_layout's `pipeline` argument for a meshsim.mesh.pipeline.Pipeline (or None): regions,
    replicas, chunks in flight."""
    return None if pipeline is None else (pipeline.n_regions, pipeline.n_replicas, pipeline.chunks_in_flight)


def layout_bytes(layout: dict) -> int:
    """Bytes the arrays of a layout take."""
    return sum(int(np.prod(shape)) * np.dtype(dtype).itemsize for shape, dtype in layout.values())


def allocate_mesh(rows: int, cols: int, queue_capacity: int, link_buffer_messages: int, history: int,
                  thresholds: np.ndarray, geo_log: float = 0.0, traffic: bool = False,
                  router_queue_packets: int = 1, pipeline=None, hysteresis: bool = False,
                  direction_counts: bool = False, policy: str = "none") -> MeshState:
    """Zeroed state for an empty mesh (before cycle 0); `traffic` allocates the routed-traffic arrays.
    `pipeline` (a meshsim.mesh.pipeline.Pipeline) allocates the layer_pipeline arrays and fills its tables."""
    layout = mesh_layout(rows, cols, queue_capacity, link_buffer_messages, history, traffic, router_queue_packets,
                         pipeline_dims(pipeline), hysteresis, direction_counts, policy)
    a = {name: np.zeros(shape, dtype) for name, (shape, dtype) in layout.items()}
    a["thr"][...] = np.asarray(thresholds, dtype=np.uint32).reshape(rows, cols)
    # Skipping quiet segments: no change "before the run" (every history slot holds the empty
    # state), every PE idle, and live where a PE can be offered work (a Bernoulli threshold above 0,
    # or a first region of a pipeline).
    a["seg_chg"][...] = -(1 << 62)
    a["seg_idle"][...] = 1
    live = a["thr"] > 0
    if pipeline is not None:
        live = live | np.isin(pipeline.region_of, pipeline.replica_ends[:, 0])
    a["seg_live"][...] = _segments_any(live)
    if pipeline is not None:
        a["lp_g"][...] = pipeline.region_of
        a["lp_reg"][...] = pipeline.table
        if (pipeline.table[:, K.REG_WAVELETS] < 1).any():
            raise ValueError("every region of a pipeline needs at least one wavelet a chunk (REG_WAVELETS >= 1)")
        a["lp_rep"][...] = pipeline.replica_ends
        last = pipeline.table[pipeline.replica_ends[:, 1]]
        if (last[:, K.REG_OUTPUT] != K.OUTPUT_SIDE).any():
            # The kernel's buffer of finishing events holds one output-edge PE per row and replica.
            raise ValueError("the last region of a pipeline must send from its side, not its bottom row")
        # Before the first admission every PE of a first region has taken all (none) of the chunks.
        first = pipeline.table[pipeline.replica_ends[:, 0]]
        a["lp_took"][...] = first[:, K.REG_WIDTH] * first[:, K.REG_HEIGHT]
    return MeshState(
        **a,
        geo_log=float(geo_log),
        sent_h32=a["sent_h"].view(np.uint32).reshape(history, rows, cols),
        recv_h32=a["recv_h"].view(np.uint32).reshape(history, rows, cols),
        oq_len64=a["oq_len"].view(np.uint64).reshape(a["oq_len"].shape[:2]),
    )


def _segments_any(mask: np.ndarray) -> np.ndarray:
    """uint8[R, S]: 1 where any PE of a row's segment of kernels.mesh.SEG columns is set in `mask`."""
    rows, cols = mask.shape
    n_seg = -(-cols // K.SEG)
    padded = np.zeros((rows, n_seg * K.SEG), bool)
    padded[:, :cols] = mask
    return padded.reshape(rows, n_seg, K.SEG).any(axis=2).astype(np.uint8)


def available_memory_bytes() -> int | None:
    """MemAvailable of /proc/meminfo (Linux), or None where it cannot be read."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def state_arrays(state: MeshState) -> dict:
    """The state's arrays with storage of their own (the views follow them): name -> array."""
    return {f: a for f in state._fields if f not in VIEW_FIELDS and isinstance(a := getattr(state, f), np.ndarray)}


def state_bytes_per_pe(state: MeshState) -> float:
    """Bytes of state arrays per PE."""
    return sum(a.nbytes for a in state_arrays(state).values()) / state.q_len.size


def in_flight_from_links(state: MeshState, cycle_done: int, link_buffer_messages: int) -> int:
    """Messages sent and not yet received, counted from the link state after `cycle_done` cycles.

    An audit independent of the kernel's running count: for every link, the sender's send count
    minus the receiver's receive count (mod 2K), at the end of the last cycle.
    """
    if cycle_done == 0:
        return 0
    slot = (cycle_done - 1) % state.sent_h.shape[0]
    return int(K.count_in_flight(sent_h=state.sent_h, recv_h=state.recv_h, slot=slot, wrap=2 * link_buffer_messages))


def row_blocks(rows: int, n_blocks: int = 64) -> np.ndarray:
    """Fixed row bounds of the blocks split over threads: int64[n + 1]. Independent of thread count."""
    n = max(1, min(rows, n_blocks))
    return np.array([rows * i // n for i in range(n + 1)], dtype=np.int64)


def busy_cycles(state: MeshState) -> np.ndarray:
    """Busy cycles of every PE so far: int64[R, C] (work started minus work still remaining)."""
    return state.tot_started - state.s_rem.astype(np.int64)
