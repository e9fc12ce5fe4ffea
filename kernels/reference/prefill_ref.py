"""Plain reference ("oracle") of the wafer decode's prefill and time to first token, from docs/decode.md alone.

Written from docs/decode.md, "Prefill and the time to first token" and "A model over several regions",
and the sections they point to ("The region and the layout", "A collective on a line", "The key-value
cache", "Scenario").  It is
slow and literal: a MeshGEMM is counted shift by shift and Cannon step by Cannon step, every row
reduction is the decode collective simulated wavelet by wavelet by `decode_ref.line_collective`,
the reshuffle's fullest row is found by spreading the prompt over the decode region's rows one row
at a time, the memory is summed term by term, and `workload.decode_regions = 0` is resolved by trying
1, 2, ... regions in turn against the decode region's memory.  It takes nothing from meshsim and, from the
kernels, only `decode_ref`'s `line_collective` and `work_cycles` (the doc's `local(x)`).

Public:

- `simulate_prefill(values)`: from a resolved scenario's values (`values["machine"]`,
  `values["workload"]`) to `{"pp", "layer_steps", "layer_cycles", "prefill_cycles",
  "reshuffle_cycles", "ttft_cycles", "bytes_per_pe", "fits", "regions", "layers", "pass_cycles"}`;
  `workload.batch` (B) prompts pass one after another (Choice 17); the reductions are
  `workload.decode_tree_levels`-level trees under `machine.route_budget` routes (Choice 18).

Choices made where docs/decode.md is ambiguous or silent (each is also noted at its spot below):

1. "its completion on the last PE" (a reduction along the rows) is read as the LAST completion
   over the line's positions (the PE that completes last, the farthest from the line's root), not
   the completion at position `Pp - 1`: the step is over when every PE holds the result, and
   position `Pp - 1` is often the line's root itself (e.g. Pp = 4, G = 2).
2. A step with local work and a reduction ("`local(x)` + a sum of `m` elements") takes the two
   added: every PE does the same local work, so every PE is ready for the reduction at the same
   cycle and the collective's time from "all ready at 0" applies shifted.
3. The group size of the prefill's reductions is `workload.decode_group` when it is not 0 (even if
   it is larger than `Pp`: one group, as decode_ref's choice 13), else the whole number nearest
   `Pp^(1/K)` (`K` the tree's levels, Choice 18; `sqrt(Pp)` at `K = 2`; computed exactly in
   integers, never a tie for a whole `Pp` since `(2 k + 1)^K` is odd and `2^K Pp` even; at least
   1).  With `K = 1` it is `Pp` itself, and level 1 is one group of the whole row whatever `G`
   (decode_ref's levels).
4. The multiply-add rate is `machine.pe_flops_per_cycle / 2`, taken exactly (a float at its
   shortest decimal string, as decode_ref's choice 9); `local(x) = ceil(x / rate)`, 0 for x = 0.
5. The MeshGEMM formula is taken as written for every product: the alignment is `floor(Pp / 2)`
   shifts of `o + Mt Kt + h` each (only the left blocks' size, as written), then `Pp` steps of
   `o + max(local(Mt Kt Nt), max(Mt Kt, Kt Nt) + 2 h)`; `Pp = 1` thus has no alignment and one step.
   The product's inner dimension (the doc's `K` in `[M, K] @ [K, N]`) is NOT the key-value width
   `K`; here it is called `Kin` and the key-value width `K`.
6. The scores' product is `[S, D] @ [D, S]` and the values' `[S, S] @ [S, D]` over the whole width
   `D` as the table says (grouped-query attention changes nothing: "the same multiply-adds"); no
   causal mask halves any work.
7. The prefill layer's time is the plain sum of its ten steps (every PE in lockstep, "one after
   another"), and the prefill is `n_layers` times it.
8. The reshuffle happens when `Pp != P` (also when `Pp > P`), taking `o + 2 L_n max_y(n_y) kp + h
   (Pp + P - 2)` with `kp = ceil(K / P)` (the decode region's `P`) and `n_y` the prompt's spread
   over the decode region's `P` rows ("The key-value cache": `floor(S / P)` a row, one more on the
   last `S mod P` rows); with `Pp = P` it is 0.
9. Memory counts every term in elements of the precision's bytes `e` (the scores too), the
   working set's maximum taken over the six MeshGEMM products of a layer (steps 2, 3, 6, 7, 9, 10;
   the norms and the softmax are not products), and the weight terms exactly as the Memory
   paragraph writes them (`ceil(H/Pp) ceil(gF/Pp)` for up and gate, `ceil(D/Pp) ceil(H/Pp)` for
   the output projection), not decode's `dp g fp` and `dp dp`.  "fits" is `bytes <= sram_kib x
   1024` ("more than sram_kib is refused").
10. Model shape: `head_dim` 0 means `H / A`, taken as `H // A` (the doc and the brief give no
    rounding; an H not divisible by A is floored); `n_kv_heads` 0 means `A`; `ffn_width` 0 means
    `ffn_multiplier x H`, rounded to the nearest whole number when it is not one; `g` is 2 for
    `mlp` "gated" or "geglu", else 1.  `workload.prefill_region` 0 means `machine.rows`.
11. A prompt of `S = 0` tokens has no prefill ("with no prompt (`S = 0`) there is none"; "with no
    prompt, no prefill and no pass"): every cycle count and the memory are 0; the oracle asserts only
    what it relies on (`Pp >= 1`, `P >= 1`, `S >= 0`).
12. "A model over several regions": `workload.decode_regions` is read with 1 when the values lack
    it.  A given `R` must satisfy `1 <= R <= max(L_n, 1)` ("`R` is at most `L_n`"; `L_n = 0` keeps
    `R = 1` possible): the oracle asserts it rather than clamping.  The layers split as written,
    `divmod(L_n, R)`: the first `L_n mod R` regions `ceil(L_n / R)`, the rest `floor(L_n / R)`.
13. `R = 0` is the fewest `R` in `1 ... max(L_n, 1)` whose region 0 (`L_0` layers, the fullest)
    satisfies `e (L_0 (dp qp + dp dp + dp g fp + fp dp + 2 dp) + 2 kp L_0 n) <= sram_kib x 1024`
    (decode's `dp, qp, fp, kp` over the decode region's `P`; "has room for" taken as `<=`, as
    Choice 9's "fits"), with `n` the fullest row of `S + 1` tokens spread by the prompt's rule,
    `ceil((S + 1) / P)`: "one token a row beyond the prompt's spread" read as the row holding the
    most of the prompt plus the first decoded token once it has joined the cache (the shift
    policy's spread, the "first token whose cache would not fit" check), for every `kv_policy`
    (not `ceil(S / P) + 1`, which append's last row would hold: the two agree when `P` divides `S`
    and otherwise the latter is one more).  The prefill region's memory plays no part.  When no
    `R` up to `L_n` fits, `R = max(L_n, 1)` (the most the doc allows; the decode itself would then
    refuse), not an error.
14. The prefill's memory counts `L_0` layers in both per-layer terms: the weight blocks and the
    cache of its tokens (`2 L_0 St ceil(K/Pp)`: "each holds its layers' weight blocks", and a
    region keeps only its layers' share of every cached token); the scores and the working set are
    a layer's, unchanged.
15. The prefill's pass between two regions is `o + St dp' + h Pp` (0 with `R = 1`), paid `R - 1`
    times and added to `prefill_cycles` (`n_layers` layers + `(R - 1)` passes); like Choice 11 it
    is 0 with `S = 0` (Choice 11).  `layer_cycles` stays one layer's time.
16. The reshuffle is Choice 8's with `L_0` for `L_n` (every region reshuffles its layers at once,
    so the slowest, region 0, sets it), still 0 when `Pp = P`; `ttft_cycles = prefill_cycles +
    reshuffle_cycles`.
17. `B = workload.batch` (read with 1 when the values lack it; a whole number >= 1, asserted): the
    prompts pass one after another, so `prefill_cycles = B (n_layers layers + (R - 1) passes)`;
    `layer_steps`, `layer_cycles` and `pass_cycles` stay ONE prompt's (one layer, one pass: the doc
    gives their B-fold total only through `prefill_cycles`).  Every prompt has the same `S`, and
    the prompts are not batched into one product (no `[B S, H]` GEMM): B whole prefills in a row.
    The reshuffle streams `2 L_0 B max_y(n_y) kp` elements (`n_y` one sequence's spread, as
    decode's), with one set-up `o` and one `h (Pp + P - 2)`, once (not once a prompt).  The
    prefill memory's cache term is `2 L_0 B St ceil(K/Pp)`; the scores `A St St` and the working
    set stay one prompt's (a prompt's products and scores are gone before the next prompt's).
    Choice 13's row room takes `2 kp L_0 B` elements a token, the fullest row's token count
    `ceil((S + 1) / P)` being one sequence's (every sequence spread alike).  With `S = 0` all is
    still 0 (Choice 11), whatever `B`.
18. The reductions' tree: `K = workload.decode_tree_levels` (read with 2 when the values lack it;
    `sh["levels"]` here, as `sh["K"]` is the key-value width, Choice 5)
    and the routes `machine.route_budget` (read with 24 when lacking) are decode's, passed to
    `decode_ref.line_collective` as they are: the same levels, the same routed and relayed levels
    (decode_ref's Choices 15, 16), and a budget below 13 refused (asserted there, and here before any
    work).  Only the reductions use them: the MeshGEMM's routes are not counted (docs/decode.md "Not
    modelled yet"), so a relayed level changes only steps 1, 4, 5 and 8.
"""

