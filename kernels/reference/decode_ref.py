"""Plain reference ("oracle") of the wafer decode model, written from docs/decode.md alone.

It is deliberately slow and literal: every collective of docs/decode.md ("A collective on a
line") is carried out cycle by cycle, wavelet by wavelet, router by router, with plain lists and
exact integers; every layer ("One layer") step by step and PE by PE; every token ("A token")
layer by layer.  It does not use the closed-form max() recurrences of the doc: a PE emits an
element at a cycle only when that cycle is allowed (its phase set up, the element from every
upstream sender arrived `c` cycles before, its previous element gone), so that the timings come
out of the events and comparing them with the fast kernel (which may use the recurrences)
catches bugs in either.  Its only job is to be obviously correct.  It uses no code of meshsim or
of the kernels.

Public:

- `line_collective(ready, m, group, hop, add, phase, op="sum", levels=2, route_budget=24)`: the
  completion cycle of every position of ONE line (`ready[i]` = r_i, `m` elements, `group` = G,
  `hop` = h, `add` = c, `phase` = o, `levels` = K = `workload.decode_tree_levels`, `route_budget`
  = `machine.route_budget`).
- `routed_levels(levels, route_budget=24)`: how many of the `K` levels have routes ("Routes and
  relays"): levels `1 ... routed` are routed, the rest relayed.
- `layer(start, P, H, Q, F, gated, heads, rows_tokens, group, hop, add, phase, macs_per_cycle, batch=1,
  levels=2, route_budget=24)`: the completion cycle of one layer on every PE (a P x P list of
  lists, `[y][x]`), the layer starting on PE (y, x) at `start[y][x]`.
- `token(P, H, Q, F, gated, heads, n_layers, rows_tokens, group, hop, add, phase, macs_per_cycle, batch=1,
  levels=2, route_budget=24)`: `{"cycles": ..., "layer_done": [...]}` for one token, its first
  layer starting at 0 everywhere.

`batch` is `B = workload.batch` ("More than one sequence"): every step's local multiply-adds and
every message's elements are `B` times the table's; `rows_tokens[y]` is `n_y`, the tokens row `y`
holds of EACH sequence (every sequence's cache spread alike).  `levels` and `route_budget` are
given as the scenario's keys (not as a count of routed levels): the oracle applies the doc's rule
itself (`routed_levels`).  Their defaults, `K = 2` and 24 routes (21 needed), reproduce the
two-level tree with every level routed exactly.

The inputs are taken as already checked: the oracle asserts only what it relies on.

Choices made where docs/decode.md is ambiguous or silent (each is also noted at its spot below):

1. The root formula `u(e)` is applied as written also to a root that receives from no side: a
   group of one member is done with its phase at `q + o + m`, and a level whose members are a
   single one (a line of one group at level 1, a level `k >= 2` whose one group has one member)
   still runs its phase on that member alone, done `o + m` cycles after its phase before.  Every
   one of the `K` levels is run, whatever `n` and `G`: a line of one PE (P = 1) thus completes at
   `r + (K + 1) (o + m)` (`K` phases and the broadcast), not at `r`.
2. The broadcast is a phase of its own with its own set-up `o` (`b(e) = q_b + o + e`), and the
   line's root completes at `b(m - 1) + 1` even though it holds the result at `q_b`.
3. A PE that is not a root completes the collective only when the broadcast reaches it
   (`b(m - 1) + h |i - root| + 1`); its phase-k done (`t(m - 1) + 1`) is not a completion.  An
   intermediate root's later phase done (its last element leaving), and a relay's last element
   leaving, likewise end nothing.
4. Wavelets never contend: any number of streams (the chains of every level, wavelets passing
   through routers, the broadcast both ways, relays) share a link or a router in the same cycle
   without delay, and a router passes a wavelet on after `h` cycles whatever else it carries.
5. A receiver buffers without limit: an upstream sender streams at its own pace even while the
   receiver is not yet ready for the phase (a root still in phase k already receiving phase k + 1
   elements, a relaying PE still in its own phase already receiving what it is to relay); the
   elements wait and count as arrived at their arrival cycle.
6. `h = 0` and `c = 0` are allowed: within one cycle the simulation repeats delivery and emission
   until nothing more happens, so an element can leave, arrive and be passed on in the same cycle.
   Two elements of the same PE in the same phase never leave in the same cycle (`t(e - 1) + 1`).
7. `op` ("sum" or "max") does not change the timing; the values are not computed.
8. The cycle counter starts at `min(ready)` rather than 0: nothing can happen before the first PE
   is ready, so the result is the same and long idle stretches are skipped.
9. Local work is rounded up per step and per PE: `ceil(macs / macs_per_cycle)` with exact
   arithmetic; a float `macs_per_cycle` is taken at its shortest decimal string (`repr`), so 4.0
   is exactly 4 and 0.1 exactly 1/10.  Zero multiply-adds cost 0 cycles.
10. A row with `n_y = 0` runs step 3 as a row collective of `m = 0` (done at its ready cycle, i.e.
    when the step before completed, as it has no local work) and steps 4 to 6 as every other row
    (it is a position of the column lines with `m = A`, `A`, `dp`).  A column collective's `m` is
    the same on every position of the line (the table's `m` of steps 4 to 6 does not depend on
    `n_y`); step 3's `m = A n_y` is the same on every PE of row `y`.
11. Steps 4 and 5 (the softmax) are timed alike; step 4's `op` is "max", the others' "sum".
12. `token` with `n_layers = 0` takes 0 cycles and has an empty `layer_done`; `cycles` is the
    maximum over PEs of the last layer's completion, and `layer_done[k]` the maximum over PEs of
    layer k's completion.
13. A group size `G >= n` makes one group of the whole line (and, at every level below `K`, a `G`
    at least the level's members makes one group of them); the groups' roots are positions of the
    line, and a routed level's hops between two consecutive members are `|distance|` (the routers
    between pass the wavelet on, `h` cycles each hop, without entering their PEs).
14. With `B = batch` sequences ("More than one sequence") each step's local multiply-adds are the
    table's times `B`, rounded up ONCE per step and PE (`ceil(B x macs / rate)`, Choice 9), not
    `B` separately rounded GEMVs; and each message's `m` is the table's times `B`, carried as one
    collective of `B m` elements (one set-up `o` per phase, the `B` vectors' elements streamed a
    wavelet a cycle one after another), not `B` collectives.  Steps 4 and 5 thus carry `A B`
    elements, step 3 `A n_y B` (still 0 on a row with `n_y = 0`, Choice 10), the norms `B`.
    `rows_tokens[y]` is `n_y` of one sequence (each sequence holds as many on row `y`).  `batch`
    must be a whole number >= 1 (asserted); `batch = 1` is the table exactly.
15. Routes ("Routes and relays"): `K >= 1` and `route_budget >= 13` are asserted (a budget below
    13 is refused).  Level `k >= 2` has routes when `13 + 8 (k - 1) <= route_budget`, i.e. the
    routed levels are `1 ... min(K, floor((route_budget - 5) / 8))`; "while the budget lasts" is
    read as: the first level that does not fit, and every level after it, are relayed (a later
    level never takes routes an earlier one could not; with eight routes a level it never could).
    The budget is the same on both axes and for every collective of the layer; the prefill's
    reductions use the same rule.  With `K = 1` there is no level beyond 1 and nothing is relayed.
16. A relayed level changes only its links between members more than one position apart: the
    wavelet enters each PE strictly between the sender and the next member toward the root, in
    order, one hop apart (`a = ` the neighbour's leaving cycle `+ h`); the receiving member's
    `a(e)` is the last relaying PE's leaving cycle plus `h` (one hop), and the sender's stream
    goes one hop to its neighbour.  Members one position apart (always, at level 1) need no relay.
    A relaying PE's `q` is the cycle its own last phase is done: the phase of the highest level it
    is a member of (where it is necessarily a chain member, not a root, as roots go on to the next
    level); it is never the line's root.  A PE may relay for several relayed levels (e.g. `K = 3`
    with both levels 2 and 3 relayed): each is a relay of its own (its own `t(e - 1) + 1`), all
    with the same `q`, and they do not contend with each other (Choice 4).  A relay's elements
    count nothing toward the PE's completion (Choice 3).
"""

