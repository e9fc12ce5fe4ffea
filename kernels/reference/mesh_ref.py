"""Plain reference ("oracle") of the mesh kernel, written from docs/mesh.md alone.

It is deliberately slow: one Python object per PE, explicit per-cycle history of every value another
PE may read, link messages kept with their send cycles so that "sent at a cycle <= t - L" is checked
literally.  Its only job is to be obviously correct so that comparing it with the fast kernel, cycle
by cycle, catches bugs in either.  Only the standard library is used, and nothing of meshsim or of
the kernels: its draws and rate maps are computed here from docs/mesh.md, and a layer_pipeline's
region table is an input to it (choice 32), checked here.

Public: `MeshReference(**params)`, the stepping machine (`step()` runs one cycle and returns its
observables, `run(cycles)` several, `snapshot()` gives the canonical state); `simulate(cycles,
**params)` runs a whole scenario through it; and the doc's helpers `mix64`, `cycle_key`, `draw`,
`threshold` and `rate_map`.

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
   Qo packets, each of which routes to that queue at that PE.  work_stealing's control messages
   are left out of both identities (choice 55).

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

Dataflow (the ``layer_pipeline`` workload, ``pipeline`` not None):

32. ``pipeline = {"regions": [region, ...], "chunks_in_flight": W}``; each region is a dict with
   exactly the keys row0, col0, row1, col1 (a half-open rectangle: h = row1 - row0 rows, w = col1 -
   col0 columns), work, next, replica, flow, input, output, and optionally wavelets (wavelets_g,
   the packets one chunk's input is for each PE of the region's lines; absent means 1, which is
   the rule as it was before wavelets: one packet, one task).  Regions are indexed by their
   position in the list; ``next`` is the successor's index or -1.  Checked (ValueError): at least
   one region; no missing or unknown key; each rectangle non-empty and inside the grid; rectangles
   disjoint; work in 1..65535; wavelets, when given, an integer in 1..65535 (the range of a
   task's work; the spec says only >= 1); next -1 or another region's index; every replica's
   regions form exactly one chain (one first region, one last region, every region reached by
   walking from the first, successors in the same replica); flow the integer +1 or -1; input
   "row" or "col"; output "side" or "bottom"; W in 1..1_048_576.  Whether edges actually touch is
   NOT checked: the rules give every destination whatever the geometry (a feed is routed by XY
   like any packet; a next PE is always a neighbour, as it lies in the same row or column).
   Replica ids are any integers; the per-replica lists of snapshot()["pipeline"] follow
   increasing replica id.  Pipeline mode takes neither rates nor trace_events nor a pattern; it
   takes every policy (with one on, step 4 uses migration neighbours: choices 57-60); the
   work-distribution arguments are ignored.  ``router_queue_packets`` is Qo as for traffic.
33. Geometry, literally: upstream column col0 (flow +1) or col1 - 1 (flow -1), downstream the other
   end (the same column when w = 1).  Input "row": input edge = upstream column, index r - row0,
   next PE (r, c + flow); input "col": input edge = row0, index |c - upstream|, next PE (r + 1, c);
   a next PE exists only inside the region.  Output "side": downstream column, index r - row0;
   "bottom": row1 - 1, index |c - downstream|.  The output-edge PE of index k feeds the
   successor's input-edge PEs of index k, k + n_out, ... < n_in, its output stage listing them in
   that (increasing) order (each wavelets_s times in a row, choice 39); ``self.feeds[u]`` holds
   their (row, col), once each (empty for a PE that is not an output-edge PE, for one of a last
   region, and for k >= n_in), ``self.next_pe[u]`` the unit index of the next PE or None,
   ``self.region_of[u]`` the region index or None (idle).
34. The output stage is kept in the PE's source queue (``pe.source``): its packets "count as in
   source queues", leave it by the traffic rule (at most B per cycle, in order, stopping at the
   first head whose XY output queue holds Qo packets; this B is the stage's own, independent of
   the links' B) and count as ``packets_injected`` (and ``measured_injected``, with wait = cycle
   of leaving - birth and hops = XY distance) when they leave.  A stage packet's destination is
   never its own PE (regions are disjoint and a region is not its own successor).  With wavelets
   a stage holds wavelets_s packets per fed PE (choice 39); each is an ordinary packet here, and
   in the network, the ejection queue and the conservation counts alike.
35. Tasks, servers and packets keep the representations of the other workloads: tasks ``(work,
   birth, hops)``, server ``(remaining, birth, hops)``, packets on links ``("p", dest_row,
   dest_col, birth)``, in router queues and output stages ``(dest_row, dest_col, birth)``.  A
   task is made with hops 0; only a migrated one has more (choice 57).  The packets of a task
   completed at t are born t + 1.
36. Multicast (step 1): only a packet whose destination is this PE, arriving on a link, is copied,
   and only if this PE has a next PE.  The packet moves iff the ejection queue AND the output
   queue of the copy's direction (the XY direction to the adjacent next PE) each hold fewer than
   Qo packets; otherwise it stays at the head of its link and its port stops, like any blocked
   message.  The oracle has no cut-through (Send comes in step 2), so "packets cut through this
   cycle count" holds by construction: nothing leaves an output queue in step 1.  The original
   goes to the ejection queue's tail and the copy, ``(next_row, next_col, birth)`` with the
   original's birth, to the tail of its output queue (behind whatever arrived earlier this
   cycle; step 2's stage packets come after it).  The original counts as received on its port
   once; the copy counts at this PE as packets offered and injected (per cycle and per PE), and
   as measured injected with wait 0 (even though birth < t) and 1 hop.  A copy arriving at the
   next PE is a packet for that PE like any other, so it is copied again there if that PE has a
   next PE.  Its latency at delivery is delivery cycle - its (original) birth.
37. Ejection, wavelets: each PE keeps ``got`` (``pe.got``, snapshot()["pipeline"]["got"]), the
   wavelets of its current chunk delivered so far, 0..wavelets_g - 1 (always 0 at a PE of a first
   region or an idle PE).  Each packet at the head of the ejection queue is one wavelet of the
   current chunk.  If got + 1 < wavelets_g it leaves (delivered, with its latency, counted in the
   B deliveries) and got grows by 1, whatever the task queue holds.  Otherwise it is the chunk's
   last: it leaves only if the task queue holds fewer than Q tasks, and then one task (work of
   the receiving PE's region, birth t, hops 0) joins the queue, counted as injected, and got
   returns to 0; if the queue is full it stays at the head, does not count towards the B
   deliveries and stops ejection for the cycle (the deliveries already made stand).  Several
   deliveries in one cycle are each checked against the queue length and got at that moment.
   So packets_delivered = wavelets_g * injected + got at every non-first region PE.  With
   wavelets_g = 1 every packet is the last: one packet, one task, as before.  A packet is only
   ever delivered at a PE of a region that is not a first region (asserted).  Neither a
   delivered task nor a first-region task is ever refused (they wait instead), so ``refused``
   stays 0.  Multicast copies (choice 36) are per packet, unchanged: every wavelet is copied.
38. Admit runs in step() before any PE's cycle (so every PE sees the same A during a cycle) and
   reads ``took``, which at that point is the end-of-(t - 1) value; it admits at most one chunk
   per replica per cycle.  ``took`` counts the PEs of the first region with taken == A; at the
   start it equals the region's size (A = 0: "always true"); admitting chunk A sets it to 0 (no
   PE can have taken the new chunk), and step 2.1 raises it when a PE's taken reaches A.  Only
   the take itself is gated by the task queue (``while taken < A and len(queue) < Q``), the same
   task queue that holds delivered tasks (a first region has none).
39. Step 5: a completed task at a PE that is not an output-edge PE does nothing more.  At an
   output-edge PE of a region with a successor s the output stage (empty, since Start needs an
   empty stage and only Work fills it) takes wavelets_s packets (s's wavelets, not g's) per fed
   PE, all born t + 1: all wavelets_s for input k first, then all for input k + n_out, and so on;
   each counts as a packet offered.  With no fed PE (k >= n_in) it stays empty.  At an
   output-edge PE of a last region the task is chunk n - 1, n the PE's completed count including
   this task (asserted to lie in D..A-1), and that chunk's completion count grows by 1.
40. Finish runs in step() after every PE's cycle, per replica: while the oldest unfinished chunk
   D (D < A) has been completed by all n_out output-edge PEs of the last region, it finishes with
   latency t + 1 - its admission cycle (``chunks_finished`` and ``chunk_latency_sum`` of cycle
   t) and D grows by 1; several chunks may finish in one cycle.  Chunks are kept per replica as a
   FIFO of [chunk, admission cycle, completions] for chunks D..A-1 (snapshot "pending").
41. Every packet is measured (``_is_measured`` is True in pipeline mode, whatever warmup_cycles
   and measure_cycles say).  ``chunks_finished`` and ``chunk_latency_sum`` are per-cycle
   observables of every workload (0 without a pipeline).  The private hook of choice 26 is
   refused in pipeline mode.
42. Start's extra condition (an empty output stage) applies in pipeline mode only; a traffic
   source queue never blocks Start.

Weight streaming (docs/mesh.md "Weight streaming", ``pipeline["streaming"]`` not None):

43. ``pipeline["streaming"] = {"chunks_per_pass": N, "load_cycles": Lw}`` (exactly these keys,
   integers in 1..2^62); absent or None: no weight streaming, nothing changes.  The oracle takes N
   and Lw as given: N = batch x seq_len / tokens_per_chunk and Lw = max(1, ceil(layer weight
   bytes x clock_ghz / weight_bandwidth_gbps)) are the set-up's business, and every layer takes
   the same Lw (the kernel sees one value; layer q mod n_layers matters for nothing else here).
   Streaming needs exactly one replica (ValueError otherwise).  That the regions cover the whole
   grid ("one layer's kernels over the whole grid") is description, not checked.
44. The two-layer buffer.  docs/mesh.md: "the load for pass q may start only once pass q - 2 has
   finished" (the PEs hold two layers' weights), and in step 2 "if no load is under way and
   loaded <= D div N + 1".  The two agree: pass q - 2 has finished iff D div N >= q - 1, i.e.
   loaded <= D div N + 1 for q = loaded.  The oracle writes it as ``loaded < D div N +
   WEIGHT_BUFFERS`` with WEIGHT_BUFFERS = 2 (1 would be a single buffer: no load overlapping a
   pass's compute).
45. The load steps run at the start of cycle t, in step(), before Admit and before any PE's
   cycle, in the written order: a load that ends at t (t >= E; it always ends exactly at E) lets
   the next load start in the same cycle t, so loads can run back to back (E, E + Lw, ...).  They
   read D as at the end of cycle t - 1 (Finish of cycle t comes later), so a pass that finishes
   at t lets the load it unblocks start at t + 1 at the earliest, like Admit's use of D.
46. Admit, streaming: the usual conditions (A < D + W, the first region took all A chunks), and
   when A mod N = 0 also D = A and A div N < loaded; the other chunks of a pass are admitted as
   usual.  So the passes never overlap in the pipeline: all chunks D..A-1 belong to one pass.
47. ``weight_wait`` (per-cycle observable, every workload; 0 without streaming) is 1 iff D = A,
   A mod N = 0 and A div N >= loaded, evaluated after the load steps and before Admit of the
   cycle (when it is 1 Admit cannot admit, so evaluating it after Admit would give the same
   value).  Cycle 0 waits (the first load has just started), so the first pass alone waits Lw
   cycles.  Cycles where the next pass waits only for the previous one to finish (D < A) do not
   count.
48. snapshot()["pipeline"]["streaming"] is None without streaming, else {"loaded", "loading",
   "load_end" (E of the load under way, or of the last that ended; 0 before any), "wait_cycles"
   (total of weight_wait so far)}, as at the end of the cycle: a load whose E is the next cycle
   is still "loading" there.

Dynamic balancing (step 4):

49. diffusion: the quotas are fixed once, from the queue's length as the loop starts and the
   depths known at t - D, before the first send; a neighbour's quota bounds the tasks sent to it in
   the cycle, and the other rules (known depth + sent + 1 < depth, room on the link, at most M)
   still apply.  A = floor(alpha x 65536 + 0.5) is computed in double precision.
50. gradient: a PE's pressure is computed after every PE's cycle, from its queue at the end of the
   cycle and the pressures its neighbours had at the end of t - D (0 before cycle 0); a PE with no
   neighbour (a 1 x 1 grid) that is not light has pressure 255.  ``snapshot()["pressure"]`` lists
   the pressures at the end of the last cycle, None for the other policies.  The per-direction
   counts ``snapshot()["totals"]["migrated_dir"]`` are the tasks each PE sent on N, E, S and W.

Work stealing (step 4's ``work_stealing``; docs/mesh.md "State", step 1 and step 4):

51. Control messages are ``("request",)`` and ``("refusal",)`` on links (and in
   snapshot()["links"]).  Like every message they count in the link's send and receive totals
   (``sent``/``received``, credits) and towards B on both ends, and in ``in_flight``; they are not
   tasks: not in ``migrated``/``received`` nor in ``migrated_out``/``migrated_in``/
   ``migrated_dir``.  They are counted by the per-cycle observables ``control_sent`` and
   ``control_received`` (present for every policy, 0 without work_stealing).  A task sent as an
   answer is sent exactly as a migrated task: the tail task, hops + 1 (saturating at 255),
   counted in ``migrated``, ``migrated_out`` and ``migrated_dir``.
52. Step 1: a control message at the head of its link always moves (it needs no room); one behind
   a task that cannot move waits behind it (FIFO: the port stops at the first message that cannot
   move), and one that moves counts towards the port's B like any message.  A request sets the
   port's owed flag; a refusal ends the outstanding request (it is always the answer to it,
   asserted).  A task that moves from port d while the request towards d is outstanding ends it.
53. Step 4: the shedding flag and ``limit`` are set exactly as for the other policies, then the
   Answer part runs over d = 0..3 in order, each owed direction judged against the queue as it
   stands after the earlier answers of this cycle and against "has room" counting everything
   sent on d this cycle (step 2's packets included).  M counts only the tasks sent in this step;
   refusals do not count towards it.  Then Ask: the PE asks only if, after the answers, its
   server and queue are empty and no request is outstanding (after Start an empty server means
   an empty queue); it lists the directions with a neighbour whose link has room (counting the
   refusals just sent), and draws ``draw(seed, 3, t, u, 8)`` only when that list is non-empty.
   A refusal received in step 1 of cycle t lets the PE ask again in step 4 of the same cycle,
   and a request received in step 1 can be answered in step 4 of the same cycle.  After the
   answers the shedding flag stays true only if the queue holds more than S tasks.
   The known depths (D) play no part.
54. Checked at the end of every cycle (AssertionError): for each PE u and direction d with a
   neighbour n, the requests on link u -> n, plus n's owed flag for u, plus the answers (tasks
   and refusals) on link n -> u add up to 1 if u's request towards d is outstanding, else 0
   (every request is answered exactly once, a PE has at most one outstanding, every task on a
   link is an answer); nothing is owed to or asked of a missing neighbour; a request never
   arrives at a port already owed.  Without work_stealing no control message or request exists.
55. Conservation (choice 15) counts control messages apart: tasks injected + packets offered =
   refused + queued + in service + in source + in router + (in flight - control in flight) +
   completed + delivered; the task-only identity uses only the tasks on links; and control in
   flight = control sent - control received, cumulated.
56. ``snapshot()["stealing"]`` is None without work_stealing, else one ``(asked, owed)`` per PE in
   unit order: ``asked`` the direction of the outstanding request or -1, ``owed`` a tuple of four
   0/1 ints for directions 0..3.  A PE with no neighbour (1 x 1) never asks, nor, in a pipeline, a
   PE with no migration neighbour (choice 57).

Migration in the pipeline (docs/mesh.md "Migration in the pipeline"; a policy with layer_pipeline):

57. Migration neighbours are precomputed once (``self.mig_nbr[u][d]``, the unit index or None):
   the neighbour n of u in direction d when u is in a region, n is in the same region, and neither
   u nor n is on that region's output edge (``output_index`` not None: every output-edge PE, also
   one whose k >= n_in, and one of a last region).  Without a pipeline it is ``neighbour(u, d)``.
   Step 4 uses only them: the known depths looked at and the eligible directions (all policies of
   the loop), diffusion's quotas (a direction that is not a migration neighbour gets none and its
   draw ``4 + d`` is not made), gradient's kp, pmin and pressure (``min(255, 1 + least p_n(t -
   D))`` over the migration neighbours; 255 for a PE that is not light and has none, so an
   output-edge PE with a queue above S shows 255; an idle PE is always light: 0), and
   work_stealing's Ask list (a PE with none never asks and draws nothing).  Everything else keeps
   using the grid's neighbours: step 1 (it receives from every neighbour), packets' routing and
   Send, "has room" (its credit rule is the link's, whoever uses it).  A request can only come
   from a migration neighbour (asserted when it is answered).
58. The shedding flag follows step 4's rule at every PE while a policy is on, a PE with no
   migration neighbour included (its depth sets and clears it; it moves nothing): the flag is
   state and shows in snapshot()["shedding"], but nothing there ever reads it.
59. Book-keeping (checked each cycle in ``_check_pipeline``): a task completes where it ends up and
   counts in that PE's ``completed``, latency and hops; ``injected`` stays the tasks *made* at the
   PE (taken chunks, or a chunk's last wavelet), so first-region ``taken == injected`` and
   ``packets_delivered == wavelets_g x injected + got`` still hold.  The old per-PE rule
   injected = queued + in service + completed becomes injected + migrated_in = queued + in
   service + completed + migrated_out; an output-edge or idle PE has migrated_in = migrated_out
   = 0 and every migrated_dir 0 (so the old rule holds there, and an output-edge PE of a last
   region still completes its chunks in order: chunk n - 1 at its n-th completion, asserted);
   no task and no control message is ever on a link u -> n, nor any migrated_dir[d] > 0, unless
   n is u's migration neighbour; and per region, the tasks made at its PEs = completed + queued +
   in service at its PEs + tasks on links leaving its PEs (all of which end at its PEs).  Only
   the last region's output edge's completions are read as chunks (Finish), as before.
60. Nothing else changes with migration on: Admit, the first region's takes (gated by the queue,
   which migrated tasks now share), the wavelets' ejection (the chunk's last wavelet needs room in
   the queue, migrated tasks included), Start (an output stage exists only at an output-edge PE,
   which has no migration neighbour), Finish.  The reference has no fast-forward: it steps every
   cycle whatever the policy (docs/mesh.md's fast-forward is the fast kernel's business).
"""

