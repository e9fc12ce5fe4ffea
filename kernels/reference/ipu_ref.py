"""Plain reference ("oracle") of the IPU machine model, written from docs/ipu.md alone.

It is deliberately slow and literal: every rule of docs/ipu.md ("Mapping", "Memory", "One
superstep", "The pipeline", "Observables and metrics") is carried out in plain Python with lists
and exact integers, unit by unit, tile by tile, superstep instance by superstep instance.  Its only
job is to be obviously correct so that comparing it with the fast kernel, element by element,
catches bugs in either.  It uses no code of meshsim or of the kernels: the transformer's
operators, their FLOPs and bytes come from the table of docs/ipu.md ("The transformer's
operators"), not from meshsim.transformer.

Public: `simulate(values)` runs a whole scenario (the resolved `values` of a scenario: its
"machine", "workload" and "run" tables) and returns every observable as plain lists and ints.  A
tile over its SRAM raises ValueError (one line per IPU, as docs/ipu.md "Memory" says) before
anything runs.  The scenario is taken as already checked: the oracle does not validate it.
`simulate_decode(values)` runs one step of the `decode` workload (docs/ipu.md "Generation") and the
token schedule that follows from it; its own choices are listed above it, at the end of this file.

Choices made where docs/ipu.md is ambiguous or silent (each is also noted at its spot below):

1. Elementwise, norm and embedding operators always have exactly `N` units (slices), even when
   `E < N` and some slices hold 0 elements: they count in the dealing and in `units`, and cost 0.
2. The exchange's "received" bytes are chosen by the direction of the *next* superstep ("their
   u_in" / "their u_out" refers to the next superstep's units): a recompute superstep that
   follows a backward one receives its `u_in`, a backward one that follows a recompute one
   receives its `u_out`.
3. The exchange phase always lasts at least `exchange_latency_cycles`, even when no tile sends or
   receives a byte (the formula as written has no exception for 0 bytes).
4. Every pipeline step adds the IPU-Link transfer when `n > 1`, the last forward and the last
   backward pipeline steps included (the formula has no exception).
5. The token ids are streamed on IPU 0 in every forward pass, even with `vocab_size = 0` (no
   embedding).
6. The slowest stage of a pipeline step is taken among the stages that process a micro-batch in
   it (an idle stage has no time); ties go to the lowest stage.
7. A pipeline row's `transfer_cycles` is the transfer between stages only (`sync_L +
   bytes_cycles(T H e, gbps_L)` over the stages' link L when `n > 1`, else 0, Choice 25); the
   token streaming counts in the
   stage's time (so in `cycles` via the slowest stage) and in the *transfer* share only when
   stage 0 is the slowest stage.
8. `Wst` of the all-reduce is the sum of `Wb(o)` over the stage's forward operators (embedding
   table included) of the largest stage, not doubled for training and not rounded per tile.
9. Superstep rows carry the pipeline direction (0 forward, 1 backward; 3 interleaved, Choice 30); a
   recompute superstep runs in a backward pipeline step and so has row direction 1 (its template has
   direction 2).
10. `recompute` without `training` is ignored (recomputation is "training only").
11. The memory error names, for every stage with a tile over its SRAM, the lowest such tile.
12. `bytes_cycles(y, g)` is `ceil((float(y) * float(f_c)) / float(g))`, multiplying first.
13. Tensor parallelism: `t` is `values["workload"]["tensor_parallel"]`; a missing key (or a value of
    None) means 1.  The oracle does not check that `t` divides `n_heads`; the exact divisions of the
    doc (F(o) / t, I(o) / t, O(o) / t, A / t) are asserted instead.
14. The split is applied to an operator's bytes (and FLOPs) as the doc writes it: `ceil(Wb(o) / t)`
    on the weight *bytes* (not elements), `I(o) / t` and `O(o) / t` on bytes.  Everything that the
    doc states in terms of F(o), Wb(o), I(o), O(o) then uses the per-IPU values: units and their
    costs and bytes, memory (weights and activations), exchange bytes, template FLOPs forward and
    backward (`BACKWARD_FLOPS_FACTOR x` the per-IPU F(o)).
15. Quantities the doc writes directly in T, H, e are not split: the recompute memory term
    `m x ceil(T H e / N)` (a block's input, whole on every IPU of the stage), the IPU-Link transfer
    between stages `bytes_cycles(T H e, ...)` and the token ids `4 T`.
16. The tensor-parallel all-reduce's cycles are part of the superstep's exchange phase: they are in
    the template's and the superstep row's `exchange_cycles`, hence in the stage's time and in the
    *exchange* share (not the *transfer* share, which names the gradient all-reduce); they do not
    change `sent_max_bytes` / `received_max_bytes` (tile-to-tile bytes only).  They are added to
    the forward (direction 0) `out_proj` / `ffn_down` templates and the backward (direction 1)
    `qkv_proj` / `ffn_up` templates, never to a recompute template (direction 2) nor to any other.
17. The memory error's "IPU s" names the stage `s` (its simulated IPU), as with `t = 1`.
18. The optimiser update ("The pipeline"): `optimizer` and `master_weights` are
    `values["workload"]["optimizer"]` / `["master_weights"]`; a missing key (or None) means "none" /
    "same".  The update applies only with training; without it the optimiser is ignored.  The
    per-parameter figures of `meshsim.transformer.update_cost` are rewritten here from the doc's
    words: `e` the element bytes, `w` = 4 with `master_weights = "fp32"` else `e`; state bytes and
    FLOPs per parameter: sgd (0, 2), adam (8, 12); `read = e + w + state`, `written = w + state + (e
    if master_weights = "fp32" else 0)`, `phi` the FLOPs; "none" is all 0 (no update).  Any other
    optimiser name is an error (AssertionError): the scenario is taken as checked.
19. `W_s` of the update is the same per-stage sum as the gradient all-reduce's (Choice 8): the sum
    of the simulated IPU's per-IPU (tensor-parallel split, `ceil(Wb(o) / t)`) weight bytes over the
    stage's forward operators, the embedding table included, not rounded per tile nor doubled;
    `P_s = ceil(W_s / e)` exactly (W_s need not be a multiple of e after the split).  A stage with no
    weights (stage 0 holding 0 blocks and no embedding) has `P_s = 0` and `U_s = 0`.
20. `U_s = max(bytes_cycles((read + written) P_s, streaming_memory_gbps), ceil(phi P_s / (N V)))`:
    the byte count `(read + written) P_s` is an exact integer handed to bytes_cycles (Choice 12);
    the FLOP term is an exact integer ceil with `N` the tiles of one IPU and `V` the vector FLOPs
    per cycle, the same at every precision (also with fp32 master weights).
21. The end row exists when (training and (the all-reduce exists or `U > 0`)).  With training and an
    optimiser other than "none" `U > 0` always holds in a valid scenario (some stage has weights), so
    this equals the doc's "exists when either does".  Its `cycles` = (all-reduce or 0) + `U`, its
    `transfer_cycles` = the all-reduce's cycles (0 without one), `index` 0, `slowest_stage` -1, and
    it starts where the step's last backward pipeline step ends; the step (and the run's `cycles`)
    advances by its whole `cycles`, and the whole of it counts as *transfer* in the shares.
22. The update is not a superstep: it adds no superstep row or template, no tile busy cycles (its
    vector work is not in `tile_busy`), no memory (its state lives in streaming memory), and it
    does not change the micro-batch latencies (which end with a micro-batch's last superstep).
23. Topology ("Mapping", "Topology"): `ipus_per_node`, `node_link_gbps` and `node_sync_cycles` are read
    from `values["machine"]`; a missing key (or None) means the doc's default, 16, 6.25 and 20000.  IPU
    `(ti, s, ri)` is number `(ri n + s) t + ti` over all `r` replicas (not only the simulated one), on
    node `number // ipus_per_node`; a group "lies in one node" when all its IPUs have the same node.
    A link is chosen per kind of movement, over every group of that kind, and holds for every instance
    of it: the node link `(ipu_link_gbps, ipu_sync_cycles)` when every group lies in one node, else
    `(node_link_gbps, node_sync_cycles)`.
24. The tensor all-reduce's link is chosen per stage: stage `s` looks at its groups `{(ti, s, ri) : ti}`
    for every `ri` in `0..r-1` (one spanning group, in any replica, makes the whole stage use the link
    between nodes), so stages of one run may pay different all-reduce cycles; the other stages' groups
    do not matter.  Every templated all-reduce of stage `s` (forward out_proj / ffn_down, backward
    qkv_proj / ffn_up) uses stage `s`'s link.  With `t = 1` it is 0 whatever the link.
25. The transfer between stages has one link for the whole run (every pipeline step, both directions,
    whichever stages hold a micro-batch in that step): the link between nodes when any pair
    `{(ti, s, ri), (ti, s + 1, ri)}`, for any `ti`, any `s < n - 1` and any `ri`, spans two nodes.  With
    `n = 1` there are no pairs and no transfer.
26. The gradient all-reduce (with `r > 1` and training) has one link: the link between nodes when any
    group `{(ti, s, ri) : ri}`, for any `ti` and any stage `s`, spans nodes (every stage reduces at
    once, and the end row pays one all-reduce).  The optimiser update streams from streaming memory
    and does not depend on the topology.
27. The pipeline schedule ("The pipeline") is `values["workload"]["pipeline_schedule"]`; a missing key
    (or None, or "") means "grouped".  It matters only with training: inference runs the grouped
    forward pipeline steps whatever it says (forward only either way).  Any other name than
    "grouped" or "interleaved" is an error (AssertionError): the scenario is taken as checked.
28. Memory ("Memory"): `k_s` replaces `m` in both training bullets (without recomputation in front of
    the sum of `out(i)`, with it in front of `ceil(T H e / N)`); `k_s = m` grouped,
    `min(m, 2 (n - 1 - s) + 1)` interleaved.  Inference memory does not depend on the schedule.
29. Interleaved pipeline step `p` (0 <= p < m + 2n - 2): stage `s` runs the forward of `f = p - s`
    (when 0 <= f < m) and then the backward of `b = p - (2n - 2 - s)` (when 0 <= b < m).  On IPU 0
    the token ids are streamed only when it runs a forward in the step, before the forward's first
    superstep; the backward's first superstep starts where the forward's last one ends (or at the
    step's first cycle when the stage runs no forward).  The stage's forward and backward lists and
    their templates are unchanged: the forward list's last superstep receives nothing in its exchange
    (nothing after the last superstep of the list), even when the backward follows it in the same
    step.  A recompute superstep belongs to the backward part (micro-batch `b`).
30. Interleaved rows: a superstep row carries direction 3 (its pipeline step's; its template's own
    direction says which part it is) and the micro-batch of its part (`f` for a forward superstep,
    `b` for a backward or recompute one); rows are in order of pipeline step, stage, then position
    (the forward part's supersteps before the backward part's).  A pipeline row is (step, 3, p,
    start, length, slowest stage, transfer).
31. The slowest stage of an interleaved pipeline step is taken among the stages that run a forward or
    a backward in it, by their time in the step (the forward with the token ids on IPU 0, plus the
    backward); ties go to the lowest stage (as Choice 6).  Every pipeline step of the interleaved
    schedule has at least one such stage.  The transfer between stages (Choice 25's link, `T H e`
    bytes, Choice 15) is added once per interleaved pipeline step when `n > 1`, even when only
    forwards or only backwards cross the links in it (the fill and the drain), and is the row's
    `transfer_cycles`.
32. Interleaved shares: the slowest stage's forward templates (when it runs a forward in the step)
    and backward list templates, recompute included (when it runs a backward), count their compute,
    sync and exchange; the transfer once, and the token ids when the slowest stage is 0 and it runs a
    forward, count as *transfer*.  The four parts thus add up to the pipeline step's length.
33. Interleaved latency: a micro-batch starts at the first cycle of the pipeline step in which IPU 0
    runs its forward and ends where IPU 0's last backward superstep of it ends (one latency per
    micro-batch per step, in micro-batch order, as grouped).
"""