import math
from fractions import Fraction

FIRST_ROUTES = 13  # the broadcast (two each axis), the one other route, level 1 (four each axis)
ROUTES_PER_LEVEL = 8  # four a level on each of the two axes


def routed_levels(levels, route_budget=24):
    """How many of the `levels` levels have routes: levels 1 ... that number (Choice 15).

    The broadcast, the one other route and level 1 take the first 13 routes; then levels 2, 3, ...
    in order take eight each while the budget lasts.
    """
    assert levels >= 1 and levels == int(levels), levels
    assert route_budget >= FIRST_ROUTES, route_budget  # "a machine.route_budget below that is refused"
    routed, used = 1, FIRST_ROUTES
    while routed < levels and used + ROUTES_PER_LEVEL <= route_budget:
        routed += 1
        used += ROUTES_PER_LEVEL
    return routed


def _node(ph, pos, ups, dest):
    """One PE in one phase (a member of a level, a relay, or the broadcast), as a plain dict.

    `ups` the positions it receives from in that phase, `dest` the position its wavelets go to
    (None for a root that only adds, "both" for the broadcast), `q` the cycle it is ready for the
    phase (None until known), `next_e` its next element, `last` the cycle its previous element
    left, `then` the nodes its phase-done makes ready.
    """
    return {"phase": ph, "pos": pos, "ups": ups, "dest": dest, "q": None, "next_e": 0, "last": None,
            "then": [], "done": None}


