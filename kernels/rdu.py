"""The RDU (SambaNova-style dataflow) kernel: docs/rdu.md.

Inputs are the program tables of `meshsim.rdu.compile_program` (int64 arrays, columns below). The
kernel runs every chip's list of section instances, jumping from event to event (docs/rdu.md,
"Implementation notes") and recording one row of observables per interval over which they are
constant.
"""

import numpy as np
from numba import njit

from .config import JIT

# Columns of the stage table (one row per stage of every section template).
ST_KIND = 0  # 0 compute, 1 collective
ST_NHI = 1  # PCUs of class hi
ST_NLO = 2  # PCUs of class lo
ST_CHI = 3  # busy cycles per tile of a class-hi PCU
ST_CLO = 4  # busy cycles per tile of a class-lo PCU
ST_DUR = 5  # cycles per tile of the stage
ST_PCU0 = 6  # first PCU of the stage
ST_PMUS = 7  # PMUs of the stage
N_ST = 8

# Columns of the section table (one row per section template).
SE_STAGE0 = 0  # first stage row
SE_NSTAGES = 1
SE_TILES = 2  # M
SE_LOAD = 3  # bytes loaded per tile
SE_STORE = 4  # bytes stored per tile
SE_WEIGHTS = 5  # resident weight bytes R
SE_PREFETCH_CAP = 6  # bytes of PMUs the section leaves free
SE_PMUS = 7  # PMUs the section holds
N_SE = 8

# Columns of the instance table [chip, instance, column].
IN_SECTION = 0
IN_DEP_CHIP = 1
IN_DEP_INST = 2
IN_DELAY = 3
N_IN = 4

# Phases.
PH_SWITCH = 0
PH_WAIT = 1
PH_RUN = 2
PH_DONE = 3

# Columns of the per-cycle (per-interval) observables of a chip (docs/rdu.md, "Observables").
SR_BUSY_PCUS = 0
SR_BUSY_STAGES = 1
SR_COLLECTIVE = 2
SR_PMUS = 3
SR_DDR_BUSY = 4
SR_PHASE = 5
SR_INSTANCE = 6
SR_DDR_WAIT = 7
N_SR = 8

# DDR streams.
STREAM_WEIGHTS = 0
STREAM_LOADS = 1
STREAM_STORES = 2

# Per-chip scalar state, columns of cs[chip, :].
CS_K = 0  # current instance
CS_PHASE = 1
CS_SWITCH_LEFT = 2
CS_WC = 3  # weight bytes loaded for instance k
CS_WN = 4  # weight bytes prefetched for instance k + 1
CS_LOADED = 5  # tiles loaded
CS_LDB = 6  # bytes of the tile being loaded
CS_STORED = 7  # tiles stored
CS_SDB = 8  # bytes of the tile being stored
CS_DDR_LEFT = 9  # cycles left of the burst in flight (0: idle)
CS_DDR_STREAM = 10
CS_DDR_BYTES = 11
CS_DDR_TARGET = 12  # instance a weights burst loads for
CS_RR = 13  # round-robin pointer
N_CS = 14

# Return codes of run_intervals.
RUNNING = 0
FINISHED = 1
STUCK = 2

_NEVER = np.int64(2**62)


def new_state(n_chips, max_stages, max_tiles, n_instances, switch_cycles):
    """Fresh kernel state at cycle 0 (docs/rdu.md, "One cycle"): (cs, started, done, left,
    tile_start, clock) where clock[0] is the next cycle and clock[1] the tiles whose latency is
    recorded."""
    cs = np.zeros((n_chips, N_CS), np.int64)
    for c in range(n_chips):
        if n_instances[c] == 0:
            cs[c, CS_PHASE] = PH_DONE
        elif switch_cycles > 0:
            cs[c, CS_PHASE] = PH_SWITCH
            cs[c, CS_SWITCH_LEFT] = switch_cycles
        else:
            cs[c, CS_PHASE] = PH_WAIT
    started = np.zeros((n_chips, max_stages), np.int64)
    done = np.zeros((n_chips, max_stages), np.int64)
    left = np.zeros((n_chips, max_stages), np.int64)
    tile_start = np.zeros((n_chips, max(1, max_tiles)), np.int64)
    clock = np.zeros(2, np.int64)
    return cs, started, done, left, tile_start, clock


