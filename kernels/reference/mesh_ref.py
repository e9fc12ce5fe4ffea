"""Plain reference ("oracle") of the mesh kernel, written from docs/mesh.md alone.

It is deliberately slow: one Python object per PE, explicit per-cycle history of every value another
PE may read, link messages kept with their send cycles so that "sent at a cycle <= t - L" is checked
literally.  Its only job is to be obviously correct so that comparing it with the fast kernel, cycle
by cycle, catches bugs in either.  Only the standard library is used.

Choices made where docs/mesh.md is ambiguous or silent:

1. Order of PEs inside a cycle.  The spec says every read of another PE uses end-of-earlier-cycle
   values.  The one exception in practice is Receive, which removes messages from the link FIFO
   that the spec places in the *sender's* state.  Because L >= 1 the receiver only ever takes
   messages sent at an earlier cycle, and the sender only appends messages of the current cycle,
   so visiting PEs one after another in any order gives the same result.  We visit them in
   increasing u (``_visit_reversed`` exists only so a test can prove order independence).
2. Hop count overflow: the count saturates at 255, as docs/mesh.md says.
3. Trace events: in cycle t a PE is offered every event whose cycle is t, so a run of N cycles
   (0..N-1) offers events with cycle in [0, N); ``unoffered_trace_events()`` counts the others
   (cycle >= N, or negative).
4. Geometric work uses ``math.log(1.0 - 1.0 / m)`` literally (not log1p(-1/m), which can differ in
   the last bit and so change floor() near integers); m = float(work_cycles).  The cap at
   work_max_cycles is applied only to the geometric distribution, as written; no distribution
   clamps to the task range 1..65535 (the scenario must keep work inside it).
5. Skewed rate map and hot regions: as docs/mesh.md defines them (Box-Muller on the set-up stream,
   cosine branch; half-open rectangles (row0, col0, row1, col1)).
6. Seeds are taken modulo 2^64 (``seed & MASK64``); the spec assumes an unsigned 64-bit seed.
7. In the Migrate step, "has room" compares ``sent_total_d`` *including this cycle's sends* with
   the credits as of t - Lc, exactly as written; ``k`` for random_lower is the number of tasks this
   PE already sent in this cycle (equal to the loop iteration index, since every iteration that
   does not stop sends one task).
8. "busy PEs (step 5)" counts PEs whose server held a task during step 5, including a task that
   completes in that same step; a completed task is counted (and its latency and hops summed) on
   the PE where it completes.
9. "migrated" per cycle counts messages sent in the cycle; "received" counts messages taken off
   links in the cycle (= migrated in); a received task is not re-counted as injected.
10. A trace PE may be offered several tasks in one cycle (one per event, in file order); each is
   accepted or refused in turn against the queue length at that moment, all before Start.
11. Rates exactly 1 still use the threshold 2^32 - 1 (the spec's note that rate 1 offers with
   probability 1 - 2^-32), computed as min(int(floor(rate * 4294967296.0)), 4294967295) in double.
12. Parameters are checked against the ranges docs/mesh.md lists (Q 1..255, L 1..8, B 1..4,
   K B..64, Lc 1..8, D 1..8, T 0..Q-1, M 1..4, rates in [0, 1], trace work 1..65535 and positions
   in the grid); anything outside raises ValueError rather than being simulated.  Work
   parameters (work_cycles, work_min/max_cycles) are not range-checked: the spec gives none.
13. "Depth" (own and known) is the queue length only, never counting the task in service, and the
   end-of-cycle depth other PEs read is taken after Work, i.e. after everything in the cycle.
14. An edge PE has no link in a missing direction; its snapshot shows an empty list and zero
   counts there.  A migrated task keeps its birth cycle, so its latency includes time in flight.
15. The spec's "the kernel checks conservation from the per-cycle counts" is done here from the
   actual state (queues, servers, source queues, router output queues, link FIFOs), plus in
   flight == sent - received.  Besides the spec's combined identity (tasks injected + packets
   offered = refused + queued + in service + in source queues + in router queues + in flight +
   completed + delivered) each kind is checked on its own (tasks never turn into packets or back),
   which the combined identity implies but cannot see; and every router queue must hold at most
   Qo packets, each of which routes to that queue at that PE.

Routed packets (the ``traffic`` workload, ``pattern`` not None):

16. The per-cycle ``migrated`` and ``received`` observables and the per-PE totals ``migrated_out``
   and ``migrated_in`` count *tasks* only (tasks sent in Migrate, tasks taken into the queue in
   Receive), as the spec's wording ("migrated", "a received task is not injected again") reads.
   The per-link counts (``sent``/``link_sent``, ``received``) and ``in_flight`` count every
   message, task or packet, since credits and bandwidth are shared.
17. A packet carries no hop count.  Its latency is counted at its delivery cycle t (when it leaves
   the ejection queue in step 2), as ``t - birth`` with no "+ 1" (unlike a task's).  A packet that
   enters an output queue in step 1 can leave it in step 2 of the same cycle, so an unhindered
   packet has latency hops * L, as the spec says ("the router adds no cycle of its own").
18. Destination "the PE itself" never produces an offer, and such a draw counts nowhere.  On a 1 x 1
   grid every destination would be the PE itself (``uniform``/``hotspot`` would take ``mod 0``,
   ``neighbor`` has no neighbour), so a 1 x 1 grid offers no packet at all.
19. ``transpose`` on a non-square grid is rejected (ValueError): the spec says square grids only.
20. The hotspot cut is ``floor(hot_fraction * 2^32)`` exactly as written, *not* capped at 2^32 - 1
   like a rate threshold: hot_fraction 1.0 always picks the hot PE (and the hot PE then offers
   nothing); hot_fraction must be in [0, 1].  ``uniform`` reduces the full 64-bit h mod (n - 1);
   ``hotspot`` reduces the low 32 bits, as written.
21. Every packet sent on a link (step 2's Send) counts in that link's send total and towards B
   for that output this cycle, whether it came from the source queue or arrived in transit.
   ``packets_injected`` counts packets leaving the source queue, i.e. entering an output queue in
   step 2 (not when they are later sent on a link).  The ejection queue's limit is its own: up to
   B deliveries per PE per cycle, independent of the four links' B.
22. Injection from the source queue stops at the first head whose output queue holds Qo packets (no
   overtaking in the source queue), and at most B packets leave it per cycle over all outputs.
   Packets that arrive in step 1 join the output queues first, so transit traffic has priority
   over new packets for output-queue space and sits ahead of them in the queue.
23. "Measured" is decided by the packet's birth cycle alone; a measured packet is counted in the
   ``measured_*`` observables in the cycle it is delivered, even if that is after the window ends.
   The accepted-throughput figure is a run-level quantity (from ``packets_delivered`` per cycle)
   and is not computed here.  Likewise a measured packet is counted in ``measured_injected``,
   ``measured_source_wait_sum`` and ``measured_hops_sum`` in the cycle it leaves its source queue
   (step 2, entering a router output queue), even if that is after the window ends: its wait is
   that cycle minus its birth (time in the router's output queue afterwards is not included), its
   hops |dest_row - row| + |dest_col - col| from its source PE (the XY path length).
24. With a pattern, ``rates`` are per-PE packet offer rates (threshold rule as for tasks; the spec's
   "rate injection_rate" is the uniform map), no tasks are offered, ``trace_events`` must be None,
   and the work-distribution arguments are ignored.  ``warmup_cycles`` and ``measure_cycles`` are
   integers >= 0.  The packet observables (``packets_in_router`` included) are 0 for task
   workloads (unless the private hook of choice 26 adds packets).
25. Order of PEs (see 1) with packets: Receive pops only messages sent at <= t - L from the head
   of the neighbour's link; every append of this cycle (Send, migration) has send cycle t, so pops
   and appends never meet, and the router queues are the PE's own state: the visiting order still
   cannot matter.
26. ``_schedule_packet`` is a private test hook: it offers an extra packet (any workload) in step
   2 after the workload's own offers, so that tests can mix tasks and packets by hand.

Output-queued routers (``router_queue_packets`` = Qo):

27. Each PE has five router queues: one per output direction 0..3 and the ejection queue; the
   limit "fewer than Qo packets" applies to each of the five separately, the ejection queue
   included ("that queue holds fewer than Qo").  A queue whose direction has no neighbour exists
   but stays empty (XY routing never points off the grid).  snapshot()["router"][u] lists them
   N, E, S, W, ejection, each head first as ``(dest_row, dest_col, birth)``; on links a packet is
   still ``("p", dest_row, dest_col, birth)``.
28. A packet that cannot enter its output queue in step 1 stops its input port for the cycle
   (it stays at the head of its link, and so do the messages behind it, whatever they need),
   exactly like a task that finds the task queue full; the other ports are still tried.
29. Send visits outputs 0..3 in order and then the ejection queue; each uses its own resource (its
   link's B and credits, or the B deliveries), so the order does not matter.  A queue's head that
   cannot be sent holds the packets behind it in that queue (they all need the same link).
30. Qo is range-checked (1..64) for every workload, although only packets use it; the default is 4.
   With a task workload the router queues stay empty (except through choice 26's hook).
31. The router queues are not among the end-of-cycle values other PEs read: a neighbour learns
   nothing about them except through link credits, as the spec's list of readable values says.
"""

