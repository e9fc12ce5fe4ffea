"""The mesh (WSE-2-style) cycle kernel: docs/mesh.md (and docs/design.md, "Performance").

Layout (structure of arrays; R = rows, C = cols, Q = queue capacity, K = link buffer, H = history), the
fields of MeshState below, which the kernels read by name (the configuration vector likewise: CFG_*):

    q_work  uint16[Q, R, C]   queued tasks' work (cycles); slot 0 is the head
    q_birth int32[Q, R, C]    queued tasks' birth cycle
    q_hops  uint8[Q, R, C]    queued tasks' hops
    q_len   uint8[R, C]       queue depth (tasks waiting; the one in service is not counted)
    s_rem   uint16[R, C]      remaining work of the task in service, 0 = server empty
    s_birth int32[R, C], s_hops uint8[R, C]
    link    uint64[R, C, 4, K] messages sent on each output link, ring indexed by the send count
    sent_h  uint8[H, R, C, 4] send count per output link at the end of cycle t (slot t & (H-1)),
                              modulo W = 2K
    recv_h  uint8[H, R, C, 4] receive count per input link, likewise
    depth_h uint8[H, R, C]    queue depth at the end of cycle t
    sent_h32, recv_h32        uint32[H, R, C] views of sent_h, recv_h (the 4 counts as one word)
    tot_started int64[R, C]   work started in service (busy cycles = tot_started - s_rem)
    tot_*                     other per-PE totals (latency int64, counts int32)
    thr     uint32[R, C]      Bernoulli injection threshold (docs/mesh.md)
    shed    uint8[R, C]       1 while a PE sheds its surplus (migration with hysteresis only, 1 x 1 otherwise;
                              docs/mesh.md step 4)
    tot_mig_dir int32[R, C, 4] tasks migrated on each output direction (where the run reports its
                              regions' boundary crossings, 1 x 1 x 4 otherwise: then not written)
    press_h uint8[H, R, C]    gradient only (1 x 1 x 1 otherwise): the pressure at the end of cycle t
    steal   uint8[R, C]       work_stealing only (1 x 1 otherwise): bits 0-3 a request from input d is owed
                              an answer, bits 4-6 the PE's outstanding request, 1 + its direction (0: none)
    routed traffic only (shape 1 x 1 otherwise): src_pending, src_scan int32[R, C] (source queues),
    tot_pkt_offered, tot_pkt_delivered int32[R, C], link_total int64[R, C, 4] (messages per link),
    oq uint64[R, C, 5, Qo] and oq_len uint8[R, C, 8] (router output queues N, E, S, W, ejection;
    3 bytes of padding so that oq_len64, its uint64[R, C] view, tells at once whether any is used)

Two-phase without copies: a PE writes only its own state, and reads other PEs only through the
history rings, at slots of cycles t - L, t - Lc, t - D (all earlier than t, and H > each delay,
so the slot written in cycle t is never one being read). A link's ring is written by the sender at
indices >= its send count and read by the receiver below the send count as it was L cycles ago;
the sender writes only into slots the receiver has freed as it knew Lc cycles ago, so the two never
touch the same slot in one cycle. The result is therefore independent of thread count and order.

A message is one uint64. A task: work (bits 0-15), hops (16-23), birth (24-55), bit 63 clear. A
packet: birth (bits 0-31), destination column (32-43) and row (44-55), bit 63 set. A control message
(work_stealing): work 0 (no task has it), bits 16-23 its kind (MSG_REQUEST, MSG_REFUSAL).

Packets of the `traffic` workload wait in an unbounded source queue that is kept as a count: the
packets are a pure function of (seed, cycle, PE), so the head is found again from the draws, from
the cycle `src_scan` (the head's birth cycle once found) on.
"""

import math
from typing import NamedTuple

import numpy as np
from numba import njit, prange

from .bits import popcount, trailing_zeros
from .config import JIT, JIT_NO_REFCOUNT, JIT_PARALLEL
from .prefetch import prefetch, prefetch_write
from .rng import G_INDEX, G_UNIT, S32, STREAM_INJECT, STREAM_MIGRATE, cycle_key, mix64, unit_interval_open0

# Columns of the per-cycle series (docs/mesh.md, "Per-cycle observables").
S_BUSY = 0
S_QUEUED = 1
S_IN_SERVICE = 2
S_INJECTED = 3
S_REFUSED = 4
S_COMPLETED = 5
S_MIGRATED = 6
S_RECEIVED = 7
S_IN_FLIGHT = 8
S_LATENCY_SUM = 9
S_LATENCY_SQ_SUM = 10
S_HOPS_SUM = 11
S_LATENCY_MAX = 12
S_PKT_OFFERED = 13
S_PKT_INJECTED = 14
S_PKT_DELIVERED = 15
S_PKT_IN_SOURCE = 16
S_MEAS_DELIVERED = 17
S_MEAS_LATENCY_SUM = 18
S_MEAS_LATENCY_SQ_SUM = 19
S_MEAS_LATENCY_MAX = 20
S_LINK_SENT = 21  # every message sent on a link (tasks and packets)
S_LINK_RECEIVED = 22  # every message taken off a link: in flight = sent - received
S_PKT_IN_ROUTER = 23
S_MEAS_INJECTED = 24
S_MEAS_SOURCE_WAIT_SUM = 25
S_MEAS_HOPS_SUM = 26
S_CHUNKS_FINISHED = 27  # layer_pipeline: chunks finished in the cycle
S_CHUNK_LATENCY_SUM = 28  # and the sum of their latencies
S_WEIGHT_WAIT = 29  # 1 if the cycle waited for weights (weight streaming)
S_CONTROL_SENT = 30  # control messages (work_stealing's requests and refusals) sent on links
S_CONTROL_RECEIVED = 31  # and taken off them (both also in S_LINK_SENT, S_LINK_RECEIVED)
N_SERIES = 32

# The pipeline's control words (lp_ctl): weight streaming, and what the fast-forward needs.
CTL_LOADED = 0  # passes whose weights are in
CTL_LOADING = 1  # 1 while a load is under way
CTL_LOAD_END = 2  # the cycle it ends
CTL_WAIT = 3  # cycles that waited for weights
CTL_IN_ROUTER = 4  # packets in router queues at the end of the last cycle
CTL_IN_SOURCE = 5  # packets in output stages at the end of the last cycle
N_CTL = 8

# Columns of the layer_pipeline region table (docs/mesh.md, "Dataflow").
REG_ROW0 = 0
REG_COL0 = 1
REG_WIDTH = 2
REG_HEIGHT = 3
REG_WORK = 4  # cycles per task
REG_NEXT = 5  # successor region, -1 for the last
REG_REPLICA = 6
REG_FIRST = 7  # 1 for the first region of its replica
REG_FLOW = 8  # +1: data moves east (upstream column col0); -1: west (upstream column col0 + w - 1)
REG_INPUT = 9  # INPUT_ROW: input edge is the upstream column; INPUT_COL: the top row
REG_OUTPUT = 10  # OUTPUT_SIDE: output edge is the downstream column; OUTPUT_BOTTOM: the bottom row
REG_WAVELETS = 11  # packets one chunk's input is for each PE of the region's lines (>= 1)
N_REG = 12
INPUT_ROW = 0
INPUT_COL = 1
OUTPUT_SIDE = 0
OUTPUT_BOTTOM = 1

POLICY_NONE = 0
POLICY_LEAST_LOADED = 1
POLICY_RANDOM_LOWER = 2
POLICY_DIFFUSION = 3
POLICY_GRADIENT = 4
POLICY_WORK_STEALING = 5
PRESSURE_NONE = 255  # gradient: the pressure of a PE that knows of no light PE
# Each policy's draws of a PE in a cycle, on the migration stream, take indices from a base of its
# own (docs/mesh.md, step 4), so that no two kinds of draw share an index.
DRAW_RANDOM_LOWER = 0  # + k: the direction of the cycle's k-th migration (k < max_per_cycle <= 4)
DRAW_DIFFUSION = 4  # + d: the rounding of the quota towards direction d
DRAW_STEALING = 8  # the neighbour an idle PE asks

WORK_FIXED = 0
WORK_UNIFORM = 1
WORK_GEOMETRIC = 2

PATTERN_UNIFORM = 0
PATTERN_TRANSPOSE = 1
PATTERN_BIT_COMPLEMENT = 2
PATTERN_NEIGHBOR = 3
PATTERN_HOTSPOT = 4

STREAM_DEST = 2

# Indices of the int64 configuration vector `cfg` (built by mesh_config; meshsim.mesh.sim.build_inputs
# gives the values). The kernels read it only through these names.
CFG_QUEUE_CAPACITY = 0
CFG_HOP_LATENCY_CYCLES = 1
CFG_LINK_MESSAGES_PER_CYCLE = 2
CFG_LINK_BUFFER_MESSAGES = 3
CFG_CREDIT_DELAY_CYCLES = 4
CFG_POLICY = 5  # POLICY_*
CFG_THRESHOLD = 6
CFG_INFO_DELAY_CYCLES = 7
CFG_MAX_PER_CYCLE = 8
CFG_WORK_KIND = 9  # WORK_*
CFG_WORK_CYCLES = 10
CFG_WORK_MIN_CYCLES = 11
CFG_WORK_MAX_CYCLES = 12
CFG_IS_TRACE = 13
CFG_HISTORY_MASK = 14  # H - 1
CFG_IS_TRAFFIC = 15
CFG_PATTERN = 16  # PATTERN_*
CFG_HOT_THRESHOLD = 17
CFG_HOT_ROW = 18
CFG_HOT_COL = 19
CFG_WARMUP_CYCLES = 20
CFG_MEASURE_END = 21
CFG_ROUTER_QUEUE_PACKETS = 22
CFG_IS_PIPELINE = 23
CFG_CHUNKS_IN_FLIGHT = 24
CFG_WEIGHT_STREAMING = 25
CFG_CHUNKS_PER_PASS = 26
CFG_LOAD_CYCLES = 27
CFG_FAST_FORWARD = 28
CFG_HYSTERESIS = 29  # Y: a shedding PE migrates down to threshold - Y (docs/mesh.md, step 4)
CFG_DIFFUSION_RATE = 30  # diffusion's rate alpha in units of 2^-16 (docs/mesh.md, step 4)
DIFFUSION_ONE = 65536  # alpha = 1 in CFG_DIFFUSION_RATE's units


def _cfg_fields(namespace) -> tuple:
    """The field names of the CFG_* constants in `namespace`, in index order (CFG_QUEUE_CAPACITY ->
    "queue_capacity"); ImportError unless the indices are exactly 0 .. N-1."""
    index = {k[4:].lower(): v for k, v in namespace.items()
             if k.startswith("CFG_") and type(v) is int}
    if sorted(index.values()) != list(range(len(index))):
        raise ImportError(f"the CFG_* indices of kernels.mesh are not 0 .. {len(index) - 1}: {index}")
    return tuple(sorted(index, key=index.__getitem__))


#: Names of the configuration vector's fields, in index order: derived from the CFG_* constants above.
CFG_FIELDS = _cfg_fields(globals())
N_CFG = len(CFG_FIELDS)


def mesh_config(**values) -> np.ndarray:
    """The kernel's configuration vector, int64[N_CFG], from one keyword argument per field of
    CFG_FIELDS. TypeError naming the fields that are missing or unknown."""
    missing = [f for f in CFG_FIELDS if f not in values]
    unknown = sorted(k for k in values if k not in CFG_FIELDS)
    if missing or unknown:
        problems = ([f"missing field(s) {', '.join(missing)}"] if missing else []) + (
            [f"unknown field(s) {', '.join(unknown)}"] if unknown else [])
        raise TypeError(f"mesh_config: {'; '.join(problems)} (fields: kernels.mesh.CFG_FIELDS)")
    return np.array([values[f] for f in CFG_FIELDS], dtype=np.int64)


