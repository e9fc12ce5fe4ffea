"""The rdu's kernel, `run_intervals`, as named steps (docs/rdu.md, "One cycle": A-D6), spliced into
the one function Numba compiles in kernels/rdu.py by `python -m kernels.splice` (docs/design.md,
"Spliced kernels").

Each step reads the state it needs by name: its parameters are the names of the caller's variables
it reads, and it returns the ones it changes. The names it reads beyond those are kernels/rdu.py's:
this module is source for the splice, never imported by the kernels.
"""


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
            _control(instance, cs, finish, t, c, k)
            phase = cs[c, CS_PHASE]
            s0 = section[x, SE_STAGE0]
            n = section[x, SE_NSTAGES]
            m = section[x, SE_TILES]
            ld = section[x, SE_LOAD]
            sd = section[x, SE_STORE]
            r_w = section[x, SE_WEIGHTS]
            _ddr_issue(section, instance, n_instances, buffer_tiles, prefetch, burst_bytes, bytes_per_kcycle, cs, done,
                       tile_start, t, c, k, x, phase, n, m, ld, sd, r_w)
            _stage_starts(stage, buffer_tiles, cs, started, done, left, c, phase, s0, n, m, r_w)
        if not active:
            return n_out, FINISHED
        dt = _cycles_to_next_event(stage, section, instance, buffer_tiles, cs, done, left, finish, n_chips, t)
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
            pcus, stages_busy, collective = _stage_work(stage, section, done, left, busy, out_series, out_stage_busy,
                                                        n_out, c, k, x, phase, s0, n, dt, ddr_busy)
            _ddr_channel(section, cs, tile_start, tile_offset, ddr_bytes, tile_latency, c, k, x, dt, last, ddr_busy)
            _switch(cs, c, phase, dt)
            if phase != PH_RUN:
                continue
            _tiles_without_ddr(section, buffer_tiles, cs, done, tile_start, tile_offset, tile_latency, c, k, x, n, m,
                               last)
            k = _section_end(n_instances, switch_cycles, cs, started, done, left, finish, c, k, m, last)
        clock[0] = t + dt
        n_out += 1
    return n_out, RUNNING


def _control(instance, cs, finish, t, c, k):
    """A. Control: a chip waiting for its instance's dependency starts running once it is met."""
    # A. Control.
    if cs[c, CS_PHASE] == PH_WAIT:
        dc = instance[c, k, IN_DEP_CHIP]
        if dc < 0:
            cs[c, CS_PHASE] = PH_RUN
        else:
            f = finish[dc, instance[c, k, IN_DEP_INST]]
            if f >= 0 and f + instance[c, k, IN_DELAY] < t:
                cs[c, CS_PHASE] = PH_RUN


def _ddr_issue(section, instance, n_instances, buffer_tiles, prefetch, burst_bytes, bytes_per_kcycle, cs, done,
               tile_start, t, c, k, x, phase, n, m, ld, sd, r_w):
    """B. DDR issue: with the channel idle, the first stream from the round-robin pointer that has
    bytes to move (the weights, the next instance's weights when prefetching, tile loads, tile
    stores) takes the next burst.
    """
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


def _stage_starts(stage, buffer_tiles, cs, started, done, left, c, phase, s0, n, m, r_w):
    """C. Stage starts: each idle stage with an input tile and room downstream starts one (the
    conditions read only values this step does not change).
    """
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


def _cycles_to_next_event(stage, section, instance, buffer_tiles, cs, done, left, finish, n_chips, t):
    """The cycles until the first event of any chip (docs/rdu.md, "Implementation notes")."""
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
    return dt


def _stage_work(stage, section, done, left, busy, out_series, out_stage_busy, n_out, c, k, x, phase, s0, n, dt,
                ddr_busy):
    """D1-D2: the chip's observables over the interval and its stages' work; a stage whose tile
    ends completes it.
    """
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
    return pcus, stages_busy, collective


def _ddr_channel(section, cs, tile_start, tile_offset, ddr_bytes, tile_latency, c, k, x, dt, last, ddr_busy):
    """D3: the DDR channel's burst advances; a burst that ends lands its bytes in its stream."""
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


def _switch(cs, c, phase, dt):
    """D4: the section switch counts down, then the chip waits for its next instance's dependency."""
    # D4: the switch.
    if phase == PH_SWITCH:
        cs[c, CS_SWITCH_LEFT] -= dt
        if cs[c, CS_SWITCH_LEFT] == 0:
            cs[c, CS_PHASE] = PH_WAIT


def _tiles_without_ddr(section, buffer_tiles, cs, done, tile_start, tile_offset, tile_latency, c, k, x, n, m, last):
    """D5: tiles that need no DDR move at the end of the interval."""
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


def _section_end(n_instances, switch_cycles, cs, started, done, left, finish, c, k, m, last):
    """D6: the end of the section: the instance finishes, and the chip moves to its next one."""
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
    return k