import math
from collections import deque

MASK64 = 0xFFFFFFFFFFFFFFFF

N, E, S, W = 0, 1, 2, 3
EJECT = 4       # index of the ejection queue among a router's five output queues
WORK_DISTRIBUTIONS = ("fixed", "uniform", "geometric")

# Stream numbers from the spec ("Streams: 0 set-up, 1 injection, 3 migration").
STREAM_SETUP = 0
STREAM_INJECTION = 1
STREAM_DESTINATION = 2
STREAM_MIGRATION = 3

PATTERNS = ("uniform", "transpose", "bit_complement", "neighbor", "hotspot")

# work_stealing's control messages on links (step 4, choice 51): they carry nothing.
REQUEST = ("request",)
REFUSAL = ("refusal",)
CONTROL_KINDS = ("request", "refusal")
# The draw indices of the migration stream (step 4), each kind of draw from a base of its own:
# random_lower's k-th pick, diffusion's quota towards d, the direction a request goes (Ask).
PICK_DRAW = 0
QUOTA_DRAW = 4
ASK_DRAW = 8

# Weight streaming: the PEs hold this many layers' weights (choice 44).
WEIGHT_BUFFERS = 2


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
        # packets waiting to enter the network: (dest_row, dest_col, birth); in pipeline mode the
        # output stage (choice 34).
        self.source = deque()
        # router[o]: the router's output queues, head at the left, each packet (dest_row, dest_col,
        # birth): o = 0..3 the queue of output direction o, o = EJECT (4) the ejection queue.
        self.router = [deque() for _ in range(5)]
        # links[d]: messages sent on output d and not yet received, oldest first, each
        # (send_cycle, message); a message is a task (work, birth, hops), a packet
        # ("p", dest_row, dest_col, birth) or a control message ("request",) or ("refusal",)
        # (work_stealing).  The receiver removes them from here.
        self.links = [deque() for _ in range(4)]
        self.sent_total = [0, 0, 0, 0]
        self.received_total = [0, 0, 0, 0]
        self.shedding = False         # step 4: moving its surplus away, from above T down to S
        # work_stealing (step 4): the direction of the outstanding request (None: none), and per
        # input direction whether a request that came from there is owed an answer.
        self.asked = None
        self.owed = [False, False, False, False]
        self.busy = 0
        self.injected = 0
        self.refused = 0
        self.completed = 0
        self.migrated_out = 0
        self.migrated_dir = [0, 0, 0, 0]   # tasks migrated out on each direction
        self.migrated_in = 0
        self.latency_sum = 0
        self.packets_offered = 0
        self.packets_injected = 0
        self.packets_delivered = 0
        # layer_pipeline only: chunks taken (a PE of a first region); wavelets of the current
        # chunk delivered so far (a PE of a region that is not first, choice 37).  The output
        # stage is ``source`` (choice 34).
        self.taken = 0
        self.got = 0