import math
from collections import deque

MASK64 = 0xFFFFFFFFFFFFFFFF

N, E, S, W = 0, 1, 2, 3
EJECT = 4       # index of the ejection queue among a router's five output queues
POLICIES = ("none", "least_loaded", "random_lower")
WORK_DISTRIBUTIONS = ("fixed", "uniform", "geometric")

# Stream numbers from the spec ("Streams: 0 set-up, 1 injection, 3 migration").
STREAM_SETUP = 0
STREAM_INJECTION = 1
STREAM_DESTINATION = 2
STREAM_MIGRATION = 3

PATTERNS = ("uniform", "transpose", "bit_complement", "neighbor", "hotspot")


# ----------------------------------------------------------------------------------------------
# Counter-based randomness (spec section "Workloads").  Every product is masked to 64 bits because
# Python ints do not wrap.
# ----------------------------------------------------------------------------------------------

def mix64(z):
    """The splitmix64 finaliser on an unsigned 64-bit integer."""
    z &= MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
    return z ^ (z >> 31)


def cycle_key(seed, stream, t):
    """Key shared by every draw of one stream in one cycle."""
    inner = mix64((seed & MASK64) ^ ((stream * 0x9E3779B97F4A7C15) & MASK64))
    return mix64(inner ^ ((t * 0xD1B54A32D192ED03) & MASK64))


