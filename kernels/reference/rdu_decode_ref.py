"""Plain reference ("oracle") of the rdu machine's `decode` workload, written from docs/rdu.md alone.

Sources: docs/rdu.md "Generation" (the calls, the schedule, memory, switching), "Operators" (the
tensor split F' = ceil(F / t), W' = ceil(W / t) for split operators, whole for norms and residual
adds), "Presets" (r as the exact fraction r_n / r_d nearest fp32_rate), "Allocation" (the collective
stage's cycles) and "Topology" (chip numbering, which link a tensor group uses); the operator table of
docs/ipu.md "The transformer's operators", with the key-value cache of docs/design.md "A step with a
key-value cache" (attention over L = c + S keys). It uses no code of meshsim or of the kernels: the
standard library only, every quantity an int or a `fractions.Fraction`.

Public: `simulate_decode(values)`, `values` the resolved scenario dict (values["machine"][key],
values["workload"][key]); it returns the time to first token, one breakdown per decode step, the
cycle each output token is known, the memory figures and the per-socket cache after every token.

Choices made reading docs/rdu.md, Generation:

1. The embedding's lookup adds bytes only (`T H e` to layer 0's call, `T = B S` of the step), no
   FLOPs: "Generation" names its bytes and nothing else, although "Operators" gives
   `embedding.lookup` `T H` FLOPs. With `vocab_size = 0` there is no embedding: no lookup bytes.
2. Weight bytes are split as bytes: `W' = ceil(W e / t)` with `W` the table's weight elements (docs/ipu.md
   "ceil(Wb(o) / t) weight bytes"); the norms' weights `m H e` stay whole. The head's final norm is
   whole too, its logits' weights `ceil(V / t) H e`; its bytes are the same tied or untied.
3. FLOPs are split per operator and then summed: a call's FLOPs are `sum ceil(F / t)` over its split
   operators plus the whole FLOPs of its norms and residual adds; likewise `sum W'`.
4. With `shared_norm` a layer has no `ln2` (docs/ipu.md) but keeps both residual adds.
5. The head's final norm, logits and argmax count `T = B` in every step, the prompt's included;
   the head's all-reduce is `Tb = 8 B` bytes. A layer call's all-reduces have `Tb = B S H e`.
6. The prompt's attention counts `L = context` keys for each of its `S = context` queries (the
   table's `2 B S L D + 5 B A S L`, no causal halving), and reads no cache (`c = 0`).
7. The learned position table, a token-type table and a pooler add neither bytes, FLOPs nor memory:
   "Memory" lists the weights it counts, and the calls are the layers and the head alone.
8. A socket that does not hold its weights plus the whole generation's cache, or (with HBM) a model
   whose weights do not fit `ddr_gib`, raises ValueError naming the key and the bytes.
9. `longest_context` is `floor((capacity - weights) / (2 n_layers B K' e))` with capacity
   `hbm_gib x 2^30` (or `ddr_gib x 2^30` without HBM).
10. The decimal values (`clock_ghz`, `stream_efficiency`, the bandwidths, `host_launch_us`,
   `fp32_rate`) are taken as written: `Fraction(str(value))`, the shortest decimal of the float.
11. `r = 1` at bf16, fp16 and fp8; `fp32_rate` (as `r_n / r_d`) at fp32 and tf32.
12. The tensor groups' link: the node's link when every tensor group (one per data replica, chips
   `di t .. di t + t - 1`) lies in one node of `chips_per_node` chips, else the link between nodes.
13. The step's "bytes" are those its calls read: every call's weights, the cache and the lookup.
14. `cache_bytes[k]` is `2 n_layers B (context + k) K' e` for `k = 0 .. output_tokens - 1`.
15. Refused besides (ValueError): a pipeline degree above 1, a batch the data degree does not divide,
   a tensor degree that does not divide n_heads, n_kv_heads or the feed-forward width, context < 1.
16. `workload.model_config` is not read: the shape comes from the scenario's model keys.
"""

from __future__ import annotations

import re
from fractions import Fraction

ELEMENT_BYTES = {"fp32": 4, "tf32": 4, "bf16": 2, "fp16": 2, "fp8": 1}
NORM_FACTORS = {"layernorm": (8, 2), "rmsnorm": (4, 1)}  # (n FLOPs per element, m weights per H)
MLP_FACTORS = {"gelu": (1, 8), "relu": (1, 1), "gated": (2, 5), "geglu": (2, 9)}  # (g, a)


def _dec(x) -> Fraction:
    """A decimal value as written (choice 10)."""
    return Fraction(str(x))