@njit(**JIT)
def _ddr_cycles(nbytes, bytes_per_kcycle):
    return (nbytes * 1024 + bytes_per_kcycle - 1) // bytes_per_kcycle


# BEGIN SPLICED run_intervals: python -m kernels.splice writes it from its steps; edit those, not this.
@njit(**JIT)
def run_intervals(stage, section, instance, n_instances, buffer_tiles, switch_cycles, prefetch, burst_bytes,
                  bytes_per_kcycle, cs, started, done, left, tile_start, clock, tile_offset, finish, busy,
                  ddr_bytes, tile_latency, out_start, out_cycles, out_series, out_stage_busy):
    """Run until every chip is done or `len(out_start)` intervals are recorded.

    Returns (intervals recorded, status): status FINISHED once every chip is DONE (clock[0] is then
    the run's length in cycles), RUNNING if it stopped for room, STUCK if no chip can ever move
    (a program error). State lives in cs, started, done, left, tile_start, clock, finish, busy,
    ddr_bytes and tile_latency, so calls continue where the last one stopped.
    """
    n_chips = cs.shape[0]
    cap = out_start.shape[0]
    n_out = 0
    while n_out < cap:
        t = clock[0]
        active = False
        for c in range(n_chips):
            if cs[c, CS_PHASE] == PH_DONE:
                continue
            active = True
            k = cs[c, CS_K]
            x = instance[c, k, IN_SECTION]
            # A. Control.
            if cs[c, CS_PHASE] == PH_WAIT:
                dc = instance[c, k, IN_DEP_CHIP]
                if dc < 0:
                    cs[c, CS_PHASE] = PH_RUN
                else:
                    f = finish[dc, instance[c, k, IN_DEP_INST]]
                    if f >= 0 and f + instance[c, k, IN_DELAY] < t:
                        cs[c, CS_PHASE] = PH_RUN
            phase = cs[c, CS_PHASE]
            s0 = section[x, SE_STAGE0]
            n = section[x, SE_NSTAGES]
            m = section[x, SE_TILES]
            ld = section[x, SE_LOAD]
            sd = section[x, SE_STORE]
            r_w = section[x, SE_WEIGHTS]
            # B. DDR issue: streams tried from the round-robin pointer.
            if cs[c, CS_DDR_LEFT] == 0:
                for i in range(3):
                    st = (cs[c, CS_RR] + i) % 3
                    remaining = 0
                    target = k
                    if st == STREAM_WEIGHTS:
                        wc = cs[c, CS_WC]
                        if wc < r_w and (phase == PH_RUN or (prefetch != 0 and phase != PH_RUN)):
                            remaining = r_w - wc
                        elif (prefetch != 0 and phase == PH_RUN and wc == r_w and k + 1 < n_instances[c]):
                            nx = instance[c, k + 1, IN_SECTION]
                            pf = min(section[nx, SE_WEIGHTS], section[x, SE_PREFETCH_CAP])
                            if cs[c, CS_WN] < pf:
                                remaining = pf - cs[c, CS_WN]
                                target = k + 1
                    elif st == STREAM_LOADS:
                        if (phase == PH_RUN and ld > 0 and cs[c, CS_LOADED] < m
                                and cs[c, CS_LOADED] - done[c, 0] < buffer_tiles):
                            remaining = ld - cs[c, CS_LDB]
                            if cs[c, CS_LDB] == 0:
                                tile_start[c, cs[c, CS_LOADED]] = t
                    else:
                        if phase == PH_RUN and sd > 0 and cs[c, CS_STORED] < done[c, n - 1]:
                            remaining = sd - cs[c, CS_SDB]
                    if remaining > 0:
                        b = min(burst_bytes, remaining)
                        cs[c, CS_DDR_LEFT] = _ddr_cycles(b, bytes_per_kcycle)
                        cs[c, CS_DDR_STREAM] = st
                        cs[c, CS_DDR_BYTES] = b
                        cs[c, CS_DDR_TARGET] = target
                        cs[c, CS_RR] = (st + 1) % 3
                        break
            # C. Stage starts (conditions read only values this step does not change).
            if phase == PH_RUN and cs[c, CS_WC] == r_w:
                for j in range(n):
                    if left[c, j] != 0 or started[c, j] >= m:
                        continue
                    if j == 0:
                        has_input = cs[c, CS_LOADED] > started[c, 0]
                    else:
                        has_input = done[c, j - 1] > started[c, j]
                    if j < n - 1:
                        has_room = started[c, j] - done[c, j + 1] < buffer_tiles
                    else:
                        has_room = started[c, j] - cs[c, CS_STORED] < buffer_tiles
                    if has_input and has_room:
                        started[c, j] += 1
                        left[c, j] = stage[s0 + j, ST_DUR]
        if not active:
            return n_out, FINISHED
        # The cycles until the first event of any chip (docs/rdu.md, "Implementation notes").
        dt = _NEVER
        for c in range(n_chips):
            phase = cs[c, CS_PHASE]
            if phase == PH_DONE:
                continue
            k = cs[c, CS_K]
            x = instance[c, k, IN_SECTION]
            s0 = section[x, SE_STAGE0]
            n = section[x, SE_NSTAGES]
            if phase == PH_SWITCH:
                dt = min(dt, cs[c, CS_SWITCH_LEFT])
            elif phase == PH_WAIT:
                dc = instance[c, k, IN_DEP_CHIP]
                f = finish[dc, instance[c, k, IN_DEP_INST]]
                if f >= 0:
                    dt = min(dt, f + instance[c, k, IN_DELAY] + 1 - t)
            elif phase == PH_RUN:
                m = section[x, SE_TILES]
                # Tiles that need no DDR move at the end of this very cycle: an event.
                if section[x, SE_LOAD] == 0 and min(m, done[c, 0] + buffer_tiles) > cs[c, CS_LOADED]:
                    dt = 1
                if section[x, SE_STORE] == 0 and done[c, n - 1] > cs[c, CS_STORED]:
                    dt = 1
            if cs[c, CS_DDR_LEFT] > 0:
                dt = min(dt, cs[c, CS_DDR_LEFT])
            for j in range(n):
                lj = left[c, j]
                if lj > 0:
                    e = stage[s0 + j, ST_DUR] - lj
                    if e < stage[s0 + j, ST_CLO]:
                        lj = min(lj, stage[s0 + j, ST_CLO] - e)
                    elif e < stage[s0 + j, ST_CHI]:
                        lj = min(lj, stage[s0 + j, ST_CHI] - e)
                    dt = min(dt, lj)
        if dt == _NEVER:
            return n_out, STUCK
        # D. dt cycles of work, recorded as one interval.
        last = t + dt - 1
        out_start[n_out] = t
        out_cycles[n_out] = dt
        for c in range(n_chips):
            phase = cs[c, CS_PHASE]
            k = cs[c, CS_K]
            for j in range(out_stage_busy.shape[2]):
                out_stage_busy[n_out, c, j] = 0
            out_series[n_out, c, SR_PHASE] = phase
            out_series[n_out, c, SR_INSTANCE] = k
            ddr_busy = 1 if cs[c, CS_DDR_LEFT] > 0 else 0
            out_series[n_out, c, SR_DDR_BUSY] = ddr_busy
            if phase == PH_DONE:
                out_series[n_out, c, SR_BUSY_PCUS] = 0
                out_series[n_out, c, SR_BUSY_STAGES] = 0
                out_series[n_out, c, SR_COLLECTIVE] = 0
                out_series[n_out, c, SR_PMUS] = 0
                out_series[n_out, c, SR_DDR_WAIT] = 0
                continue
            x = instance[c, k, IN_SECTION]
            s0 = section[x, SE_STAGE0]
            n = section[x, SE_NSTAGES]
            m = section[x, SE_TILES]
            # D1-D2: observables and stage work.
            pcus = 0
            stages_busy = 0
            collective = 0
            for j in range(n):
                lj = left[c, j]
                if lj == 0:
                    continue
                row = s0 + j
                if stage[row, ST_KIND] == 1:
                    collective += 1
                else:
                    stages_busy += 1
                e = stage[row, ST_DUR] - lj
                b = 0
                if e < stage[row, ST_CHI]:
                    b += stage[row, ST_NHI]
                    busy[c, k, j, 0] += dt
                if e < stage[row, ST_CLO]:
                    b += stage[row, ST_NLO]
                    busy[c, k, j, 1] += dt
                out_stage_busy[n_out, c, j] = b
                pcus += b
                left[c, j] = lj - dt
                if lj == dt:
                    done[c, j] += 1
            out_series[n_out, c, SR_BUSY_PCUS] = pcus
            out_series[n_out, c, SR_BUSY_STAGES] = stages_busy
            out_series[n_out, c, SR_COLLECTIVE] = collective
            out_series[n_out, c, SR_PMUS] = section[x, SE_PMUS] if phase == PH_RUN else 0
            out_series[n_out, c, SR_DDR_WAIT] = 1 if (phase == PH_RUN and stages_busy == 0 and ddr_busy) else 0
            # D3: the DDR channel.
            if ddr_busy:
                cs[c, CS_DDR_LEFT] -= dt
                if cs[c, CS_DDR_LEFT] == 0:
                    b = cs[c, CS_DDR_BYTES]
                    ddr_bytes[c] += b
                    st = cs[c, CS_DDR_STREAM]
                    if st == STREAM_WEIGHTS:
                        if cs[c, CS_DDR_TARGET] == k:
                            cs[c, CS_WC] += b
                        else:
                            cs[c, CS_WN] += b
                    elif st == STREAM_LOADS:
                        cs[c, CS_LDB] += b
                        if cs[c, CS_LDB] == section[x, SE_LOAD]:
                            cs[c, CS_LOADED] += 1
                            cs[c, CS_LDB] = 0
                    else:
                        cs[c, CS_SDB] += b
                        if cs[c, CS_SDB] == section[x, SE_STORE]:
                            tile = cs[c, CS_STORED]
                            tile_latency[tile_offset[c, k] + tile] = last - tile_start[c, tile]
                            cs[c, CS_STORED] += 1
                            cs[c, CS_SDB] = 0
            # D4: the switch.
            if phase == PH_SWITCH:
                cs[c, CS_SWITCH_LEFT] -= dt
                if cs[c, CS_SWITCH_LEFT] == 0:
                    cs[c, CS_PHASE] = PH_WAIT
            if phase != PH_RUN:
                continue
            # D5: tiles that need no DDR.
            if section[x, SE_LOAD] == 0:
                target = min(m, done[c, 0] + buffer_tiles)
                while cs[c, CS_LOADED] < target:
                    tile_start[c, cs[c, CS_LOADED]] = last
                    cs[c, CS_LOADED] += 1
            if section[x, SE_STORE] == 0:
                while cs[c, CS_STORED] < done[c, n - 1]:
                    tile = cs[c, CS_STORED]
                    tile_latency[tile_offset[c, k] + tile] = last - tile_start[c, tile]
                    cs[c, CS_STORED] += 1
            # D6: the end of the section.
            if cs[c, CS_STORED] == m:
                finish[c, k] = last
                k += 1
                cs[c, CS_K] = k
                if k == n_instances[c]:
                    cs[c, CS_PHASE] = PH_DONE
                else:
                    if switch_cycles > 0:
                        cs[c, CS_PHASE] = PH_SWITCH
                        cs[c, CS_SWITCH_LEFT] = switch_cycles
                    else:
                        cs[c, CS_PHASE] = PH_WAIT
                    cs[c, CS_WC] = cs[c, CS_WN]
                    cs[c, CS_WN] = 0
                    for col in (CS_LOADED, CS_LDB, CS_STORED, CS_SDB):
                        cs[c, col] = 0
                    for j in range(started.shape[1]):
                        started[c, j] = 0
                        done[c, j] = 0
                        left[c, j] = 0
        clock[0] = t + dt
        n_out += 1
    return n_out, RUNNING
# END SPLICED run_intervals