class _Replica:
    """Per-replica chunk book-keeping of the layer_pipeline workload."""

    def __init__(self, replica_id, first, last, first_pes, last_out_pes):
        self.replica_id = replica_id
        self.first = first              # index of the first region
        self.last = last                # index of the last region
        self.first_pes = first_pes      # unit indices of the first region's PEs
        self.last_out_pes = last_out_pes    # unit indices of the last region's output edge
        self.admitted = 0               # A
        self.finished = 0               # D
        self.took = len(first_pes)      # PEs of the first region with taken == A (A = 0: all)
        # Chunks D..A-1, oldest first: [chunk, admission cycle, output-edge PEs of the last
        # region that completed it].
        self.pending = deque()


class _WeightStream:
    """Weight-streaming state of the (single) replica (docs/mesh.md "Weight streaming")."""

    def __init__(self, chunks_per_pass, load_cycles):
        self.N = chunks_per_pass        # chunks per pass
        self.Lw = load_cycles           # cycles to stream in one layer's weights
        self.loaded = 0                 # passes whose weights are in
        self.loading = False            # a load under way
        self.load_end = 0               # E of the load under way, or of the last that ended
        self.wait_cycles = 0            # cycles counted as waiting for weights


def _check_range(name, value, low, high):
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise ValueError("%s = %r: must be an integer in %d..%d" % (name, value, low, high))