class MeshState(NamedTuple):
    """Every per-PE array of a mesh run (docs/mesh.md, "Implementation notes"), allocated by
    meshsim.mesh.state.allocate_mesh. The kernels read it by field name (st.q_len), never by
    position; in a parallel function only outside its prange loops (bind a local first): Numba
    loses writes made through a NamedTuple attribute inside a prange body (numba issue 7135)."""

    q_work: np.ndarray  # uint16[Q, R, C] work (cycles) of queued tasks, head at slot 0
    q_birth: np.ndarray  # int32[Q, R, C] birth cycle of queued tasks
    q_hops: np.ndarray  # uint8[Q, R, C] hops of queued tasks
    q_len: np.ndarray  # uint8[R, C] queue depth (tasks)
    s_rem: np.ndarray  # uint16[R, C] remaining work in service (cycles), 0 = idle
    s_birth: np.ndarray  # int32[R, C]
    s_hops: np.ndarray  # uint8[R, C]
    link: np.ndarray  # uint64[R, C, 4, K] packed messages on each output link
    sent_h: np.ndarray  # uint8[H, R, C, 4] send counts (mod 2K) at the end of cycle t, slot t % H
    recv_h: np.ndarray  # uint8[H, R, C, 4] receive counts (mod 2K), likewise
    depth_h: np.ndarray  # uint8[H, R, C] queue depth at the end of cycle t
    tot_started: np.ndarray  # int64[R, C] work started in service; busy cycles = tot_started - s_rem
    tot_injected: np.ndarray  # int32[R, C] tasks offered
    tot_refused: np.ndarray  # int32[R, C] tasks refused at injection
    tot_completed: np.ndarray  # int32[R, C] tasks completed here
    tot_migrated_out: np.ndarray  # int32[R, C] tasks sent to a neighbour
    tot_migrated_in: np.ndarray  # int32[R, C] tasks received from a neighbour
    tot_latency: np.ndarray  # int64[R, C] sum of latencies of tasks completed here (cycles)
    thr: np.ndarray  # uint32[R, C] Bernoulli injection threshold
    geo_log: float  # log(1 - 1/mean) for geometric work (0 otherwise)
    sent_h32: np.ndarray  # uint32[H, R, C] view of sent_h: a PE's 4 counts as one word
    recv_h32: np.ndarray  # uint32[H, R, C] view of recv_h
    # Routed traffic only (shape (1, 1[, 4]) otherwise): the source queues and the packet totals.
    src_pending: np.ndarray  # int32[R, C] packets offered and not yet injected
    src_scan: np.ndarray  # int32[R, C] birth cycle of the source queue's head (or where to look from)
    tot_pkt_offered: np.ndarray  # int32[R, C] packets offered
    tot_pkt_delivered: np.ndarray  # int32[R, C] packets delivered here
    link_total: np.ndarray  # int64[R, C, 4] messages ever sent on each output link
    oq: np.ndarray  # uint64[R, C, 5, Qo] router output queues (N, E, S, W, ejection), head at slot 0
    oq_len: np.ndarray  # uint8[R, C, 8] packets in each output queue (5 used, 3 padding)
    oq_len64: np.ndarray  # uint64[R, C] view of oq_len: all five lengths in one word
    # layer_pipeline only (shape 1 x 1 otherwise; docs/mesh.md, "Dataflow"). Inputs:
    lp_g: np.ndarray  # int32[R, C] region of each PE, -1 for an idle PE
    lp_reg: np.ndarray  # int64[G, N_REG] region table, columns REG_*
    lp_rep: np.ndarray  # int64[P, 2] first and last region of each replica
    # ... and state:
    lp_taken: np.ndarray  # int32[R, C] chunks taken (first regions)
    out_left: np.ndarray  # int32[R, C] packets left in the output stage
    out_birth: np.ndarray  # int32[R, C] their birth cycle
    lp_got: np.ndarray  # int32[R, C] wavelets of the current chunk delivered so far
    lp_adm: np.ndarray  # int64[P] chunks admitted per replica
    lp_fin: np.ndarray  # int64[P] chunks finished per replica
    lp_done: np.ndarray  # int64[P, W] output-edge PEs of the last region that completed chunk c, at c mod W
    lp_admit_t: np.ndarray  # int64[P, W] admission cycle of chunk c, at c mod W
    lp_took: np.ndarray  # int64[P] PEs of the first region that have taken every chunk admitted
    lp_ctl: np.ndarray  # int64[N_CTL] control words, CTL_* (weight streaming, fast-forward)
    # Segments of SEG columns of a row, for skipping quiet ones (docs/mesh.md, "Implementation notes"):
    seg_chg: np.ndarray  # int64[2, R, S] last cycle a count or depth of the segment changed, as of cycle t at t & 1
    seg_idle: np.ndarray  # uint8[R, S] 1 if every PE of the segment was idle at the end of its last cycle
    seg_live: np.ndarray  # uint8[R, S] 1 if a PE of the segment can be offered work (never skipped)
    # Migration with hysteresis only (shape 1 x 1 otherwise):
    shed: np.ndarray  # uint8[R, C] 1 while the PE sheds: its queue went above T and not yet down to T - Y
    # Where the run reports its regions' crossings (shape 1 x 1 x 4 otherwise, and not written):
    tot_mig_dir: np.ndarray  # int32[R, C, 4] tasks sent on each output direction (the regions' crossings)
    # The gradient policy only (shape 1 x 1 x 1 otherwise):
    press_h: np.ndarray  # uint8[H, R, C] pressure at the end of cycle t (docs/mesh.md, step 4), slot t % H
    # The work_stealing policy only (shape 1 x 1 otherwise):
    steal: np.ndarray  # uint8[R, C] bits 0-3: a request from input d is owed; bits 4-6: 1 + direction asked

# Direction d: 0 N (r-1), 1 E (c+1), 2 S (r+1), 3 W (c-1); opposite (d + 2) & 3.

U16 = np.uint64(0xFFFF)
U8 = np.uint64(0xFF)
U32 = np.uint64(0xFFFFFFFF)
U12 = np.uint64(0xFFF)
PKT_FLAG = np.uint64(1) << np.uint64(63)
MSG_REQUEST = np.uint64(1) << np.uint64(16)  # work_stealing's control messages (work 0)
MSG_REFUSAL = np.uint64(2) << np.uint64(16)
BYTE_SUM = np.uint64(0x0101010101010101)
SEG = 64  # columns of a segment, the unit a cycle skips when nothing in or around it moves
PF_AHEAD = 4  # PEs ahead whose lines the slow path asks for


@njit(**JIT)
def pack_task(work, birth, hops):
    """One uint64 message holding a task: work | hops << 16 | birth << 24."""
    return (np.uint64(work) & U16) | ((np.uint64(hops) & U8) << np.uint64(16)) | (
        (np.uint64(birth) & U32) << np.uint64(24))


@njit(**JIT)
def pack_packet(dest_r, dest_c, birth):
    """One uint64 message holding a packet: birth | dest_c << 32 | dest_r << 44 | 1 << 63."""
    return PKT_FLAG | ((np.uint64(dest_r) & U12) << np.uint64(44)) | ((np.uint64(dest_c) & U12) << np.uint64(32)) | (
        np.uint64(birth) & U32)


@njit(inline="always", **JIT)
def _xy_direction(r, c, dest_r, dest_c):
    """Output of XY routing at (r, c) for a packet to (dest_r, dest_c), columns first: 1 E, 3 W,
    then 2 S, 0 N, and 4 (ejection) at the destination. Arithmetic, not branches: the direction
    is a coin flip to the branch predictor."""
    east = np.int64(dest_c > c)
    west = np.int64(dest_c < c)
    same_col = 1 - east - west
    return east + 3 * west + same_col * (2 * np.int64(dest_r > r) + 4 * np.int64(dest_r == r))


@njit(**JIT)
def packet_destination(h, r, c, rows, cols, pattern, hot_thr, hot_r, hot_c):
    """Destination (row, col) of a packet offered at (r, c) given its draw h (docs/mesh.md,
    "Routed packets"); (-1, -1) when the pattern gives the PE itself, which offers nothing."""
    n = rows * cols
    u = r * cols + c
    if pattern == PATTERN_TRANSPOSE:
        dr, dc = c, r
    elif pattern == PATTERN_BIT_COMPLEMENT:
        dr, dc = rows - 1 - r, cols - 1 - c
    elif pattern == PATTERN_NEIGHBOR:
        n_nb = np.uint64((r > 0) + (c + 1 < cols) + (r + 1 < rows) + (c > 0))
        if n_nb == 0:
            return -1, -1
        pick = np.int64(((h >> S32) * n_nb) >> S32)
        dr, dc = -1, -1
        for d in range(4):
            nr = r + (d == 2) - (d == 0)
            nc = c + (d == 1) - (d == 3)
            if 0 <= nr < rows and 0 <= nc < cols:
                if pick == 0:
                    dr, dc = nr, nc
                    break
                pick -= 1
    else:
        if n < 2:
            return -1, -1
        if pattern == PATTERN_HOTSPOT and (h >> S32) < np.uint64(hot_thr):
            dr, dc = hot_r, hot_c
        else:
            hv = h & U32 if pattern == PATTERN_HOTSPOT else h
            v = np.int64(hv % np.uint64(n - 1))
            if v >= u:
                v += 1
            dr, dc = v // cols, v % cols
    if dr == r and dc == c:
        return -1, -1
    return dr, dc


@njit(**JIT)
def _task_work(m):
    return np.uint16(m & U16)


@njit(**JIT)
def _task_hops(m):
    return np.uint8((m >> np.uint64(16)) & U8)


@njit(**JIT)
def _task_birth(m):
    return np.int32((m >> np.uint64(24)) & U32)


@njit(inline="always", **JIT)
def _neighbour(u, o, cols):
    """Index (r * cols + c) of the neighbour of PE u across output o, which must exist: u + 2 - o
    for the odd (E, W), u + (o - 1) cols for the even (N, S). Arithmetic, not a jump table."""
    odd = np.int64(o & 1)
    return u + odd * (2 - o) + (1 - odd) * (o - 1) * cols


@njit(inline="always", **JIT)
def _first_byte(w):
    """Index of the lowest nonzero byte of w (w != 0, bytes 0-3 only), without branches."""
    z0 = np.int64(w & U8 == 0)
    z1 = z0 * np.int64(w & np.uint64(0xFF00) == 0)
    return z0 + z1 + z1 * np.int64(w & np.uint64(0xFF0000) == 0)


@njit(**JIT)
def _start_sends(sent_now):
    """Start counting this cycle's sends of a PE: none yet. (Its send counts so far are the ones
    the row pass carried into this cycle's slot, where the PE updates them.)"""
    for e in range(4):
        sent_now[e] = 0


@njit(inline="always", **JIT)
def _has_room(o, nu, sent_f, i_now, sent_now, recv_f, b_cred, wrap, kbuf, bw):
    """Output o of a PE, towards neighbour nu (which exists), can take a message now: fewer than bw
    sent on it this cycle, and a credit (sent minus received by the neighbour as known Lc cycles
    ago, modulo wrap, below kbuf). The PE's send counts start at sent_f[i_now] (this cycle's
    slot); b_cred: where the slot of t - Lc starts in recv_f."""
    oi = np.uint64(o)  # (unsigned indices: no wraparound code)
    if sent_now[oi] >= bw:
        return False
    outstanding = np.int64(sent_f[np.uint64(i_now + o)]) - np.int64(recv_f[np.uint64(b_cred + 4 * nu + ((o + 2) & 3))])
    if outstanding < 0:
        outstanding += wrap
    return outstanding < kbuf