from __future__ import annotations

import math
from fractions import Fraction
from types import SimpleNamespace

# docs/ipu.md "The transformer's operators": bytes per element by precision, and backward FLOPs as a
# multiple of forward FLOPs by operator kind.
ELEMENT_BYTES = {"fp32": 4, "tf32": 4, "bf16": 2, "fp16": 2, "fp8": 1}
BACKWARD_FLOPS_FACTOR = {"gemm": 2, "attention": 2, "elementwise": 1, "norm": 1}

# Template kinds and directions, as docs/ipu.md "Result file" numbers them.
KIND_CODE = {"gemm": 0, "attention": 1, "elementwise": 2, "norm": 3, "embedding": 4}
DIR_FORWARD = 0
DIR_BACKWARD = 1
DIR_RECOMPUTE = 2
DIR_ALLREDUCE = 2  # pipeline rows only: the end row (the gradient all-reduce and the optimiser update)
DIR_END = DIR_ALLREDUCE
DIR_INTERLEAVED = 3  # pipeline and superstep rows of an interleaved pipeline step (Choice 30)

# docs/ipu.md "The pipeline" (Choice 18): per optimiser, the state bytes and the FLOPs per parameter of
# its update (SGD: no state, 2 FLOPs; Adam: two fp32 moments of 4 bytes, 12 FLOPs).  "none" has none.
OPTIMIZER_STATE_FLOPS = {"sgd": (0, 2), "adam": (8, 12)}

# docs/ipu.md "Tensor parallelism": how each block operator is split over the t IPUs of a stage, as
# (input split, output split).  qkv_proj and ffn_up are column-parallel (whole input, split output),
# out_proj and ffn_down row-parallel (split input, whole output), the attentions and gelu split in
# and out; an operator not listed (ln1, ln2, residual1, residual2, the embedding) is replicated.
TP_SPLIT = {
    "qkv_proj": (False, True),
    "attn_scores_softmax": (True, True),
    "attn_v": (True, True),
    "out_proj": (True, False),
    "ffn_up": (False, True),
    "gelu": (True, True),
    "relu": (True, True),
    "swiglu": (True, True),
    "geglu": (True, True),
    "ffn_down": (True, False),
}
# The supersteps whose exchange phase also all-reduces a T H e-byte output over the t IPUs (t > 1):
# forward out_proj and ffn_down, backward qkv_proj and ffn_up (the input gradient).
TP_ALLREDUCE_FORWARD = ("out_proj", "ffn_down")
TP_ALLREDUCE_BACKWARD = ("qkv_proj", "ffn_up")