def draw(seed, stream, t, u, i):
    """The i-th 64-bit draw of PE u in cycle t on the given stream."""
    key = cycle_key(seed, stream, t)
    return mix64(key ^ ((u * 0xC2B2AE3D27D4EB4F) & MASK64) ^ ((i * 0x165667B19E3779F9) & MASK64))


def threshold(rate):
    """Offer threshold of a rate: an offer happens iff (draw >> 32) < threshold(rate)."""
    return min(int(math.floor(rate * 4294967296.0)), 4294967295)


# MeshReference's constructor has a keyword argument named ``threshold`` (the migration threshold
# T) that shadows this function inside __init__; the alias lets __init__ reach the function.
threshold_of = threshold


def _unit_from_draw_open_low(h):
    """((h >> 11) + 1) * 2^-53: a double in (0, 1], never 0 so that log() is finite."""
    return ((h >> 11) + 1) * (2.0 ** -53)


def _unit_from_draw_closed_low(h):
    """(h >> 11) * 2^-53: a double in [0, 1)."""
    return (h >> 11) * (2.0 ** -53)


def rate_map(rows, cols, workload_type, injection_rate, hot_rate=0.0, hot_regions=(),
             sigma=0.0, seed=0):
    """Per-PE offer rates (list of rows*cols floats, index u = r*cols + c)."""
    n_pe = rows * cols
    if workload_type == "uniform":
        return [float(injection_rate)] * n_pe
    if workload_type == "hotspot":
        rates = []
        for r in range(rows):
            for c in range(cols):
                inside = False
                for (row0, col0, row1, col1) in hot_regions:
                    # Half-open rectangles, as docs/mesh.md defines them.
                    if row0 <= r < row1 and col0 <= c < col1:
                        inside = True
                rates.append(float(hot_rate) if inside else float(injection_rate))
        return rates
    if workload_type == "skewed":
        rates = []
        for u in range(n_pe):
            u1 = _unit_from_draw_open_low(draw(seed, STREAM_SETUP, 0, u, 0))
            u2 = _unit_from_draw_closed_low(draw(seed, STREAM_SETUP, 0, u, 1))
            z = math.sqrt(-2.0 * math.log(u1)) * math.cos(2.0 * math.pi * u2)
            rate = injection_rate * math.exp(sigma * z - sigma * sigma / 2.0)
            # Clip to [0, 1]; exp() is positive so only the upper bound can bite in practice.
            rates.append(min(max(rate, 0.0), 1.0))
        return rates
    if workload_type == "trace":
        # A trace does not use rates; the caller passes rates=None to MeshReference.
        return None
    raise ValueError("unknown workload type %r" % (workload_type,))


def opp(d):
    """The opposite direction: the input port on which a neighbour receives what we send on d."""
    return (d + 2) % 4


# ----------------------------------------------------------------------------------------------
# The machine.
# ----------------------------------------------------------------------------------------------

class _Pe:
    """Everything one PE holds at the end of a cycle (spec section "State")."""

    def __init__(self):
        self.queue = deque()          # (work, birth, hops), head at the left
        self.server = None            # None or [remaining_work, birth, hops]
        self.source = deque()         # packets waiting to enter the network: (dest_row, dest_col, birth)
        # router[o]: the router's output queues, head at the left, each packet (dest_row, dest_col,
        # birth): o = 0..3 the queue of output direction o, o = EJECT (4) the ejection queue.
        self.router = [deque() for _ in range(5)]
        # links[d]: messages sent on output d and not yet received, oldest first, each
        # (send_cycle, message); a message is a task (work, birth, hops) or a packet
        # ("p", dest_row, dest_col, birth).  The receiver removes them from here.
        self.links = [deque() for _ in range(4)]
        self.sent_total = [0, 0, 0, 0]
        self.received_total = [0, 0, 0, 0]
        self.busy = 0
        self.injected = 0
        self.refused = 0
        self.completed = 0
        self.migrated_out = 0
        self.migrated_in = 0
        self.latency_sum = 0
        self.packets_offered = 0
        self.packets_injected = 0
        self.packets_delivered = 0