@njit(inline="always", **JIT)
def _send(link_f, u, o, m, sent_f, i_now, sent_now, wrap, kbuf, lt_f, per_link):
    """Put message m on output o of PE u (send counts from sent_f[i_now] on) and count it (lt_f,
    the link totals, only when per_link)."""
    oi = np.uint64(o)
    count = np.int64(sent_f[np.uint64(i_now + o)])
    i = count
    if i >= kbuf:
        i -= kbuf
    link_f[np.uint64((4 * u + o) * kbuf + i)] = m
    count += 1
    if count >= wrap:
        count -= wrap
    sent_f[np.uint64(i_now + o)] = count
    sent_now[oi] += 1
    if per_link:
        lt_f[np.uint64(4 * u + o)] += 1


@njit(inline="always", **JIT)
def _send_tail(q_work, q_birth, q_hops, qlen, r, c, link_f, u, o, sent_f, i_now, sent_now, wrap, kbuf, lt_f,
               per_link):
    """Step 4: the tail task of the queue of PE u = (r, c), which holds qlen > 0 tasks, goes out on output o
    with one hop more (saturating at 255). The caller shortens the queue."""
    tail = qlen - 1
    hops = min(np.int64(q_hops[tail, r, c]) + 1, 255)
    _send(link_f, u, o, pack_task(q_work[tail, r, c], q_birth[tail, r, c], hops), sent_f, i_now, sent_now, wrap,
          kbuf, lt_f, per_link)


@njit(inline="always", **JIT)
def _pop_front(oq_f, oql_f, u, o, qcap):
    """Remove the head packet of output queue o of PE u; the rest move up one slot."""
    base = (5 * u + o) * qcap
    n = np.int64(oql_f[np.uint64(8 * u + o)]) - 1
    for i in range(n):
        oq_f[np.uint64(base + i)] = oq_f[np.uint64(base + i + 1)]
    oql_f[np.uint64(8 * u + o)] = n


@njit(inline="always", **JIT)
def _enqueue(q_work, q_birth, q_hops, qlen, r, c, work, birth, hops):
    """Append a task at the tail of the queue of (r, c), which holds qlen tasks; the new length."""
    q_work[qlen, r, c] = work
    q_birth[qlen, r, c] = birth
    q_hops[qlen, r, c] = hops
    return qlen + 1


@njit(**JIT)
def _record_depth(depth_h, dhist, s_now, r, c, qlen):
    """Step 6's record of the queue depth of (r, c) at the end of the cycle (the history others
    read, and the histogram: four interleaved ones, which break the store-to-load chain of equal
    neighbours); returns qlen, for the running total."""
    depth_h[s_now, r, c] = qlen
    dhist[c & 3, qlen] += 1
    return qlen


@njit(inline="always", **JIT)
def _add_latency(lat, count, total, total_sq, most):
    """One more latency into the running count, sum, sum of squares and maximum."""
    return count + 1, total + lat, total_sq + lat * lat, max(most, lat)


@njit(inline="always", **JIT)
def _enter_router(oq_f, oql_f, qcap, link_f, lt_f, per_link, u, r, c, cols, m, dest_r, dest_c, sent_f, i_now,
                  sent_now, recv_f, b_cred, wrap, kbuf, bw, qo):
    """A packet from PE u = (r, c) itself (source queue or output stage) enters the router: the output
    queue of its XY direction if that holds fewer than qo (packets cut through on it this cycle
    count), sent at once instead when the queue is empty and the link has room (cut-through).
    Returns 0: no room, 1: queued, 2: sent."""
    o = _xy_direction(r, c, dest_r, dest_c)
    n_o = np.int64(oql_f[np.uint64(8 * u + o)])
    if n_o + sent_now[np.uint64(o)] >= qo:
        return 0
    if n_o == 0:
        if _has_room(o, _neighbour(u, o, cols), sent_f, i_now, sent_now, recv_f, b_cred, wrap, kbuf, bw):
            _send(link_f, u, o, m, sent_f, i_now, sent_now, wrap, kbuf, lt_f, per_link)
            return 2
    oq_f[np.uint64((5 * u + o) * qcap + n_o)] = m
    oql_f[np.uint64(8 * u + o)] = n_o + 1
    return 1


@njit(**JIT)
def _up_col(lp_reg, g):
    """Region g's upstream column (docs/mesh.md, "Dataflow")."""
    if lp_reg[g, REG_FLOW] > 0:
        return lp_reg[g, REG_COL0]
    return lp_reg[g, REG_COL0] + lp_reg[g, REG_WIDTH] - 1


@njit(**JIT)
def _down_col(lp_reg, g):
    """Region g's downstream column."""
    if lp_reg[g, REG_FLOW] > 0:
        return lp_reg[g, REG_COL0] + lp_reg[g, REG_WIDTH] - 1
    return lp_reg[g, REG_COL0]


@njit(**JIT)
def _out_index(lp_reg, g, r, c):
    """The output index of (r, c) in region g, or -1 if it is not on the output edge."""
    if lp_reg[g, REG_OUTPUT] == OUTPUT_SIDE:
        return r - lp_reg[g, REG_ROW0] if c == _down_col(lp_reg, g) else -1
    if r != lp_reg[g, REG_ROW0] + lp_reg[g, REG_HEIGHT] - 1:
        return -1
    return abs(c - _down_col(lp_reg, g))


@njit(inline="always", **JIT)
def _migrates(lp_g, lp_reg, r, c):
    """layer_pipeline with a policy on: whether (r, c) takes part in migration, in a region and not on
    its output edge (docs/mesh.md, "Migration in the pipeline")."""
    g = np.int64(lp_g[r, c])
    return g >= 0 and _out_index(lp_reg, g, r, c) < 0


@njit(inline="always", **JIT)
def _migration_neighbour(lp_g, lp_reg, r, c, nr, nc):
    """layer_pipeline: whether (nr, nc), a neighbour of (r, c) that takes part in migration, is one
    of its migration neighbours: in the same region and not on its output edge."""
    return lp_g[nr, nc] == lp_g[r, c] and _migrates(lp_g, lp_reg, nr, nc)


@njit(**JIT)
def _n_out(lp_reg, g):
    return lp_reg[g, REG_HEIGHT] if lp_reg[g, REG_OUTPUT] == OUTPUT_SIDE else lp_reg[g, REG_WIDTH]


@njit(**JIT)
def _n_in(lp_reg, g):
    return lp_reg[g, REG_HEIGHT] if lp_reg[g, REG_INPUT] == INPUT_ROW else lp_reg[g, REG_WIDTH]


@njit(**JIT)
def _feeds(k, n_out, n_in):
    """Input-edge PEs of a successor (n_in of them) fed by output index k (of n_out): indices
    k, k + n_out, ... below n_in."""
    if k >= n_in:
        return 0
    return (n_in - k + n_out - 1) // n_out


@njit(**JIT)
def _input_pe(lp_reg, g, k):
    """The PE of input index k of region g."""
    if lp_reg[g, REG_INPUT] == INPUT_ROW:
        return lp_reg[g, REG_ROW0] + k, _up_col(lp_reg, g)
    return lp_reg[g, REG_ROW0], _up_col(lp_reg, g) + lp_reg[g, REG_FLOW] * k


@njit(inline="always", **JIT)
def _next_pe(lp_reg, g, r, c):
    """The PE an input reaching (r, c) is passed on to, or (-1, -1) at the end of its line."""
    if lp_reg[g, REG_INPUT] == INPUT_ROW:
        cn = c + lp_reg[g, REG_FLOW]
        if lp_reg[g, REG_COL0] <= cn < lp_reg[g, REG_COL0] + lp_reg[g, REG_WIDTH]:
            return r, cn
        return -1, -1
    if r + 1 < lp_reg[g, REG_ROW0] + lp_reg[g, REG_HEIGHT]:
        return r + 1, c
    return -1, -1


@njit(**JIT)
def _offered_packet(seed, tb, u, r, c, thr_u, rows, cols, pattern, hot_thr, hot_r, hot_c):
    """The destination of the packet offered to PE u at cycle tb, or (-1, -1) if none was."""
    h = mix64(cycle_key(seed, STREAM_INJECT, tb) ^ (np.uint64(u) * G_UNIT))
    if (h >> S32) >= np.uint64(thr_u):
        return -1, -1
    hd = mix64(cycle_key(seed, STREAM_DEST, tb) ^ (np.uint64(u) * G_UNIT))
    return packet_destination(hd, r, c, rows, cols, pattern, hot_thr, hot_r, hot_c)