def _level_groups(members, size):
    """Groups of `size` consecutive members (the last may be shorter), each with its root, member j + floor(s / 2)."""
    groups = []
    for j in range(0, len(members), size):
        chunk = members[j:j + size]
        groups.append((chunk, chunk[len(chunk) // 2]))
    return groups


def _chain_nodes(ph, chunk, root):
    """Phase `ph` in one group: a chain from each end toward the root, members by position."""
    r = chunk.index(root)
    out = {}
    for i, p in enumerate(chunk):
        if i < r:  # left of the root: receives from the member before, sends to the next
            out[p] = _node(ph, p, [chunk[i - 1]] if i > 0 else [], chunk[i + 1])
        elif i > r:  # right of the root: receives from the member after, sends to the one before
            out[p] = _node(ph, p, [chunk[i + 1]] if i < len(chunk) - 1 else [], chunk[i - 1])
        else:  # the root receives from both sides (or one, or none) and adds
            ups = ([chunk[i - 1]] if i > 0 else []) + ([chunk[i + 1]] if i < len(chunk) - 1 else [])
            out[p] = _node(ph, p, ups, None)
    return out


def _relays(ph, level_nodes, top):
    """A relayed level's links (Choice 16): a relay node on every PE between two consecutive members.

    Rewrites the sender's `dest` to its neighbour and the receiver's `ups` to its neighbour; each
    relay is made ready by the relaying PE's own last phase (`top[pos]`, already final).
    """
    relays = []
    for sender in list(level_nodes.values()):
        dest = sender["dest"]
        if dest is None or abs(dest - sender["pos"]) <= 1:
            continue
        step = 1 if dest > sender["pos"] else -1
        between = list(range(sender["pos"] + step, dest, step))
        for idx, p in enumerate(between):
            up = sender["pos"] if idx == 0 else between[idx - 1]
            to = dest if idx == len(between) - 1 else between[idx + 1]
            relay = _node(ph, p, [up], to)  # a chain member that adds nothing
            top[p]["then"].append(relay)  # q: its own last phase done
            relays.append(relay)
        receiver = level_nodes[dest]
        receiver["ups"] = [between[-1] if u == sender["pos"] else u for u in receiver["ups"]]
        sender["dest"] = between[0]
    return relays


def _line_nodes(n, group, levels, routed):
    """Every sender of the `levels` phases and the broadcast of a line of `n` PEs (docs/decode.md "Levels and groups").

    Returns the nodes (phase 1's in position order first, the broadcast last) and the line's root.
    """
    members = list(range(n))
    top = {}  # position -> its node of the highest level it is a member of so far
    nodes = []
    for ph in range(1, levels + 1):
        size = group if ph < levels else len(members)  # level K's members form one group
        level_nodes = {}
        for chunk, root in _level_groups(members, size):
            level_nodes.update(_chain_nodes(ph, chunk, root))
        if ph > routed:  # a level without routes is relayed (Choices 15, 16)
            nodes.extend(_relays(ph, level_nodes, top))
        for p in members:
            if ph > 1:  # "A member starts phase k + 1 when it has finished phase k."
                top[p]["then"].append(level_nodes[p])
            top[p] = level_nodes[p]
            nodes.append(level_nodes[p])
        members = [root for _, root in _level_groups(members, size)]
    assert len(members) == 1
    line_root = members[0]  # level K's root
    broadcast = _node(levels + 1, line_root, [], "both")
    # The line's root broadcasts when it has finished phase K.
    top[line_root]["then"].append(broadcast)
    nodes.append(broadcast)
    return nodes, line_root


def line_collective(ready, m, group, hop, add, phase, op="sum", levels=2, route_budget=24):
    """Completion cycle of each position of one line, simulated cycle by cycle (docs/decode.md).

    Wavelets in flight are kept by the cycle they reach their next router; a router passes a
    wavelet on (`hop` cycles a hop) until it reaches its target PE, or, for the broadcast,
    delivers it to its PE and passes it on to the end of the line.  `levels` = K; the levels past
    `routed_levels(levels, route_budget)` are relayed (Choices 15, 16).
    """
    n = len(ready)
    assert n >= 1 and group >= 1 and m >= 0, (n, group, m)
    assert hop >= 0 and add >= 0 and phase >= 0, (hop, add, phase)
    assert op in ("sum", "max"), op  # Choice 7: the op does not change the timing
    routed = routed_levels(levels, route_budget)  # asserts K >= 1 and the budget >= 13 (Choice 15)
    if m == 0:
        return list(ready)  # "With m = 0 the collective completes on every PE at its r_i."
    nodes, line_root = _line_nodes(n, group, levels, routed)
    for nd in nodes[:n]:
        assert nd["phase"] == 1
        nd["q"] = ready[nd["pos"]]  # phase 1: q = r_i
    bcast = levels + 1  # the broadcast's phase number
    received = {}  # (phase, receiving position, sending position) -> arrival cycles, by element
    in_flight = {}  # cycle -> wavelets reaching a router at that cycle
    broadcast_in = [[] for _ in range(n)]  # arrival cycles of the broadcast's elements at each PE
    complete = [None] * n

    def launch(cycle, ph, src, at, step, target):
        if 0 <= at < n:
            in_flight.setdefault(cycle, []).append((ph, src, at, step, target))

    def deliver(t):
        moved = False
        while in_flight.get(t):
            ph, src, at, step, target = in_flight[t].pop(0)
            moved = True
            if ph == bcast:  # every router delivers the broadcast to its PE and passes it on
                broadcast_in[at].append(t)
                launch(t + hop, ph, src, at + step, step, target)
            elif at == target:  # it enters the PE (a member, or a relay of a relayed level)
                received.setdefault((ph, at, src), []).append(t)
            else:  # a router between passes it through without entering its PE (a routed level)
                launch(t + hop, ph, src, at + step, step, target)
        in_flight.pop(t, None)
        return moved

    def may_leave(nd, t):
        e = nd["next_e"]
        if nd["q"] is None or e >= m:
            return False
        if t < nd["q"] + phase + e:  # its phase set up
            return False
        if nd["last"] is not None and nd["last"] > t - 1:  # previous element gone at t - 1 or earlier
            return False
        for up in nd["ups"]:  # the same element from every upstream sender arrived by t - c
            arrivals = received.get((nd["phase"], nd["pos"], up), [])
            if len(arrivals) <= e or arrivals[e] > t - add:
                return False
        return True

    def leave(nd, t):
        e = nd["next_e"]
        nd["next_e"] = e + 1
        nd["last"] = t
        pos = nd["pos"]
        if nd["dest"] == "both":
            broadcast_in[pos].append(t)  # the root holds its own element at b(e)
            launch(t + hop, bcast, pos, pos - 1, -1, None)
            launch(t + hop, bcast, pos, pos + 1, +1, None)
        elif nd["dest"] is not None:
            step = 1 if nd["dest"] > pos else -1
            launch(t + hop, nd["phase"], pos, pos + step, step, nd["dest"])
        if e == m - 1:
            nd["done"] = t + 1  # done with its last element: u(m - 1) + 1 (or t(m - 1) + 1)
            for nxt in nd["then"]:  # its next phase, or (its last phase) its relays
                nxt["q"] = t + 1

    t = min(ready)  # Choice 8
    limit = max(ready) + (levels + 1) * (phase + m + 1 + n * (hop + add + phase + 1)) + 10
    while any(d is None or d > t for d in complete):
        assert t <= limit, "decode_ref: line collective did not finish"
        changed = True
        while changed:  # Choice 6: repeat within the cycle (h = 0 or c = 0)
            changed = deliver(t)
            for nd in nodes:
                if may_leave(nd, t):
                    leave(nd, t)
                    changed = True
        for i in range(n):
            if complete[i] is None and len(broadcast_in[i]) == m:
                complete[i] = broadcast_in[i][m - 1] + 1  # b(m - 1) + h |i - root| + 1
        t += 1
    assert complete[line_root] == nodes[-1]["done"]
    assert all(nd["done"] is not None for nd in nodes), "decode_ref: a node never finished"
    return complete


def _rate(macs_per_cycle):
    if isinstance(macs_per_cycle, float):
        return Fraction(repr(macs_per_cycle))  # Choice 9: the float's decimal string
    return Fraction(macs_per_cycle)


def work_cycles(macs, macs_per_cycle):
    """Cycles of `macs` multiply-adds, rounded up to whole cycles (Choice 9)."""
    rate = _rate(macs_per_cycle)
    assert rate > 0 and macs >= 0, (rate, macs)
    return math.ceil(Fraction(macs) / rate)


def _step_table(dp, qp, fp, g, heads, n_y, batch=1):
    """docs/decode.md "One layer": (local multiply-adds, line, elements, op) of the ten steps.

    With `batch` = B sequences ("More than one sequence") every step's multiply-adds and elements
    are B times the table's (Choice 14).
    """
    assert batch >= 1 and batch == int(batch), batch  # Choice 14: a whole number of sequences
    batch = int(batch)
    table = [
        (dp, "column", 1, "sum"),  # 1 first norm
        (dp * qp, "column", qp, "sum"),  # 2 Q, K and V
        (dp * n_y, "row", heads * n_y, "sum"),  # 3 scores against the cached keys, A a token (Choice 10)
        (heads * n_y, "column", heads, "max"),  # 4 softmax: the maximum of each head (Choice 11)
        (heads * n_y, "column", heads, "sum"),  # 5 softmax: the sum of each head
        (n_y * dp, "column", dp, "sum"),  # 6 scores times the cached values
        (dp * dp, "row", dp, "sum"),  # 7 output projection
        (dp, "column", 1, "sum"),  # 8 second norm
        (dp * g * fp, "column", g * fp, "sum"),  # 9 up and gate
        (fp * dp, "row", dp, "sum"),  # 10 down projection
    ]
    return [(macs * batch, line, m * batch, op) for macs, line, m, op in table]  # Choice 14


def layer(start, P, H, Q, F, gated, heads, rows_tokens, group, hop, add, phase, macs_per_cycle, batch=1,
          levels=2, route_budget=24):
    """Completion cycle of one layer on every PE (`[y][x]`), started on PE (y, x) at `start[y][x]`.

    `batch` = B sequences decoding together, each holding `rows_tokens[y]` tokens on row y (Choice 14).
    Every collective is a `levels`-level tree under `route_budget` routes, on both axes (Choice 15).
    """
    assert P >= 1 and len(start) == P and all(len(row) == P for row in start), P
    assert len(rows_tokens) == P, (P, rows_tokens)
    dp, fp, qp = math.ceil(H / P), math.ceil(F / P), math.ceil(Q / P)
    g = 2 if gated else 1
    tables = [_step_table(dp, qp, fp, g, heads, rows_tokens[y], batch) for y in range(P)]
    done = [list(row) for row in start]
    for k in range(10):
        # A PE starts a step's local work when the step before has completed on it.
        ready = [[done[y][x] + work_cycles(tables[y][k][0], macs_per_cycle) for x in range(P)] for y in range(P)]
        kind = tables[0][k][1]
        if kind == "column":  # line x: positions y = 0 ... P - 1
            m = tables[0][k][2]
            assert all(tables[y][k][2] == m for y in range(P)), (k, m)  # Choice 10
            for x in range(P):
                out = line_collective([ready[y][x] for y in range(P)], m, group, hop, add, phase, tables[0][k][3],
                                      levels, route_budget)
                for y in range(P):
                    done[y][x] = out[y]
        else:  # line y: positions x = 0 ... P - 1, m = the row's own count
            for y in range(P):
                m = tables[y][k][2]
                done[y] = line_collective(list(ready[y]), m, group, hop, add, phase, tables[y][k][3],
                                          levels, route_budget)
    return done


def token(P, H, Q, F, gated, heads, n_layers, rows_tokens, group, hop, add, phase, macs_per_cycle, batch=1,
          levels=2, route_budget=24):
    """One token: `n_layers` layers one after the other, the first starting at cycle 0 everywhere.

    With `batch` = B sequences it is one token of every sequence (Choice 14); `levels` and
    `route_budget` as in `layer` (Choice 15).
    """
    assert n_layers >= 0, n_layers
    done = [[0] * P for _ in range(P)]
    layer_done = []
    for _ in range(n_layers):
        # Each layer's first step starts on a PE when the layer before completed on it.
        done = layer(done, P, H, Q, F, gated, heads, rows_tokens, group, hop, add, phase, macs_per_cycle, batch,
                     levels, route_budget)
        layer_done.append(max(max(row) for row in done))
    cycles = layer_done[-1] if layer_done else 0  # Choice 12
    return {"cycles": cycles, "layer_done": layer_done}
