"""Plain reference ("oracle") of the RDU kernel, written from docs/rdu.md alone.

It is deliberately slow: it steps every cycle t = 0, 1, 2, ... and, for every chip in index
order, performs steps A, B, C, D1..D6 of docs/rdu.md ("One cycle") literally, in plain Python.
numpy is used only to build the output arrays.  Its only job is to be obviously correct so that
comparing it with the fast kernel, cycle by cycle, catches bugs in either.  It uses no code of
meshsim or of the kernels: the column numbers of the program tables and of the observables are its
own, from docs/rdu.md ("The program tables", "Observables"), and a test checks they equal the
kernel's.

Public: `simulate(prog)` runs a whole compiled program (the tables docs/rdu.md "The program tables"
lists, e.g. a `meshsim.rdu.RduProgram`, read only through those attributes) and returns every
observable, one row per cycle; and the table layout constants (`ST_*`, `SE_*`, `IN_*`, `SR_*`,
`PH_*`, `STREAM_*`).

Choices made where docs/rdu.md is ambiguous or silent:

1. "remaining" of each stream (step B): weights (a) ``R - wc``; weights (b) ``pf - wn`` with
   ``pf = min(R_{k+1}, SE_PREFETCH_CAP of k's template)``; loads ``ld - ldb``; stores
   ``sd - sdb``.  A burst is only issued when the channel is idle, so no bytes are ever in
   flight when "remaining" is computed and nothing is counted twice.
2. A weights burst remembers the absolute instance index it loads for.  When it lands (D3) it is
   credited to ``wc`` if that index equals the chip's current ``k`` and to ``wn`` if it equals
   ``k + 1``.  So a prefetch burst for ``k + 1`` still in flight across the switch of D6 lands on
   ``wc`` of the new instance, as the doc says.  If it matches neither (impossible with M >= 1,
   only conceivable with M = 0 templates) its bytes are dropped from wc/wn but still counted in
   ``ddr_bytes`` (every landed burst is "credited" to the DDR total).
3. ``ddr_bytes`` counts the bytes of every burst when it lands in D3 (not when issued), so a
   burst still in flight at the end of the run (cannot happen with sane tables) is not counted.
4. The round-robin pointer ``rr`` is per chip, starts at 0 and is never reset (not across
   instances either).  A stream "has something to move" exactly when its condition in step B
   holds (which implies remaining > 0).
5. Step A reads ``finish`` of the dependency chip as stored at the end of earlier cycles; since
   ``finish[dep] + delay < t`` can never hold for a finish written in cycle t (delay >= 0),
   reading the shared finish table while visiting chips in index order is equivalent.
   ``IN_DEP_CHIP < 0`` or ``IN_DEP_INST < 0`` means "no dependency".
6. Step C snapshots ``loaded``, ``started``, ``done``, ``stored`` before deciding any start, so
   the order of stages cannot matter (the doc says it does not anyway).  ``wc = R`` is compared
   with the current template's SE_WEIGHTS.
7. Busy PCU classes (D2): with ``e = dur_j - left_j``, the class-hi "busy cycle" counter of
   (instance, stage) is incremented when ``e < c_hi`` and the class-lo counter when
   ``e < c_lo``, literally, without looking at whether the class has any PCU (with tables from
   the compiler an empty class has c = 0 anyway).  The busy-PCU observable and ``stage_busy``
   add ``n_hi`` resp. ``n_lo`` for a busy class, so empty classes contribute 0 PCUs.  This holds
   for collective stages too (they have n_hi = n_lo = 0, so 0 busy PCUs).
8. Observables of cycle t: phase, k and SR_PMUS are taken at D1 (before D4/D6 change them);
   busy PCUs / busy stages / collective busy / stage_busy are what D2 does; SR_DDR_BUSY is 1 iff
   ``ddr_left > 0`` at the start of D3; SR_DDR_WAIT is 1 iff phase (at D1) is RUN, no compute
   stage had ``left > 0`` in D2 and SR_DDR_BUSY is 1.  SR_PMUS is the SE_PMUS of the current
   instance's template while the phase is RUN, else 0.  For a DONE chip SR_INSTANCE is
   ``n_instances``.  A chip that is DONE still runs D3 if a burst were in flight (cannot happen
   with sane tables); otherwise it does nothing.
9. Tile start cycles: a tile's start is the cycle of the load burst issued while ``ldb = 0`` for
   it (the tile index being ``loaded``); with ``ld = 0`` (D5) each tile newly counted as loaded
   starts at that cycle t.  A tile's latency is ``t - start`` at the D3 (or D5 when ``sd = 0``)
   in which it is counted as stored; latencies are listed per chip, per instance, in tile order.
10. D5 runs in RUN even while weights are still loading (``wc < R``): with ``ld = 0`` tiles count
   as loaded from the first RUN cycle.  D5's ld part is applied before its sd part, and D6 (same
   cycle) sees the result.
11. Finish and the end of the run: ``finish[k] = t`` at D6; the run length is (last cycle in which
   a chip became DONE) + 1.  A chip with 0 instances is DONE from the start and shows phase DONE,
   instance 0 in every cycle.  If every chip has 0 instances the run has 0 cycles.  If no chip
   has become DONE after ``max_cycles`` cycles, RuntimeError is raised (deadlock guard; e.g. a
   stage with ST_DUR = 0 never completes a tile and deadlocks).
12. Counters reset at D6 are loaded, ldb, started, done, left, stored, sdb (as listed); the DDR
   channel (ddr_left, its stream, bytes, instance) and rr are kept.  Loads and stores can never
   be in flight at D6 (stored = M implies loaded = M and every store landed).
13. max_stages = max(1, max SE_NSTAGES over templates); ``busy`` and ``stage_busy`` slots past a
   section's stages stay 0.  ``busy`` rows of instances past n_instances stay 0, ``finish`` -1.
14. DDR burst time is ``ceil(b * 1024 / ddr_bytes_per_kcycle)`` in exact integer arithmetic.
"""