def _ceil_div(a, c):
    """ceil(a / c) for non-negative integers, exactly."""
    return -((-a) // c)


def _exact_div(a, c):
    """a / c where the doc says the division is exact; checked."""
    assert a % c == 0, (a, c)
    return a // c


def _update_cost(optimizer, master_weights, e):
    """(read, written, phi): the optimiser update's bytes read, bytes written and FLOPs per parameter
    (docs/ipu.md "The pipeline", meshsim.transformer.update_cost restated; Choice 18).  Read: the
    gradient (e), the master weights (w) and the state; written: the master weights, the state and,
    with fp32 master weights, the e-byte copy computed with.  All 0 for "none"."""
    if optimizer == "none":
        return 0, 0, 0
    assert optimizer in OPTIMIZER_STATE_FLOPS, optimizer
    state, phi = OPTIMIZER_STATE_FLOPS[optimizer]
    fp32_master = master_weights == "fp32"
    w = 4 if fp32_master else e
    read = e + w + state
    written = w + state + (e if fp32_master else 0)
    return read, written, phi


def _block_operators(layer, T, B, S, H, A, F, K=None, gated=False, bias=True, shape=None, L=None):
    """The forward operators of transformer block `layer`, in execution order, as the table of
    docs/ipu.md "The transformer's operators" gives them: (name, op, kind, FLOPs, weight elements,
    input elements, output elements), `op` being the name without its "layer<i>." prefix, for T
    tokens of B sequences of S tokens, hidden size H, A heads (all of them: the tensor-parallel split
    is applied by the caller), feed-forward width F, K key (and value) elements a token (None: H),
    a gated MLP or GeLU, and biases or none.  `shape` (a dict, None: the defaults) gives the rest of
    the table's names: D (query elements a token, H by default), g and a (the MLP's projections side
    by side and its activation's FLOPs an element; from `gated` by default), act (the activation
    operator's name, "gelu" by default), n and m (the norm's FLOPs
    and parameters an element, 8 and 2), beta_q (biases of Q, K and V; `bias` by default) and
    shared (one norm a block: no ln2).  `L` is the keys each query attends to (None: S, the table at the
    top of docs/ipu.md; a decode step has S = 1 and L = context + output_tokens, "Generation"): the
    attentions then have FLOPs 2 B S L D + 5 B A S L and 2 B S L D, inputs T D + B L K and
    B A S L + B L K, output B A S L (with L = S these are the table's, B L K = T K)."""
    K = H if K is None else K
    L = S if L is None else L
    shape = shape or {}
    D = shape.get("D", H)
    Q = D + 2 * K
    g = shape.get("g", 2 if gated else 1)
    a = shape.get("a", 5 if gated else 8)
    n, m = shape.get("n", 8), shape.get("m", 2)
    beta = 1 if bias else 0
    beta_q = shape.get("beta_q", beta)
    table = [
        ("ln1", "norm", n * T * H, m * H, T * H, T * H),
        ("qkv_proj", "gemm", 2 * T * H * Q, H * Q + beta_q * Q, T * H, T * Q),
        ("attn_scores_softmax", "attention", 2 * B * S * L * D + 5 * B * A * S * L, 0, T * D + B * L * K,
         B * A * S * L),
        ("attn_v", "attention", 2 * B * S * L * D, 0, B * A * S * L + B * L * K, T * D),
        ("out_proj", "gemm", 2 * T * D * H, D * H + beta * H, T * D, T * H),
        ("residual1", "elementwise", T * H, 0, 2 * T * H, T * H),
        ("ln2", "norm", n * T * H, m * H, T * H, T * H),
        ("ffn_up", "gemm", 2 * T * H * g * F, g * H * F + beta * g * F, T * H, g * T * F),
        (shape.get("act", "gelu"), "elementwise", a * T * F, 0, g * T * F, T * F),
        ("ffn_down", "gemm", 2 * T * F * H, F * H + beta * H, T * F, T * H),
        ("residual2", "elementwise", T * H, 0, 2 * T * H, T * H),
    ]
    if shape.get("shared"):
        table = [row for row in table if row[0] != "ln2"]
    return [("layer%d.%s" % (layer, op), op, kind, fl, w, i, o) for op, kind, fl, w, i, o in table]


# docs/ipu.md "The transformer's operators": per workload.mlp, (g, a); per workload.norm, (n, m).
MLP_G_A = {"gelu": (1, 8), "relu": (1, 1), "gated": (2, 5), "geglu": (2, 9)}
# docs/ipu.md "The transformer's operators": the activation's operator is named for what it computes.
ACT_NAME = {"gelu": "gelu", "relu": "relu", "gated": "swiglu", "geglu": "geglu"}
NORM_N_M = {"layernorm": (8, 2), "rmsnorm": (4, 1)}


def _names(values: dict) -> SimpleNamespace:
    """The names of docs/ipu.md ("Names", "Batches"), from a scenario's resolved values, with the
    choices where the doc is silent (10, 13, 18, 23, 27)."""
    mach = values["machine"]
    wl = values["workload"]
    nm = SimpleNamespace(steps=int(values["run"]["steps"]))
    nm.N = int(mach["tiles"])
    nm.W = int(mach["worker_threads"])
    M = int(mach["macs_per_cycle"])
    nm.V = int(mach["vector_flops_per_cycle"])
    nm.X = int(mach["exchange_bytes_per_cycle"])
    nm.b = int(mach["gemm_block"])
    nm.f_c = mach["clock_ghz"]
    nm.sram_bytes = int(mach["tile_sram_kib"]) * 1024
    nm.code_bytes = int(mach["code_kib_per_tile"]) * 1024
    nm.sync_cycles = int(mach["sync_cycles"])
    nm.ipu_sync_cycles = int(mach["ipu_sync_cycles"])
    nm.exchange_latency = int(mach["exchange_latency_cycles"])
    nm.ipu_link_gbps = mach["ipu_link_gbps"]
    # Choice 23: the topology's keys, with the doc's defaults when missing (older inputs).
    per_node = mach.get("ipus_per_node")
    nm.ipus_per_node = 16 if per_node is None else int(per_node)
    node_gbps = mach.get("node_link_gbps")
    nm.node_link_gbps = 6.25 if node_gbps is None else node_gbps
    node_sync = mach.get("node_sync_cycles")
    nm.node_sync_cycles = 20000 if node_sync is None else int(node_sync)
    nm.streaming_gbps = mach["streaming_memory_gbps"]

    nm.H = int(wl["hidden_size"])
    nm.n_layers = int(wl["n_layers"])
    nm.A = int(wl["n_heads"])
    nm.S = int(wl["seq_len"])
    batch = int(wl["batch"])
    precision = wl["precision"]
    nm.e = ELEMENT_BYTES[precision]
    # M at the precision (docs/ipu.md, "Names"): macs_per_cycle x fp32_rate at fp32 and tf32, as the
    # exact fraction M_num / M_den with fp32_rate nearest r_n / r_d (r_d <= 10^6); else M.
    if precision in ("fp32", "tf32"):
        # the fraction nearest fp32_rate with a denominator of at most 10^6 (docs/ipu.md, "Names")
        p_q = Fraction(str(mach["fp32_rate"])).limit_denominator(10**6)
        nm.M_num, nm.M_den = M * p_q.numerator, p_q.denominator
    else:
        nm.M_num, nm.M_den = M, 1
    nm.training = bool(wl["training"])
    # Choice 10: recomputation is "training only"; without training it is ignored.
    nm.recompute = bool(wl["recompute"]) and nm.training
    nm.r_replicas = int(wl["replicas"])
    nm.m = int(wl["microbatches"])
    nm.vocab = int(wl["vocab_size"])
    layers_per_stage = list(wl["layers_per_stage"])
    if len(layers_per_stage) == 0:
        layers_per_stage = [nm.n_layers]
    nm.layers_per_stage = layers_per_stage
    nm.n = len(layers_per_stage)
    # Choice 13: the tensor-parallel degree t, 1 when the key is missing.
    tp = wl.get("tensor_parallel")
    nm.tp = 1 if tp is None else int(tp)
    # Choice 18: the optimiser and the master weights, "none" and "same" when the key is missing.
    optimizer = wl.get("optimizer")
    nm.optimizer = "none" if optimizer is None else str(optimizer)
    master_weights = wl.get("master_weights")
    nm.master_weights = "same" if master_weights is None else str(master_weights)
    # Choice 27: the pipeline schedule, "grouped" when the key is missing; it matters only with training.
    schedule = wl.get("pipeline_schedule") or "grouped"
    assert schedule in ("grouped", "interleaved"), schedule
    nm.interleaved = nm.training and schedule == "interleaved"
    # The simulated IPU of a stage holds A' = A / t heads (docs/ipu.md, "Work units").
    nm.A_ipu = _exact_div(nm.A, nm.tp)

    # ---- Batches.
    nm.B_m = _exact_div(batch, nm.r_replicas * nm.m)
    nm.T = nm.B_m * nm.S
    # F of the operator table: workload.ffn_width, or ffn_multiplier x H when it is 0 (or missing, in
    # older inputs); K = n_kv_heads x H / A (n_kv_heads 0 or missing: A); the MLP and the biases.
    nm.F_width = int(wl.get("ffn_width") or 0) or int(wl["ffn_multiplier"]) * nm.H
    # The head's width: workload.head_dim, or H / A when it is 0 (or missing); D = A x that.
    head = int(wl.get("head_dim") or 0) or nm.H // nm.A
    nm.K_kv = (int(wl.get("n_kv_heads") or 0) or nm.A) * head
    nm.gated = wl.get("mlp", "gelu") in ("gated", "geglu")
    nm.bias = bool(wl.get("bias", True))
    g, a = MLP_G_A[wl.get("mlp", "gelu")]
    n, m = NORM_N_M[wl.get("norm", "layernorm")]
    nm.shape = dict(D=nm.A * head, g=g, a=a, n=n, m=m, act=ACT_NAME[wl.get("mlp", "gelu")],
                    beta_q=int(nm.bias or bool(wl.get("qkv_bias", False))),
                    shared=bool(wl.get("shared_norm", False)))
    return nm


def _bytes_cycles(nm, y, g):
    """docs/ipu.md: ceil(y x f_c / g), double precision, 0 for 0 bytes.  Choice 12: y x f_c first."""
    if y == 0:
        return 0
    return int(math.ceil(float(y) * float(nm.f_c) / float(g)))


def _topology(nm) -> SimpleNamespace:
    """docs/ipu.md "Topology", Choices 23-26: the link each kind of data movement uses, and each
    stage's tensor-parallel all-reduce.  IPU (ti, s, ri) is number (ri n + s) t + ti and sits on node
    number // ipus_per_node.  A kind of data movement uses the node's link (ipu_link_gbps,
    ipu_sync_cycles) when every one of its groups lies in one node, else the link between nodes
    (node_link_gbps, node_sync_cycles)."""
    n, tp, r_replicas = nm.n, nm.tp, nm.r_replicas

    def node_of(ti, s, ri):
        return ((ri * n + s) * tp + ti) // nm.ipus_per_node

    def link(groups):
        # (gbps_L, sync_L) for a kind of movement made of these groups of IPUs.
        if any(len(set(node_of(ti, s, ri) for ti, s, ri in g)) > 1 for g in groups):
            return nm.node_link_gbps, nm.node_sync_cycles
        return nm.ipu_link_gbps, nm.ipu_sync_cycles

    top = SimpleNamespace()
    # Choice 24: stage s's tensor all-reduces: the groups {(ti, s, ri) : ti}, one per ri.
    tensor_link = [link([[(ti, s, ri) for ti in range(tp)] for ri in range(r_replicas)]) for s in range(n)]
    # Choice 25: the transfer between stages: the pairs {(ti, s, ri), (ti, s + 1, ri)} of every s < n - 1.
    top.stage_link = link(
        [[(ti, s, ri), (ti, s + 1, ri)] for ri in range(r_replicas) for s in range(n - 1) for ti in range(tp)]
    )
    # Choice 26: the gradient all-reduce: the groups {(ti, s, ri) : ri}, one per (ti, s).
    top.replica_link = link([[(ti, s, ri) for ri in range(r_replicas)] for s in range(n) for ti in range(tp)])
    # docs/ipu.md "Tensor parallelism": with t > 1 the exchange phase of the listed supersteps adds a
    # ring all-reduce of the operator's T H e-byte output over the stage's t IPUs, over the link of the
    # stage's tensor groups (Choice 24); 0 with t = 1.
    top.tp_allreduce = []
    for s in range(n):
        if tp > 1:
            gbps_L, sync_L = tensor_link[s]
            top.tp_allreduce.append(
                sync_L + _bytes_cycles(nm, _ceil_div(2 * (tp - 1) * nm.T * nm.H * nm.e, tp), gbps_L))
        else:
            top.tp_allreduce.append(0)
    return top


def _stage_layers(nm) -> list:
    """Stages: which blocks each IPU holds."""
    stage_layers = []
    first = 0
    for s in range(nm.n):
        stage_layers.append(list(range(first, first + int(nm.layers_per_stage[s]))))
        first += int(nm.layers_per_stage[s])
    return stage_layers


def _forward_operators(nm, s, layers) -> list:
    """Stage s's forward operators, each a dict: name, op (the operator's name inside its block,
    "embedding" for the embedding), kind, block (layer index or -1 for the embedding), F, Wb, I, O
    (the simulated IPU's values, split by tensor parallelism), backward_name, backward_flops."""
    T, H, e, tp = nm.T, nm.H, nm.e, nm.tp
    fops = []
    if s == 0 and nm.vocab > 0:
        fops.append(dict(name="embedding", op="embedding", kind="embedding", block=-1,
                         F=T * H,  # one FLOP per gathered element
                         Wb=nm.vocab * H * e, I=0, O=T * H * e, backward_name="embedding.backward",
                         backward_flops=T * H))
    for layer in layers:
        # nm.L: the keys a query attends to, absent (None: S) outside a decode step (simulate_decode).
        block = _block_operators(layer, T, nm.B_m, nm.S, H, nm.A, nm.F_width, nm.K_kv, nm.gated, nm.bias, nm.shape,
                                 L=getattr(nm, "L", None))
        for name, op, kind, flops, w_el, i_el, o_el in block:
            Wb, I_b, O_b = w_el * e, i_el * e, o_el * e
            if op in TP_SPLIT:
                # docs/ipu.md "Tensor parallelism": F(o) / t FLOPs, ceil(Wb(o) / t) weight bytes, a
                # split input or output I(o) / t or O(o) / t bytes (exact divisions).  Choice 14: on
                # bytes; every use of F, Wb, I, O below is then the per-IPU value.
                split_in, split_out = TP_SPLIT[op]
                flops = _exact_div(flops, tp)
                Wb = _ceil_div(Wb, tp)
                if split_in:
                    I_b = _exact_div(I_b, tp)
                if split_out:
                    O_b = _exact_div(O_b, tp)
            fops.append(dict(name=name, op=op, kind=kind, block=layer, F=flops, Wb=Wb, I=I_b, O=O_b,
                             backward_name=name + ".backward",
                             backward_flops=BACKWARD_FLOPS_FACTOR[kind] * flops))
    return fops


def _work_units(nm, fo) -> list:
    """An operator's work units, in their fixed order: [c_forward, c_backward, u_out, u_in] each."""
    T, e, b, N = nm.T, nm.e, nm.b, nm.N
    M_num, M_den = nm.M_num, nm.M_den
    units = []
    kind = fo["kind"]
    if kind == "gemm":
        K = _exact_div(fo["I"], T * e)
        C = _exact_div(fo["O"], T * e)
        for tb in range(_ceil_div(T, b)):
            r = min(b, T - tb * b)
            for cb in range(_ceil_div(C, b)):
                q = min(b, C - cb * b)
                c_f = _ceil_div(r * q * K * M_den, M_num)
                F_u = 2 * r * q * K
                c_b = _ceil_div(BACKWARD_FLOPS_FACTOR["gemm"] * F_u * M_den, 2 * M_num)
                units.append([c_f, c_b, r * q * e, r * K * e])
    elif kind == "attention":
        # The IPU's A' = A / t heads: D = B_m A' S.
        S = nm.S
        D = nm.B_m * nm.A_ipu * S
        nblk = _ceil_div(S, b)
        for _seq in range(nm.B_m):
            for _head in range(nm.A_ipu):
                for blk in range(nblk):
                    r = (S - b * (nblk - 1)) if blk == nblk - 1 else b
                    c_f = _ceil_div(fo["F"] * r * M_den, 2 * M_num * D)
                    # F_u = F(o) r / D; backward ceil(2 F_u / (2 M)), kept as one exact ratio.
                    c_b = _ceil_div(BACKWARD_FLOPS_FACTOR["attention"] * fo["F"] * r * M_den, 2 * M_num * D)
                    units.append([c_f, c_b, _exact_div(fo["O"] * r, D), _exact_div(fo["I"] * r, D)])
    elif kind in ("elementwise", "norm", "embedding"):
        if kind == "embedding":
            E = T * nm.H
            phi = 1
        else:
            E = _exact_div(fo["O"], e)
            phi = _exact_div(fo["F"], E)
        # Choice 1: always N slices, some possibly of 0 elements.
        for k in range(N):
            s_k = E // N + (1 if k < E % N else 0)
            c = _ceil_div(s_k * phi, nm.V)
            u_in = 0 if kind == "embedding" else _exact_div(fo["I"] * s_k, E)
            # backward: a slice costs what it costs forward
            units.append([c, c, s_k * e, u_in])
    else:
        raise AssertionError(kind)
    return units


def _deal(nm, fops) -> None:
    """Dealing: the j-th unit of the stage (over all its forward operators) goes to tile j mod N; on
    its tile, the units of one operator are numbered k = 0, 1, ... and run on thread k mod W."""
    j = 0
    for fo in fops:
        count_on_tile = [0] * nm.N
        for u in fo["units"]:
            tile = j % nm.N
            u["tile"] = tile
            u["thread"] = count_on_tile[tile] % nm.W
            count_on_tile[tile] += 1
            j += 1


def _stage_operators(nm, layers_of_stages) -> list:
    """Per stage, its forward operators with their units (dicts: tile, thread, c_f, c_b, u_out,
    u_in), dealt to tiles."""
    stage_fops = []
    for s in range(nm.n):
        fops = _forward_operators(nm, s, layers_of_stages[s])
        for fo in fops:
            fo["units"] = [dict(tile=-1, thread=-1, c_f=u[0], c_b=u[1], u_out=u[2], u_in=u[3])
                           for u in _work_units(nm, fo)]
        _deal(nm, fops)
        stage_fops.append(fops)
    return stage_fops


def _tile_busy(nm, fo, cost_key) -> list:
    """An operator's busy cycles per tile.  docs/ipu.md: an attention unit runs on one thread (W x
    the largest thread sum); a GEMM block and every slice are split over all the tile's threads (the
    sum of the costs)."""
    N, W = nm.N, nm.W
    busy = [0] * N
    if fo["kind"] == "attention":
        per_thread = [[0] * W for _ in range(N)]
        for u in fo["units"]:
            per_thread[u["tile"]][u["thread"]] += u[cost_key]
        for t in range(N):
            busy[t] = W * max(per_thread[t])
    else:
        for u in fo["units"]:
            busy[u["tile"]] += u[cost_key]
    return busy


def _tile_bytes(nm, fo, key) -> list:
    out = [0] * nm.N
    for u in fo["units"]:
        out[u["tile"]] += u[key]
    return out


def _stage_memory(nm, s, fops) -> list:
    """docs/ipu.md "Memory": stage s's bytes per tile, as (code, weights, activations)."""
    N, T, H, e, m = nm.N, nm.T, nm.H, nm.e, nm.m
    # Choice 28: k_s, the micro-batches in flight on stage s: m grouped, min(m, 2 (n - 1 - s) + 1)
    # interleaved.
    k_s = min(m, 2 * (nm.n - 1 - s) + 1) if nm.interleaved else m
    w_share = 0
    for fo in fops:
        w_share += _ceil_div(fo["Wb"], N)
    if nm.training:
        w_share *= 2
    outs = [_tile_bytes(nm, fo, "u_out") for fo in fops]
    ins = [_tile_bytes(nm, fo, "u_in") for fo in fops]
    split = []
    for t in range(N):
        if not nm.training:
            act = max([ins[i][t] + outs[i][t] for i in range(len(fops))] + [0])
        elif not nm.recompute:
            act = k_s * sum(outs[i][t] for i in range(len(fops))) + max([ins[i][t] for i in range(len(fops))] + [0])
        else:
            groups = {}
            for i, fo in enumerate(fops):
                groups[fo["block"]] = groups.get(fo["block"], 0) + outs[i][t]
            # Choice 15: a micro-batch's input T H e is whole on every IPU of the stage.
            act = (
                k_s * _ceil_div(T * H * e, N)
                + max(list(groups.values()) + [0])
                + max([ins[i][t] for i in range(len(fops))] + [0])
            )
        split.append((nm.code_bytes, w_share, act))
    return split


def _memory(nm, stage_fops, layers_of_stages) -> list:
    """Memory, checked before anything runs: [stage][tile] bytes; ValueError naming, for every stage
    with a tile over its SRAM, the lowest such tile (Choices 11 and 17)."""
    memory = []
    problems = []
    for s in range(nm.n):
        split = _stage_memory(nm, s, stage_fops[s])
        mem = [code + wsh + act for code, wsh, act in split]
        memory.append(mem)
        for t in range(nm.N):
            if mem[t] > nm.sram_bytes:
                # Choice 11: the lowest tile over its SRAM, one line per stage.  Choice 17: "IPU s" is
                # the stage (its simulated IPU), whatever t.
                lay = layers_of_stages[s]
                if len(lay) == 1:
                    held = "layer %d" % lay[0]
                elif lay:
                    held = "layers %d-%d" % (lay[0], lay[-1])
                else:
                    held = "no layer"
                if s == 0 and nm.vocab > 0:
                    held += " and the embedding"
                code, wsh, act = split[t]
                problems.append(
                    "IPU %d tile %d needs %d bytes but has %d (tile_sram_kib = %d): code %d + "
                    "weights %d + activations %d; IPU %d holds %s"
                    % (s, t, mem[t], nm.sram_bytes, nm.sram_bytes // 1024, code, wsh, act, s, held)
                )
                break
    if problems:
        raise ValueError("\n".join(problems))
    return memory


def _superstep_lists(nm, fops, layers) -> tuple:
    """A stage's forward list and backward list of supersteps, entries (operator, direction)."""
    fwd_list = [(fo, DIR_FORWARD) for fo in fops]
    bwd_list = []
    if nm.training:
        if not nm.recompute:
            bwd_list = [(fo, DIR_BACKWARD) for fo in reversed(fops)]
        else:
            for layer in reversed(layers):
                block_ops = [fo for fo in fops if fo["block"] == layer]
                bwd_list += [(fo, DIR_RECOMPUTE) for fo in block_ops]
                bwd_list += [(fo, DIR_BACKWARD) for fo in reversed(block_ops)]
            for fo in fops:
                if fo["block"] == -1:  # the embedding's backward comes last
                    bwd_list.append((fo, DIR_BACKWARD))
    return fwd_list, bwd_list


def _template(nm, s, lst, i, tp_allreduce) -> dict:
    """The template of entry i of a stage's superstep list."""
    fo, d = lst[i]
    if d == DIR_BACKWARD:
        busy = _tile_busy(nm, fo, "c_b")
        sent = _tile_bytes(nm, fo, "u_in")
        name = fo["backward_name"]
        flops = fo["backward_flops"]
    else:
        busy = _tile_busy(nm, fo, "c_f")
        sent = _tile_bytes(nm, fo, "u_out")
        name = fo["name"] + (".recompute" if d == DIR_RECOMPUTE else "")
        flops = fo["F"]
    if i + 1 < len(lst):
        nfo, nd = lst[i + 1]
        # Choice 2: keyed on the direction of the next superstep.
        received = _tile_bytes(nm, nfo, "u_out" if nd == DIR_BACKWARD else "u_in")
    else:
        received = [0] * nm.N
    peak = max(max(sent[t], received[t]) for t in range(nm.N))
    # Choice 3: the latency is paid even with 0 bytes.
    exchange = nm.exchange_latency + _ceil_div(peak, nm.X)
    # docs/ipu.md "Tensor parallelism" (Choice 16): forward out_proj / ffn_down and backward qkv_proj /
    # ffn_up also all-reduce over the stage's t IPUs; recompute never does.
    if (d == DIR_FORWARD and fo["op"] in TP_ALLREDUCE_FORWARD) or (
        d == DIR_BACKWARD and fo["op"] in TP_ALLREDUCE_BACKWARD
    ):
        exchange += tp_allreduce[s]
    return dict(stage=s, name=name, direction=d, kind=KIND_CODE[fo["kind"]], units=len(fo["units"]), flops=flops,
                busy=busy, compute=max(busy), sync=nm.sync_cycles, exchange=exchange, sent_max=max(sent),
                received_max=max(received))


def _templates(nm, stage_fops, layers_of_stages, tp_allreduce) -> tuple:
    """Superstep lists and templates, stage by stage: forward list, then backward list.  Returns
    (templates, per stage the template indices of its forward list, and of its backward list)."""
    templates = []
    stage_fwd_ids = []
    stage_bwd_ids = []
    for s in range(nm.n):
        ids_per_list = []
        for lst in _superstep_lists(nm, stage_fops[s], layers_of_stages[s]):
            ids = []
            for i in range(len(lst)):
                ids.append(len(templates))
                templates.append(_template(nm, s, lst, i, tp_allreduce))
            ids_per_list.append(ids)
        stage_fwd_ids.append(ids_per_list[0])
        stage_bwd_ids.append(ids_per_list[1])
    return templates, stage_fwd_ids, stage_bwd_ids


def _superstep_length(tpl) -> int:
    return tpl["compute"] + tpl["sync"] + tpl["exchange"]


def _step_costs(nm, top, stage_fops) -> SimpleNamespace:
    """What every training step pays besides its supersteps: the token ids' streaming, the transfer
    between stages, and the end row (the gradient all-reduce and the optimiser update)."""
    n, e = nm.n, nm.e
    costs = SimpleNamespace()
    # Choice 5: the token ids are streamed on IPU 0 in every forward pass.
    costs.stream_cycles = _bytes_cycles(nm, 4 * nm.T, nm.streaming_gbps)
    # Choice 4: every pipeline step has the transfer when n > 1.  Choice 15: T H e, not split.  Choice
    # 25: over the stages' link L, one for every pipeline step.
    if n > 1:
        gbps_L, sync_L = top.stage_link
        costs.link_transfer = sync_L + _bytes_cycles(nm, nm.T * nm.H * e, gbps_L)
    else:
        costs.link_transfer = 0
    # W_s: the sum of Wb(o) over stage s's forward operators, the embedding table included.  With
    # tensor parallelism these are the simulated IPU's per-IPU (split) Wb(o) (docs/ipu.md "The
    # pipeline": Wst is the simulated IPU's share; Choice 19: W_s of the update likewise).
    stage_weight_bytes = [sum(fo["Wb"] for fo in stage_fops[s]) for s in range(n)]
    allreduce = None
    if nm.r_replicas > 1 and nm.training:
        # Choice 8: Wst is the largest W_s, not doubled for training and not rounded per tile.
        wst = max(stage_weight_bytes)
        # Choice 26: over the replicas' link L.
        gbps_L, sync_L = top.replica_link
        allreduce = sync_L + _bytes_cycles(nm, _ceil_div(2 * (nm.r_replicas - 1) * wst, nm.r_replicas), gbps_L)
    # docs/ipu.md "The pipeline": with training and an optimiser other than "none", the optimiser
    # update: stage s streams (read + written) P_s bytes while its tiles do phi P_s FLOPs, overlapped;
    # U is the slowest stage's (every stage updates at once).  Choices 18-20.
    update = 0
    if nm.training:
        read, written, phi = _update_cost(nm.optimizer, nm.master_weights, e)
        for s in range(n):
            P_s = _ceil_div(stage_weight_bytes[s], e)
            U_s = max(_bytes_cycles(nm, (read + written) * P_s, nm.streaming_gbps), _ceil_div(phi * P_s, nm.N * nm.V))
            update = max(update, U_s)
    # Choice 21: the step's end row, when there is an all-reduce or an update: it lasts both, and its
    # transfer_cycles are the all-reduce's alone.
    costs.end_row = None
    if nm.training and (allreduce is not None or update > 0):
        allreduce_cycles = 0 if allreduce is None else allreduce
        costs.end_row = (allreduce_cycles + update, allreduce_cycles)
    return costs


def _run_part(nm, run, step, d, p, s, mb, ids, t0) -> int:
    """Stage s runs the supersteps `ids` of micro-batch mb from cycle t0, in pipeline step p of
    direction d (its rows' direction); returns where the last one ends."""
    for x in ids:
        tpl = run.templates[x]
        run.supersteps.append((step, d, p, s, mb, x, t0, tpl["compute"], tpl["sync"], tpl["exchange"]))
        for t in range(nm.N):
            run.tile_busy[s][t] += tpl["busy"][t]
        t0 += _superstep_length(tpl)
    return t0


def _count_shares(run, ids) -> None:
    """The slowest stage's supersteps into the compute, sync and exchange shares."""
    for x in ids:
        run.shares["compute"] += run.templates[x]["compute"]
        run.shares["sync"] += run.templates[x]["sync"]
        run.shares["exchange"] += run.templates[x]["exchange"]


def _run_interleaved(nm, run, step, cycle, mb_start, mb_end) -> int:
    """docs/ipu.md "The pipeline", interleaved: the m + 2n - 2 pipeline steps of one training step,
    from `cycle`; returns where the last one ends.  Choices 29-33."""
    n, m = nm.n, nm.m
    for p in range(m + 2 * n - 2):
        p_start = cycle
        slowest = -1
        slowest_time = -1
        slowest_parts = []
        for s in range(n):
            f = p - s
            b_mb = p - (2 * n - 2 - s)
            # the parts the stage runs, in order: (micro-batch, its list, forward or not)
            parts = []
            if 0 <= f < m:
                parts.append((f, run.fwd_ids[s], True))
            if 0 <= b_mb < m:
                parts.append((b_mb, run.bwd_ids[s], False))
            if not parts:
                continue  # idle: a bubble
            t0 = p_start
            for mb, ids, is_fwd in parts:
                if is_fwd and s == 0:
                    # Choice 29: the token ids stream before IPU 0's forward, and only then.
                    mb_start[mb] = p_start
                    t0 += run.costs.stream_cycles
                # Choice 30: the row's direction is its pipeline step's (3).
                t0 = _run_part(nm, run, step, DIR_INTERLEAVED, p, s, mb, ids, t0)
                if not is_fwd and s == 0:
                    # Choice 33: the micro-batch ends where IPU 0's backward of it ends.
                    mb_end[mb] = t0
            # The stage's time in the step: the sum of the parts it runs (with the token ids on IPU 0).
            time_s = t0 - p_start
            # Choice 31: the slowest among the stages that run something; ties the lowest.
            if time_s > slowest_time:
                slowest_time = time_s
                slowest = s
                slowest_parts = parts
        assert slowest >= 0
        # Choice 31: the transfer once per pipeline step (n > 1), the row's transfer_cycles.
        link_transfer = run.costs.link_transfer
        length = slowest_time + link_transfer
        run.pipeline.append((step, DIR_INTERLEAVED, p, p_start, length, slowest, link_transfer))
        # Choice 32: the slowest stage's parts into compute / sync / exchange; the transfer and its
        # token ids (stage 0 with a forward) into transfer.
        for _mb, ids, is_fwd in slowest_parts:
            _count_shares(run, ids)
            if is_fwd and slowest == 0:
                run.shares["transfer"] += run.costs.stream_cycles
        run.shares["transfer"] += link_transfer
        cycle = p_start + length
    return cycle


def _run_grouped(nm, run, step, d, cycle, mb_start, mb_end) -> int:
    """docs/ipu.md "The pipeline", grouped: the m + n - 1 pipeline steps of direction d of one step,
    from `cycle`; returns where the last one ends."""
    n, m = nm.n, nm.m
    for p in range(m + n - 1):
        p_start = cycle
        slowest = -1
        slowest_time = -1
        for s in range(n):
            mb = p - s if d == DIR_FORWARD else p - (n - 1 - s)
            if not (0 <= mb < m):
                continue  # idle: a bubble
            t0 = p_start
            ids = run.fwd_ids[s] if d == DIR_FORWARD else run.bwd_ids[s]
            if d == DIR_FORWARD and s == 0:
                t0 += run.costs.stream_cycles
            t0 = _run_part(nm, run, step, d, p, s, mb, ids, t0)
            if d == DIR_FORWARD and s == 0:
                mb_start[mb] = p_start
            if nm.training and d == DIR_BACKWARD and s == 0:
                mb_end[mb] = t0
            if not nm.training and d == DIR_FORWARD and s == n - 1:
                mb_end[mb] = t0
            # Choice 6: the slowest among the stages with a micro-batch; ties the lowest.
            if run.stage_time[s][d] > slowest_time:
                slowest_time = run.stage_time[s][d]
                slowest = s
        link_transfer = run.costs.link_transfer
        length = slowest_time + link_transfer
        # Choice 7: the row's transfer_cycles is the IPU-Link transfer only.
        run.pipeline.append((step, d, p, p_start, length, slowest, link_transfer))
        _count_shares(run, run.fwd_ids[slowest] if d == DIR_FORWARD else run.bwd_ids[slowest])
        if d == DIR_FORWARD and slowest == 0:
            run.shares["transfer"] += run.costs.stream_cycles
        run.shares["transfer"] += link_transfer
        cycle = p_start + length
    return cycle


def simulate(values: dict) -> dict:
    """Run a whole ipu scenario (its resolved values) and return its observables: `templates`,
    `supersteps`, `pipeline` (rows as docs/ipu.md "Result file" lists them), `memory` [stage][tile],
    `tile_busy` [stage][tile], `cycles`, `microbatch_latency` and the cycle `shares`."""
    nm = _names(values)
    n, m = nm.n, nm.m
    top = _topology(nm)
    layers_of_stages = _stage_layers(nm)
    stage_fops = _stage_operators(nm, layers_of_stages)
    memory = _memory(nm, stage_fops, layers_of_stages)
    templates, fwd_ids, bwd_ids = _templates(nm, stage_fops, layers_of_stages, top.tp_allreduce)
    costs = _step_costs(nm, top, stage_fops)
    # Stage time per micro-batch per direction.
    stage_time = [[0, 0] for _ in range(n)]
    for s in range(n):
        stage_time[s][0] = sum(_superstep_length(templates[x]) for x in fwd_ids[s])
        if s == 0:
            stage_time[s][0] += costs.stream_cycles
        stage_time[s][1] = sum(_superstep_length(templates[x]) for x in bwd_ids[s])
    run = SimpleNamespace(templates=templates, fwd_ids=fwd_ids, bwd_ids=bwd_ids, costs=costs, stage_time=stage_time,
                          supersteps=[], pipeline=[], tile_busy=[[0] * nm.N for _ in range(n)],
                          shares=dict(compute=0, sync=0, exchange=0, transfer=0))
    # ---- Run: steps, pipeline steps, stages, supersteps.  The grouped schedule (and inference) runs
    # the directions one after the other; the interleaved one (training only, Choice 27) runs its
    # m + 2n - 2 pipeline steps of direction 3 instead.
    if nm.interleaved:
        directions = [DIR_INTERLEAVED]
    elif nm.training:
        directions = [DIR_FORWARD, DIR_BACKWARD]
    else:
        directions = [DIR_FORWARD]
    latency = []
    cycle = 0
    for step in range(nm.steps):
        step_start = cycle
        # per micro-batch: start of the forward pipeline step in which IPU 0 starts it, and end
        mb_start = [None] * m
        mb_end = [None] * m
        for d in directions:
            if d == DIR_INTERLEAVED:
                cycle = _run_interleaved(nm, run, step, cycle, mb_start, mb_end)
            else:
                cycle = _run_grouped(nm, run, step, d, cycle, mb_start, mb_end)
        if costs.end_row is not None:
            # Choice 21: the end row (the all-reduce and the optimiser update) is transfer, whole.
            end_cycles, end_transfer = costs.end_row
            run.pipeline.append((step, DIR_END, 0, cycle, end_cycles, -1, end_transfer))
            run.shares["transfer"] += end_cycles
            cycle += end_cycles
        for mb in range(m):
            latency.append(mb_end[mb] - mb_start[mb])
        assert step_start <= cycle

    return dict(
        templates=templates,
        supersteps=run.supersteps,
        pipeline=run.pipeline,
        memory=memory,
        tile_busy=run.tile_busy,
        cycles=cycle,
        microbatch_latency=latency,
        shares=run.shares,
    )


# ---------------------------------------------------------------------------------------------------
# docs/ipu.md "Generation": the `decode` workload, one step of one token of every sequence through the
# whole model, over a static key-value cache.  Written from the doc alone, reusing the helpers above
# where the contract is the same ("Mapping", "Work units", "Dealing", "Memory", "One superstep",
# "Topology"); what differs in a decode step is below.
#
# Choices made reading docs/ipu.md, Generation:
#  1. The batch of a step is `B = batch / (replicas x microbatches)` ("Batches"; with `m = 1`, the
#     sharded generation, `B` is `workload.batch` since the scenario refuses `workload.replicas` for
#     decode), so `T = B` tokens with `S = 1`.  With `m > 1` this `B` is the micro-batch's `B_m` (Choice
#     14).  With `m = 1` the same `B` is in the cache's bytes, the filled cache and the prompt's token
#     ids (`4 B context` bytes, streamed once on IPU 0 of the simulated replica).
#  2. `workload.training` (and so recomputation, the optimiser and the pipeline schedule) is ignored:
#     "there is no training"; a step is forward only and memory is the inference rule.
#  3. The blocks' operators are the table's with `S = 1` and `L = C = context + output_tokens` in the
#     two attentions (FLOPs `2 B S L D + 5 B A S L` and `2 B S L D`, inputs `T D + B L K` and
#     `B A S L + B L K`, output `B A S L`); every other operator is the table's with `T = B`.  An
#     attention has `B A' ceil(1 / b) = B A'` units of `r = 1` row, its `u_in = I(o) r / D` carrying
#     its head's whole cached keys (or values): "as for any attention unit".
#  4. The head's operators are named `head.final_norm`, `head.logits`, `head.argmax` (the table's `op`
#     column); `final_norm` is a norm with the block norms' `n` and `m` (`workload.norm`), `logits` a
#     GEMM (`K = H` inputs, `C = V` outputs a token, no bias), `argmax` an elementwise operator of
#     `phi = 1`.  `logits` holds `V H` weights unless `workload.tied_head` (a missing key means tied,
#     its default), then 0.
#  5. With `vocab_size = 0` all three `head.*` operators are left out (the doc's "no embedding and no
#     head"; they are the one group `head_operators`), the final norm included.
#  6. The head's operators are not split by tensor parallelism (the doc lists only the blocks'
#     operators as split): on each of the `t` IPUs they are whole, like the norms and the embedding.
#  7. Order of a stage's list: IPU 0 is the embedding, its blocks, then (the last IPU's final norm when
#     `n = 1`) `head.logits`, `head.argmax`; the last IPU (n > 1) its blocks then `head.final_norm`.
#     With `n = 1` the one list is embedding, blocks, final norm, logits, argmax.
#  8. Dealing is per stage from unit 0, over that stage's list in order ("Dealing"; "one IPU's list
#     after another" read as the order of the templates, not a dealing counter running across IPUs,
#     whose tiles are distinct).  The exchange of a list's last superstep receives nothing (on the last
#     IPU, the final norm's: its output crosses to IPU 0 by the back transfer, not by an exchange).
#  9. The transfers: `n - 1` forward, each over Choice 25's link (the pairs `{(ti, s, ri), (ti, s + 1,
#     ri)}` of every `s < n - 1`, as a transfer between pipeline stages), and one back from `n - 1` to 0
#     over the link of the pairs `{(ti, n - 1, ri), (ti, 0, ri)}`; each `sync_L + bytes_cycles(T H e,
#     gbps_L)`.  `T H e` is not split by tensor parallelism (Choice 15).  None with `n = 1`.
# 10. The step is `sum over stages of (compute + sync + exchange of every superstep) + the n transfers`
#     (n > 1); the prompt's token ids are not in any step (`prompt_io`, once, before the first);
#     `stage_cycles[s]` excludes them too.  Output token `k` ends at `prompt_io + (context + k) step`.
# 11. The cache: `Cb_s = layers_s x 2 x B x C x K' x e` bytes on IPU `s` (`K' = K / t`, exact), each
#     tile holding `ceil(Cb_s / N)` more bytes, added to "Memory"'s code + weights + activations (the
#     activations' inference rule, `max over i of in(i) + out(i)`, already counts a cache block being
#     received by an attention unit; the cache share is the buffer itself).  A tile over its SRAM raises
#     ValueError naming the IPU, the (lowest) tile, and the cache's bytes (per tile and `Cb_s`).
# 12. `cache_filled[k][s]` is `layers_s x 2 x B x p x K' x e` with `p = context + k` positions once
#     token k is known: `context + k` steps have run, each writing the position of the token it took.
# 13. A tensor-parallel stage (t > 1) adds the all-reduce of the forward `out_proj` and `ffn_down` to
#     their exchange, as in a transformer step, with `T = B` (Choices 16, 24).
#
# A pipelined generation ("A pipelined generation" and the paragraph after it):
# 14. `m = workload.microbatches`, `1 <= m <= n` asserted, `B_m = batch / (replicas x m)` exact (asserted),
#     `output_tokens >= 1` asserted.  The step is compiled for one micro-batch (`T = B_m`): `templates`,
#     `stage_cycles` (`c_s`), `transfers`, `step_cycles`, `shares` and `tile_busy` are that step's (one
#     micro-batch, one pass of every IPU), as in the sharded step.  `prompt_io` is the doc's `io`:
#     `bytes_cycles(4 m B_m context, streaming_memory_gbps)` (the old value with `m = 1`).
# 15. The pipeline steps are walked one by one from `p = 0`, the first starting at `io`, each where the one
#     before ended: in step `p` IPU `s` runs micro-batch `j = (p - s) mod n` when `j < m` and `0 <= p - s - j
#     < n passes` (its pass `i = (p - s - j) / n`), `passes = context + output_tokens - 1`; the walk stops
#     after the step in which the last micro-batch's last pass ran on the last IPU (every micro-batch's
#     passes done there), and its count is asserted to be `m - 1 + n passes`.  Every step has at least one
#     IPU running (asserted).  The walk is done for `m = 1` too (Choice 19).
# 16. A pipeline step lasts the largest `c_s` among the IPUs that run a micro-batch in it (an IPU with
#     `c_s = 0` counts, with 0), plus when `n > 1` the largest of: `x_f` when some IPU `s < n - 1` ran,
#     `x_b` when IPU `n - 1` ran.  `x_f` is Choice 9's forward transfer (Choice 25's link), `x_b` its back
#     one, each for `T H e = B_m H e` bytes (`transfers[0]` and `transfers[-1]`).  No transfer with `n = 1`.
# 17. Token `k` of micro-batch `j` is known at the end (start + length, its transfer included) of the
#     pipeline step in which IPU `n - 1` runs pass `context - 1 + k` of `j` (taken from the walk, asserted
#     to be step `j + n (context - 1 + k) + n - 1`).
# 18. Rows (`m > 1`), in the doc's order (token `k` of micro-batches `0 .. m - 1`, then `k + 1`): `known`
#     (Choice 17); `start_cycle` for `k >= 1` the start of the pipeline step in which IPU 0 ran pass
#     `context - 1 + k` of `j`, for `k = 0` cycle 0 (the doc: "token 0: 0, as in the sharded table",
#     the prompt's io included in its `cycles`), for every micro-batch; `cycles = known - start_cycle`.
# 19. Rows (`m = 1`): the sharded table as before: token 0 starts at cycle 0 (the prompt's io included),
#     token `k` where token `k - 1` is known; `known` is `io + (context + k) step`, asserted equal to the
#     walk's (the doc: "with m = 1 this is the sharded generation, step for step").  `cache_filled` is
#     then the old `[token][stage]` list, one entry per row.
# 20. `cache_filled` per row (`m > 1`): at the end of the row's pipeline step, each micro-batch's passes
#     completed, a pass being completed in the pipeline step in which IPU `n - 1` runs it (or before);
#     IPU `s` holds `layers_s x 2 x B_m x (sum over micro-batches of their completed passes) x K' x e`
#     bytes (one position a pass, on every IPU alike).  With `m = 1` this is `context + k` positions.
# 21. The cache's buffer (`cache_bytes`, and its share in `memory`) holds `m B_m` sequences of `C`
#     positions; the activations are one micro-batch's (the inference rule with `T = B_m`).
# 22. `ttft` is the known cycle of token 0 of micro-batch `m - 1`; `token_end` the rows' known cycles, in
#     row order; `cycles` the last row's known cycle (asserted to be the last pipeline step's end).
# 23. `latencies`: for every row with `k >= 1`, in row order, its known cycle minus that of token `k - 1`
#     of the same micro-batch (`m = 1`: `output_tokens - 1` times `step_cycles`).
# 24. `pipeline_steps` is the walk's count (`n passes` with `m = 1`), `pipeline_step_cycles` the list of
#     their lengths (for every `m`, `m = 1` included), `stage_runs[s]` the number of pipeline steps in
#     which IPU `s` runs a micro-batch (`m passes` each); `tile_busy` stays one step's (one pass of one
#     micro-batch), so a tile's busy cycles over the generation are `tile_busy x stage_runs`.
# ---------------------------------------------------------------------------------------------------


def _decode_names(values: dict) -> SimpleNamespace:
    """The names of docs/ipu.md for a decode step (Choices 1-3 of Generation): `_names` with `S = 1`,
    `T = B`, `L = C = context + output_tokens`, no training."""
    nm = _names(values)  # B_m = batch / (replicas x m), exact (asserted there)
    wl = values["workload"]
    # Choice 14: 1 <= m <= n, the IPUs of a replica.
    assert 1 <= nm.m <= nm.n, ("decode: workload.microbatches must be 1 .. n", nm.m, nm.n)
    nm.training = False
    nm.recompute = False
    nm.interleaved = False
    nm.context = int(wl["context"])
    nm.output_tokens = int(wl["output_tokens"])
    assert nm.context >= 1, nm.context
    assert nm.output_tokens >= 1, nm.output_tokens
    nm.C = nm.context + nm.output_tokens
    nm.S = 1
    nm.L = nm.C
    nm.T = nm.B_m * nm.S
    tied = wl.get("tied_head")
    nm.tied_head = True if tied is None else bool(tied)
    nm.K_ipu = _exact_div(nm.K_kv, nm.tp)
    return nm


def _head_operator(name, kind, flops, w_el, i_el, o_el, e) -> dict:
    """One of the head's operators (Choices 4 and 6: whole on each tensor-parallel IPU), as a stage
    operator dict of `_forward_operators`."""
    return dict(name="head." + name, op=name, kind=kind, block=-2, F=flops, Wb=w_el * e, I=i_el * e, O=o_el * e,
                backward_name="head." + name + ".backward", backward_flops=BACKWARD_FLOPS_FACTOR[kind] * flops)


def _decode_stage_operators(nm, layers_of_stages) -> list:
    """Per stage, its decode list of operators (Choice 7) with their units, dealt to its tiles (Choice
    8), as `_stage_operators` does for a transformer step."""
    T, H, V, e = nm.T, nm.H, nm.vocab, nm.e
    n_fl, m_w = nm.shape["n"], nm.shape["m"]
    stage_fops = []
    for s in range(nm.n):
        fops = _forward_operators(nm, s, layers_of_stages[s])
        if V > 0:  # Choice 5: no head at all without a vocabulary
            if s == nm.n - 1:
                fops.append(_head_operator("final_norm", "norm", n_fl * T * H, m_w * H, T * H, T * H, e))
            if s == 0:
                fops.append(_head_operator("logits", "gemm", 2 * T * H * V, 0 if nm.tied_head else V * H,
                                           T * H, T * V, e))
                fops.append(_head_operator("argmax", "elementwise", T * V, 0, T * V, T * V, e))
        for fo in fops:
            fo["units"] = [dict(tile=-1, thread=-1, c_f=u[0], c_b=u[1], u_out=u[2], u_in=u[3])
                           for u in _work_units(nm, fo)]
        _deal(nm, fops)
        stage_fops.append(fops)
    return stage_fops


def _cache_bytes(nm, layers, positions, sequences=None) -> int:
    """`layers x 2 x sequences x positions x K' x e`: keys and values of `positions` positions of
    `sequences` sequences (None: one micro-batch's `B_m`; Choices 11-12, 20-21)."""
    sequences = nm.B_m if sequences is None else sequences
    return layers * 2 * sequences * positions * nm.K_ipu * nm.e


def _decode_memory(nm, stage_fops, layers_of_stages) -> list:
    """docs/ipu.md "Memory" plus the cache's share (Choice 11): [stage][tile] bytes, checked before
    anything runs; ValueError naming, for every stage with a tile over its SRAM, the lowest such tile."""
    memory = []
    problems = []
    for s in range(nm.n):
        split = _stage_memory(nm, s, stage_fops[s])
        cache = _cache_bytes(nm, len(layers_of_stages[s]), nm.C, nm.m * nm.B_m)  # Choice 21: every micro-batch
        cache_share = _ceil_div(cache, nm.N)
        mem = [code + wsh + act + cache_share for code, wsh, act in split]
        memory.append(mem)
        for t in range(nm.N):
            if mem[t] > nm.sram_bytes:
                code, wsh, act = split[t]
                problems.append(
                    "IPU %d tile %d needs %d bytes but has %d (tile_sram_kib = %d): code %d + weights %d + "
                    "activations %d + key-value cache %d (the cache: %d bytes on IPU %d, %d positions)"
                    % (s, t, mem[t], nm.sram_bytes, nm.sram_bytes // 1024, code, wsh, act, cache_share, cache, s,
                       nm.C))
                break
    if problems:
        raise ValueError("\n".join(problems))
    return memory


def _pair_link(nm, a, b) -> tuple:
    """(gbps_L, sync_L) of the back transfer from stage a to stage b (Choice 9): the node's link when every
    pair {(ti, a, ri), (ti, b, ri)} lies in one node, else the link between nodes."""
    def node_of(ti, s, ri):
        return ((ri * nm.n + s) * nm.tp + ti) // nm.ipus_per_node

    for ri in range(nm.r_replicas):
        for ti in range(nm.tp):
            if node_of(ti, a, ri) != node_of(ti, b, ri):
                return nm.node_link_gbps, nm.node_sync_cycles
    return nm.ipu_link_gbps, nm.ipu_sync_cycles


def _decode_transfers(nm, top) -> list:
    """The step's transfers (Choice 9): n - 1 forward, then one back from the last IPU to IPU 0; none
    with n = 1.  Each `sync_L + bytes_cycles(T H e, gbps_L)`."""
    if nm.n == 1:
        return []
    links = [top.stage_link] * (nm.n - 1) + [_pair_link(nm, nm.n - 1, 0)]
    return [sync_L + _bytes_cycles(nm, nm.T * nm.H * nm.e, gbps_L) for gbps_L, sync_L in links]


def _decode_walk(nm, c, x_f, x_b, io) -> SimpleNamespace:
    """docs/ipu.md "A pipelined generation": the pipeline steps walked one by one from cycle `io`
    (Choices 15-17, 20), `c[s]` IPU s's part of a step, `x_f` / `x_b` the forward / back transfer.
    Returns per pipeline step its `starts` and `lengths`, `completed_after` (the passes completed on the
    last IPU by the end of it, summed over the micro-batches), `runs` per IPU, and per (micro-batch, pass)
    the pipeline step in which IPU 0 runs it (`ipu0_step`) and the one in which IPU n - 1 does
    (`last_step`); `end` is where the last pipeline step ends."""
    n, m = nm.n, nm.m
    passes = nm.context + nm.output_tokens - 1
    walk = SimpleNamespace(starts=[], lengths=[], completed_after=[], runs=[0] * n, ipu0_step={}, last_step={})
    completed = [0] * m  # per micro-batch, its passes completed (run on the last IPU)
    cycle = io
    p = 0
    while any(done < passes for done in completed):
        longest = -1
        before_last_ran = False
        last_ran = False
        for s in range(n):
            j = (p - s) % n
            if j >= m or not (0 <= p - s - j < n * passes):
                continue  # IPU s idles in pipeline step p
            i = (p - s - j) // n
            walk.runs[s] += 1
            longest = max(longest, c[s])  # Choice 16: an IPU that runs counts, even with c_s = 0
            if s == 0:
                walk.ipu0_step[(j, i)] = p
            if s == n - 1:
                last_ran = True
                assert completed[j] == i, (p, j, i, completed[j])
                completed[j] += 1
                walk.last_step[(j, i)] = p
            else:
                before_last_ran = True
        assert longest >= 0, ("a pipeline step where no IPU runs", p)
        # Choice 16: the longest transfer among those that follow the step (none with n = 1).
        transfer = 0
        if nm.n > 1:
            transfer = max([x_f if before_last_ran else 0, x_b if last_ran else 0])
        walk.starts.append(cycle)
        walk.lengths.append(longest + transfer)
        walk.completed_after.append(sum(completed))
        cycle += longest + transfer
        p += 1
    # Choice 15: the doc's count, m - 1 + n passes.
    assert p == m - 1 + n * passes, (p, m, n, passes)
    walk.end = cycle
    return walk


def _decode_rows(nm, walk, layers_of_stages, io, step_cycles) -> list:
    """The `tokens/` rows (Choices 17-20): token k of micro-batches 0 .. m - 1, then k + 1; each a dict
    token, microbatch, start_cycle, cycles, known, and the row's `cache_filled` (per stage, bytes)."""
    n, m = nm.n, nm.m
    rows = []
    for k in range(nm.output_tokens):
        for j in range(m):
            i = nm.context - 1 + k  # the pass that gives token k
            P = walk.last_step[(j, i)]
            assert P == j + n * (nm.context - 1 + k) + n - 1, (j, k, P)  # Choice 17: the doc's step
            known = walk.starts[P] + walk.lengths[P]
            start = walk.starts[walk.ipu0_step[(j, i)]]
            if k == 0:
                start = 0  # Choice 18: token 0 starts at 0, as in the sharded table
            if m == 1:
                # Choice 19: the sharded table; the walk gives the sharded step's cycles, step for step.
                assert known == io + (nm.context + k) * step_cycles, (k, known, io, step_cycles)
                start = 0 if k == 0 else rows[-1]["known"]
                assert k == 0 or start == walk.starts[walk.ipu0_step[(j, i)]]
            # Choice 20: every micro-batch's completed passes, one position each, B_m sequences each.
            positions = walk.completed_after[P]
            filled = [_cache_bytes(nm, len(layers_of_stages[s]), positions) for s in range(n)]
            rows.append(dict(token=k, microbatch=j, start_cycle=start, cycles=known - start, known=known,
                             cache_filled=filled))
    return rows


def simulate_decode(values: dict) -> dict:
    """Run an ipu `decode` scenario (its resolved values; docs/ipu.md "Generation") and return: the
    step's `templates` (stage by stage, each stage's list in order), `stage_cycles` (each IPU's
    supersteps in one step, `c_s`), `transfers`, `step_cycles`, `prompt_io` (the doc's `io`, every
    micro-batch's ids), `memory` [stage][tile] (the cache's share included), `cache_bytes` (per stage,
    the whole buffer of every micro-batch), `tile_busy` [stage][tile] (one step), the step's `shares`
    (compute, sync, exchange summed over every stage; transfer); and the generation ("A pipelined
    generation", Choices 14-24; with m = 1 the sharded one): `microbatches`, `pipeline_steps`,
    `pipeline_step_cycles`, `stage_runs`, `rows` (per output token of each micro-batch: token,
    microbatch, start_cycle, cycles, known), `cache_filled` [row][stage], `token_end` [row] (known),
    `ttft`, `latencies` and `cycles` (the last row's known cycle)."""
    nm = _decode_names(values)
    top = _topology(nm)
    layers_of_stages = _stage_layers(nm)
    stage_fops = _decode_stage_operators(nm, layers_of_stages)
    memory = _decode_memory(nm, stage_fops, layers_of_stages)
    templates = []
    stage_cycles = []
    tile_busy = []
    shares = dict(compute=0, sync=0, exchange=0, transfer=0)
    for s in range(nm.n):
        lst = [(fo, DIR_FORWARD) for fo in stage_fops[s]]
        busy = [0] * nm.N
        total = 0
        for i in range(len(lst)):
            tpl = _template(nm, s, lst, i, top.tp_allreduce)  # Choice 13: the forward all-reduces
            templates.append(tpl)
            total += _superstep_length(tpl)
            for key in ("compute", "sync", "exchange"):
                shares[key] += tpl[key]
            for t in range(nm.N):
                busy[t] += tpl["busy"][t]
        stage_cycles.append(total)
        tile_busy.append(busy)
    transfers = _decode_transfers(nm, top)
    shares["transfer"] = sum(transfers)
    # Choice 10: the step is every IPU's supersteps in turn plus the transfers.
    step_cycles = sum(stage_cycles) + sum(transfers)
    # Choice 14: io streams every micro-batch's prompt ids (4 m B_m context bytes) once, before anything.
    prompt_io = _bytes_cycles(nm, 4 * nm.m * nm.B_m * nm.context, nm.streaming_gbps)
    cache_bytes = [_cache_bytes(nm, len(layers_of_stages[s]), nm.C, nm.m * nm.B_m) for s in range(nm.n)]
    # Choices 15-17: the pipeline steps, walked; x_f the forward transfer, x_b the back one (n > 1).
    x_f, x_b = (transfers[0], transfers[-1]) if nm.n > 1 else (0, 0)
    walk = _decode_walk(nm, stage_cycles, x_f, x_b, prompt_io)
    rows = _decode_rows(nm, walk, layers_of_stages, prompt_io, step_cycles)
    # Choice 22: the first token of the last micro-batch; the end is the last row's known cycle.
    ttft = [r["known"] for r in rows if r["token"] == 0][-1]
    assert rows[-1]["known"] == walk.end, (rows[-1]["known"], walk.end)
    # Choice 23: consecutive tokens of one micro-batch, every token after its micro-batch's first.
    known = {(r["microbatch"], r["token"]): r["known"] for r in rows}
    latencies = [r["known"] - known[(r["microbatch"], r["token"] - 1)] for r in rows if r["token"] >= 1]
    return dict(
        templates=templates,
        stage_cycles=stage_cycles,
        transfers=transfers,
        step_cycles=step_cycles,
        prompt_io=prompt_io,
        ttft=ttft,
        token_end=[r["known"] for r in rows],
        memory=memory,
        cache_bytes=cache_bytes,
        cache_filled=[r["cache_filled"] for r in rows],
        tile_busy=tile_busy,
        shares=shares,
        microbatches=nm.m,
        pipeline_steps=len(walk.lengths),
        pipeline_step_cycles=walk.lengths,
        stage_runs=walk.runs,
        rows=[{key: r[key] for key in ("token", "microbatch", "start_cycle", "cycles", "known")} for r in rows],
        latencies=latencies,
        cycles=rows[-1]["known"],
    )
