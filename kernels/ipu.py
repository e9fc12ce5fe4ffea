"""The IPU (Graphcore-style bulk-synchronous) kernels: docs/ipu.md.

`deal` maps one operator's work units onto a stage's tiles and threads and gives every tile's busy
cycles and bytes; `run_steps` runs the lockstep pipeline schedule of whole steps over the superstep
templates `meshsim.ipu.compile_program` builds, recording one row per superstep instance and per
pipeline step. Both are exact integer arithmetic over a fixed schedule (docs/ipu.md, "Mapping" and
"The pipeline"), so results do not depend on threads or on how steps are split over calls.
"""

import numpy as np
from numba import njit

from .config import JIT

# Columns of a superstep row (docs/ipu.md, "Result file": supersteps/).
SS_STEP = 0
SS_DIRECTION = 1  # the pipeline step's: 0 forward, 1 backward, 3 interleaved
SS_PIPELINE_STEP = 2
SS_STAGE = 3
SS_MICROBATCH = 4
SS_TEMPLATE = 5
SS_START = 6
SS_COMPUTE = 7
SS_SYNC = 8
SS_EXCHANGE = 9
N_SS = 10

# Columns of a pipeline row (pipeline/).
PL_STEP = 0
PL_DIRECTION = 1  # 0 forward, 1 backward, 2 the end row (all-reduce and update), 3 interleaved
PL_INDEX = 2
PL_START = 3
PL_CYCLES = 4
PL_SLOWEST = 5  # -1 for the all-reduce
PL_TRANSFER = 6
N_PL = 7

# Shares of the run's cycles (docs/ipu.md, "Observables and metrics").
SH_COMPUTE = 0
SH_SYNC = 1
SH_EXCHANGE = 2
SH_TRANSFER = 3
N_SH = 4