class MeshReference:
    """Cycle-by-cycle reference simulator of docs/mesh.md."""

    def __init__(self, *, rows, cols, queue_capacity, hop_latency_cycles, link_messages_per_cycle,
                 link_buffer_messages, credit_delay_cycles, policy, threshold, info_delay_cycles,
                 max_per_cycle, seed, rates, work_distribution, work_cycles, work_min_cycles,
                 work_max_cycles, trace_events, pattern=None, hot_fraction=0.0, warmup_cycles=0,
                 measure_cycles=0, router_queue_packets=4, pipeline=None, hysteresis=0,
                 diffusion_rate=0.2):
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
        _check_range("hysteresis", hysteresis, 0, threshold)
        _check_range("router_queue_packets", router_queue_packets, 1, 64)
        if policy != "none" and policy not in MIGRATION_RULES:
            raise ValueError("policy = %r: must be one of %s" % (policy, ("none", *MIGRATION_RULES)))
        if not 0.0 < diffusion_rate <= 0.5:
            raise ValueError("diffusion_rate %r is outside (0, 0.5]" % (diffusion_rate,))
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
        self.S = threshold - hysteresis     # the stop threshold (step 4)
        self.M = max_per_cycle
        self.Qo = router_queue_packets
        self.policy = policy
        # diffusion's rate alpha in units of 2^-16 (step 4)
        self.A = math.floor(diffusion_rate * 65536 + 0.5)
        self.seed = seed & MASK64

        # Exactly one workload source: per-PE rates (Bernoulli or traffic), a trace, or a pipeline.
        self.pipeline_mode = pipeline is not None
        if self.pipeline_mode:
            if rates is not None or trace_events is not None or pattern is not None:
                raise ValueError("a pipeline takes no rates, trace_events or pattern")
        elif (rates is None) == (trace_events is None):
            raise ValueError("give exactly one of rates (Bernoulli workloads) and trace_events")
        self.trace_mode = trace_events is not None
        self.thresholds = None
        self.trace_by_cycle = {}
        self.trace_events = None
        if self.pipeline_mode:
            pass                    # the pipeline table is read below, once the PEs exist
        elif self.trace_mode:
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
        self.pressure_history = []      # gradient only
        self.sent_history = []
        self.received_history = []
        # Cumulative per-cycle observables, used for the conservation check.
        self.cum_injected = 0
        self.cum_refused = 0
        self.cum_completed = 0
        self.cum_packets_offered = 0
        self.cum_packets_delivered = 0
        self.cum_control_sent = 0
        self.cum_control_received = 0
        # Only for the order-independence test: visit PEs in decreasing u.
        self._visit_reversed = False

        # layer_pipeline tables (choices 32-33); empty without a pipeline.
        self.W = 0
        self.regions = []           # per region: dict of its fields, see _setup_pipeline
        self.region_of = [None] * self.n_pe     # region index of each PE, None if idle
        self.next_pe = [None] * self.n_pe       # unit index of the next PE (multicast), or None
        self.output_index = [None] * self.n_pe  # output index of an output-edge PE, else None
        self.feeds = [[] for _ in range(self.n_pe)]     # (row, col) of the fed PEs, in order
        self.replicas = []          # _Replica objects in increasing replica id
        self.stream = None          # _WeightStream with weight streaming, else None
        if self.pipeline_mode:
            self._setup_pipeline(pipeline)
        # Step 4's migration neighbours (choice 57): mig_nbr[u][d] is u's neighbour in direction
        # d if it is one, else None.  Without a pipeline every neighbour is one.
        self.mig_nbr = [[self._migration_neighbour(u, d) for d in range(4)]
                        for u in range(self.n_pe)]

    REGION_KEYS = ("row0", "col0", "row1", "col1", "work", "next", "replica", "flow", "input",
                   "output")
    OPTIONAL_REGION_KEYS = ("wavelets",)     # absent: 1 (choice 32)

    def _setup_pipeline(self, pipeline):
        """Read and check the region table; compute edges, next PEs, feeds and replicas."""
        if (not isinstance(pipeline, dict)
                or set(pipeline) - {"streaming"} != {"regions", "chunks_in_flight"}):
            raise ValueError("pipeline must be a dict with exactly the keys 'regions' and "
                             "'chunks_in_flight', and optionally 'streaming'")
        _check_range("chunks_in_flight", pipeline["chunks_in_flight"], 1, 1_048_576)
        self.W = pipeline["chunks_in_flight"]
        table = list(pipeline["regions"])
        if not table:
            raise ValueError("a pipeline needs at least one region")

        for g, spec in enumerate(table):
            if (not isinstance(spec, dict)
                    or set(spec) - set(self.OPTIONAL_REGION_KEYS) != set(self.REGION_KEYS)):
                raise ValueError("region %d: expected a dict with exactly the keys %s, and "
                                 "optionally %s, got %r"
                                 % (g, ", ".join(self.REGION_KEYS),
                                    ", ".join(self.OPTIONAL_REGION_KEYS), spec))
            row0, col0, row1, col1 = spec["row0"], spec["col0"], spec["row1"], spec["col1"]
            for name in ("row0", "col0", "row1", "col1", "replica"):
                _check_range("region %d %s" % (g, name), spec[name], -(1 << 62), 1 << 62)
            if not (0 <= row0 < row1 <= self.rows and 0 <= col0 < col1 <= self.cols):
                raise ValueError("region %d: rectangle rows %d..%d, cols %d..%d is empty or not "
                                 "inside the %d x %d grid" % (g, row0, row1 - 1, col0, col1 - 1,
                                                               self.rows, self.cols))
            _check_range("region %d work" % g, spec["work"], 1, 65535)
            wavelets = spec.get("wavelets", 1)
            _check_range("region %d wavelets" % g, wavelets, 1, 65535)
            _check_range("region %d next" % g, spec["next"], -1, len(table) - 1)
            if spec["next"] == g:
                raise ValueError("region %d names itself as its successor" % g)
            flow = spec["flow"]
            if isinstance(flow, bool) or flow not in (1, -1) or not isinstance(flow, int):
                raise ValueError("region %d flow = %r: must be +1 or -1" % (g, flow))
            if spec["input"] not in ("row", "col"):
                raise ValueError("region %d input = %r: must be 'row' or 'col'"
                                 % (g, spec["input"]))
            if spec["output"] not in ("side", "bottom"):
                raise ValueError("region %d output = %r: must be 'side' or 'bottom'"
                                 % (g, spec["output"]))
            pes = []            # unit indices of the region's PEs, row-major
            for r in range(row0, row1):
                for c in range(col0, col1):
                    u = r * self.cols + c
                    if self.region_of[u] is not None:
                        raise ValueError("regions %d and %d overlap at PE (%d, %d)"
                                         % (self.region_of[u], g, r, c))
                    self.region_of[u] = g
                    pes.append(u)
            h, w = row1 - row0, col1 - col0
            upstream = col0 if flow == 1 else col1 - 1
            downstream = col1 - 1 if flow == 1 else col0
            # Input edge, indexed by input index k: the upstream column (row) or the top row (col).
            if spec["input"] == "row":
                input_edge = [(row0 + k) * self.cols + upstream for k in range(h)]
            else:
                input_edge = [row0 * self.cols + (upstream + k * flow) for k in range(w)]
            # Output edge, indexed by output index k: the downstream column (side) or the bottom
            # row (bottom), k = |c - downstream|.
            if spec["output"] == "side":
                output_edge = [(row0 + k) * self.cols + downstream for k in range(h)]
            else:
                output_edge = [(row1 - 1) * self.cols + (downstream - k * flow) for k in range(w)]
            for k, u in enumerate(input_edge):
                r, c = divmod(u, self.cols)
                assert self.region_of[u] == g and k == (
                    r - row0 if spec["input"] == "row" else abs(c - upstream))
            for k, u in enumerate(output_edge):
                r, c = divmod(u, self.cols)
                assert self.region_of[u] == g and k == (
                    r - row0 if spec["output"] == "side" else abs(c - downstream))
                self.output_index[u] = k
            # Next PE of every PE, while it is in the region.
            for u in pes:
                r, c = divmod(u, self.cols)
                if spec["input"] == "row":
                    nr, nc = r, c + flow
                else:
                    nr, nc = r + 1, c
                if row0 <= nr < row1 and col0 <= nc < col1:
                    self.next_pe[u] = nr * self.cols + nc
            self.regions.append({"row0": row0, "col0": col0, "row1": row1, "col1": col1,
                                 "h": h, "w": w, "pes": pes, "work": spec["work"],
                                 "wavelets": wavelets,
                                 "next": spec["next"], "replica": spec["replica"], "flow": flow,
                                 "input": spec["input"], "output": spec["output"],
                                 "upstream": upstream, "downstream": downstream,
                                 "input_edge": input_edge, "output_edge": output_edge,
                                 "first": True})

        # Chains: successors in the same replica; per replica one first, one last, and walking
        # from the first reaches every region of the replica (so there is no cycle).
        for g, region in enumerate(self.regions):
            nxt = region["next"]
            if nxt >= 0:
                if self.regions[nxt]["replica"] != region["replica"]:
                    raise ValueError("region %d (replica %d) names region %d of replica %d as "
                                     "successor" % (g, region["replica"], nxt,
                                                    self.regions[nxt]["replica"]))
                self.regions[nxt]["first"] = False
        for replica_id in sorted(set(region["replica"] for region in self.regions)):
            members = [g for g, region in enumerate(self.regions)
                       if region["replica"] == replica_id]
            firsts = [g for g in members if self.regions[g]["first"]]
            lasts = [g for g in members if self.regions[g]["next"] < 0]
            if len(firsts) != 1 or len(lasts) != 1:
                raise ValueError("replica %d: its regions must form one chain, but it has first "
                                 "regions %s and last regions %s" % (replica_id, firsts, lasts))
            walk = [firsts[0]]
            while self.regions[walk[-1]]["next"] >= 0 and len(walk) <= len(members):
                walk.append(self.regions[walk[-1]]["next"])
            if sorted(walk) != members:
                raise ValueError("replica %d: walking from first region %d gives %s, which is not "
                                 "every region of the replica once (a cycle or a second chain)"
                                 % (replica_id, firsts[0], walk))
            first, last = firsts[0], lasts[0]
            self.replicas.append(_Replica(replica_id, first, last,
                                          list(self.regions[first]["pes"]),
                                          list(self.regions[last]["output_edge"])))
        # Weight streaming (choices 43-48): one replica only.
        streaming = pipeline.get("streaming")
        if streaming is not None:
            if not isinstance(streaming, dict) or set(streaming) != {"chunks_per_pass",
                                                                     "load_cycles"}:
                raise ValueError("pipeline streaming must be None or a dict with exactly the "
                                 "keys 'chunks_per_pass' and 'load_cycles', got %r" % (streaming,))
            _check_range("streaming chunks_per_pass", streaming["chunks_per_pass"], 1, 1 << 62)
            _check_range("streaming load_cycles", streaming["load_cycles"], 1, 1 << 62)
            if len(self.replicas) != 1:
                raise ValueError("weight streaming needs exactly one replica, not %d"
                                 % len(self.replicas))
            self.stream = _WeightStream(streaming["chunks_per_pass"], streaming["load_cycles"])
        replica_index = {rep.replica_id: i for i, rep in enumerate(self.replicas)}
        for region in self.regions:
            region["replica_index"] = replica_index[region["replica"]]

        # Feeds: output index k feeds the successor's input indices k, k + n_out, ... < n_in.
        for region in self.regions:
            if region["next"] < 0:
                continue
            succ = self.regions[region["next"]]
            n_out, n_in = len(region["output_edge"]), len(succ["input_edge"])
            for k, u in enumerate(region["output_edge"]):
                self.feeds[u] = [divmod(succ["input_edge"][kk], self.cols)
                                 for kk in range(k, n_in, n_out)]

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

    def _migration_neighbour(self, u, d):
        """u's migration neighbour in direction d (docs/mesh.md, "Migration in the pipeline"), or
        None: in a pipeline, a neighbour in u's region when neither u nor it is on the region's
        output edge (an idle PE has none); without a pipeline, the neighbour itself."""
        n = self.neighbour(u, d)
        if n is None or not self.pipeline_mode:
            return n
        g = self.region_of[u]
        if (g is None or self.region_of[n] != g or self.output_index[u] is not None
                or self.output_index[n] is not None):
            return None
        return n

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

    def _pressure_at(self, n, x):
        if x < 0:
            return 0
        assert x < self.cycle, "read of a cycle that has not ended"
        return self.pressure_history[x][n]

    def _pressure(self, t, u):
        """gradient: PE u's pressure at the end of cycle t (step 4): 0 while light, else one more
        than the least its migration neighbours had at t - D, at most 255 (255 with none)."""
        if len(self.pes[u].queue) <= self.S:
            return 0
        known = [self._pressure_at(n, t - self.D) for n in self.mig_nbr[u] if n is not None]
        return min(255, 1 + min(known)) if known else 255

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
        if self.pipeline_mode:
            return []               # a pipeline's tasks come from _inject_pipeline_tasks
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
        assert not self.pipeline_mode, "no extra packets in pipeline mode (choice 38)"
        assert (row, col) != (dest_row, dest_col), "a packet for the PE itself is never offered"
        assert 0 <= dest_row < self.rows and 0 <= dest_col < self.cols
        self._scheduled_packets.setdefault(t, []).append((row * self.cols + col, dest_row,
                                                           dest_col))

    def _is_measured(self, birth):
        if self.pipeline_mode:
            return True             # every packet is measured (choice 38)
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
               "measured_injected": 0, "measured_source_wait_sum": 0, "measured_hops_sum": 0,
               "chunks_finished": 0, "chunk_latency_sum": 0, "weight_wait": 0,
               "control_sent": 0, "control_received": 0}
        if self.stream is not None:
            obs["weight_wait"] = self._stream_weights(t)
        if self.pipeline_mode:
            self._admit(t)
        order = range(self.n_pe - 1, -1, -1) if self._visit_reversed else range(self.n_pe)
        for u in order:
            self._step_pe(t, u, obs)
        if self.pipeline_mode:
            self._finish(t, obs)

        # Record the end-of-cycle values other PEs may read in later cycles.
        self.depth_history.append([len(pe.queue) for pe in self.pes])
        if self.policy == "gradient":
            self.pressure_history.append([self._pressure(t, u) for u in range(self.n_pe)])
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

    def _stream_weights(self, t):
        """Weight streaming at the start of cycle t, before Admit (choices 44-47): end the load
        under way if t >= E, then start the next if no load is under way and the buffer it needs
        is free.  Returns 1 if the cycle waits for weights, else 0."""
        stream = self.stream
        rep = self.replicas[0]
        if stream.loading and t >= stream.load_end:
            stream.loading = False
            stream.loaded += 1
        # The load for pass q = loaded needs pass q - WEIGHT_BUFFERS finished: D div N passes are.
        if not stream.loading and stream.loaded < rep.finished // stream.N + WEIGHT_BUFFERS:
            stream.loading = True
            stream.load_end = t + stream.Lw
        A, D = rep.admitted, rep.finished
        if D == A and A % stream.N == 0 and A // stream.N >= stream.loaded:
            stream.wait_cycles += 1
            return 1
        return 0

    def _admit(self, t):
        """Admit (before step 1, once per replica): at most one chunk, if A < D + W and every PE
        of the first region had taken all A chunks by the end of cycle t - 1; with weight
        streaming, the first chunk of a pass also needs D = A and its pass's weights loaded."""
        stream = self.stream
        for rep in self.replicas:
            A, D = rep.admitted, rep.finished
            if (stream is not None and A % stream.N == 0
                    and not (D == A and A // stream.N < stream.loaded)):
                continue
            if rep.admitted < rep.finished + self.W and rep.took == len(rep.first_pes):
                rep.pending.append([rep.admitted, t, 0])
                rep.admitted += 1
                rep.took = 0            # no PE has taken the new chunk yet

    def _finish(self, t, obs):
        """Finish (after every PE's cycle, once per replica): while every output-edge PE of the
        last region has completed chunk D, chunk D finishes."""
        for rep in self.replicas:
            while rep.pending and rep.pending[0][2] == len(rep.last_out_pes):
                chunk, admitted_at, _count = rep.pending.popleft()
                assert chunk == rep.finished
                obs["chunks_finished"] += 1
                obs["chunk_latency_sum"] += t + 1 - admitted_at
                rep.finished += 1

    def _inject_pipeline_tasks(self, t, u, obs):
        """Step 2.1: a PE of a first region takes admitted chunks while its queue has room."""
        g = self.region_of[u]
        if g is None or not self.regions[g]["first"]:
            return
        region = self.regions[g]
        rep = self.replicas[region["replica_index"]]
        pe = self.pes[u]
        while pe.taken < rep.admitted and len(pe.queue) < self.Q:
            pe.queue.append((region["work"], t, 0))
            pe.taken += 1
            pe.injected += 1
            obs["injected"] += 1
            self.cum_injected += 1
            if pe.taken == rep.admitted:
                rep.took += 1

    def _complete_pipeline_task(self, t, u, obs):
        """Step 5 for a completed pipeline task (after pe.completed counted it): fill the output
        stage of an output-edge PE, or count the chunk at an output-edge PE of a last region."""
        g = self.region_of[u]
        assert g is not None, "a task completed at an idle PE"
        if self.output_index[u] is None:
            return                  # not an output-edge PE: nothing more
        region = self.regions[g]
        pe = self.pes[u]
        if region["next"] >= 0:
            assert not pe.source, "output stage not empty when a task completed"
            # wavelets_s packets per fed PE, all of one input before the next (choice 39).
            wavelets = self.regions[region["next"]]["wavelets"]
            for (dest_row, dest_col) in self.feeds[u]:
                for _ in range(wavelets):
                    pe.source.append((dest_row, dest_col, t + 1))
                    pe.packets_offered += 1
                    obs["packets_offered"] += 1
                    self.cum_packets_offered += 1
        else:
            # An output-edge PE never sends or receives a task (choice 59), so its completed tasks
            # are its own chunks, in order.
            assert pe.migrated_in == pe.migrated_out == 0, "an output-edge PE migrated a task"
            rep = self.replicas[region["replica_index"]]
            chunk = pe.completed - 1
            assert rep.finished <= chunk < rep.admitted, "completed a chunk not in flight"
            entry = rep.pending[chunk - rep.finished]
            assert entry[0] == chunk
            entry[2] += 1

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
        """One cycle of PE u, the steps of docs/mesh.md "One cycle" in order."""
        sent_now = [0, 0, 0, 0]     # messages of every kind sent on each output this cycle
        self._receive(t, u, obs)                # 1. Receive and route
        self._inject(t, u, obs)                 # 2. Inject
        self._send_stage(t, u, sent_now, obs)   # Send
        self._start(u)                          # 3. Start
        self._migrate(t, u, sent_now, obs)      # 4. Migrate
        self._work(t, u, obs)                   # 5. Work

    def _receive(self, t, u, obs):
        """Step 1: receive and route, rotating port priority; a port stops at its first message that
        cannot move."""
        pe = self.pes[u]
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
                if message[0] in CONTROL_KINDS:
                    self._take_control(u, d, message, obs)
                elif message[0] != "p":
                    if not self._take_task(u, d, message, obs):
                        break
                elif not self._take_packet(u, message, obs):
                    break
                link.popleft()
                pe.received_total[d] += 1
                taken += 1

    def _take_control(self, u, d, message, obs):
        """A control message (work_stealing) always moves and is gone: a request marks port d owed,
        a refusal ends the outstanding request (choice 52)."""
        pe = self.pes[u]
        if message == REQUEST:
            assert not pe.owed[d], "PE %d: a second request from direction %d while one is owed" % (u, d)
            pe.owed[d] = True
        else:
            assert pe.asked == d, (
                "PE %d: a refusal from direction %d, but its request is towards %r" % (u, d, pe.asked))
            pe.asked = None
        obs["control_received"] += 1
        self.cum_control_received += 1

    def _take_task(self, u, d, message, obs):
        """A task to the queue's tail, unchanged (hops were counted when sent), if the queue has
        room; whether it moved."""
        pe = self.pes[u]
        if len(pe.queue) >= self.Q:
            return False
        pe.queue.append(message)
        pe.migrated_in += 1
        obs["received"] += 1
        if pe.asked == d:
            pe.asked = None     # the answer to this PE's request (work_stealing)
        return True

    def _take_packet(self, u, message, obs):
        """A packet to the tail of its output queue (ejection if it is for this PE, else its XY
        direction) if that queue holds fewer than Qo packets; whether it moved."""
        pe = self.pes[u]
        packet = message[1:]    # (dest_row, dest_col, birth)
        o = self.output_queue(u, packet[0], packet[1])
        queue = pe.router[o]
        if len(queue) >= self.Qo:
            return False
        # Multicast (pipeline mode, choice 36): a packet for this PE also sends a copy to the next PE,
        # and moves only if the copy's queue has room too.
        copy_queue = copy = None
        if o == EJECT and self.pipeline_mode:
            g = self.region_of[u]
            assert g is not None and not self.regions[g]["first"], (
                "a packet for PE %d, which is idle or in a first region" % u)
            if self.next_pe[u] is not None:
                next_row, next_col = divmod(self.next_pe[u], self.cols)
                copy = (next_row, next_col, packet[2])
                copy_queue = pe.router[self.xy_output(u, next_row, next_col)]
                if len(copy_queue) >= self.Qo:
                    return False
        queue.append(packet)
        if copy is not None:
            # The copy enters the network here: offered and injected, measured, with no wait and
            # one hop.
            copy_queue.append(copy)
            pe.packets_offered += 1
            pe.packets_injected += 1
            self.cum_packets_offered += 1
            obs["packets_offered"] += 1
            obs["packets_injected"] += 1
            obs["measured_injected"] += 1
            obs["measured_hops_sum"] += 1
        return True

    def _inject(self, t, u, obs):
        """Step 2: the workload's offers (tasks, or packets to the source queue), then up to B
        packets from the source queue (in pipeline mode: the output stage, in the order of
        increasing input index) to their XY output queue."""
        pe = self.pes[u]
        r, c = divmod(u, self.cols)
        if self.pipeline_mode:
            self._inject_pipeline_tasks(t, u, obs)
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

    def _send_stage(self, t, u, sent_now, obs):
        """Send: each output queue onto its link while the link has room; the ejection queue
        delivers up to B."""
        pe = self.pes[u]
        for o in range(4):
            queue = pe.router[o]
            while queue and self._has_room(t, u, o, sent_now):
                self._send(t, u, o, ("p",) + queue.popleft(), sent_now)
        delivered_now = 0
        ejection = pe.router[EJECT]
        while delivered_now < self.B and ejection:
            birth = ejection[0][2]
            if self.pipeline_mode:
                # Each packet is one wavelet of the current chunk (choice 37).  A wavelet that is not
                # the chunk's last just leaves; the last leaves only if the task queue has room, and
                # makes the chunk's task.
                region = self.regions[self.region_of[u]]
                if pe.got + 1 < region["wavelets"]:
                    pe.got += 1
                else:
                    if len(pe.queue) >= self.Q:
                        break
                    pe.queue.append((region["work"], t, 0))
                    pe.injected += 1
                    obs["injected"] += 1
                    self.cum_injected += 1
                    pe.got = 0
            ejection.popleft()
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

    def _start(self, u):
        """Step 3: start (in pipeline mode also only with an empty output stage)."""
        pe = self.pes[u]
        if pe.server is None and pe.queue and not (self.pipeline_mode and pe.source):
            pe.server = list(pe.queue.popleft())    # [remaining, birth, hops]

    def _migrate(self, t, u, sent_now, obs):
        """Step 4: the shedding flag, then the policy's rule (MIGRATION_RULES).  sent_now (packets
        of step 2, tasks and control messages of step 4) limits B and is already in sent_total."""
        if self.policy == "none":
            return
        pe = self.pes[u]
        depth = len(pe.queue)
        if depth > self.T:
            pe.shedding = True
        elif depth <= self.S:
            pe.shedding = False
        limit = self.S if pe.shedding else self.T
        MIGRATION_RULES[self.policy](self, t, u, limit, sent_now, obs)
        pe.shedding = pe.shedding and len(pe.queue) > self.S

    # ---- The policies' rules for step 4, one each (MIGRATION_RULES).  The push policies share the
    # loop `_push`: a quota per direction, which directions are downhill, and the pick among the
    # eligible.

    def _least_loaded(self, t, u, limit, sent_now, obs):
        """least_loaded: the eligible direction with the smallest known depth, ties to the smallest d."""
        self._push(t, u, limit, sent_now, obs, _fewer_after_one, _least_known)

    def _random_lower(self, t, u, limit, sent_now, obs):
        """random_lower: one of the eligible directions at random (draw PICK_DRAW + k)."""
        def pick(eligible, k):
            h = draw(self.seed, STREAM_MIGRATION, t, u, PICK_DRAW + k)
            return eligible[((h >> 32) * len(eligible)) >> 32][0]
        self._push(t, u, limit, sent_now, obs, _fewer_after_one, pick)

    def _diffusion(self, t, u, limit, sent_now, obs):
        """diffusion: least_loaded's pick within each direction's quota for the cycle, from the
        depths as step 4 starts (draw QUOTA_DRAW + d)."""
        pe = self.pes[u]
        quota = [None, None, None, None]
        if len(pe.queue) > limit:
            depth0 = len(pe.queue)
            for d in range(4):
                n = self.mig_nbr[u][d]
                if n is None:
                    continue        # no quota: not a migration neighbour (choice 57)
                diff = max(0, depth0 - self._depth_at(n, t - self.D))
                h = draw(self.seed, STREAM_MIGRATION, t, u, QUOTA_DRAW + d)
                quota[d] = (self.A * diff + (h >> 48)) >> 16
        self._push(t, u, limit, sent_now, obs, _fewer_after_one, _least_known, quota)

    def _gradient(self, t, u, limit, sent_now, obs):
        """gradient: towards the neighbours known to have the least pressure, if a light PE is
        known (pressure below 255); least_loaded's pick among them."""
        pressure = [None, None, None, None]
        for d in range(4):
            n = self.mig_nbr[u][d]
            if n is not None:
                pressure[d] = self._pressure_at(n, t - self.D)
        pmin = min((p for p in pressure if p is not None), default=255)

        def downhill(d, kd, depth):
            return pressure[d] == pmin and pmin < 255
        self._push(t, u, limit, sent_now, obs, downhill, _least_known)

    def _push(self, t, u, limit, sent_now, obs, downhill, pick, quota=(None, None, None, None)):
        """Step 4's loop for the push policies: at most M tasks from the tail, each to a direction
        picked among the eligible (a migration neighbour within its quota, downhill, whose link has
        room)."""
        pe = self.pes[u]
        tasks_now = [0, 0, 0, 0]    # tasks sent here only: what the known depth adds
        for k in range(self.M):
            depth = len(pe.queue)
            if depth <= limit:
                break
            eligible = []   # (d, kd) in increasing d
            for d in range(4):
                n = self.mig_nbr[u][d]
                if n is None:
                    continue        # only migration neighbours (choice 57)
                kd = self._depth_at(n, t - self.D) + tasks_now[d]
                if quota[d] is not None and tasks_now[d] >= quota[d]:
                    continue
                if downhill(d, kd, depth) and self._has_room(t, u, d, sent_now):
                    eligible.append((d, kd))
            if not eligible:
                break
            d_pick = pick(eligible, k)
            self._send_tail(t, u, d_pick, sent_now, obs)
            tasks_now[d_pick] += 1

    def _send_tail(self, t, u, d, sent_now, obs):
        """The task at the queue's tail leaves, one more hop (saturating at 255), on link d with
        send cycle t; it counts as migrated out (on direction d)."""
        pe = self.pes[u]
        work, birth, hops = pe.queue.pop()
        self._send(t, u, d, (work, birth, min(hops + 1, 255)), sent_now)
        pe.migrated_out += 1
        pe.migrated_dir[d] += 1
        obs["migrated"] += 1

    def _send_control(self, t, u, d, message, sent_now, obs):
        """A request or a refusal on link d with send cycle t (work_stealing)."""
        self._send(t, u, d, message, sent_now)
        obs["control_sent"] += 1
        self.cum_control_sent += 1

    def _work_stealing(self, t, u, limit, sent_now, obs):
        """Step 4 of work_stealing, after the shedding flag: first Answer, then Ask (choice 53)."""
        pe = self.pes[u]
        tasks_now = 0               # tasks sent in this step (M counts these only)
        # Answer the owed requests in increasing d.
        for d in range(4):
            if not pe.owed[d]:
                continue
            assert self.mig_nbr[u][d] is not None, "a request from a non-migration neighbour"
            if not self._has_room(t, u, d, sent_now):
                continue            # stays owed, tried again next cycle
            if len(pe.queue) > limit:
                if tasks_now >= self.M:
                    continue        # M reached: stays owed
                self._send_tail(t, u, d, sent_now, obs)
                tasks_now += 1
            else:
                self._send_control(t, u, d, REFUSAL, sent_now, obs)
            pe.owed[d] = False
        # Ask: an idle PE with no request outstanding asks one neighbour drawn at random among
        # those whose link has room.
        if pe.server is None and not pe.queue and pe.asked is None:
            choices = [d for d in range(4)
                       if self.mig_nbr[u][d] is not None
                       and self._has_room(t, u, d, sent_now)]
            if choices:
                h = draw(self.seed, STREAM_MIGRATION, t, u, ASK_DRAW)
                d = choices[((h >> 32) * len(choices)) >> 32]
                self._send_control(t, u, d, REQUEST, sent_now, obs)
                pe.asked = d

    def _work(self, t, u, obs):
        """Step 5: the server works one cycle; a task whose work runs out completes."""
        pe = self.pes[u]
        if pe.server is not None:
            pe.busy += 1
            obs["busy"] += 1
            pe.server[0] -= 1
            if pe.server[0] == 0:
                birth, hops = pe.server[1], pe.server[2]
                latency = t + 1 - birth
                pe.server = None
                pe.completed += 1
                if self.pipeline_mode:
                    self._complete_pipeline_task(t, u, obs)
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
        control_in_flight = sum(1 for msg in messages if msg[0] in CONTROL_KINDS)
        tasks_in_flight = in_flight - packets_in_flight - control_in_flight
        injected = sum(pe.injected for pe in self.pes)
        refused = sum(pe.refused for pe in self.pes)
        completed = sum(pe.completed for pe in self.pes)
        offered = sum(pe.packets_offered for pe in self.pes)
        delivered = sum(pe.packets_delivered for pe in self.pes)
        left_source = sum(pe.packets_injected for pe in self.pes)
        sent = sum(sum(pe.sent_total) for pe in self.pes)
        received = sum(sum(pe.received_total) for pe in self.pes)
        cycle = self.cycle - 1
        # Control messages (work_stealing) carry nothing: they are counted on their own.
        if (injected + offered != refused + queued + in_service + in_source + in_router
                + (in_flight - control_in_flight) + completed + delivered):
            raise AssertionError(
                "conservation violated at the end of cycle %d: tasks injected %d + packets offered "
                "%d != refused %d + queued %d + in service %d + in source queues %d + in router "
                "queues %d + (in flight %d - control in flight %d) + completed %d + delivered %d"
                % (cycle, injected, offered, refused, queued, in_service, in_source, in_router,
                   in_flight, control_in_flight, completed, delivered))
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
                for packet in queue:
                    dest_row, dest_col = packet[0], packet[1]
                    if self.output_queue(u, dest_row, dest_col) != o:
                        raise AssertionError("cycle %d: packet for (%d, %d) in PE %d's output "
                                             "queue %d" % (cycle, dest_row, dest_col, u, o))
        if offered - in_source != left_source:
            raise AssertionError("cycle %d: packets that left source queues %d != offered %d - "
                                 "in source %d" % (cycle, left_source, offered, in_source))
        if in_flight != sent - received:
            raise AssertionError("cycle %d: in flight %d != sent %d - received %d"
                                 % (cycle, in_flight, sent, received))
        if control_in_flight != self.cum_control_sent - self.cum_control_received:
            raise AssertionError("cycle %d: control messages in flight %d != sent %d - received %d"
                                 % (cycle, control_in_flight, self.cum_control_sent,
                                    self.cum_control_received))
        if self.policy == "work_stealing":
            self._check_stealing(cycle)
        elif control_in_flight or any(pe.asked is not None or any(pe.owed) for pe in self.pes):
            raise AssertionError("cycle %d: control messages or requests without work_stealing"
                                 % cycle)
        if (injected, refused, completed, offered, delivered) != (
                self.cum_injected, self.cum_refused, self.cum_completed,
                self.cum_packets_offered, self.cum_packets_delivered):
            raise AssertionError("cycle %d: per-PE totals disagree with cumulative observables"
                                 % cycle)
        if self.pipeline_mode:
            self._check_pipeline(cycle)
        if (queued, in_service, in_flight, in_source, in_router) != (
                obs["queued"], obs["in_service"], obs["in_flight"], obs["packets_in_source"],
                obs["packets_in_router"]):
            raise AssertionError("cycle %d: end-of-cycle observables disagree with the state"
                                 % cycle)

    def _check_stealing(self, cycle):
        """work_stealing's book-keeping (choice 54).  Every request is answered exactly once, a PE
        has at most one outstanding and every task on a link is an answer, so for each PE u and
        each direction d towards a neighbour n: the requests on link u -> n, plus n's owed flag
        for u, plus the answers (tasks and refusals) on link n -> u make exactly 1 if u's request
        towards d is outstanding, else 0; and no PE is owed anything from a missing neighbour."""
        for u, pe in enumerate(self.pes):
            if pe.asked is not None and pe.asked not in range(4):
                raise AssertionError("cycle %d: PE %d asked %r" % (cycle, u, pe.asked))
            for d in range(4):
                n = self.neighbour(u, d)
                if n is None:
                    if pe.owed[d] or pe.asked == d or pe.links[d]:
                        raise AssertionError("cycle %d: PE %d has a request or a message towards "
                                             "missing direction %d" % (cycle, u, d))
                    continue
                requests = sum(1 for (_sent_at, msg) in pe.links[d] if msg == REQUEST)
                answers = sum(1 for (_sent_at, msg) in self.pes[n].links[opp(d)]
                              if msg == REFUSAL or msg[0] not in CONTROL_KINDS + ("p",))
                count = requests + int(self.pes[n].owed[opp(d)]) + answers
                if count != int(pe.asked == d):
                    raise AssertionError(
                        "cycle %d: PE %d asked %r, but towards direction %d there are %d requests "
                        "on the link, owed %s, %d answers on the way back"
                        % (cycle, u, pe.asked, d, requests, self.pes[n].owed[opp(d)], answers))

    def _check_pipeline(self, cycle):
        """Invariants of the layer_pipeline book-keeping (beyond the spec's conservation)."""
        for rep in self.replicas:
            A, D = rep.admitted, rep.finished
            if not D <= A <= D + self.W:
                raise AssertionError("cycle %d: replica %d has A = %d, D = %d, W = %d"
                                     % (cycle, rep.replica_id, A, D, self.W))
            if [entry[0] for entry in rep.pending] != list(range(D, A)):
                raise AssertionError("cycle %d: replica %d pending chunks %r, A = %d, D = %d"
                                     % (cycle, rep.replica_id, list(rep.pending), A, D))
            admissions = [entry[1] for entry in rep.pending]
            if admissions != sorted(set(admissions)) or any(a > cycle for a in admissions):
                raise AssertionError("cycle %d: replica %d admission cycles %r"
                                     % (cycle, rep.replica_id, admissions))
            # A chunk's completion count is the number of last-region output-edge PEs whose
            # completed count exceeds it; the oldest one is not yet complete (Finish ran).
            completed = [self.pes[v].completed for v in rep.last_out_pes]
            if any(not D <= n <= A for n in completed):
                raise AssertionError("cycle %d: replica %d last-region output edge completed %r, "
                                     "A = %d, D = %d" % (cycle, rep.replica_id, completed, A, D))
            for (chunk, _admitted_at, count) in rep.pending:
                if count != sum(1 for n in completed if n > chunk):
                    raise AssertionError("cycle %d: replica %d chunk %d counted %d completions"
                                         % (cycle, rep.replica_id, chunk, count))
            if rep.pending and rep.pending[0][2] == len(rep.last_out_pes):
                raise AssertionError("cycle %d: replica %d chunk %d complete but not finished"
                                     % (cycle, rep.replica_id, D))
            if rep.took != sum(1 for v in rep.first_pes if self.pes[v].taken == A):
                raise AssertionError("cycle %d: replica %d took = %d is not the count of PEs "
                                     "that have taken all %d chunks" % (cycle, rep.replica_id,
                                                                        rep.took, A))
        if self.stream is not None:
            self._check_stream(cycle)
        for u, pe in enumerate(self.pes):
            g = self.region_of[u]
            if g is None:
                if (pe.queue or pe.server is not None or pe.source or pe.taken or pe.injected
                        or pe.packets_delivered or pe.packets_offered or pe.got
                        or pe.migrated_in or pe.migrated_out or any(pe.migrated_dir)):
                    raise AssertionError("cycle %d: idle PE %d holds pipeline work" % (cycle, u))
                continue
            region = self.regions[g]
            A = self.replicas[region["replica_index"]].admitted
            if region["first"]:
                if not pe.taken == pe.injected <= A or pe.packets_delivered or pe.got:
                    raise AssertionError("cycle %d: first-region PE %d taken %d, injected %d, "
                                         "delivered %d, got %d, A = %d"
                                         % (cycle, u, pe.taken, pe.injected,
                                            pe.packets_delivered, pe.got, A))
            elif (pe.taken or not 0 <= pe.got < region["wavelets"] or not pe.injected <= A
                  or pe.packets_delivered != region["wavelets"] * pe.injected + pe.got):
                # Choice 37: every wavelets_g-th delivered packet made a task; got counts the rest.
                raise AssertionError("cycle %d: PE %d taken %d, injected %d, delivered %d, got %d, "
                                     "wavelets %d, A = %d"
                                     % (cycle, u, pe.taken, pe.injected, pe.packets_delivered,
                                        pe.got, region["wavelets"], A))
            in_service = 0 if pe.server is None else 1
            # Tasks made here or received = queued + in service + completed here + sent away
            # (choice 59); a PE that never migrates (an output-edge PE) completes its own.
            if (pe.injected + pe.migrated_in
                    != len(pe.queue) + in_service + pe.completed + pe.migrated_out):
                raise AssertionError("cycle %d: PE %d tasks do not add up" % (cycle, u))
            if self.output_index[u] is not None and (pe.migrated_in or pe.migrated_out):
                raise AssertionError("cycle %d: output-edge PE %d migrated in %d, out %d"
                                     % (cycle, u, pe.migrated_in, pe.migrated_out))
            if pe.server is not None and pe.source:
                raise AssertionError("cycle %d: PE %d serves a task with a non-empty output "
                                     "stage" % (cycle, u))
            # The stage holds the last packets of the PE's feed list, each fed PE wavelets_s times
            # in a row (choice 39), all with one birth.
            feeds = self.feeds[u]
            if feeds:
                feeds = [feed for feed in feeds
                         for _ in range(self.regions[region["next"]]["wavelets"])]
            stage = list(pe.source)
            if (len(stage) > len(feeds)
                    or [p[:2] for p in stage] != feeds[len(feeds) - len(stage):]
                    or len(set(p[2] for p in stage)) > 1):
                raise AssertionError("cycle %d: PE %d output stage %r, feeds %r"
                                     % (cycle, u, stage, feeds))
        # Migration (choice 59): a task or a control message is only ever on a link between
        # migration neighbours, and a PE sends tasks only to them; so per region, the tasks made at
        # its PEs are completed, queued, in service or on links between its PEs. (With no policy
        # no task is ever on a link: the per-PE identity above says so.)
        if self.policy != "none":
            self._check_pipeline_migration(cycle)
        self._check_pipeline_packets(cycle)

    def _check_pipeline_migration(self, cycle):
        """Choice 59's checks of migration in the pipeline (above)."""
        made = [0] * len(self.regions)
        held = [0] * len(self.regions)
        for u, pe in enumerate(self.pes):
            for d in range(4):
                if self.mig_nbr[u][d] is None and (
                        pe.migrated_dir[d]
                        or any(msg[0] != "p" for (_sent_at, msg) in pe.links[d])):
                    raise AssertionError("cycle %d: PE %d sent a task or control message towards "
                                         "direction %d, which is not a migration neighbour"
                                         % (cycle, u, d))
            g = self.region_of[u]
            if g is None:
                continue
            made[g] += pe.injected
            held[g] += len(pe.queue) + (pe.server is not None) + pe.completed + sum(
                1 for link in pe.links for (_sent_at, msg) in link
                if msg[0] != "p" and msg[0] not in CONTROL_KINDS)
        if made != held:
            raise AssertionError("cycle %d: tasks made per region %r != completed + queued + in "
                                 "service + on links %r" % (cycle, made, held))

    def _check_pipeline_packets(self, cycle):
        """Every PE receives exactly wavelets_g packets per admitted chunk (below)."""
        # Every PE receives exactly wavelets_g packets per admitted chunk: the packets ever sent
        # to a PE (delivered, or still in the network or a stage) number at most wavelets_g * A.
        towards = [0] * self.n_pe
        for pe in self.pes:
            packets = [packet for queue in pe.router for packet in queue] + list(pe.source)
            packets += [msg[1:] for link in pe.links for (_sent_at, msg) in link if msg[0] == "p"]
            for (dest_row, dest_col, _birth) in packets:
                towards[dest_row * self.cols + dest_col] += 1
        for v, count in enumerate(towards):
            if not count:
                continue
            g = self.region_of[v]
            if g is None or self.regions[g]["first"]:
                raise AssertionError("cycle %d: a packet for PE %d, idle or in a first region"
                                     % (cycle, v))
            A = self.replicas[self.regions[g]["replica_index"]].admitted
            wavelets = self.regions[g]["wavelets"]
            if count + self.pes[v].packets_delivered > wavelets * A:
                raise AssertionError("cycle %d: PE %d has %d packets delivered and %d on the way "
                                     "with A = %d, wavelets %d"
                                     % (cycle, v, self.pes[v].packets_delivered, count, A,
                                        wavelets))

    def _check_stream(self, cycle):
        """Invariants of weight streaming at the end of a cycle."""
        stream, rep = self.stream, self.replicas[0]
        A, D, N = rep.admitted, rep.finished, self.stream.N
        passes_done = D // N
        # Every admitted chunk's pass has its weights in, and the pending chunks are one pass's.
        if A and (A - 1) // N >= stream.loaded:
            raise AssertionError("cycle %d: chunk %d admitted with %d passes loaded"
                                 % (cycle, A - 1, stream.loaded))
        if A > D and (A - 1) // N != D // N:
            raise AssertionError("cycle %d: chunks %d..%d in flight span two passes"
                                 % (cycle, D, A - 1))
        # At most WEIGHT_BUFFERS layers held: those loaded for passes not yet finished, plus
        # the one loading.
        held = stream.loaded - passes_done + (1 if stream.loading else 0)
        if stream.loaded < passes_done or held > WEIGHT_BUFFERS:
            raise AssertionError("cycle %d: loaded %d, loading %s, passes finished %d"
                                 % (cycle, stream.loaded, stream.loading, passes_done))
        if stream.loading and not cycle < stream.load_end <= cycle + stream.Lw:
            raise AssertionError("cycle %d: load under way ends at %d, Lw = %d"
                                 % (cycle, stream.load_end, stream.Lw))
        if stream.wait_cycles > self.cycle:
            raise AssertionError("cycle %d: %d waiting cycles" % (cycle, stream.wait_cycles))

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
            "shedding": [int(pe.shedding) for pe in self.pes],
            "pressure": list(self.pressure_history[-1]) if self.pressure_history else None,
            # work_stealing: per PE (asked direction or -1, owed flags of directions 0..3)
            "stealing": None if self.policy != "work_stealing" else [
                (-1 if pe.asked is None else pe.asked, tuple(int(f) for f in pe.owed))
                for pe in self.pes],
            "totals": {
                "busy": [pe.busy for pe in self.pes],
                "injected": [pe.injected for pe in self.pes],
                "refused": [pe.refused for pe in self.pes],
                "completed": [pe.completed for pe in self.pes],
                "migrated_out": [pe.migrated_out for pe in self.pes],
                "migrated_dir": [list(pe.migrated_dir) for pe in self.pes],
                "migrated_in": [pe.migrated_in for pe in self.pes],
                "latency_sum": [pe.latency_sum for pe in self.pes],
                "packets_offered": [pe.packets_offered for pe in self.pes],
                "packets_delivered": [pe.packets_delivered for pe in self.pes],
                "link_sent": [list(pe.sent_total) for pe in self.pes],
            },
            "pipeline": None if not self.pipeline_mode else {
                "taken": [pe.taken for pe in self.pes],
                "got": [pe.got for pe in self.pes],
                "admitted": [rep.admitted for rep in self.replicas],
                "finished": [rep.finished for rep in self.replicas],
                "took": [rep.took for rep in self.replicas],
                "pending": [[tuple(entry) for entry in rep.pending] for rep in self.replicas],
                "streaming": None if self.stream is None else {
                    "loaded": self.stream.loaded,
                    "loading": self.stream.loading,
                    "load_end": self.stream.load_end,
                    "wait_cycles": self.stream.wait_cycles,
                },
            },
        }


def _fewer_after_one(d, kd, depth):
    """least_loaded, random_lower, diffusion: moving one task strictly reduces the difference."""
    return kd + 1 < depth


def _least_known(eligible, k):
    """The eligible direction with the smallest known depth, ties going to the smallest d."""
    best_d, best_kd = eligible[0]
    for (d, kd) in eligible[1:]:
        if kd < best_kd:        # strict: ties keep the smaller d
            best_d, best_kd = d, kd
    return best_d


#: Step 4's rule of each migration policy (docs/mesh.md, step 4), by its name; "none" has none. The
#: policies the reference knows are "none" and these.
MIGRATION_RULES = {
    "least_loaded": MeshReference._least_loaded,
    "random_lower": MeshReference._random_lower,
    "diffusion": MeshReference._diffusion,
    "gradient": MeshReference._gradient,
    "work_stealing": MeshReference._work_stealing,
}


def simulate(cycles, **params):
    """Run cycles 0 .. cycles - 1 of a machine built as `MeshReference(**params)`; return its
    observables, one dict per cycle (`series`), and its canonical state at the end (`snapshot`)."""
    ref = MeshReference(**params)
    series = ref.run(cycles)
    return {"series": series, "snapshot": ref.snapshot()}