from types import SimpleNamespace

import numpy as np

# The table layout of docs/rdu.md ("The program tables" and "Observables"), numbered there; a test
# checks that these equal the kernel's (kernels/rdu.py), so that the doc, the oracle and the kernel agree.
# stage[s, :]
ST_KIND = 0  # 0 compute, 1 collective
ST_NHI = 1
ST_NLO = 2
ST_CHI = 3
ST_CLO = 4
ST_DUR = 5
ST_PCU0 = 6
ST_PMUS = 7
N_ST = 8
# section[x, :]
SE_STAGE0 = 0
SE_NSTAGES = 1
SE_TILES = 2
SE_LOAD = 3
SE_STORE = 4
SE_WEIGHTS = 5
SE_PREFETCH_CAP = 6
SE_PMUS = 7
N_SE = 8
# instance[c, i, :]
IN_SECTION = 0
IN_DEP_CHIP = 1
IN_DEP_INST = 2
IN_DELAY = 3
N_IN = 4
# phases
PH_SWITCH = 0
PH_WAIT = 1
PH_RUN = 2
PH_DONE = 3
# a chip's observables of one cycle
SR_BUSY_PCUS = 0
SR_BUSY_STAGES = 1
SR_COLLECTIVE = 2
SR_PMUS = 3
SR_DDR_BUSY = 4
SR_PHASE = 5
SR_INSTANCE = 6
SR_DDR_WAIT = 7
N_SR = 8
# DDR streams of step B
STREAM_WEIGHTS = 0
STREAM_LOADS = 1
STREAM_STORES = 2