def _check_range(name, value, low, high):
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise ValueError("%s = %r: must be an integer in %d..%d" % (name, value, low, high))


class MeshReference:
    """Cycle-by-cycle reference simulator of docs/mesh.md."""

    def __init__(self, *, rows, cols, queue_capacity, hop_latency_cycles, link_messages_per_cycle,
                 link_buffer_messages, credit_delay_cycles, policy, threshold, info_delay_cycles,
                 max_per_cycle, seed, rates, work_distribution, work_cycles, work_min_cycles,
                 work_max_cycles, trace_events, pattern=None, hot_fraction=0.0, warmup_cycles=0,
                 measure_cycles=0, router_queue_packets=4):
        _check_range("rows", rows, 1, 1 << 30)
        _check_range("cols", cols, 1, 1 << 30)
        _check_range("queue_capacity", queue_capacity, 1, 255)
        _check_range("hop_latency_cycles", hop_latency_cycles, 1, 8)
        _check_range("link_messages_per_cycle", link_messages_per_cycle, 1, 4)
        _check_range("link_buffer_messages", link_buffer_messages, link_messages_per_cycle, 64)
        _check_range("credit_delay_cycles", credit_delay_cycles, 1, 8)
        _check_range("info_delay_cycles", info_delay_cycles, 1, 8)
        _check_range("threshold", threshold, 0, queue_capacity - 1)
        _check_range("max_per_cycle", max_per_cycle, 1, 4)
        _check_range("router_queue_packets", router_queue_packets, 1, 64)
        if policy not in POLICIES:
            raise ValueError("policy = %r: must be one of %s" % (policy, POLICIES))
        _check_range("warmup_cycles", warmup_cycles, 0, 1 << 62)
        _check_range("measure_cycles", measure_cycles, 0, 1 << 62)
        if pattern is not None:
            if pattern not in PATTERNS:
                raise ValueError("pattern = %r: must be None or one of %s" % (pattern, PATTERNS))
            if trace_events is not None:
                raise ValueError("a traffic pattern takes rates, not trace_events")
            if rates is None:
                raise ValueError("a traffic pattern needs per-PE rates")
            if pattern == "transpose" and rows != cols:
                raise ValueError("pattern 'transpose' needs a square grid, not %d x %d"
                                 % (rows, cols))
        if not 0.0 <= hot_fraction <= 1.0:
            raise ValueError("hot_fraction %r is outside [0, 1]" % (hot_fraction,))

        self.rows = rows
        self.cols = cols
        self.n_pe = rows * cols
        self.Q = queue_capacity
        self.L = hop_latency_cycles
        self.B = link_messages_per_cycle
        self.K = link_buffer_messages
        self.Lc = credit_delay_cycles
        self.D = info_delay_cycles
        self.T = threshold
        self.M = max_per_cycle
        self.Qo = router_queue_packets
        self.policy = policy
        self.seed = seed & MASK64

        # Exactly one workload source: per-PE rates (Bernoulli) or a trace.
        if (rates is None) == (trace_events is None):
            raise ValueError("give exactly one of rates (Bernoulli workloads) and trace_events")
        self.trace_mode = trace_events is not None
        self.thresholds = None
        self.trace_by_cycle = {}
        self.trace_events = None
        if self.trace_mode:
            self.trace_events = [tuple(ev) for ev in trace_events]
            for (cycle, r, c, work) in self.trace_events:
                _check_range("trace row", r, 0, rows - 1)
                _check_range("trace col", c, 0, cols - 1)
                _check_range("trace work_cycles", work, 1, 65535)
                # Keep file order within a cycle and PE: a list per cycle, appended in order.
                self.trace_by_cycle.setdefault(cycle, []).append((r * cols + c, work))
        else:
            rates = list(rates)
            if len(rates) != self.n_pe:
                raise ValueError("rates has %d entries, expected %d" % (len(rates), self.n_pe))
            for rate in rates:
                if not 0.0 <= rate <= 1.0:
                    raise ValueError("rate %r is outside [0, 1]" % (rate,))
            self.thresholds = [threshold_of(rate) for rate in rates]
            if pattern is None and work_distribution not in WORK_DISTRIBUTIONS:
                raise ValueError("work_distribution = %r: must be one of %s"
                                 % (work_distribution, WORK_DISTRIBUTIONS))
        self.work_distribution = work_distribution
        self.work_cycles = work_cycles
        self.work_min_cycles = work_min_cycles
        self.work_max_cycles = work_max_cycles
        self.pattern = pattern
        self.hot_fraction = hot_fraction
        # floor(hot_fraction * 2^32), not capped (docstring choice 20).
        self.hot_cut = int(math.floor(hot_fraction * 4294967296.0))
        self.warmup_cycles = warmup_cycles
        self.measure_cycles = measure_cycles
        # Private test hook (choice 26): cycle -> list of (u, dest_row, dest_col), in order.
        self._scheduled_packets = {}

        self.pes = [_Pe() for _ in range(self.n_pe)]
        self.cycle = 0
        # End-of-cycle values other PEs may read later, indexed [cycle][u]; cycles < 0 read as 0.
        self.depth_history = []
        self.sent_history = []
        self.received_history = []
        # Cumulative per-cycle observables, used for the conservation check.
        self.cum_injected = 0
        self.cum_refused = 0
        self.cum_completed = 0
        self.cum_packets_offered = 0
        self.cum_packets_delivered = 0
        # Only for the order-independence test: visit PEs in decreasing u.
        self._visit_reversed = False

    # --- geometry ------------------------------------------------------------------------------

    def neighbour(self, u, d):
        """Unit index of u's neighbour in direction d, or None at an edge (not a torus)."""
        r, c = divmod(u, self.cols)
        if d == N:
            r -= 1
        elif d == E:
            c += 1
        elif d == S:
            r += 1
        else:
            c -= 1
        if 0 <= r < self.rows and 0 <= c < self.cols:
            return r * self.cols + c
        return None

    def output_queue(self, u, dest_row, dest_col):
        """Index of the output queue a packet for (dest_row, dest_col) joins at u: EJECT if the
        destination is u itself, else its XY output direction."""
        if divmod(u, self.cols) == (dest_row, dest_col):
            return EJECT
        return self.xy_output(u, dest_row, dest_col)

    def xy_output(self, u, dest_row, dest_col):
        """Output direction of XY routing at u for a packet to (dest_row, dest_col), not u itself.

        Columns first: E if the destination column is greater, W if smaller, else S if the
        destination row is greater, else N.
        """
        r, c = divmod(u, self.cols)
        assert (r, c) != (dest_row, dest_col), "a packet at its destination is not routed"
        if dest_col > c:
            return E
        if dest_col < c:
            return W
        if dest_row > r:
            return S
        return N

    # --- reads of other PEs, only "as at the end of cycle x" with x < t ------------------------

    def _depth_at(self, n, x):
        if x < 0:
            return 0
        assert x < self.cycle, "read of a cycle that has not ended"
        return self.depth_history[x][n]

    def _received_at(self, n, port, x):
        if x < 0:
            return 0
        assert x < self.cycle, "read of a cycle that has not ended"
        return self.received_history[x][n][port]

    def _sent_at(self, n, port, x):
        if x < 0:
            return 0
        assert x < self.cycle, "read of a cycle that has not ended"
        return self.sent_history[x][n][port]

    # --- workload ------------------------------------------------------------------------------

    def _work_of_draw(self, h):
        dist = self.work_distribution
        if dist == "fixed":
            return self.work_cycles
        if dist == "uniform":
            return self.work_min_cycles + h % (self.work_max_cycles - self.work_min_cycles + 1)
        # geometric with mean m on 1, 2, ...
        m = self.work_cycles
        if m == 1:
            return 1
        big_u = _unit_from_draw_open_low(h)
        work = 1 + int(math.floor(math.log(big_u) / math.log(1.0 - 1.0 / float(m))))
        return min(work, self.work_max_cycles)

    def _offers(self, t, u):
        """Works of the tasks offered to PE u in cycle t, in order."""
        if self.pattern is not None:
            return []               # a traffic workload offers packets instead
        if self.trace_mode:
            return [work for (v, work) in self.trace_by_cycle.get(t, ()) if v == u]
        if (draw(self.seed, STREAM_INJECTION, t, u, 0) >> 32) < self.thresholds[u]:
            return [self._work_of_draw(draw(self.seed, STREAM_INJECTION, t, u, 1))]
        return []

    def _destination(self, t, u):
        """Destination PE index of a packet drawn by u at cycle t (may be u itself: no offer)."""
        n = self.n_pe
        r, c = divmod(u, self.cols)
        h = draw(self.seed, STREAM_DESTINATION, t, u, 0)
        pattern = self.pattern
        if pattern == "transpose":
            return c * self.cols + r            # (c, r); square grid checked in __init__
        if pattern == "bit_complement":
            return (self.rows - 1 - r) * self.cols + (self.cols - 1 - c)
        if pattern == "neighbor":
            neighbours = [v for v in (self.neighbour(u, d) for d in range(4)) if v is not None]
            if not neighbours:
                return u                        # 1 x 1 grid: nothing to offer (choice 18)
            return neighbours[((h >> 32) * len(neighbours)) >> 32]
        if pattern == "hotspot" and (h >> 32) < self.hot_cut:
            return (self.rows // 2) * self.cols + (self.cols // 2)
        if n == 1:
            return u                            # 1 x 1 grid: nothing to offer (choice 18)
        if pattern == "uniform":
            v = h % (n - 1)
        else:                                   # hotspot, not the hot PE
            v = (h & 0xFFFFFFFF) % (n - 1)
        return v + 1 if v >= u else v

    def _packet_offers(self, t, u):
        """Destinations (row, col) of the packets offered to PE u in cycle t, in order."""
        dests = []
        if self.pattern is not None:
            if (draw(self.seed, STREAM_INJECTION, t, u, 0) >> 32) < self.thresholds[u]:
                v = self._destination(t, u)
                if v != u:
                    dests.append(divmod(v, self.cols))
        for (v, dest_row, dest_col) in self._scheduled_packets.get(t, ()):
            if v == u:
                dests.append((dest_row, dest_col))
        return dests

    def _schedule_packet(self, t, row, col, dest_row, dest_col):
        """Test hook: offer PE (row, col) one extra packet to (dest_row, dest_col) in cycle t."""
        assert (row, col) != (dest_row, dest_col), "a packet for the PE itself is never offered"
        assert 0 <= dest_row < self.rows and 0 <= dest_col < self.cols
        self._scheduled_packets.setdefault(t, []).append((row * self.cols + col, dest_row,
                                                           dest_col))

    def _is_measured(self, birth):
        return self.warmup_cycles <= birth < self.warmup_cycles + self.measure_cycles

    def unoffered_trace_events(self):
        """Trace events not offered in the cycles run so far (cycle outside [0, cycles done))."""
        if not self.trace_mode:
            return 0
        return sum(1 for ev in self.trace_events if not 0 <= ev[0] < self.cycle)

    # --- one cycle -----------------------------------------------------------------------------

    def step(self):
        t = self.cycle
        obs = {"busy": 0, "queued": 0, "in_service": 0, "injected": 0, "refused": 0,
               "completed": 0, "migrated": 0, "received": 0, "in_flight": 0, "latency_sum": 0,
               "latency_sq_sum": 0, "hops_sum": 0, "latency_max": 0, "depth_hist": [0] * (self.Q + 1),
               "packets_offered": 0, "packets_injected": 0, "packets_delivered": 0,
               "packets_in_source": 0, "packets_in_router": 0, "measured_delivered": 0,
               "measured_latency_sum": 0,
               "measured_latency_sq_sum": 0, "measured_latency_max": 0,
               "measured_injected": 0, "measured_source_wait_sum": 0, "measured_hops_sum": 0}
        order = range(self.n_pe - 1, -1, -1) if self._visit_reversed else range(self.n_pe)
        for u in order:
            self._step_pe(t, u, obs)

        # Record the end-of-cycle values other PEs may read in later cycles.
        self.depth_history.append([len(pe.queue) for pe in self.pes])
        self.sent_history.append([tuple(pe.sent_total) for pe in self.pes])
        self.received_history.append([tuple(pe.received_total) for pe in self.pes])
        self.cycle = t + 1

        # End-of-cycle observables, counted from the actual state.
        for pe in self.pes:
            depth = len(pe.queue)
            obs["queued"] += depth
            obs["depth_hist"][depth] += 1
            if pe.server is not None:
                obs["in_service"] += 1
            obs["packets_in_source"] += len(pe.source)
            obs["packets_in_router"] += sum(len(queue) for queue in pe.router)
            for d in range(4):
                obs["in_flight"] += len(pe.links[d])
        self._check_conservation(obs)
        return obs

    def _has_room(self, t, u, d, sent_now):
        """Step 4's "link d has room": fewer than B sent on d this cycle, and a credit."""
        n = self.neighbour(u, d)
        assert n is not None, "no link in direction %d at PE %d" % (d, u)
        credits = self._received_at(n, opp(d), t - self.Lc)
        return sent_now[d] < self.B and self.pes[u].sent_total[d] - credits < self.K

    def _send(self, t, u, d, message, sent_now):
        """Append a message to u's output link d with send cycle t."""
        pe = self.pes[u]
        pe.links[d].append((t, message))
        pe.sent_total[d] += 1
        sent_now[d] += 1

    def _step_pe(self, t, u, obs):
        pe = self.pes[u]
        r, c = divmod(u, self.cols)
        sent_now = [0, 0, 0, 0]     # messages of every kind sent on each output this cycle

        # 1. Receive and route, rotating port priority.
        for k in range(4):
            d = (t + k) % 4
            n = self.neighbour(u, d)
            if n is None:
                continue
            link = self.pes[n].links[opp(d)]
            # Cross-check of the literal send-cycle rule against the count form: messages sent at
            # <= t - L by n on this link, minus what u already received from it.
            available = sum(1 for (sent_at, _msg) in link if sent_at <= t - self.L)
            assert available == self._sent_at(n, opp(d), t - self.L) - pe.received_total[d], (
                "link %d->%d: %d messages available but counts say otherwise" % (n, u, available))
            taken = 0
            while taken < self.B and link and link[0][0] <= t - self.L:
                message = link[0][1]
                if message[0] != "p":
                    # A task: to the queue's tail, unchanged (hops were counted when sent).
                    if len(pe.queue) >= self.Q:
                        break
                    link.popleft()
                    pe.queue.append(message)
                    pe.migrated_in += 1
                    obs["received"] += 1
                else:
                    # A packet: to the tail of its output queue (ejection if it is for this PE,
                    # else its XY direction) if that queue holds fewer than Qo packets.
                    _p, dest_row, dest_col, birth = message
                    queue = pe.router[self.output_queue(u, dest_row, dest_col)]
                    if len(queue) >= self.Qo:
                        break
                    link.popleft()
                    queue.append((dest_row, dest_col, birth))
                pe.received_total[d] += 1
                taken += 1

        # 2. Inject.
        for work in self._offers(t, u):
            pe.injected += 1
            obs["injected"] += 1
            self.cum_injected += 1
            if len(pe.queue) < self.Q:
                pe.queue.append((work, t, 0))
            else:
                pe.refused += 1
                obs["refused"] += 1
                self.cum_refused += 1
        for (dest_row, dest_col) in self._packet_offers(t, u):
            pe.source.append((dest_row, dest_col, t))
            pe.packets_offered += 1
            obs["packets_offered"] += 1
            self.cum_packets_offered += 1
        left = 0
        while left < self.B and pe.source:
            dest_row, dest_col, birth = pe.source[0]
            queue = pe.router[self.xy_output(u, dest_row, dest_col)]
            if len(queue) >= self.Qo:
                break
            queue.append(pe.source.popleft())
            pe.packets_injected += 1
            obs["packets_injected"] += 1
            left += 1
            if self._is_measured(birth):
                obs["measured_injected"] += 1
                obs["measured_source_wait_sum"] += t - birth
                obs["measured_hops_sum"] += abs(dest_row - r) + abs(dest_col - c)
        # Send: each output queue onto its link while the link has room; the ejection queue
        # delivers up to B.
        for o in range(4):
            queue = pe.router[o]
            while queue and self._has_room(t, u, o, sent_now):
                dest_row, dest_col, birth = queue.popleft()
                self._send(t, u, o, ("p", dest_row, dest_col, birth), sent_now)
        delivered_now = 0
        ejection = pe.router[EJECT]
        while delivered_now < self.B and ejection:
            _dest_row, _dest_col, birth = ejection.popleft()
            delivered_now += 1
            pe.packets_delivered += 1
            self.cum_packets_delivered += 1
            obs["packets_delivered"] += 1
            if self._is_measured(birth):
                latency = t - birth
                obs["measured_delivered"] += 1
                obs["measured_latency_sum"] += latency
                obs["measured_latency_sq_sum"] += latency * latency
                obs["measured_latency_max"] = max(obs["measured_latency_max"], latency)

        # 3. Start.
        if pe.server is None and pe.queue:
            work, birth, hops = pe.queue.popleft()
            pe.server = [work, birth, hops]

        # 4. Migrate.  sent_now (packets of step 2, tasks of step 4) limits B and is already in
        # sent_total; tasks_now (tasks sent here only) is what the known depth adds.
        if self.policy != "none":
            tasks_now = [0, 0, 0, 0]
            for k in range(self.M):
                depth = len(pe.queue)
                if depth <= self.T:
                    break
                eligible = []   # (d, kd) in increasing d
                for d in range(4):
                    n = self.neighbour(u, d)
                    if n is None:
                        continue
                    kd = self._depth_at(n, t - self.D) + tasks_now[d]
                    if kd + 1 < depth and self._has_room(t, u, d, sent_now):
                        eligible.append((d, kd))
                if not eligible:
                    break
                if self.policy == "least_loaded":
                    best_d, best_kd = eligible[0]
                    for (d, kd) in eligible[1:]:
                        if kd < best_kd:        # strict: ties keep the smaller d
                            best_d, best_kd = d, kd
                    d_pick = best_d
                else:
                    h = draw(self.seed, STREAM_MIGRATION, t, u, k)
                    idx = ((h >> 32) * len(eligible)) >> 32
                    d_pick = eligible[idx][0]
                work, birth, hops = pe.queue.pop()      # the tail task
                self._send(t, u, d_pick, (work, birth, min(hops + 1, 255)), sent_now)
                tasks_now[d_pick] += 1
                pe.migrated_out += 1
                obs["migrated"] += 1

        # 5. Work.
        if pe.server is not None:
            pe.busy += 1
            obs["busy"] += 1
            pe.server[0] -= 1
            if pe.server[0] == 0:
                _rem, birth, hops = pe.server
                latency = t + 1 - birth
                pe.server = None
                pe.completed += 1
                pe.latency_sum += latency
                obs["completed"] += 1
                obs["latency_sum"] += latency
                obs["latency_sq_sum"] += latency * latency
                obs["hops_sum"] += hops
                obs["latency_max"] = max(obs["latency_max"], latency)
                self.cum_completed += 1

    def _check_conservation(self, obs):
        # Count the state directly rather than trusting the observables.
        queued = sum(len(pe.queue) for pe in self.pes)
        in_service = sum(1 for pe in self.pes if pe.server is not None)
        in_source = sum(len(pe.source) for pe in self.pes)
        in_router = sum(len(queue) for pe in self.pes for queue in pe.router)
        messages = [msg for pe in self.pes for link in pe.links for (_sent_at, msg) in link]
        in_flight = len(messages)
        packets_in_flight = sum(1 for msg in messages if msg[0] == "p")
        tasks_in_flight = in_flight - packets_in_flight
        injected = sum(pe.injected for pe in self.pes)
        refused = sum(pe.refused for pe in self.pes)
        completed = sum(pe.completed for pe in self.pes)
        offered = sum(pe.packets_offered for pe in self.pes)
        delivered = sum(pe.packets_delivered for pe in self.pes)
        left_source = sum(pe.packets_injected for pe in self.pes)
        sent = sum(sum(pe.sent_total) for pe in self.pes)
        received = sum(sum(pe.received_total) for pe in self.pes)
        cycle = self.cycle - 1
        if (injected + offered != refused + queued + in_service + in_source + in_router
                + in_flight + completed + delivered):
            raise AssertionError(
                "conservation violated at the end of cycle %d: tasks injected %d + packets offered "
                "%d != refused %d + queued %d + in service %d + in source queues %d + in router "
                "queues %d + in flight %d + completed %d + delivered %d"
                % (cycle, injected, offered, refused, queued, in_service, in_source, in_router,
                   in_flight, completed, delivered))
        if injected != refused + queued + in_service + tasks_in_flight + completed:
            raise AssertionError("conservation of tasks violated at the end of cycle %d" % cycle)
        if offered != in_source + in_router + packets_in_flight + delivered:
            raise AssertionError("conservation of packets violated at the end of cycle %d" % cycle)
        # Every router queue holds at most Qo packets, each of which belongs there.
        for u, pe in enumerate(self.pes):
            for o, queue in enumerate(pe.router):
                if len(queue) > self.Qo:
                    raise AssertionError("cycle %d: PE %d output queue %d holds %d > Qo = %d"
                                         % (cycle, u, o, len(queue), self.Qo))
                for (dest_row, dest_col, _birth) in queue:
                    if self.output_queue(u, dest_row, dest_col) != o:
                        raise AssertionError("cycle %d: packet for (%d, %d) in PE %d's output "
                                             "queue %d" % (cycle, dest_row, dest_col, u, o))
        if offered - in_source != left_source:
            raise AssertionError("cycle %d: packets that left source queues %d != offered %d - "
                                 "in source %d" % (cycle, left_source, offered, in_source))
        if in_flight != sent - received:
            raise AssertionError("cycle %d: in flight %d != sent %d - received %d"
                                 % (cycle, in_flight, sent, received))
        if (injected, refused, completed, offered, delivered) != (
                self.cum_injected, self.cum_refused, self.cum_completed,
                self.cum_packets_offered, self.cum_packets_delivered):
            raise AssertionError("cycle %d: per-PE totals disagree with cumulative observables"
                                 % cycle)
        if (queued, in_service, in_flight, in_source, in_router) != (
                obs["queued"], obs["in_service"], obs["in_flight"], obs["packets_in_source"],
                obs["packets_in_router"]):
            raise AssertionError("cycle %d: end-of-cycle observables disagree with the state"
                                 % cycle)

    # --- driving and inspection ----------------------------------------------------------------

    def run(self, cycles):
        """Run the given number of cycles; return the list of their observables."""
        return [self.step() for _ in range(cycles)]

    def snapshot(self):
        """Canonical state at the end of the last cycle (plain lists, tuples and ints)."""
        return {
            "cycle": self.cycle,
            "queue": [[tuple(task) for task in pe.queue] for pe in self.pes],
            "server": [None if pe.server is None else tuple(pe.server) for pe in self.pes],
            "links": [[[msg for (_sent_at, msg) in pe.links[d]] for d in range(4)]
                      for pe in self.pes],
            "source": [list(pe.source) for pe in self.pes],
            "router": [[list(queue) for queue in pe.router] for pe in self.pes],
            "sent": [list(pe.sent_total) for pe in self.pes],
            "received": [list(pe.received_total) for pe in self.pes],
            "totals": {
                "busy": [pe.busy for pe in self.pes],
                "injected": [pe.injected for pe in self.pes],
                "refused": [pe.refused for pe in self.pes],
                "completed": [pe.completed for pe in self.pes],
                "migrated_out": [pe.migrated_out for pe in self.pes],
                "migrated_in": [pe.migrated_in for pe in self.pes],
                "latency_sum": [pe.latency_sum for pe in self.pes],
                "packets_offered": [pe.packets_offered for pe in self.pes],
                "packets_delivered": [pe.packets_delivered for pe in self.pes],
                "link_sent": [list(pe.sent_total) for pe in self.pes],
            },
        }