def _ceil(x) -> int:
    """ceil of an int or Fraction, exactly."""
    return -((-x.numerator) // x.denominator) if isinstance(x, Fraction) else int(x)


def _cdiv(a: int, b: int) -> int:
    return -((-a) // b)


def _model(values: dict) -> dict:
    """The model's shape and the parallel layout, checked (choice 15)."""
    w = values["workload"]
    m = dict(H=int(w["hidden_size"]), nl=int(w["n_layers"]), A=int(w["n_heads"]))
    kv = int(w.get("n_kv_heads", 0)) or m["A"]
    hd = int(w.get("head_dim", 0)) or m["H"] // m["A"]
    m.update(D=m["A"] * hd, K=kv * hd, kv=kv, V=int(w.get("vocab_size", 0)))
    m["Q"] = m["D"] + 2 * m["K"]
    m["F"] = int(w.get("ffn_width", 0)) or int(w["ffn_multiplier"]) * m["H"]
    m["g"], m["a"] = MLP_FACTORS[w.get("mlp", "gelu")]
    m["n"], m["m"] = NORM_FACTORS[w.get("norm", "layernorm")]
    m["beta"] = 1 if w.get("bias", True) else 0
    m["beta_q"] = 1 if (w.get("bias", True) or w.get("qkv_bias", False)) else 0
    m["shared_norm"] = bool(w.get("shared_norm", False))
    m["tied"] = bool(w.get("tied_head", True))
    m["e"] = ELEMENT_BYTES[w.get("precision", "bf16")]
    m["precision"] = w.get("precision", "bf16")
    match = re.fullmatch(r"T(\d+)P(\d+)D(\d+)", str(w.get("parallelism", "T1P1D1")).strip())
    if not match:
        raise ValueError(f"workload.parallelism: cannot read {w.get('parallelism')!r}")
    t, p, d = (int(x) for x in match.groups())
    if p != 1:
        raise ValueError("workload.parallelism: a pipeline degree above 1 is refused for decode")
    if t < 1 or d < 1:
        raise ValueError("workload.parallelism: degrees must be at least 1")
    batch = int(w["batch"])
    if batch % d:
        raise ValueError(f"workload.batch: {batch} is not divisible by the data degree {d}")
    for key, val in (("n_heads", m["A"]), ("n_kv_heads", kv), ("ffn_width", m["F"])):
        if val % t:
            raise ValueError(f"workload.{key}: {val} is not divisible by the tensor degree {t}")
    m.update(t=t, d=d, B=batch // d, context=int(w["context"]), out=int(w["output_tokens"]))
    if m["context"] < 1:
        raise ValueError("workload.context: decode needs a prompt of at least 1 token")
    m["Kp"] = m["K"] // t
    return m


def _layer_cost(m: dict, S: int, c: int) -> tuple[int, int]:
    """(FLOPs, weight bytes) of one decoder layer on one socket: S new tokens a sequence over c cached
    positions, batch B, after the tensor split (docs/ipu.md's table with L = c + S)."""
    H, A, D, Q, F, e, t = m["H"], m["A"], m["D"], m["Q"], m["F"], m["e"], m["t"]
    B, g, a, n, mm = m["B"], m["g"], m["a"], m["n"], m["m"]
    T, L = B * S, c + S
    # (FLOPs, weight elements, split?)
    ops = [("ln1", n * T * H, mm * H, False),
           ("qkv_proj", 2 * T * H * Q, H * Q + m["beta_q"] * Q, True),
           ("attn_scores_softmax", 2 * B * S * L * D + 5 * B * A * S * L, 0, True),
           ("attn_v", 2 * B * S * L * D, 0, True),
           ("out_proj", 2 * T * D * H, D * H + m["beta"] * H, True),
           ("residual1", T * H, 0, False)]
    if not m["shared_norm"]:
        ops.append(("ln2", n * T * H, mm * H, False))
    ops += [("ffn_up", 2 * T * H * g * F, g * H * F + m["beta"] * g * F, True),
            ("gelu", a * T * F, 0, True),
            ("ffn_down", 2 * T * F * H, F * H + m["beta"] * H, True),
            ("residual2", T * H, 0, False)]
    flops = sum(_cdiv(f, t) if split else f for _, f, _, split in ops)
    weights = sum(_cdiv(w * e, t) if split else w * e for _, _, w, split in ops)
    return flops, weights


def _head_cost(m: dict) -> tuple[int, int]:
    """(FLOPs, weight bytes) of the head call on one socket, at the last position (T = B)."""
    H, e, T = m["H"], m["e"], m["B"]
    Vs = _cdiv(m["V"], m["t"])
    flops = m["n"] * T * H + 2 * T * H * Vs + T * Vs
    weights = m["m"] * H * e + Vs * H * e
    return flops, weights


def _machine(values: dict, m: dict) -> dict:
    """The chip's figures generation uses, exact (choices 10, 11, 12)."""
    mc = values["machine"]
    f = _dec(mc["clock_ghz"])
    hbm = int(mc.get("hbm_gib", 0))
    if hbm > 0:
        G, cap_key, cap = _dec(mc["hbm_bandwidth_gbps"]), "machine.hbm_gib", hbm * 2 ** 30
    else:
        G, cap_key, cap = _dec(mc["ddr_bandwidth_gbps"]), "machine.ddr_gib", int(mc["ddr_gib"]) * 2 ** 30
    if m["precision"] in ("fp32", "tf32"):
        r = _dec(mc["fp32_rate"]).limit_denominator(10 ** 6)
    else:
        r = Fraction(1)
    launch = int(mc.get("kernel_launch_cycles", 3000))
    if mc.get("orchestration", "hardware") == "software":
        launch += _ceil(_dec(mc.get("host_launch_us", 10.0)) * 1000 * f)
    t, d, c = m["t"], m["d"], int(mc.get("chips_per_node", 8))
    in_node = all((di * t) // c == (di * t + t - 1) // c for di in range(d))
    if in_node:
        gbps, lat = _dec(mc["interconnect_gbps"]), int(mc["interconnect_latency_cycles"])
    else:
        gbps, lat = _dec(mc["node_interconnect_gbps"]), int(mc["node_interconnect_latency_cycles"])
    peak_den = int(mc["pcus"]) * int(mc["pcu_lanes"]) * int(mc["pcu_stages"]) * 2
    return dict(f=f, G=G, eta=_dec(mc["stream_efficiency"]), r=r, peak_den=peak_den, launch=launch,
                gbps=gbps, lat=lat, hbm=hbm > 0, cap_key=cap_key, cap=cap,
                ddr_gbps=_dec(mc["ddr_bandwidth_gbps"]), ddr_cap=int(mc["ddr_gib"]) * 2 ** 30)


def _allreduce(m: dict, ch: dict, tb: int) -> int:
    """Allocation's collective stage over the tensor group: 2 (t - 1) (lat + ceil(ceil(Tb / t) / bw))."""
    t = m["t"]
    if t <= 1:
        return 0
    return 2 * (t - 1) * (ch["lat"] + _ceil(Fraction(_cdiv(tb, t)) * ch["f"] / ch["gbps"]))


def _call(ch: dict, nbytes: int, flops: int) -> tuple[int, int, int]:
    """(call cycles, stream term, compute term) of one kernel call."""
    stream = _ceil(Fraction(nbytes) * ch["f"] / (ch["eta"] * ch["G"]))
    r = ch["r"]
    compute = _ceil(Fraction(flops * r.denominator, ch["peak_den"] * r.numerator))
    return ch["launch"] + max(stream, compute), stream, compute


def _step(m: dict, ch: dict, S: int, c: int) -> dict:
    """One step of S new tokens a sequence over c cached positions: its layer calls, their all-reduces,
    and the head call with its all-reduce."""
    B, H, e = m["B"], m["H"], m["e"]
    T = B * S
    lflops, lweights = _layer_cost(m, S, c)
    cache = 2 * B * c * m["Kp"] * e
    out = dict(cycles=0, stream=0, compute=0, launch=0, allreduce=0, bytes=0)

    def add(nbytes: int, flops: int, ar: int) -> None:
        cyc, stream, compute = _call(ch, nbytes, flops)
        out["cycles"] += cyc + ar
        out["stream"] += stream
        out["compute"] += compute
        out["launch"] += ch["launch"]
        out["allreduce"] += ar
        out["bytes"] += nbytes

    layer_ar = 2 * _allreduce(m, ch, T * H * e)
    for layer in range(m["nl"]):
        lookup = T * H * e if (layer == 0 and m["V"] > 0) else 0
        add(lweights + cache + lookup, lflops, layer_ar)
    if m["V"] > 0:
        hflops, hweights = _head_cost(m)
        add(hweights, hflops, _allreduce(m, ch, 8 * B))
    return out


def _weights(m: dict) -> int:
    """A socket's weights as "Memory" counts them."""
    _, lweights = _layer_cost(m, 1, 0)
    total = m["nl"] * lweights
    if m["V"] > 0:
        total += _head_cost(m)[1]
        if not m["tied"]:
            total += _cdiv(m["V"], m["t"]) * m["H"] * m["e"]
    return total


def simulate_decode(values: dict) -> dict:
    """The whole generation of docs/rdu.md "Generation" for the resolved scenario `values`."""
    m = _model(values)
    ch = _machine(values, m)
    per_position = 2 * m["nl"] * m["B"] * m["Kp"] * m["e"]
    weights = _weights(m)
    memory = weights + per_position * (m["context"] + m["out"] - 1)
    if memory > ch["cap"]:
        raise ValueError(f"{ch['cap_key']}: the weights and the cache need {memory} bytes a socket, "
                         f"more than {ch['cap']}")
    switch = 0
    if ch["hbm"]:
        if weights > ch["ddr_cap"]:
            raise ValueError(f"machine.ddr_gib: the weights need {weights} bytes, more than {ch['ddr_cap']}")
        switch = _ceil(Fraction(weights) * ch["f"] / ch["ddr_gbps"])
    prompt = _step(m, ch, m["context"], 0)
    token_end = [prompt["cycles"]]
    steps = []
    for k in range(1, m["out"]):
        step = _step(m, ch, 1, m["context"] + k - 1)
        steps.append(step)
        token_end.append(token_end[-1] + step["cycles"])
    return dict(ttft_cycles=prompt["cycles"], prompt=prompt, steps=steps, token_end=token_end,
                weights_bytes=weights, memory_bytes=memory,
                longest_context=(ch["cap"] - weights) // per_position, switch_cycles=switch,
                cache_bytes=[per_position * (m["context"] + k) for k in range(m["out"])])