import math
from fractions import Fraction

from kernels.reference.decode_ref import line_collective, work_cycles

_PRECISION_BYTES = {"fp32": 4, "tf32": 4, "bf16": 2, "fp16": 2, "fp8": 1}


def _exact(x):
    """An int, or a float at its shortest decimal string, as an exact Fraction (Choice 4)."""
    if isinstance(x, float):
        return Fraction(repr(x))
    return Fraction(x)


def _nearest_root(n, K):
    """The whole number nearest n^(1/K), n >= 1, K >= 1 (Choice 3): k or k + 1, k = floor(n^(1/K)), exactly."""
    k = 0
    while (k + 1) ** K <= n:  # slow and exact: the largest k with k^K <= n
        k += 1
    # n^(1/K) >= k + 1/2  <=>  2^K n >= (2 k + 1)^K (never equal: the right side is odd)
    return k + 1 if 2 ** K * n >= (2 * k + 1) ** K else max(k, 1)


def _shape(values):
    """The model's names of docs/decode.md "Scenario" from the resolved values (Choice 10)."""
    w, m = values["workload"], values["machine"]
    H = int(w["hidden_size"])
    A = int(w["n_heads"])
    kv_heads = int(w["n_kv_heads"]) or A
    head = int(w["head_dim"]) or H // A
    F = int(w["ffn_width"])
    if F == 0:
        F = round(_exact(w["ffn_multiplier"]) * H)
    g = 2 if w["mlp"] in ("gated", "geglu") else 1
    D = A * head
    K = kv_heads * head
    return {
        "H": H, "A": A, "D": D, "K": K, "Q": D + 2 * K, "F": F, "g": g,
        "L": int(w["n_layers"]), "S": int(w["context"]), "e": _PRECISION_BYTES[w["precision"]],
        "P": int(m["rows"]), "h": int(m["hop_latency_cycles"]), "c": int(m["decode_add_cycles"]),
        "o": int(m["decode_phase_cycles"]), "rate": _exact(m["pe_flops_per_cycle"]) / 2,
        "sram_bytes": _exact(m["sram_kib"]) * 1024, "group": int(w["decode_group"]),
        "Pp": int(w["prefill_region"]) or int(m["rows"]),
        "regions": int(w.get("decode_regions", 1)),  # Choice 12: 0 is resolved by `_regions`
        "B": int(w.get("batch", 1)),  # Choice 17: the sequences, their prompts one after another
        "levels": int(w.get("decode_tree_levels", 2)),  # Choice 18: the reductions' levels
        "budget": int(m.get("route_budget", 24)),  # Choice 18: the routes a router holds
    }