@njit(**JIT)
def deal(cost, out_bytes, in_bytes, offset, n_tiles, threads, even, busy, sent, recv):
    """Deal one operator's units to the tiles, from the stage's running unit count `offset`.

    Unit j goes to tile (offset + j) mod n_tiles as the tile's (j // n_tiles)-th unit of the
    operator, on thread (j // n_tiles) mod threads. `busy` (int64[n_tiles], zeroed here) gets each
    tile's compute time: the sum of its units' cost when `even` (slices split over the threads),
    else threads x the largest thread sum. `sent` and `recv` (int64[n_tiles], zeroed here) get the
    sums of out_bytes and in_bytes of the tile's units.
    """
    n = cost.shape[0]
    thread_sum = np.zeros((n_tiles, threads), np.int64)
    for t in range(n_tiles):
        busy[t] = 0
        sent[t] = 0
        recv[t] = 0
    for j in range(n):
        t = (offset + j) % n_tiles
        k = (j // n_tiles) % threads
        thread_sum[t, k] += cost[j]
        sent[t] += out_bytes[j]
        recv[t] += in_bytes[j]
    for t in range(n_tiles):
        if even:
            s = 0
            for k in range(threads):
                s += thread_sum[t, k]
            busy[t] = s
        else:
            top = 0
            for k in range(threads):
                if thread_sum[t, k] > top:
                    top = thread_sum[t, k]
            busy[t] = threads * top


@njit(**JIT)
def _stage_cycles(ptr, idx, s, t_comp, t_sync, t_exch):
    c = 0
    for i in range(ptr[s], ptr[s + 1]):
        x = idx[i]
        c += t_comp[x] + t_sync[x] + t_exch[x]
    return c


@njit(**JIT)
def _pipeline_row(out_pl, q, step, direction, index, start, cycles, slowest, transfer):
    out_pl[q, PL_STEP] = step
    out_pl[q, PL_DIRECTION] = direction
    out_pl[q, PL_INDEX] = index
    out_pl[q, PL_START] = start
    out_pl[q, PL_CYCLES] = cycles
    out_pl[q, PL_SLOWEST] = slowest
    out_pl[q, PL_TRANSFER] = transfer


@njit(**JIT)
def _supersteps(step, d, p, s, mb, c, ptr, idx, t_comp, t_sync, t_exch, count, out_ss, r):
    """One stage's supersteps of one direction for micro-batch mb from cycle c, as rows of a pipeline
    step of direction d; returns (end cycle, rows of out_ss used)."""
    for i in range(ptr[s], ptr[s + 1]):
        x = idx[i]
        out_ss[r, SS_STEP] = step
        out_ss[r, SS_DIRECTION] = d
        out_ss[r, SS_PIPELINE_STEP] = p
        out_ss[r, SS_STAGE] = s
        out_ss[r, SS_MICROBATCH] = mb
        out_ss[r, SS_TEMPLATE] = x
        out_ss[r, SS_START] = c
        out_ss[r, SS_COMPUTE] = t_comp[x]
        out_ss[r, SS_SYNC] = t_sync[x]
        out_ss[r, SS_EXCHANGE] = t_exch[x]
        count[x] += 1
        c += t_comp[x] + t_sync[x] + t_exch[x]
        r += 1
    return c, r


@njit(**JIT)
def _share(shares, ptr, idx, s, t_comp, t_sync, t_exch):
    for i in range(ptr[s], ptr[s + 1]):
        x = idx[i]
        shares[SH_COMPUTE] += t_comp[x]
        shares[SH_SYNC] += t_sync[x]
        shares[SH_EXCHANGE] += t_exch[x]


@njit(**JIT)
def _direction(step, d, start, n, m, ptr, idx, t_comp, t_sync, t_exch, extra0, transfer, count, out_ss, r,
               out_pl, q, shares, mb_start, mb_end, training):
    """The m + n - 1 pipeline steps of one direction of one step from cycle `start`; returns
    (end cycle, rows of out_ss used, rows of out_pl used)."""
    stage_time = np.zeros(n, np.int64)
    for s in range(n):
        stage_time[s] = _stage_cycles(ptr, idx, s, t_comp, t_sync, t_exch) + (extra0 if s == 0 else 0)
    for p in range(m + n - 1):
        slowest = -1
        top = -1
        for s in range(n):
            mb = p - s if d == 0 else p - (n - 1 - s)
            if mb < 0 or mb >= m:
                continue
            if stage_time[s] > top:
                top = stage_time[s]
                slowest = s
            c, r = _supersteps(step, d, p, s, mb, start + (extra0 if s == 0 else 0), ptr, idx, t_comp, t_sync,
                               t_exch, count, out_ss, r)
            if d == 0 and s == 0:
                mb_start[mb] = start
            if (d == 0 and s == n - 1 and not training) or (d == 1 and s == 0):
                mb_end[mb] = c
        length = top + transfer
        _share(shares, ptr, idx, slowest, t_comp, t_sync, t_exch)
        shares[SH_TRANSFER] += transfer + (extra0 if slowest == 0 else 0)
        _pipeline_row(out_pl, q, step, d, p, start, length, slowest, transfer)
        q += 1
        start += length
    return start, r, q


@njit(**JIT)
def _interleaved(step, start, n, m, fwd_ptr, fwd_idx, bwd_ptr, bwd_idx, t_comp, t_sync, t_exch, io0, transfer,
                 count, out_ss, r, out_pl, q, shares, mb_start, mb_end):
    """The m + 2n - 2 interleaved pipeline steps of one training step from cycle `start` (docs/ipu.md,
    "The pipeline": in step p stage s runs the forward of micro-batch p - s, then the backward of
    micro-batch p - (2n - 2 - s)); returns (end cycle, rows of out_ss used, rows of out_pl used)."""
    fwd_time = np.zeros(n, np.int64)
    bwd_time = np.zeros(n, np.int64)
    for s in range(n):
        fwd_time[s] = _stage_cycles(fwd_ptr, fwd_idx, s, t_comp, t_sync, t_exch) + (io0 if s == 0 else 0)
        bwd_time[s] = _stage_cycles(bwd_ptr, bwd_idx, s, t_comp, t_sync, t_exch)
    for p in range(m + 2 * n - 2):
        slowest = -1
        top = -1
        for s in range(n):
            f = p - s
            b = p - (2 * n - 2 - s)
            has_f = 0 <= f < m
            has_b = 0 <= b < m
            if not has_f and not has_b:
                continue
            c = start
            if has_f:
                if s == 0:
                    mb_start[f] = start
                    c += io0
                c, r = _supersteps(step, 3, p, s, f, c, fwd_ptr, fwd_idx, t_comp, t_sync, t_exch, count, out_ss, r)
            if has_b:
                c, r = _supersteps(step, 3, p, s, b, c, bwd_ptr, bwd_idx, t_comp, t_sync, t_exch, count, out_ss, r)
                if s == 0:
                    mb_end[b] = c
            busy = (fwd_time[s] if has_f else 0) + (bwd_time[s] if has_b else 0)
            if busy > top:
                top = busy
                slowest = s
        f = p - slowest
        if 0 <= f < m:
            _share(shares, fwd_ptr, fwd_idx, slowest, t_comp, t_sync, t_exch)
            if slowest == 0:
                shares[SH_TRANSFER] += io0
        b = p - (2 * n - 2 - slowest)
        if 0 <= b < m:
            _share(shares, bwd_ptr, bwd_idx, slowest, t_comp, t_sync, t_exch)
        shares[SH_TRANSFER] += transfer
        length = top + transfer
        _pipeline_row(out_pl, q, step, 3, p, start, length, slowest, transfer)
        q += 1
        start += length
    return start, r, q


@njit(**JIT)
def run_steps(first_step, n_steps, start, n, m, training, fwd_ptr, fwd_idx, bwd_ptr, bwd_idx, t_comp, t_sync,
              t_exch, io0, transfer, allreduce, update, count, out_ss, out_pl, out_lat, shares, interleaved=False):
    """Run steps first_step .. first_step + n_steps - 1 from cycle `start` (docs/ipu.md, "The
    pipeline"). Writes their superstep rows to out_ss, pipeline rows to out_pl and micro-batch
    latencies to out_lat (m per step), adds to `count` (instances per template) and `shares`;
    returns the cycle where the last step ends. allreduce: the gradient all-reduce's cycles (-1:
    none); update: the optimiser update's (0: none); with either, a training step ends with a row
    of their sum. interleaved: a training step's forward and backward pipeline steps interleaved
    (each stage a forward, then a backward, in every pipeline step) rather than grouped."""
    r = 0
    q = 0
    mb_start = np.zeros(m, np.int64)
    mb_end = np.zeros(m, np.int64)
    for k in range(n_steps):
        step = first_step + k
        if training and interleaved:
            start, r, q = _interleaved(step, start, n, m, fwd_ptr, fwd_idx, bwd_ptr, bwd_idx, t_comp, t_sync, t_exch,
                                       io0, transfer, count, out_ss, r, out_pl, q, shares, mb_start, mb_end)
        else:
            start, r, q = _direction(step, 0, start, n, m, fwd_ptr, fwd_idx, t_comp, t_sync, t_exch, io0, transfer,
                                     count, out_ss, r, out_pl, q, shares, mb_start, mb_end, training)
        if training and not interleaved:
            start, r, q = _direction(step, 1, start, n, m, bwd_ptr, bwd_idx, t_comp, t_sync, t_exch, 0, transfer,
                                     count, out_ss, r, out_pl, q, shares, mb_start, mb_end, training)
        if training:
            if allreduce >= 0 or update > 0:  # the end row: all-reduce (-1: none) and update (0: none)
                reduce = max(allreduce, 0)
                _pipeline_row(out_pl, q, step, 2, 0, start, reduce + update, -1, reduce)
                shares[SH_TRANSFER] += reduce + update
                q += 1
                start += reduce + update
        for b in range(m):
            out_lat[k * m + b] = mb_end[b] - mb_start[b]
    return start