# Without Numba's reference counting (kernels/config.py): the function allocates nothing, and with it
# on, every array handed to an inlined helper was counted in and out at each call, fourteen calls for
# each wavelet the layer pipeline multicasts. (Its arrays belong to its caller, which keeps them alive.)
# BEGIN SPLICED _step_rows: python -m kernels.splice writes it from its steps; edit those, not this.
@njit(**JIT_NO_REFCOUNT)
def _step_rows(r0, r1, t, st, cfg, seed, key_inject, key_migrate, key_dest, ev_unit, ev_work, ev_lo, ev_hi, acc,
               dhist, lhist, scratch, arrivals, flags, done_ev, took):
    """Advance rows r0..r1-1 by cycle t; add this block's observables into acc, dhist, lhist.

    st: the state (MeshState). cfg: int64 vector, indices CFG_* (mesh_config). acc: int64[N_SERIES];
    dhist: int64[4, Q+1] (summed over its first axis); lhist: int64[n_bins] (last bin = overflow);
    scratch: int64[6, 4], arrivals: uint32[C], and flags: uint8[4, C], work space. For
    traffic runs lhist holds the
    latencies of measured packets. done_ev: int64[1 + n], layer_pipeline: the count, then the
    chunks completed by output-edge PEs of last regions (chunk x replicas + replica); took: int64[P],
    the PEs of first regions that took their replica's newest chunk in the cycle. Reads other PEs
    only through history slots of earlier cycles, and the replicas' admitted chunks as set before
    the cycle.
    """
    q_work = st.q_work
    q_birth = st.q_birth
    q_hops = st.q_hops
    q_len = st.q_len
    s_rem = st.s_rem
    s_birth = st.s_birth
    s_hops = st.s_hops
    link = st.link
    sent_h = st.sent_h
    recv_h = st.recv_h
    depth_h = st.depth_h
    tot_started = st.tot_started
    tot_injected = st.tot_injected
    tot_refused = st.tot_refused
    tot_completed = st.tot_completed
    tot_out = st.tot_migrated_out
    tot_in = st.tot_migrated_in
    tot_latency = st.tot_latency
    thr = st.thr
    geo_log = st.geo_log
    sent_h32 = st.sent_h32
    recv_h32 = st.recv_h32
    src_pending = st.src_pending
    src_scan = st.src_scan
    tot_pkt_offered = st.tot_pkt_offered
    tot_pkt_delivered = st.tot_pkt_delivered
    link_total = st.link_total
    oq = st.oq
    oq_len = st.oq_len
    oq_len64 = st.oq_len64
    lp_g = st.lp_g
    lp_reg = st.lp_reg
    lp_taken = st.lp_taken
    out_left = st.out_left
    out_birth = st.out_birth
    lp_got = st.lp_got
    lp_adm = st.lp_adm
    rows = q_len.shape[0]
    cols = q_len.shape[1]
    cap = cfg[CFG_QUEUE_CAPACITY]
    hop_lat = cfg[CFG_HOP_LATENCY_CYCLES]
    bw = cfg[CFG_LINK_MESSAGES_PER_CYCLE]
    kbuf = cfg[CFG_LINK_BUFFER_MESSAGES]
    credit_delay = cfg[CFG_CREDIT_DELAY_CYCLES]
    policy = cfg[CFG_POLICY]
    threshold = cfg[CFG_THRESHOLD]
    info_delay = cfg[CFG_INFO_DELAY_CYCLES]
    max_mig = cfg[CFG_MAX_PER_CYCLE]
    work_kind = cfg[CFG_WORK_KIND]
    work_fixed = cfg[CFG_WORK_CYCLES]
    work_min = cfg[CFG_WORK_MIN_CYCLES]
    work_max = cfg[CFG_WORK_MAX_CYCLES]
    is_trace = cfg[CFG_IS_TRACE]
    hmask = cfg[CFG_HISTORY_MASK]
    is_traffic = cfg[CFG_IS_TRAFFIC]
    pattern = cfg[CFG_PATTERN]
    hot_thr = cfg[CFG_HOT_THRESHOLD]
    hot_r = cfg[CFG_HOT_ROW]
    hot_c = cfg[CFG_HOT_COL]
    warmup = cfg[CFG_WARMUP_CYCLES]
    measure_end = cfg[CFG_MEASURE_END]
    qo = cfg[CFG_ROUTER_QUEUE_PACKETS]
    is_lp = cfg[CFG_IS_PIPELINE]
    n_rep = lp_adm.shape[0]
    routed = is_traffic or is_lp
    wrap = 2 * kbuf
    n_bins = lhist.shape[0]
    s_now = t & hmask
    s_prev = (t - 1) & hmask
    s_lat = (t - hop_lat) & hmask
    s_cred = (t - credit_delay) & hmask
    s_info = (t - info_delay) & hmask
    work_span = np.uint64(work_max - work_min + 1)
    # Flat views of the link and router arrays, indexed by PE u = r * cols + c: fewer index
    # multiplications on the paths that every message takes (layout in the module docstring).
    rc4 = 4 * rows * cols
    link_f = link.reshape(link.size)  # (4u + o) * kbuf + i
    sent_f = sent_h.reshape(sent_h.size)  # slot * rc4 + 4u + o
    recv_f = recv_h.reshape(recv_h.size)
    oq_f = oq.reshape(oq.size)  # (5u + o) * qcap + i
    oql_f = oq_len.reshape(oq_len.size)  # 8u + o
    lt_f = link_total.reshape(link_total.size)  # 4u + o
    per_link = link_total.size == rc4
    qcap = oq.shape[3]
    b_lat = s_lat * rc4
    b_cred = s_cred * rc4

    busy = 0
    queued = 0
    in_service = 0
    injected = 0
    refused = 0
    completed = 0
    migrated = 0
    received = 0
    lat_sum = 0
    lat_sq = 0
    hops_sum = 0
    lat_max = acc[S_LATENCY_MAX]
    link_sent = 0
    link_received = 0
    pk_offered = 0
    pk_injected = 0
    pk_delivered = 0
    pk_in_source = 0
    pk_in_router = 0
    meas_injected = 0
    meas_wait = 0
    meas_hops = 0
    meas_delivered = 0
    meas_lat_sum = 0
    meas_lat_sq = 0
    meas_lat_max = acc[S_MEAS_LATENCY_MAX]
    ctl_sent = 0
    ctl_received = 0
    ep = ev_lo
    sent_now = scratch[0]
    known = scratch[1]
    elig = scratch[2]
    mig_now = scratch[3]
    quota = scratch[4]
    kp = scratch[5]
    offer_f = flags[0]
    simple_f = flags[1]
    nb_min = flags[2]
    p_min = flags[3]
    seg_chg = st.seg_chg
    seg_idle = st.seg_idle
    seg_live = st.seg_live
    n_seg = seg_idle.shape[1]
    t_calm = t - (hmask + 1)  # a segment unchanged since then has the same counts in every history slot
    check_nb = policy != POLICY_NONE
    # Hysteresis: a shedding PE migrates down to `stop`, the others only above `threshold`. A PE's
    # flag implies a queue longer than `stop` at the end of every cycle, and a queue longer than
    # `threshold` implies the flag: a PE that does nothing this cycle keeps its flag as it is.
    # (Without hysteresis stop = threshold, and the flags are neither read nor written.)
    hyst = cfg[CFG_HYSTERESIS] if check_nb else 0
    stop = threshold - hyst
    shed = st.shed
    mig_dir = st.tot_mig_dir
    count_dirs = mig_dir.shape[0] == rows and mig_dir.shape[1] == cols
    diffusion = policy == POLICY_DIFFUSION
    gradient = policy == POLICY_GRADIENT
    press_h = st.press_h
    alpha = cfg[CFG_DIFFUSION_RATE]
    # work_stealing moves tasks only as answers to requests (step 4): no PE pushes, and what makes a
    # PE take part is its steal state, not its depth.
    stealing = policy == POLICY_WORK_STEALING
    push = check_nb and not stealing
    steal = st.steal

    for r in range(r0, r1):
        # Row views, indexed below by unsigned column indices (no negative-index code: the loops vectorise).
        ql_r = q_len[r]
        rem_r = s_rem[r]
        thr_r = thr[r]
        dep_now = depth_h[s_now, r]
        rv_row = recv_h32[s_prev, r]
        rv_now = recv_h32[s_now, r]
        sent_prev = sent_h32[s_prev, r]
        sent_now_row = sent_h32[s_now, r]
        up = sent_h32[s_lat, max(r - 1, 0)]
        down = sent_h32[s_lat, min(r + 1, rows - 1)]
        same = sent_h32[s_lat, r]
        up_mask = np.uint32(0xFF) if r > 0 else np.uint32(0)
        down_mask = np.uint32(0xFF) if r + 1 < rows else np.uint32(0)
        i_up = depth_h[s_info, max(r - 1, 0)]
        i_down = depth_h[s_info, min(r + 1, rows - 1)]
        i_same = depth_h[s_info, r]
        pr = r if gradient else 0
        p_up = press_h[s_info if gradient else 0, max(pr - 1, 0)]
        p_down = press_h[s_info if gradient else 0, min(pr + 1, press_h.shape[1] - 1)]
        p_same = press_h[s_info if gradient else 0, pr]
        p_now = press_h[s_now if gradient else 0, pr]
        um = np.uint8(0) if r > 0 else np.uint8(0xFF)
        dm = np.uint8(0) if r + 1 < rows else np.uint8(0xFF)
        rr = r if routed else 0
        oql_r = oq_len64[rr]
        pend_r = src_pending[r if is_traffic else 0]
        lr = r if is_lp else 0
        g_r = lp_g[lr]
        left_r = out_left[lr]
        chg_prev = seg_chg[(t - 1) & 1, r]
        chg_now = seg_chg[t & 1, r]
        chg_up = seg_chg[(t - 1) & 1, max(r - 1, 0)]
        chg_down = seg_chg[(t - 1) & 1, min(r + 1, rows - 1)]
        stl_r = steal[r if stealing else 0]
        for sg in range(n_seg):
            c0 = sg * SEG
            c1 = min(c0 + SEG, cols)
            a0 = np.uint64(c0)
            a1 = np.uint64(c1)
            if is_trace:
                # This segment's trace events this cycle (sorted by unit): the first at or after ep.
                has_ev = ep < ev_hi and ev_unit[ep] < r * cols + c1
            else:
                has_ev = False
            # A quiet segment: every PE idle at the end of the last cycle, none that can be offered
            # work, and no send count, receive count or depth of it or of the segments around it
            # changed in the last H cycles. Its PEs have nothing arriving (docs/mesh.md,
            # "Implementation notes") and every history slot already holds their counts: the cycle
            # leaves them as they are, and they add only idle PEs to the depth histogram.
            # (With work_stealing an idle PE with no request outstanding asks: no segment is quiet.)
            if seg_idle[r, sg] == 1 and seg_live[r, sg] == 0 and not has_ev and not stealing and \
                    chg_prev[sg] <= t_calm and \
                    (sg == 0 or chg_prev[sg - 1] <= t_calm) and (sg + 1 == n_seg or chg_prev[sg + 1] <= t_calm) and \
                    chg_up[sg] <= t_calm and chg_down[sg] <= t_calm:
                chg_now[sg] = chg_prev[sg]
                dhist[0, 0] += c1 - c0
                continue

            # Row pass: which input links of each PE hold a message sent at t - L or earlier that it
            # has not received? Compares the neighbours' send counts (as at t - L) with the PE's own
            # receive counts, one byte of each 4-count word per direction; written to vectorise.
            # Plainly: byte d of arrivals[c] is nonzero iff sent[n_d, opp(d)](t - L) != recv[(r, c), d](t - 1)
            # (always zero where there is no neighbour d). The counts carry over to this cycle's slot
            # unless a PE changes them below.
            for c in range(a0, a1):
                rv = rv_row[c]
                arrivals[c] = (((up[c] >> np.uint32(16)) ^ rv) & up_mask) | (
                    ((down[c] ^ (rv >> np.uint32(16))) & down_mask) << np.uint32(16))
                rv_now[c] = rv
                sent_now_row[c] = sent_prev[c]
            for c in range(a0, min(a1, np.uint64(cols - 1))):
                arrivals[c] |= (((same[c + np.uint64(1)] >> np.uint32(24)) ^ (rv_row[c] >> np.uint32(8))) &
                                np.uint32(0xFF)) << np.uint32(8)
            for c in range(max(a0, np.uint64(1)), a1):
                arrivals[c] |= (((same[c - np.uint64(1)] >> np.uint32(8)) ^ (rv_row[c] >> np.uint32(24))) &
                                np.uint32(0xFF)) << np.uint32(24)
            # Which PEs have something to do this cycle? The others ("simple": nothing arrives,
            # nothing is offered, no task starts or completes, nothing to send, no migration
            # possible) only count down their task in service, done here for the whole segment at
            # once; the rest go through steps 1-6 below. Written to vectorise.
            deepest = np.uint8(0)
            if push:
                for c in range(a0, a1):
                    deepest = max(deepest, ql_r[c])
            if deepest > stop and not gradient:
                # The least depth of a neighbour as known at t - D, plus 1 (255 where there is none, or
                # it is 255): with it >= the queue, step 4 finds no neighbour to migrate to. (Needed
                # only where a queue is longer than the threshold, or than `stop` for a shedding PE.)
                for c in range(a0, a1):
                    nb_min[c] = min(i_up[c] | um, i_down[c] | dm)
                for c in range(max(a0, np.uint64(1)), a1):
                    nb_min[c] = min(nb_min[c], i_same[c - np.uint64(1)])
                for c in range(a0, min(a1, np.uint64(cols - 1))):
                    nb_min[c] = min(nb_min[c], i_same[c + np.uint64(1)])
                for c in range(a0, a1):
                    nb_min[c] += np.uint8(nb_min[c] != 255)
            if gradient:
                # The least pressure of a neighbour as known at t - D (255 where there is none).
                for c in range(a0, a1):
                    p_min[c] = min(p_up[c] | um, p_down[c] | dm)
                for c in range(max(a0, np.uint64(1)), a1):
                    p_min[c] = min(p_min[c], p_same[c - np.uint64(1)])
                for c in range(a0, min(a1, np.uint64(cols - 1))):
                    p_min[c] = min(p_min[c], p_same[c + np.uint64(1)])
                if is_lp:
                    # In a pipeline, over the migration neighbours only (255 where there are none).
                    for c in range(c0, c1):
                        pm = PRESSURE_NONE
                        if _migrates(lp_g, lp_reg, r, c):
                            for d in range(4):
                                nr = r + (d == 2) - (d == 0)
                                nc = c + (d == 1) - (d == 3)
                                if 0 <= nr < rows and 0 <= nc < cols and \
                                        _migration_neighbour(lp_g, lp_reg, r, c, nr, nc):
                                    pm = min(pm, np.int64(press_h[s_info, nr, nc]))
                        p_min[c] = np.uint8(pm)
                # Where no light PE is known, step 4 finds no direction: 255 (>= any queue) in nb_min
                # says so to the test below, 0 that a queue above `stop` may move.
                for c in range(a0, a1):
                    nb_min[c] = np.uint8(0xFF) if p_min[c] == PRESSURE_NONE else np.uint8(0)
            if is_trace:
                for c in range(a0, a1):
                    offer_f[c] = 0
                e = ep
                while e < ev_hi and ev_unit[e] < r * cols + c1:
                    offer_f[ev_unit[e] - r * cols] = 1
                    e += 1
            elif is_lp:
                # (First regions take chunks: never simple.)
                for c in range(a0, a1):
                    offer_f[c] = np.uint8(oql_r[c] != 0) | np.uint8(left_r[c] != 0)
                if seg_live[r, sg] != 0:
                    for c in range(a0, a1):
                        g = np.int64(g_r[c])
                        if g >= 0 and lp_reg[g, REG_FIRST] != 0:
                            offer_f[c] = 1
            else:
                # Bernoulli offers (the task path and routed traffic): the draw of step 2.
                ub = np.uint64(r * cols)
                for c in range(a0, a1):
                    h = mix64(key_inject ^ ((ub + c) * G_UNIT))
                    offer_f[c] = np.uint8((h >> S32) < np.uint64(thr_r[c]))
                if is_traffic:
                    for c in range(a0, a1):
                        offer_f[c] |= np.uint8(oql_r[c] != 0) | np.uint8(pend_r[c] != 0)
            if stealing:
                # A PE that owes an answer, or is idle or about to be with no request outstanding, has
                # step 4 to do.
                # (A pipeline PE that takes no part in migration never asks, nor is asked.)
                for c in range(c0, c1):
                    if not is_lp or _migrates(lp_g, lp_reg, r, c):
                        sv = stl_r[c]
                        offer_f[c] |= np.uint8((sv & np.uint8(15)) != 0) | (np.uint8(sv < 16) & np.uint8(rem_r[c] <= 1))
            # With no policy, or no queue above the threshold, no PE can migrate: ql <= shallow for all.
            # With hysteresis a shedding PE's limit is `stop`: every PE above it goes through step 4
            # (where those that are not shedding move nothing), so that the flags need not be read here.
            shallow = stop if deepest > stop else 255
            todo_bits = np.uint64(0)  # bit c - c0: PE c goes through steps 1-6
            h1 = 0  # simple PEs with 1, 2 and more tasks queued (for the depth histogram; the rest have 0)
            h2 = 0
            deep = 0
            dec_sum = 0  # simple PEs serving a task
            for c in range(a0, a1):
                ql = np.int64(ql_r[c])
                rem = np.int64(rem_r[c])
                quiet_mig = np.int64(ql <= shallow) | np.int64(np.int64(nb_min[c]) >= ql)
                s = np.int64(arrivals[c] == 0) & np.int64(offer_f[c] == 0) & quiet_mig & (
                    np.int64(rem > 1) | np.int64(rem + ql == 0))
                simple_f[c] = np.uint8(s)
                todo_bits |= np.uint64(1 - s) << (c - a0)
                dec = s & np.int64(rem > 0)  # (a simple PE that is serving has more than 1 cycle left)
                rem_r[c] = np.uint16(rem - dec)
                dec_sum += dec
                dep_now[c] = np.uint8(ql)
                h1 += s & np.int64(ql == 1)
                h2 += s & np.int64(ql == 2)
                deep += s & np.int64(ql > 2)
            if gradient:
                # Every PE's pressure from its queue as it stands (the others write theirs again in step 6).
                for c in range(a0, a1):
                    p_now[c] = np.uint8(0) if ql_r[c] <= stop else np.uint8(min(np.int64(p_min[c]) + 1, PRESSURE_NONE))
            busy += dec_sum
            in_service += dec_sum
            n_simple = (c1 - c0) - popcount(todo_bits)
            dhist[0, 0] += n_simple - h1 - h2 - deep
            dhist[0, 1] += h1
            queued += h1 + 2 * h2
            if cap >= 2:
                dhist[0, 2] += h2
            if deep > 0:
                for c in range(a0, a1):
                    if simple_f[c] != 0 and ql_r[c] > 2:
                        dhist[c & np.uint64(3), ql_r[c]] += 1
                        queued += np.int64(ql_r[c])
            seg_busy = dec_sum + h1 + h2 + deep  # simple PEs that are not idle
            all_simple = todo_bits == 0
            moved_before = link_sent + link_received
            q_moved = False
            # The lines steps 1-6 touch are far apart (one array per field, the neighbours' link
            # slots), and the grid's sweep has long evicted them: ask for a PE's a few PEs ahead of it.
            if routed and todo_bits != 0:
                # The per-PE totals and the wavelet counts that packets update, a stream per array.
                for k in range(c0, c1, 16):
                    prefetch_write(tot_pkt_offered, (r, k))
                    prefetch_write(tot_pkt_delivered, (r, k))
                    if is_lp:
                        prefetch_write(lp_got, (r, k))
            ahead = todo_bits  # the PEs whose lines are asked for, kept PF_AHEAD PEs ahead
            lead = 0
            while todo_bits != 0:
                while ahead != 0 and lead <= PF_AHEAD:
                    ca = c0 + trailing_zeros(ahead)
                    ahead &= ahead - np.uint64(1)
                    lead += 1
                    if routed:
                        # The link slots that messages wait in (written a cycle ago, and evicted by the
                        # sweep over the grid since: every input's slot, since a branch per input would
                        # be a coin flip; prefetches never fault, off the grid's edge included), and the
                        # PE's own, which it writes when it passes them on.
                        ua = r * cols + ca
                        for d in range(4):
                            prefetch(link_f, ((4 * _neighbour(ua, d, cols) + ((d + 2) & 3)) * kbuf,))
                        prefetch_write(link_f, (4 * ua * kbuf,))
                        prefetch_write(lt_f, (4 * ua,))
                    if not routed or rem_r[np.uint64(ca)] <= 1:
                        # The fields that starting, finishing or taking a task touch (routed: where a
                        # task completes or may start).
                        prefetch_write(tot_started, (r, ca))
                        prefetch_write(tot_latency, (r, ca))
                        prefetch_write(tot_completed, (r, ca))
                        prefetch_write(tot_injected, (r, ca))
                        prefetch_write(s_birth, (r, ca))
                        prefetch_write(q_work, (0, r, ca))
                        prefetch_write(q_birth, (0, r, ca))
                        prefetch_write(q_birth, (1, r, ca))
                lead -= 1
                c = c0 + trailing_zeros(todo_bits)
                todo_bits &= todo_bits - np.uint64(1)
                u = r * cols + c
                i_now = s_now * rc4 + 4 * u  # the PE's send and receive counts (carried over above)
                qlen = np.int64(q_len[r, c])
                ql_start = qlen
                offer = is_traffic and offer_f[c] != 0 and (mix64(key_inject ^ (np.uint64(u) * G_UNIT)) >> S32) < \
                    np.uint64(thr[r, c])
                # This cycle's sends: a routed PE counts them from here on, whether or not it sends (most
                # do, and whether one does is a coin flip to the branch predictor); elsewhere only
                # migration sends, and step 4 starts the count.
                if routed:
                    _start_sends(sent_now)
                eject_now = 0  # layer_pipeline: packets delivered early this cycle (see below)
                stv = np.int64(steal[r, c]) if stealing else 0  # work_stealing's state (owed, asked)

                # 1. Receive and route, rotating priority over input ports (the slow path only where
                # the row pass above found something waiting). A port stops at its first message that
                # cannot move.
                if arrivals[c] != 0 and (qlen < cap or routed or stealing):
                    # Only the inputs with something waiting, in the rotating order from input t mod 4:
                    # byte k of `waiting` is input (t + k) mod 4's byte of the arrivals word.
                    a = np.uint64(arrivals[c])
                    waiting = ((a | (a << np.uint64(32))) >> np.uint64(8 * (t & 3))) & U32
                    while waiting != 0:
                        k = _first_byte(waiting)
                        waiting &= ~(U8 << np.uint64(8 * k))
                        d = (t + k) & 3
                        nu = _neighbour(u, d, cols)
                        od = (d + 2) & 3
                        lb = (4 * nu + od) * kbuf  # where the link's ring starts
                        got = np.int64(recv_f[np.uint64(i_now + d)])
                        avail = np.int64(sent_f[np.uint64(b_lat + 4 * nu + od)]) - got
                        if avail < 0:
                            avail += wrap
                        take = 0
                        for j in range(min(avail, bw)):
                            i = got + j  # < 3K: got < 2K and j < avail <= K
                            if i >= kbuf:
                                i -= kbuf
                                if i >= kbuf:
                                    i -= kbuf
                            m = link_f[np.uint64(lb + i)]
                            if (m & PKT_FLAG) == 0:
                                if stealing:
                                    if (m & U16) == 0:
                                        # A control message: always taken. A request is owed an answer; a
                                        # refusal ends the PE's request.
                                        if m == MSG_REQUEST:
                                            stv |= 1 << d
                                        else:
                                            stv &= 15
                                        ctl_received += 1
                                        take += 1
                                        continue
                                    if (stv >> 4) == d + 1:
                                        if qlen >= cap:
                                            break
                                        stv &= 15  # the answer to the PE's request
                                if qlen >= cap:
                                    break
                                qlen = _enqueue(q_work, q_birth, q_hops, qlen, r, c, _task_work(m), _task_birth(m),
                                                _task_hops(m))
                                tot_in[r, c] += 1
                                received += 1
                            else:
                                # A packet goes to the output queue it needs (4: ejection) if it has room.
                                dest_r = np.int64((m >> np.uint64(44)) & U12)
                                dest_c = np.int64((m >> np.uint64(32)) & U12)
                                o = _xy_direction(r, c, dest_r, dest_c)
                                n_o = np.int64(oql_f[np.uint64(8 * u + o)])
                                # Packets cut through on o this cycle would still be in its queue until
                                # Send: they count towards its capacity (before Send, every send on o
                                # this cycle is a cut-through).
                                # Packets delivered early this cycle count towards the ejection queue likewise.
                                if n_o + (sent_now[np.uint64(o)] if o < 4 else 0) + \
                                        (eject_now if o == 4 else 0) >= qo:
                                    break
                                if is_lp and o == 4:
                                    rn, cn = _next_pe(lp_reg, lp_g[r, c], r, c)
                                    if rn >= 0:
                                        # Multicast along the region's line: a copy for the next PE.
                                        birth = np.int64(m & U32)
                                        entered = _enter_router(oq_f, oql_f, qcap, link_f, lt_f, per_link, u, r, c,
                                                                cols, pack_packet(rn, cn, birth), rn, cn, sent_f,
                                                                i_now, sent_now, recv_f, b_cred, wrap, kbuf, bw, qo)
                                        if entered == 0:
                                            break
                                        link_sent += entered == 2
                                        pk_offered += 1
                                        pk_injected += 1
                                        tot_pkt_offered[r, c] += 1
                                        meas_injected += 1
                                        meas_hops += 1
                                    g_here = lp_g[r, c]
                                    got_now = np.int64(lp_got[r, c]) + 1
                                    last_wavelet = got_now >= lp_reg[g_here, REG_WAVELETS]
                                    if n_o == 0 and eject_now < bw and (qlen < cap or not last_wavelet) and \
                                            not check_nb:
                                        # Early delivery: the packet would be among the first the Send
                                        # stage delivers, and nothing changes the task queue or the
                                        # wavelet count before it (with migration off: else a task may
                                        # still arrive on a later port).
                                        if last_wavelet:
                                            qlen = _enqueue(q_work, q_birth, q_hops, qlen, r, c,
                                                            lp_reg[g_here, REG_WORK], t, 0)
                                            injected += 1
                                            tot_injected[r, c] += 1
                                            lp_got[r, c] = 0
                                        else:
                                            lp_got[r, c] = got_now
                                        pk_delivered += 1
                                        tot_pkt_delivered[r, c] += 1
                                        meas_delivered, meas_lat_sum, meas_lat_sq, meas_lat_max = _add_latency(
                                            t - np.int64(m & U32), meas_delivered, meas_lat_sum, meas_lat_sq,
                                            meas_lat_max)
                                        eject_now += 1
                                        take += 1
                                        continue
                                if n_o == 0 and o < 4:
                                    # Cut-through: into an empty queue whose link has room, the packet
                                    # would be the first the Send stage sends; send it now instead.
                                    if _has_room(o, _neighbour(u, o, cols), sent_f, i_now, sent_now, recv_f, b_cred,
                                                 wrap, kbuf, bw):
                                        _send(link_f, u, o, m, sent_f, i_now, sent_now, wrap, kbuf, lt_f, per_link)
                                        link_sent += 1
                                        take += 1
                                        continue
                                oq_f[np.uint64((5 * u + o) * qcap + n_o)] = m
                                oql_f[np.uint64(8 * u + o)] = n_o + 1
                            take += 1
                        if take > 0:
                            got += take
                            if got >= wrap:
                                got -= wrap
                            recv_f[np.uint64(i_now + d)] = got
                            link_received += take

                # 2. Inject.
                if is_traffic:
                    pending = np.int64(src_pending[r, c])
                    if offer:
                        dest_r, dest_c = packet_destination(mix64(key_dest ^ (np.uint64(u) * G_UNIT)), r, c, rows, cols,
                                                            pattern, hot_thr, hot_r, hot_c)
                        if dest_r >= 0:
                            if pending == 0:
                                src_scan[r, c] = t  # the head is this packet
                            pending += 1
                            pk_offered += 1
                            tot_pkt_offered[r, c] += 1
                    sent_from_source = 0
                    while pending > 0 and sent_from_source < bw:
                        # The head: the first packet born at or after src_scan (found again from draws).
                        tb = np.int64(src_scan[r, c])
                        while True:
                            dest_r, dest_c = _offered_packet(seed, tb, u, r, c, thr[r, c], rows, cols, pattern, hot_thr,
                                                             hot_r, hot_c)
                            if dest_r >= 0:
                                break
                            tb += 1
                        src_scan[r, c] = tb
                        entered = _enter_router(oq_f, oql_f, qcap, link_f, lt_f, per_link, u, r, c, cols,
                                                pack_packet(dest_r, dest_c, tb), dest_r, dest_c, sent_f, i_now,
                                                sent_now, recv_f, b_cred, wrap, kbuf, bw, qo)
                        if entered == 0:
                            break
                        link_sent += entered == 2
                        pending -= 1
                        pk_injected += 1
                        sent_from_source += 1
                        if warmup <= tb < measure_end:
                            meas_injected += 1
                            meas_wait += t - tb
                            meas_hops += abs(dest_r - r) + abs(dest_c - c)
                        src_scan[r, c] = tb + 1
                    src_pending[r, c] = pending
                    pk_in_source += pending
                elif is_lp:
                    g = np.int64(lp_g[r, c])
                    if g >= 0:
                        # A first region takes the chunks admitted to its replica while its queue has room.
                        if lp_reg[g, REG_FIRST] == 1:
                            adm = lp_adm[lp_reg[g, REG_REPLICA]]
                            taken = np.int64(lp_taken[r, c])
                            while taken < adm and qlen < cap:
                                qlen = _enqueue(q_work, q_birth, q_hops, qlen, r, c, lp_reg[g, REG_WORK], t, 0)
                                taken += 1
                                injected += 1
                                tot_injected[r, c] += 1
                            if taken == adm and taken > lp_taken[r, c]:
                                took[lp_reg[g, REG_REPLICA]] += 1
                            lp_taken[r, c] = taken
                        # The output stage (output index k): packets for inputs k, k + n_out, ... of the successor.
                        left = np.int64(out_left[r, c])
                        if left > 0:
                            nxt = lp_reg[g, REG_NEXT]
                            k = _out_index(lp_reg, g, r, c)
                            n_out = _n_out(lp_reg, g)
                            wv = lp_reg[nxt, REG_WAVELETS]
                            n_stage = _feeds(k, n_out, _n_in(lp_reg, nxt)) * wv
                            ob = np.int64(out_birth[r, c])
                            sent_from_stage = 0
                            while left > 0 and sent_from_stage < bw:
                                # All of one input's wavelets, then the next input's.
                                dest_r, dest_c = _input_pe(lp_reg, nxt, k + ((n_stage - left) // wv) * n_out)
                                entered = _enter_router(oq_f, oql_f, qcap, link_f, lt_f, per_link, u, r, c, cols,
                                                        pack_packet(dest_r, dest_c, ob), dest_r, dest_c, sent_f, i_now,
                                                        sent_now, recv_f, b_cred, wrap, kbuf, bw, qo)
                                if entered == 0:
                                    break
                                link_sent += entered == 2
                                left -= 1
                                sent_from_stage += 1
                                pk_injected += 1
                                meas_injected += 1
                                meas_wait += t - ob
                                meas_hops += abs(dest_r - r) + abs(dest_c - c)
                            out_left[r, c] = left
                elif is_trace:
                    while ep < ev_hi and ev_unit[ep] == u:
                        injected += 1
                        tot_injected[r, c] += 1
                        if qlen < cap:
                            qlen = _enqueue(q_work, q_birth, q_hops, qlen, r, c, ev_work[ep], t, 0)
                        else:
                            refused += 1
                            tot_refused[r, c] += 1
                        ep += 1
                else:
                    uk = key_inject ^ (np.uint64(u) * G_UNIT)
                    h = mix64(uk)
                    if (h >> S32) < np.uint64(thr[r, c]):
                        injected += 1
                        tot_injected[r, c] += 1
                        if qlen < cap:
                            if work_kind == WORK_FIXED:
                                w = work_fixed
                            else:
                                h1 = mix64(uk ^ G_INDEX)
                                if work_kind == WORK_UNIFORM:
                                    w = work_min + np.int64(h1 % work_span)
                                elif work_fixed == 1:
                                    w = 1
                                else:
                                    g = math.floor(math.log(unit_interval_open0(h1)) / geo_log)
                                    # w = 1 + floor(log(U) / log(1 - 1/m)), capped.
                                    if g >= work_max - 1:
                                        w = work_max
                                    else:
                                        w = 1 + np.int64(g)
                            qlen = _enqueue(q_work, q_birth, q_hops, qlen, r, c, w, t, 0)
                        else:
                            refused += 1
                            tot_refused[r, c] += 1

                # Send: each output queue's head packets go out while their link has room; up to B
                # packets leave the ejection queue. (oq_len64 holds the five lengths in one word.)
                if routed and oq_len64[r, c] != 0:
                    # Only the output queues that hold packets (bytes 0-3 of the lengths word).
                    busy_out = oq_len64[r, c] & U32
                    while busy_out != 0:
                        o = _first_byte(busy_out)
                        busy_out &= ~(U8 << np.uint64(8 * o))
                        while oql_f[np.uint64(8 * u + o)] > 0:
                            if not _has_room(o, _neighbour(u, o, cols), sent_f, i_now, sent_now, recv_f, b_cred, wrap,
                                             kbuf, bw):
                                break
                            _send(link_f, u, o, oq_f[np.uint64((5 * u + o) * qcap)], sent_f, i_now, sent_now, wrap,
                                  kbuf, lt_f, per_link)
                            link_sent += 1
                            _pop_front(oq_f, oql_f, u, o, qcap)
                    for _ in range(bw - eject_now):
                        if oql_f[np.uint64(8 * u + 4)] == 0:
                            break
                        m = oq_f[np.uint64((5 * u + 4) * qcap)]
                        if is_lp:
                            # Each packet is a wavelet of the PE's current chunk; the last makes its
                            # task, if the queue has room.
                            g_here = lp_g[r, c]
                            got_now = np.int64(lp_got[r, c]) + 1
                            if got_now >= lp_reg[g_here, REG_WAVELETS]:
                                if qlen >= cap:
                                    break
                                qlen = _enqueue(q_work, q_birth, q_hops, qlen, r, c, lp_reg[g_here, REG_WORK], t, 0)
                                injected += 1
                                tot_injected[r, c] += 1
                                lp_got[r, c] = 0
                            else:
                                lp_got[r, c] = got_now
                        birth = np.int64(m & U32)
                        _pop_front(oq_f, oql_f, u, 4, qcap)
                        pk_delivered += 1
                        tot_pkt_delivered[r, c] += 1
                        if warmup <= birth < measure_end:
                            lat = t - birth
                            meas_delivered, meas_lat_sum, meas_lat_sq, meas_lat_max = _add_latency(
                                lat, meas_delivered, meas_lat_sum, meas_lat_sq, meas_lat_max)
                            if is_traffic:  # (layer_pipeline: the histogram is of task latencies)
                                lhist[min(lat, n_bins - 1)] += 1
                    # The sum of the five length bytes (each <= 48, so the sum fits in the top byte);
                    # queues that were empty before Send are still empty.
                    pk_in_router += np.int64((oq_len64[r, c] * BYTE_SUM) >> np.uint64(56))

                if is_traffic:
                    # Traffic runs hold no tasks: steps 3-5 have nothing to do (its depth, 0, is recorded).
                    dhist[c & 3, 0] += 1
                    continue

                # 3. Start service (layer_pipeline: only once the last output has left).
                rem = np.int64(s_rem[r, c])
                if rem == 0 and qlen > 0 and (is_lp == 0 or out_left[r, c] == 0):
                    rem = np.int64(q_work[0, r, c])
                    # Busy cycles are derived: work started minus work remaining (no per-cycle update).
                    tot_started[r, c] += rem
                    s_birth[r, c] = q_birth[0, r, c]
                    s_hops[r, c] = q_hops[0, r, c]
                    qlen -= 1
                    # The head stays at slot 0 and the rest move up: queues are short on average, and
                    # keeping tasks in the low slots keeps the memory the kernel touches small.
                    for i in range(qlen):
                        q_work[i, r, c] = q_work[i + 1, r, c]
                        q_birth[i, r, c] = q_birth[i + 1, r, c]
                        q_hops[i, r, c] = q_hops[i + 1, r, c]

                # 4. Migrate from the tail to a neighbour known to be less loaded. Messages sent in steps
                # 1-2 count towards the bandwidth and credits but not towards the known depth.
                # (With hysteresis, the shedding flag first: set above the threshold, cleared at or below
                # `stop`, and the limit is `stop` while it is set.)
                limit = threshold
                on = np.int64(0)
                mine = is_lp and policy != POLICY_NONE and _migrates(lp_g, lp_reg, r, c)
                if hyst > 0:
                    on = np.int64(qlen > threshold) | (np.int64(shed[r, c]) & np.int64(qlen > stop))
                    limit = threshold - hyst * on
                if stealing:
                    if stv != 0 or qlen + rem == 0:
                        if not routed:
                            _start_sends(sent_now)
                        # Answer the requests owed, in increasing d: a task while the queue is above the
                        # limit (at most M), else a refusal; one whose link has no room waits.
                        n_sent = 0
                        for d in range(4):
                            if (stv >> d) & 1 == 0:
                                continue
                            if not _has_room(d, _neighbour(u, d, cols), sent_f, i_now, sent_now, recv_f, b_cred,
                                             wrap, kbuf, bw):
                                continue
                            if qlen > limit:
                                if n_sent >= max_mig:
                                    continue
                                _send_tail(q_work, q_birth, q_hops, qlen, r, c, link_f, u, d, sent_f, i_now,
                                           sent_now, wrap, kbuf, lt_f, per_link)
                                qlen -= 1
                                n_sent += 1
                                migrated += 1
                                tot_out[r, c] += 1
                                if count_dirs:
                                    mig_dir[r, c, d] += 1
                            else:
                                _send(link_f, u, d, MSG_REFUSAL, sent_f, i_now, sent_now, wrap, kbuf, lt_f, per_link)
                                ctl_sent += 1
                            link_sent += 1
                            stv &= ~(1 << d)
                        # Ask: an idle PE with no request outstanding asks a neighbour at random.
                        if qlen + rem == 0 and stv < 16:
                            n_elig = 0
                            for d in range(4):
                                nr = r + (d == 2) - (d == 0)
                                nc = c + (d == 1) - (d == 3)
                                if nr < 0 or nr >= rows or nc < 0 or nc >= cols:
                                    continue
                                if is_lp and not (mine and _migration_neighbour(lp_g, lp_reg, r, c, nr, nc)):
                                    continue
                                if _has_room(d, _neighbour(u, d, cols), sent_f, i_now, sent_now, recv_f, b_cred,
                                             wrap, kbuf, bw):
                                    elig[n_elig] = d
                                    n_elig += 1
                            if n_elig > 0:
                                hm = mix64(key_migrate ^ (np.uint64(u) * G_UNIT) ^ (np.uint64(DRAW_STEALING) * G_INDEX))
                                d = elig[np.int64(((hm >> S32) * np.uint64(n_elig)) >> S32)]
                                _send(link_f, u, d, MSG_REQUEST, sent_f, i_now, sent_now, wrap, kbuf, lt_f, per_link)
                                ctl_sent += 1
                                link_sent += 1
                                stv |= (d + 1) << 4
                    steal[r, c] = np.uint8(stv)
                elif policy != POLICY_NONE and qlen > limit:
                    if not routed:
                        _start_sends(sent_now)  # (a routed PE started its count above)
                    for d in range(4):
                        mig_now[d] = 0
                        quota[d] = 255
                        nr = r + (d == 2) - (d == 0)
                        nc = c + (d == 1) - (d == 3)
                        if nr < 0 or nr >= rows or nc < 0 or nc >= cols or \
                                (is_lp and not (mine and _migration_neighbour(lp_g, lp_reg, r, c, nr, nc))):
                            known[d] = -1
                        else:
                            known[d] = depth_h[s_info, nr, nc]
                            if gradient:
                                kp[d] = press_h[s_info, nr, nc]
                            if diffusion:
                                # floor(alpha x (depth - known) + U), U uniform in [0, 1) from the
                                # migration stream: the expected quota is alpha x the difference.
                                hq = mix64(key_migrate ^ (np.uint64(u) * G_UNIT) ^
                                           (np.uint64(DRAW_DIFFUSION + d) * G_INDEX))
                                quota[d] = (alpha * max(qlen - known[d], 0) + np.int64(hq >> np.uint64(48))) >> 16
                    for k in range(max_mig):
                        if qlen <= limit:
                            break
                        n_elig = 0
                        best = -1
                        for d in range(4):
                            if known[d] < 0 or mig_now[d] >= quota[d]:
                                continue
                            if gradient:
                                # Down the surface: towards the least pressure known, if a light PE is.
                                if kp[d] != p_min[c] or kp[d] == PRESSURE_NONE:
                                    continue
                            elif known[d] + mig_now[d] + 1 >= qlen:
                                continue
                            if not _has_room(d, _neighbour(u, d, cols), sent_f, i_now, sent_now, recv_f, b_cred, wrap,
                                             kbuf, bw):
                                continue  # (known[d] >= 0: the neighbour exists)
                            elig[n_elig] = d
                            n_elig += 1
                            if best < 0 or known[d] + mig_now[d] < known[best] + mig_now[best]:
                                best = d
                        if n_elig == 0:
                            break
                        if policy == POLICY_RANDOM_LOWER:
                            hm = mix64(key_migrate ^ (np.uint64(u) * G_UNIT) ^
                                       (np.uint64(DRAW_RANDOM_LOWER + k) * G_INDEX))
                            best = elig[np.int64(((hm >> S32) * np.uint64(n_elig)) >> S32)]
                        _send_tail(q_work, q_birth, q_hops, qlen, r, c, link_f, u, best, sent_f, i_now, sent_now,
                                   wrap, kbuf, lt_f, per_link)
                        link_sent += 1
                        qlen -= 1
                        mig_now[best] += 1
                        migrated += 1
                        tot_out[r, c] += 1
                        if count_dirs:
                            mig_dir[r, c, best] += 1
                if hyst > 0:
                    shed[r, c] = np.uint8(on & np.int64(qlen > stop))

                # 5. Work. Written without a branch on "busy", which is a coin flip at moderate load.
                b = np.int64(rem > 0)
                busy += b
                rem -= b
                if b == 1 and rem == 0:
                    lat = t + 1 - np.int64(s_birth[r, c])
                    completed += 1
                    tot_completed[r, c] += 1
                    tot_latency[r, c] += lat
                    lat_sum += lat
                    lat_sq += lat * lat
                    hops_sum += s_hops[r, c]
                    if lat > lat_max:
                        lat_max = lat
                    if is_traffic == 0:
                        if lat >= n_bins - 1:
                            lhist[n_bins - 1] += 1
                        else:
                            lhist[lat] += 1
                    g = np.int64(lp_g[r, c]) if is_lp else -1
                    k = _out_index(lp_reg, g, r, c) if g >= 0 else -1
                    if k >= 0:
                        nxt = lp_reg[g, REG_NEXT]
                        if nxt >= 0:
                            fan = _feeds(k, _n_out(lp_reg, g), _n_in(lp_reg, nxt)) * lp_reg[nxt, REG_WAVELETS]
                            out_left[r, c] = fan
                            out_birth[r, c] = t + 1
                            pk_offered += fan
                            tot_pkt_offered[r, c] += fan
                        else:
                            n_ev = done_ev[0] + 1
                            done_ev[n_ev] = (np.int64(tot_completed[r, c]) - 1) * n_rep + lp_reg[g, REG_REPLICA]
                            done_ev[0] = n_ev
                in_service += np.int64(rem > 0)
                s_rem[r, c] = rem

                # 6. End of cycle: own state and the values others may read later.
                q_len[r, c] = qlen
                queued += _record_depth(depth_h, dhist, s_now, r, c, qlen)
                if gradient:
                    p_now[c] = np.uint8(0) if qlen <= stop else np.uint8(min(np.int64(p_min[c]) + 1, PRESSURE_NONE))
                q_moved |= qlen != ql_start

            # What the next cycles need to know to skip the segment: whether any count or depth of it
            # changed, and whether all its PEs are idle.
            if link_sent + link_received != moved_before or q_moved:
                chg_now[sg] = t
            else:
                chg_now[sg] = chg_prev[sg]
            seg_idle[r, sg] = all_simple and seg_busy == 0

    acc[S_BUSY] += busy
    acc[S_QUEUED] += queued
    acc[S_IN_SERVICE] += in_service
    acc[S_INJECTED] += injected
    acc[S_REFUSED] += refused
    acc[S_COMPLETED] += completed
    acc[S_MIGRATED] += migrated
    acc[S_RECEIVED] += received
    acc[S_LATENCY_SUM] += lat_sum
    acc[S_LATENCY_SQ_SUM] += lat_sq
    acc[S_HOPS_SUM] += hops_sum
    acc[S_LATENCY_MAX] = lat_max
    acc[S_LINK_SENT] += link_sent
    acc[S_LINK_RECEIVED] += link_received
    acc[S_PKT_OFFERED] += pk_offered
    acc[S_PKT_INJECTED] += pk_injected
    acc[S_PKT_DELIVERED] += pk_delivered
    acc[S_PKT_IN_SOURCE] += pk_in_source
    acc[S_PKT_IN_ROUTER] += pk_in_router
    acc[S_MEAS_INJECTED] += meas_injected
    acc[S_MEAS_SOURCE_WAIT_SUM] += meas_wait
    acc[S_MEAS_HOPS_SUM] += meas_hops
    acc[S_MEAS_DELIVERED] += meas_delivered
    acc[S_MEAS_LATENCY_SUM] += meas_lat_sum
    acc[S_MEAS_LATENCY_SQ_SUM] += meas_lat_sq
    acc[S_MEAS_LATENCY_MAX] = meas_lat_max
    acc[S_CONTROL_SENT] += ctl_sent
    acc[S_CONTROL_RECEIVED] += ctl_received
# END SPLICED _step_rows


# BEGIN SPLICED run_cycles: python -m kernels.splice writes it from its steps; edit those, not this.
@njit(**JIT_PARALLEL)
def run_cycles(st, cfg, seed, t0, n_cycles, ev_cycle_lo, ev_unit, ev_work, block_rows, series, depth_series,
               lat_hist_blocks, cum):
    """Run cycles t0 .. t0+n_cycles-1 of the mesh in place; return -1, or the first cycle whose
    conservation check failed.

    st: the state (MeshState, allocated by meshsim.mesh.state.allocate_mesh). cfg: int64 config vector,
    indices CFG_* (built by mesh_config).
    ev_cycle_lo: int64[n_cycles + 1] offsets into the trace events (ev_unit int64, ev_work uint16,
    sorted by cycle then unit) for cycles t0..; empty arrays for Bernoulli workloads.
    block_rows: int64[n_blocks + 1] row bounds of the fixed row blocks split over threads.
    series: int64[>= n_cycles, N_SERIES] and depth_series: int64[>= n_cycles, Q+1], filled per cycle.
    lat_hist_blocks: int64[n_blocks, n_bins], accumulated. cum: int64[6] running totals (tasks
    injected + packets offered, refused, completed, messages in flight, delivered, control messages in
    flight), carried across calls.
    """
    n_blocks = block_rows.shape[0] - 1
    acc = np.zeros((n_blocks, N_SERIES), np.int64)
    dh = np.zeros((n_blocks, 4, depth_series.shape[1]), np.int64)
    scratch = np.zeros((n_blocks, 6, 4), np.int64)
    cols = st.q_len.shape[1]
    arrivals = np.zeros((n_blocks, cols), np.uint32)
    flags = np.zeros((n_blocks, 4, cols), np.uint8)
    is_lp = cfg[CFG_IS_PIPELINE]
    lp_w = cfg[CFG_CHUNKS_IN_FLIGHT]
    # (Bound here, outside the prange loop below: see MeshState.)
    lp_reg = st.lp_reg
    lp_rep = st.lp_rep
    lp_adm = st.lp_adm
    lp_fin = st.lp_fin
    lp_done = st.lp_done
    lp_admit_t = st.lp_admit_t
    lp_took = st.lp_took
    lp_ctl = st.lp_ctl
    is_stream = cfg[CFG_WEIGHT_STREAMING]
    per_pass = cfg[CFG_CHUNKS_PER_PASS]
    load_cycles = cfg[CFG_LOAD_CYCLES]
    fast_forward = cfg[CFG_FAST_FORWARD]
    n_rep = lp_adm.shape[0]
    took = np.zeros((n_blocks, n_rep), np.int64)
    # Per block: how many output-edge PEs of last regions it holds at most (one per row and replica).
    most_rows = 0
    for b in range(n_blocks):
        most_rows = max(most_rows, block_rows[b + 1] - block_rows[b])
    done_ev = np.zeros((n_blocks, 1 + (most_rows * n_rep if is_lp else 0)), np.int64)
    # Threads take contiguous runs of the loop's index, and the loop visits the blocks with a stride
    # of about 0.62 of their number (coprime with it, so each once): every thread's run is spread
    # over the whole grid, and the work shares evenly where the activity is only in some rows (a
    # pipeline filling from the top, a hot spot). Which thread steps a block changes no result.
    stride = max(1, (n_blocks * 618) // 1000)
    while math.gcd(stride, n_blocks) != 1:
        stride += 1
    i = np.int64(0)  # (typed int64 from the start: a literal 0 had _fast_forward compiled twice)
    while i < n_cycles:
        t = t0 + i
        key_inject = cycle_key(seed, STREAM_INJECT, t)
        key_migrate = cycle_key(seed, STREAM_MIGRATE, t)
        key_dest = cycle_key(seed, STREAM_DEST, t)
        acc[:, :] = 0
        dh[:, :, :] = 0
        waiting = 0
        if is_lp:
            if is_stream:
                # Weights: one layer loads at a time, into one of two buffers.
                if lp_ctl[CTL_LOADING] == 1 and t >= lp_ctl[CTL_LOAD_END]:
                    lp_ctl[CTL_LOADED] += 1
                    lp_ctl[CTL_LOADING] = 0
                if lp_ctl[CTL_LOADING] == 0 and lp_ctl[CTL_LOADED] <= lp_fin[0] // per_pass + 1:
                    lp_ctl[CTL_LOADING] = 1
                    lp_ctl[CTL_LOAD_END] = t + load_cycles
            # Admit a chunk once the first region has taken the last (at most W in flight).
            all_took = True
            for p in range(n_rep):
                first = lp_rep[p, 0]
                n_first = lp_reg[first, REG_HEIGHT] * lp_reg[first, REG_WIDTH]
                ok = lp_adm[p] < lp_fin[p] + lp_w and lp_took[p] == n_first
                if ok and is_stream and lp_adm[p] % per_pass == 0:
                    ok = lp_fin[p] == lp_adm[p] and lp_adm[p] // per_pass < lp_ctl[CTL_LOADED]
                if ok:
                    lp_admit_t[p, lp_adm[p] % lp_w] = t
                    lp_adm[p] += 1
                    lp_took[p] = 0
                if lp_took[p] != n_first:
                    all_took = False
            if is_stream and lp_fin[0] == lp_adm[0] and lp_adm[0] % per_pass == 0 and \
                    lp_adm[0] // per_pass >= lp_ctl[CTL_LOADED]:
                waiting = 1
                lp_ctl[CTL_WAIT] += 1
            done_ev[:, 0] = 0
            took[:, :] = 0
            # Fast-forward: with nothing on the move and every chunk taken, nothing happens but
            # countdown until the first task completes or a load ends; do those cycles at once.
            if fast_forward and all_took and cum[3] == 0 and lp_ctl[CTL_IN_ROUTER] == 0 and \
                    lp_ctl[CTL_IN_SOURCE] == 0:
                k = _quiet_cycles(st, block_rows, n_cycles - i)
                if is_stream and lp_ctl[CTL_LOADING] == 1:
                    k = min(k, lp_ctl[CTL_LOAD_END] - t)
                if k > 0:
                    _fast_forward(st, block_rows, t, k, cfg[CFG_HISTORY_MASK], series, depth_series, i, waiting)
                    lp_ctl[CTL_WAIT] += waiting * (k - 1)
                    i += k
                    continue
        lo = ev_cycle_lo[i]
        hi = ev_cycle_lo[i + 1]
        for k in prange(n_blocks):
            b = (k * stride) % n_blocks  # (see `stride`, _run_setup)
            r0 = block_rows[b]
            r1 = block_rows[b + 1]
            # This block's slice of the cycle's trace events (sorted by unit).
            e0 = lo + np.searchsorted(ev_unit[lo:hi], r0 * cols)
            e1 = lo + np.searchsorted(ev_unit[lo:hi], r1 * cols)
            _step_rows(r0, r1, t, st, cfg, seed, key_inject, key_migrate, key_dest, ev_unit, ev_work, e0, e1, acc[b],
                       dh[b], lat_hist_blocks[b], scratch[b], arrivals[b], flags[b], done_ev[b], took[b])
        # Merge blocks in a fixed order (integer sums: exact in any order anyway).
        for j in range(N_SERIES):
            series[i, j] = 0
        for b in range(n_blocks):
            for j in range(N_SERIES):
                if j == S_LATENCY_MAX or j == S_MEAS_LATENCY_MAX:
                    if acc[b, j] > series[i, j]:
                        series[i, j] = acc[b, j]
                else:
                    series[i, j] += acc[b, j]
        if is_lp:
            # Finish: a chunk is done when every output-edge PE of its replica's last region has completed it.
            for b in range(n_blocks):
                for p in range(n_rep):
                    lp_took[p] += took[b, p]
                for e in range(1, done_ev[b, 0] + 1):
                    lp_done[done_ev[b, e] % n_rep, (done_ev[b, e] // n_rep) % lp_w] += 1
            for p in range(n_rep):
                n_last = _n_out(lp_reg, lp_rep[p, 1])
                while lp_done[p, lp_fin[p] % lp_w] == n_last:
                    w = lp_fin[p] % lp_w
                    lp_done[p, w] = 0
                    series[i, S_CHUNKS_FINISHED] += 1
                    series[i, S_CHUNK_LATENCY_SUM] += t + 1 - lp_admit_t[p, w]
                    lp_fin[p] += 1
            series[i, S_WEIGHT_WAIT] = waiting
            # Output stages hold every packet offered and not yet injected (copies are both at once).
            series[i, S_PKT_IN_SOURCE] = lp_ctl[CTL_IN_SOURCE] + series[i, S_PKT_OFFERED] - series[i, S_PKT_INJECTED]
            lp_ctl[CTL_IN_ROUTER] = series[i, S_PKT_IN_ROUTER]
            lp_ctl[CTL_IN_SOURCE] = series[i, S_PKT_IN_SOURCE]
        for q in range(depth_series.shape[1]):
            v = 0
            for b in range(n_blocks):
                for lane in range(4):
                    v += dh[b, lane, q]
            depth_series[i, q] = v
        cum[0] += series[i, S_INJECTED] + series[i, S_PKT_OFFERED]
        cum[1] += series[i, S_REFUSED]
        cum[2] += series[i, S_COMPLETED]
        cum[3] += series[i, S_LINK_SENT] - series[i, S_LINK_RECEIVED]
        cum[4] += series[i, S_PKT_DELIVERED]
        cum[5] += series[i, S_CONTROL_SENT] - series[i, S_CONTROL_RECEIVED]
        series[i, S_IN_FLIGHT] = cum[3]
        # (Control messages on links carry no task or packet.)
        if cum[0] != (cum[1] + series[i, S_QUEUED] + series[i, S_IN_SERVICE] + series[i, S_PKT_IN_SOURCE]
                      + series[i, S_PKT_IN_ROUTER] + cum[3] - cum[5] + cum[2] + cum[4]):
            return t
        i += 1
    return -1
# END SPLICED run_cycles


@njit(**JIT_PARALLEL)
def _quiet_cycles(st, block_rows, most):
    """Cycles from now in which no task starts or completes (the least remaining work of a busy
    server, less 1), at most `most`; `most` when no server is busy, 0 when an idle server has a
    task queued (it starts now)."""
    q_len = st.q_len  # (outside the prange loop: see MeshState)
    s_rem = st.s_rem
    cols = s_rem.shape[1]
    n_blocks = block_rows.shape[0] - 1
    least = np.full(n_blocks, most + 1, np.int64)
    for b in prange(n_blocks):
        m = most + 1
        for r in range(block_rows[b], block_rows[b + 1]):
            for c in range(cols):
                v = np.int64(s_rem[r, c])
                if v == 0 and q_len[r, c] > 0:
                    m = 1
                elif 0 < v < m:
                    m = v
        least[b] = m
    return min(least.min() - 1, most)


@njit(**JIT_PARALLEL)
def _fast_forward(st, block_rows, t, k, hmask, series, depth_series, i, waiting):
    """Cycles t .. t+k-1 at once, when in each of them nothing moves and nothing completes: busy
    servers count down k, the history rings carry the last values forward, and the series rows
    and depth histograms are those such a cycle gives (docs/mesh.md, implementation notes)."""
    q_len = st.q_len  # (outside the prange loop: see MeshState)
    s_rem = st.s_rem
    depth_h = st.depth_h
    sent_h32 = st.sent_h32
    recv_h32 = st.recv_h32
    seg_idle = st.seg_idle
    lp_g = st.lp_g
    lp_reg = st.lp_reg
    cols = q_len.shape[1]
    n_blocks = block_rows.shape[0] - 1
    busy_b = np.zeros(n_blocks, np.int64)
    queued_b = np.zeros(n_blocks, np.int64)
    hist_b = np.zeros((n_blocks, depth_series.shape[1]), np.int64)
    s_last = (t - 1) & hmask
    j0 = max(0, k - (hmask + 1))  # only the last H cycles' slots survive
    for b in prange(n_blocks):
        for r in range(block_rows[b], block_rows[b + 1]):
            for c in range(cols):
                v = np.int64(s_rem[r, c])
                if v > 0:
                    busy_b[b] += 1
                    s_rem[r, c] = v - k
                ql = np.int64(q_len[r, c])
                queued_b[b] += ql
                hist_b[b, ql] += 1
                for j in range(j0, k):
                    s = (t + j) & hmask
                    sent_h32[s, r, c] = sent_h32[s_last, r, c]
                    recv_h32[s, r, c] = recv_h32[s_last, r, c]
                    depth_h[s, r, c] = ql
            # A segment is idle as such a cycle leaves it: no PE serving or holding a task, none of a
            # first region (nothing is on the move, so nothing else keeps a PE busy).
            for sg in range(seg_idle.shape[1]):
                idle = 1
                for c in range(sg * SEG, min(sg * SEG + SEG, cols)):
                    g = np.int64(lp_g[r, c])
                    if s_rem[r, c] != 0 or q_len[r, c] != 0 or (g >= 0 and lp_reg[g, REG_FIRST] == 1):
                        idle = 0
                seg_idle[r, sg] = idle
    # The segments' change cycles carry over (nothing changed in them) into the slot cycles t .. t+k-1
    # write, which the last of them leaves as it is.
    seg_chg = st.seg_chg
    seg_chg[t & 1] = seg_chg[(t - 1) & 1]
    busy = busy_b.sum()
    queued = queued_b.sum()
    for j in range(k):
        for col in range(N_SERIES):
            series[i + j, col] = 0
        series[i + j, S_BUSY] = busy
        series[i + j, S_QUEUED] = queued
        series[i + j, S_IN_SERVICE] = busy
        series[i + j, S_WEIGHT_WAIT] = waiting
        for q in range(depth_series.shape[1]):
            v = 0
            for b in range(n_blocks):
                v += hist_b[b, q]
            depth_series[i + j, q] = v


@njit(**JIT)
def count_in_flight(sent_h, recv_h, slot, wrap):
    """Messages on all links at the end of the cycle stored in history slot `slot`: for every link,
    the sender's send count minus the receiver's receive count, modulo `wrap` (= 2K). int64."""
    rows = sent_h.shape[1]
    cols = sent_h.shape[2]
    total = 0
    for r in range(rows):
        for c in range(cols):
            for d in range(4):
                nr = r + (d == 2) - (d == 0)
                nc = c + (d == 1) - (d == 3)
                if nr < 0 or nr >= rows or nc < 0 or nc >= cols:
                    continue
                k = np.int64(sent_h[slot, r, c, d]) - np.int64(recv_h[slot, nr, nc, (d + 2) & 3])
                if k < 0:
                    k += wrap
                total += k
    return total