def _gemm(M, Kin, N, Pp, o, h, rate):
    """Cycles of the MeshGEMM `[M, Kin] @ [Kin, N]` on `Pp x Pp` PEs, shift by shift (Choice 5)."""
    Mt, Kt, Nt = math.ceil(M / Pp), math.ceil(Kin / Pp), math.ceil(N / Pp)
    cycles = 0
    for _ in range(Pp // 2):  # the left blocks' alignment: one hop each, the set-up, a wavelet a cycle
        cycles += o + Mt * Kt + h
    for _ in range(Pp):  # Cannon's steps: multiply this pair while the next pair streams in, two hops
        compute = work_cycles(Mt * Kt * Nt, rate)
        stream = max(Mt * Kt, Kt * Nt) + 2 * h
        cycles += o + max(compute, stream)
    return cycles


def _working_set(M, Kin, N, Pp):
    """A product's working set on a PE, `2 (Mt Kt + Kt Nt) + Mt Nt` elements."""
    Mt, Kt, Nt = math.ceil(M / Pp), math.ceil(Kin / Pp), math.ceil(N / Pp)
    return 2 * (Mt * Kt + Kt * Nt) + Mt * Nt


def _reduction(m, op, sh, cache):
    """Cycles of a reduction of `m` elements along a row of `Pp` PEs, every PE ready at 0 (Choice 1)."""
    key = (m, op)
    if key not in cache:
        done = line_collective([0] * sh["Pp"], m, sh["G"], sh["h"], sh["c"], sh["o"], op, sh["levels"], sh["budget"])
        cache[key] = max(done)  # the last PE to complete
    return cache[key]


def _products(sh):
    """The six MeshGEMM products of a prefill layer, by step number: (M, Kin, N)."""
    S, H, D, Q, F, g = sh["S"], sh["H"], sh["D"], sh["Q"], sh["F"], sh["g"]
    return {
        2: (S, H, Q),  # Q, K and V
        3: (S, D, S),  # scores (Choice 6)
        6: (S, S, D),  # scores times values
        7: (S, D, H),  # output projection
        9: (S, H, g * F),  # up and gate
        10: (S, F, H),  # down projection
    }


def _layer_steps(sh):
    """The ten steps' cycles of one prefill layer, in the doc's order (Choices 2, 7)."""
    Pp, St, A = sh["Pp"], sh["St"], sh["A"]
    dpp = math.ceil(sh["H"] / Pp)  # dp'
    products = _products(sh)
    cache = {}

    def gemm(k):
        M, Kin, N = products[k]
        return _gemm(M, Kin, N, Pp, sh["o"], sh["h"], sh["rate"])

    def norm():
        return work_cycles(St * dpp, sh["rate"]) + _reduction(St, "sum", sh, cache)

    def softmax(op):
        return work_cycles(A * St * St, sh["rate"]) + _reduction(A * St, op, sh, cache)

    return [
        norm(),  # 1 first norm
        gemm(2),  # 2 Q, K and V
        gemm(3),  # 3 scores
        softmax("max"),  # 4 softmax: the maximum
        softmax("sum"),  # 5 softmax: the sum
        gemm(6),  # 6 scores times values
        gemm(7),  # 7 output projection
        norm(),  # 8 second norm, as step 1
        gemm(9),  # 9 up and gate
        gemm(10),  # 10 down projection
    ]


def _rows_tokens(S, P):
    """The prompt spread over the decode region's rows: floor(S / P) a row, one more on the last S mod P."""
    rows = [S // P] * P
    for y in range(P - S % P, P):
        rows[y] += 1
    assert sum(rows) == S
    return rows


def _reshuffle(sh):
    """Cycles of the reshuffle from the prefill regions to the decode regions (Choices 8, 16)."""
    P, Pp = sh["P"], sh["Pp"]
    if Pp == P:
        return 0  # the prefill writes the keys and values where decode keeps them
    kp = math.ceil(sh["K"] / P)
    fullest = max(_rows_tokens(sh["S"], P))
    # Choice 16: L_0 for L_n; Choice 17: every one of the B sequences' slices, one stream
    return sh["o"] + 2 * sh["L0"] * sh["B"] * fullest * kp + sh["h"] * (Pp + P - 2)


def _bytes_per_pe(sh):
    """A prefill PE's memory as the Memory paragraph counts it, in bytes, with L_0 layers (Choices 9, 14)."""
    Pp, St, H, D, K, Q, F, g, A, L = (sh[k] for k in ("Pp", "St", "H", "D", "K", "Q", "F", "g", "A", "L0"))

    def cl(x):
        return math.ceil(x / Pp)

    weights = L * (cl(H) * cl(Q) + cl(D) * cl(H) + cl(H) * cl(g * F) + cl(F) * cl(H) + 2 * cl(H))
    cache = 2 * L * sh["B"] * St * cl(K)  # Choice 17: B prompts' cache; scores and working set one prompt's
    scores = A * St * St
    working = max(_working_set(M, Kin, N, Pp) for M, Kin, N in _products(sh).values())
    return (weights + cache + scores + working) * sh["e"]


def _split_layers(L, R):
    """The layers `L_r` of the `R` regions: the first `L mod R` regions `ceil(L / R)`, the rest `floor(L / R)`."""
    q, extra = divmod(L, R)
    layers = [q + 1] * extra + [q] * (R - extra)
    assert sum(layers) == L and layers == sorted(layers, reverse=True)
    return layers


def _decode_region_fits(sh, L0):
    """Whether a decode region of `L0` layers has room for its weights and the first token's fullest row (Choice 13)."""
    P, H, Q, F, g, K = (sh[k] for k in ("P", "H", "Q", "F", "g", "K"))
    dp, qp, fp, kp = math.ceil(H / P), math.ceil(Q / P), math.ceil(F / P), math.ceil(K / P)
    weights = L0 * (dp * qp + dp * dp + dp * g * fp + fp * dp + 2 * dp)
    row_tokens = max(_rows_tokens(sh["S"] + 1, P))  # the prompt and the first decoded token, spread
    cache = 2 * kp * L0 * sh["B"] * row_tokens  # Choice 17: 2 kp L_r B elements a token
    return (weights + cache) * sh["e"] <= sh["sram_bytes"]


def _regions(sh):
    """`R` as resolved: the given one, or with 0 the fewest whose fullest region fits (Choices 12, 13)."""
    most = max(sh["L"], 1)  # "R is at most L_n"
    R = sh["regions"]
    if R != 0:
        assert 1 <= R <= most, (R, sh["L"])  # Choice 12
        return R
    for R in range(1, most + 1):
        if _decode_region_fits(sh, _split_layers(sh["L"], R)[0]):
            return R
    return most  # Choice 13: none fits


def simulate_prefill(values):
    """The prefill's and the time to first token's cycles and the prefill PE's memory (docs/decode.md)."""
    sh = _shape(values)
    assert sh["Pp"] >= 1 and sh["P"] >= 1 and sh["S"] >= 0, (sh["Pp"], sh["P"], sh["S"])  # Choice 11
    assert sh["B"] >= 1, sh["B"]  # Choice 17
    assert sh["levels"] >= 1 and sh["budget"] >= 13, (sh["levels"], sh["budget"])  # Choice 18
    sh["St"] = math.ceil(sh["S"] / sh["Pp"])
    sh["G"] = sh["group"] or _nearest_root(sh["Pp"], sh["levels"])  # Choice 3
    R = _regions(sh)
    layers = _split_layers(sh["L"], R)
    sh["L0"] = layers[0]  # the fullest region's layers
    steps = _layer_steps(sh)
    layer_cycles = sum(steps)
    # the prompt's activations pass between two prefill regions: o + St dp' + h Pp (Choice 15)
    pass_cycles = 0 if R == 1 else sh["o"] + sh["St"] * math.ceil(sh["H"] / sh["Pp"]) + sh["h"] * sh["Pp"]
    # Choice 17: the B prompts one after another, each its layers and its passes
    prefill_cycles = sh["B"] * (sh["L"] * layer_cycles + (R - 1) * pass_cycles)
    reshuffle_cycles = _reshuffle(sh)
    bytes_per_pe = _bytes_per_pe(sh)
    if sh["S"] == 0:  # "with no prompt, no prefill and no pass" (Choice 11)
        steps, layer_cycles, pass_cycles, prefill_cycles, reshuffle_cycles, bytes_per_pe = [0] * 10, 0, 0, 0, 0, 0
    return {
        "pp": sh["Pp"],
        "layer_steps": steps,
        "layer_cycles": layer_cycles,
        "prefill_cycles": prefill_cycles,
        "reshuffle_cycles": reshuffle_cycles,
        "ttft_cycles": prefill_cycles + reshuffle_cycles,
        "bytes_per_pe": bytes_per_pe,
        "fits": bytes_per_pe <= sh["sram_bytes"],
        "regions": R,
        "layers": layers,
        "pass_cycles": pass_cycles,
    }