def _ceil_div(a, b):
    return -((-a) // b)


class _Template:
    """One section template, read from the section and stage tables."""

    def __init__(self, prog, x):
        row = [int(v) for v in prog.section[x]]
        self.M = row[SE_TILES]
        self.ld = row[SE_LOAD]
        self.sd = row[SE_STORE]
        self.R = row[SE_WEIGHTS]
        self.prefetch_cap = row[SE_PREFETCH_CAP]
        self.pmus = row[SE_PMUS]
        s0 = row[SE_STAGE0]
        self.n = row[SE_NSTAGES]
        self.stages = []
        for j in range(self.n):
            st = [int(v) for v in prog.stage[s0 + j]]
            self.stages.append(
                {
                    "kind": st[ST_KIND],
                    "n_hi": st[ST_NHI],
                    "n_lo": st[ST_NLO],
                    "c_hi": st[ST_CHI],
                    "c_lo": st[ST_CLO],
                    "dur": st[ST_DUR],
                }
            )


class _Chip:
    """State of one chip, with the names of docs/rdu.md."""

    def __init__(self, n_instances, X):
        self.n_instances = n_instances
        self.k = 0
        if n_instances == 0:
            self.phase = PH_DONE
        elif X > 0:
            self.phase = PH_SWITCH
        else:
            self.phase = PH_WAIT
        self.switch_left = X
        self.wc = 0
        self.wn = 0
        self.rr = 0
        # DDR channel
        self.ddr_left = 0
        self.ddr_stream = -1
        self.ddr_bytes_burst = 0
        self.ddr_inst = -1
        self.ddr_total = 0
        self.reset_counters(0)

    def reset_counters(self, n_stages):
        self.loaded = 0
        self.ldb = 0
        self.started = [0] * n_stages
        self.done = [0] * n_stages
        self.left = [0] * n_stages
        self.stored = 0
        self.sdb = 0
        self.tile_start = {}  # tile index -> first-burst cycle, for the current instance


def _ddr_issue(run, c, ch, k, tp, t):
    """Step B: with the channel idle, the first stream in round-robin order that has bytes to move
    issues one burst."""
    insts, B = run.insts, run.B
    for off in range(3):
        s = (ch.rr + off) % 3
        remaining = 0
        for_inst = -1
        if s == STREAM_WEIGHTS:
            if ch.wc < tp.R and (ch.phase == PH_RUN or (run.prefetch and ch.phase in (PH_SWITCH, PH_WAIT))):
                remaining = tp.R - ch.wc
                for_inst = k
            elif run.prefetch and ch.phase == PH_RUN and ch.wc == tp.R and k + 1 < run.n_inst[c]:
                nxt = insts[c][k + 1]["template"]
                pf = min(nxt.R, tp.prefetch_cap)
                if ch.wn < pf:
                    remaining = pf - ch.wn
                    for_inst = k + 1
        elif s == STREAM_LOADS:
            if ch.phase == PH_RUN and tp.ld > 0 and ch.loaded < tp.M and ch.loaded - ch.done[0] < B:
                remaining = tp.ld - ch.ldb
                if ch.ldb == 0:
                    ch.tile_start[ch.loaded] = t
        else:  # STREAM_STORES
            if ch.phase == PH_RUN and tp.sd > 0 and ch.stored < ch.done[tp.n - 1]:
                remaining = tp.sd - ch.sdb
        if remaining > 0:
            b = min(run.burst_bytes, remaining)
            ch.ddr_left = _ceil_div(b * 1024, run.kbw)
            ch.ddr_stream = s
            ch.ddr_bytes_burst = b
            ch.ddr_inst = for_inst
            ch.rr = (s + 1) % 3
            break


def _stage_starts(run, ch, tp):
    """Step C: every idle stage with an input and room downstream starts its next tile (the
    decisions on the counts as the step starts)."""
    B = run.B
    n = tp.n
    loaded = ch.loaded
    stored = ch.stored
    started = list(ch.started)
    done = list(ch.done)
    left = list(ch.left)
    for j in range(n):
        if left[j] != 0 or started[j] >= tp.M:
            continue
        if j == 0:
            has_input = loaded > started[0]
        else:
            has_input = done[j - 1] > started[j]
        if j < n - 1:
            has_room = started[j] - done[j + 1] < B
        else:
            has_room = started[n - 1] - stored < B
        if has_input and has_room:
            ch.started[j] += 1
            ch.left[j] = tp.stages[j]["dur"]


def _stages_work(run, c, ch, k, tp, obs, slot_busy):
    """Step D2: every stage with a tile works a cycle; returns how many compute stages did."""
    n_compute_busy = 0
    for j in range(tp.n):
        if ch.left[j] > 0:
            st = tp.stages[j]
            if st["kind"] == 0:
                n_compute_busy += 1
            else:
                obs[SR_COLLECTIVE] += 1
            e = st["dur"] - ch.left[j]
            pcus = 0
            if e < st["c_hi"]:
                pcus += st["n_hi"]
                run.busy[c][k][j][0] += 1
            if e < st["c_lo"]:
                pcus += st["n_lo"]
                run.busy[c][k][j][1] += 1
            slot_busy[j] = pcus
            obs[SR_BUSY_PCUS] += pcus
            ch.left[j] -= 1
            if ch.left[j] == 0:
                ch.done[j] += 1
    return n_compute_busy


def _ddr_works(run, c, ch, k, tp, obs, t):
    """Step D3: the DDR channel works a cycle; a burst that ends delivers its bytes."""
    obs[SR_DDR_BUSY] = 1
    ch.ddr_left -= 1
    if ch.ddr_left != 0:
        return
    b = ch.ddr_bytes_burst
    ch.ddr_total += b
    if ch.ddr_stream == STREAM_WEIGHTS:
        if ch.ddr_inst == ch.k:
            ch.wc += b
        elif ch.ddr_inst == ch.k + 1:
            ch.wn += b
    elif ch.ddr_stream == STREAM_LOADS:
        ch.ldb += b
        if ch.ldb == tp.ld:
            ch.loaded += 1
            ch.ldb = 0
    else:  # STREAM_STORES
        ch.sdb += b
        if ch.sdb == tp.sd:
            run.latencies[c][k].append(t - ch.tile_start[ch.stored])
            ch.stored += 1
            ch.sdb = 0
    ch.ddr_stream = -1
    ch.ddr_bytes_burst = 0
    ch.ddr_inst = -1


def _tiles_without_ddr(run, c, ch, k, tp, t):
    """Step D5: tiles that need no DDR load or store arrive, and leave, at once."""
    if tp.ld == 0:
        target = min(tp.M, ch.done[0] + run.B)
        if target > ch.loaded:
            for i in range(ch.loaded, target):
                ch.tile_start[i] = t
            ch.loaded = target
    if tp.sd == 0:
        while ch.done[tp.n - 1] > ch.stored:
            run.latencies[c][k].append(t - ch.tile_start[ch.stored])
            ch.stored += 1


def _instance_end(run, c, ch, k, t):
    """Step D6: the instance's last tile stored, the chip moves to its next instance (or is done)."""
    run.finish[c][k] = t
    ch.k = k + 1
    if ch.k >= run.n_inst[c]:
        ch.phase = PH_DONE
        ch.reset_counters(0)
    else:
        ch.phase = PH_SWITCH if run.X > 0 else PH_WAIT
        ch.switch_left = run.X
        ch.wc = ch.wn
        ch.wn = 0
        ch.reset_counters(run.insts[c][ch.k]["template"].n)


def _chip_cycle(run, c, t):
    """Cycle t of chip c, steps A-D6 of docs/rdu.md "One cycle"; returns its observables and its
    stages' busy PCUs."""
    ch = run.chips[c]
    k = ch.k
    cur = run.insts[c][k] if ch.phase != PH_DONE else None
    tp = cur["template"] if cur is not None else None

    # ---- A. Control.
    if ch.phase == PH_WAIT:
        dc, di = cur["dep_chip"], cur["dep_inst"]
        if dc < 0 or di < 0:
            ch.phase = PH_RUN
        else:
            f = run.finish[dc][di]
            if f >= 0 and f + cur["delay"] < t:
                ch.phase = PH_RUN
    # ---- B. DDR issue.
    if ch.ddr_left == 0 and ch.phase != PH_DONE:
        _ddr_issue(run, c, ch, k, tp, t)
    # ---- C. Stage starts.
    if ch.phase == PH_RUN and ch.wc == tp.R:
        _stage_starts(run, ch, tp)
    # ---- D1. Observables (phase, k, PMUs as now; the rest filled in D2/D3).
    obs = [0] * N_SR
    obs[SR_PHASE] = ch.phase
    obs[SR_INSTANCE] = k
    obs[SR_PMUS] = tp.pmus if ch.phase == PH_RUN else 0
    slot_busy = [0] * run.max_stages
    phase_d1 = ch.phase
    # ---- D2. Stages work.
    n_compute_busy = _stages_work(run, c, ch, k, tp, obs, slot_busy) if tp is not None else 0
    obs[SR_BUSY_STAGES] = n_compute_busy
    # ---- D3. DDR channel works.
    if ch.ddr_left > 0:
        _ddr_works(run, c, ch, k, tp, obs, t)
    if phase_d1 == PH_RUN and n_compute_busy == 0 and obs[SR_DDR_BUSY] == 1:
        obs[SR_DDR_WAIT] = 1
    # ---- D4. Switch.
    if ch.phase == PH_SWITCH:
        ch.switch_left -= 1
        if ch.switch_left == 0:
            ch.phase = PH_WAIT
    # ---- D5. Tiles that need no DDR.
    if ch.phase == PH_RUN:
        _tiles_without_ddr(run, c, ch, k, tp, t)
    # ---- D6. Instance end.
    if ch.phase == PH_RUN and ch.stored == tp.M:
        _instance_end(run, c, ch, k, t)
    return obs, slot_busy


def simulate(prog, max_cycles=10_000_000):
    """Run a whole program, every cycle of every chip, and return: `cycles`; `series` [cycle, chip,
    N_SR]; `stage_busy` [cycle, chip, stage slot] busy PCUs; `finish` [chip, instance]; `busy` [chip,
    instance, stage, (class hi, class lo)] busy cycles; `ddr_bytes` [chip]; `tile_latency` (chip,
    instance, tile order)."""
    instance = np.asarray(prog.instance)
    n_inst = [int(v) for v in np.asarray(prog.n_instances)]
    n_chips = int(instance.shape[0])
    max_inst = int(instance.shape[1])
    X = int(prog.switch_cycles)
    n_templates = int(np.asarray(prog.section).shape[0])
    templates = [_Template(prog, x) for x in range(n_templates)]
    max_stages = max([1] + [tp.n for tp in templates])

    def inst_row(c, i):
        r = [int(v) for v in instance[c, i]]
        return {
            "template": templates[r[IN_SECTION]],
            "dep_chip": r[IN_DEP_CHIP],
            "dep_inst": r[IN_DEP_INST],
            "delay": r[IN_DELAY],
        }

    run = SimpleNamespace(
        n_inst=n_inst, B=int(prog.buffer_tiles), X=X, prefetch=int(prog.prefetch) != 0,
        burst_bytes=int(prog.burst_bytes), kbw=int(prog.ddr_bytes_per_kcycle), max_stages=max_stages,
        insts=[[inst_row(c, i) for i in range(n_inst[c])] for c in range(n_chips)],
        chips=[_Chip(n_inst[c], X) for c in range(n_chips)],
        finish=[[-1] * max_inst for _ in range(n_chips)],
        busy=[[[[0, 0] for _ in range(max_stages)] for _ in range(max_inst)] for _ in range(n_chips)],
        latencies=[[[] for _ in range(max_inst)] for _ in range(n_chips)],
    )
    chips = run.chips
    for c in range(n_chips):
        if n_inst[c] > 0:
            chips[c].reset_counters(run.insts[c][0]["template"].n)
    series = []  # per cycle: list over chips of N_SR ints
    stage_busy = []  # per cycle: list over chips of max_stages ints

    t = 0
    if all(ch.phase == PH_DONE for ch in chips):
        n_cycles = 0
    else:
        n_cycles = None
    while n_cycles is None:
        if t >= max_cycles:
            raise RuntimeError("rdu reference: run exceeds max_cycles=%d (deadlock?)" % max_cycles)
        cyc = [_chip_cycle(run, c, t) for c in range(n_chips)]
        series.append([obs for obs, _ in cyc])
        stage_busy.append([slots for _, slots in cyc])
        if all(ch.phase == PH_DONE for ch in chips):
            n_cycles = t + 1
        t += 1

    tile_latency = []
    for c in range(n_chips):
        for i in range(n_inst[c]):
            tile_latency.extend(run.latencies[c][i])

    return {
        "cycles": int(n_cycles),
        "series": np.array(series, dtype=np.int64).reshape(n_cycles, n_chips, N_SR),
        "stage_busy": np.array(stage_busy, dtype=np.int64).reshape(n_cycles, n_chips, max_stages),
        "finish": np.array(run.finish, dtype=np.int64).reshape(n_chips, max_inst),
        "busy": np.array(run.busy, dtype=np.int64).reshape(n_chips, max_inst, max_stages, 2),
        "ddr_bytes": np.array([ch.ddr_total for ch in chips], dtype=np.int64),
        "tile_latency": np.array(tile_latency, dtype=np.int64),
    }
