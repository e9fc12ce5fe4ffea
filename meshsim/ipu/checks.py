"""What only the ipu asks of a scenario, beyond each key's own range (meshsim.scenario calls it
through meshsim.machine.Machine.check_scenario; docs/ipu.md, "Mapping")."""

from __future__ import annotations


def check_scenario(ok, get, add, shown) -> None:
    """Problems of an ipu scenario that involve several keys, each reported through `add`."""
    mtype, wtype = "machine.type", "workload.type"
    if not ok(wtype):
        return
    if get(wtype) not in ("transformer", "decode"):
        add(wtype, [mtype], 'must be "transformer" or "decode" when machine.type is "ipu" (the ipu runs a model '
                            'mapped onto its tiles, or generates tokens with one)')
        return
    _check_transformer(ok, get, add, shown)
    if get(wtype) == "decode":
        _check_decode(ok, get, add, shown)


def _check_decode(ok, get, add, shown) -> None:
    """A generation's own rules (docs/ipu.md, "Generation")."""

    wtype = "workload.type"
    if ok("workload.context") and get("workload.context") < 1:
        add("workload.context", [wtype], "must be at least 1 for decode on the ipu: the prompt's last token gives "
                                         "the first output token")
    lpi = "workload.layers_per_stage"
    if ok("workload.microbatches", lpi) and get("workload.microbatches") > max(1, len(get(lpi))):
        n = max(1, len(get(lpi)))
        add("workload.microbatches", [wtype, lpi], f"must be at most the IPUs of a replica ({n}) for decode on the "
                                                   "ipu: a pipelined generation's micro-batches each occupy one IPU "
                                                   "at a time (docs/ipu.md, \"A pipelined generation\")")
    if ok("workload.training") and get("workload.training"):
        add("workload.training", [wtype], "must be false for decode, which generates tokens")
    from ..params import refuse_mesh_decode_keys

    refuse_mesh_decode_keys(ok, get, add)


def _check_transformer(ok, get, add, shown) -> None:
    """Problems of an ipu scenario that involve several keys (docs/ipu.md, "Mapping"), each reported
    through `add`. Whether every tile's memory suffices is the compiler's check (meshsim.ipu)."""
    hs, nh, layers, lpi = "workload.hidden_size", "workload.n_heads", "workload.n_layers", "workload.layers_per_stage"
    batch, reps, ga = "workload.batch", "workload.replicas", "workload.microbatches"
    tr, rc = "workload.training", "workload.recompute"
    if ok(lpi, layers) and get(lpi):
        split = get(lpi)
        zero = [i for i, x in enumerate(split) if x == 0 and i > 0]
        if zero:
            add(lpi, [], f"entry {zero[0]} is 0: every IPU after the first holds at least one layer (only IPU 0 may "
                         "hold the embedding alone)")
        elif split[0] == 0 and ok("workload.vocab_size") and get("workload.vocab_size") == 0:
            add(lpi, ["workload.vocab_size"], "entry 0 is 0 but workload.vocab_size = 0 leaves out the embedding: "
                                              "IPU 0 would hold nothing")
        elif sum(split) != get(layers):
            add(lpi, [layers], f"sums to {sum(split)} layers; must sum to {layers} = {shown(layers)}")

    if ok(lpi, reps, "workload.tensor_parallel"):
        stages, tp = len(get(lpi)) or 1, get("workload.tensor_parallel")
        if stages * get(reps) * tp > 4096:
            add(reps, [lpi, "workload.tensor_parallel"], f"{stages} stage(s) x {get(reps)} replica(s) x "
                f"workload.tensor_parallel = {tp} asks for {stages * get(reps) * tp} IPUs; at most 4096")
    if ok(batch, reps, ga) and get(batch) % (get(reps) * get(ga)) != 0:
        add(batch, [reps, ga], f"must be a multiple of {reps} x {ga} = {get(reps)} x {get(ga)} = "
                               f"{get(reps) * get(ga)} (each micro-batch holds whole sequences)")
    tp = "workload.tensor_parallel"
    kv = "workload.n_kv_heads"
    hd = "workload.head_dim"
    if ok(hs, nh, kv, hd) and get(kv) and (get(hd) or get(hs) % get(nh) == 0) and get(nh) % get(kv) == 0 \
            and (get(hd) or get(hs) // get(nh)) % (get(nh) // get(kv)):
        size = f"{hd} = {get(hd)}" if get(hd) else f"{hs} / {nh} = {get(hs) // get(nh)}"
        add(kv, [nh, hd if get(hd) else hs], f"the head size {size} must be a multiple of {nh} / {kv} = "
                          f"{get(nh) // get(kv)} on the ipu, whose attention work units each hold a whole number of "
                          "elements of their head's keys and values (docs/ipu.md)")
    if ok(tp, nh) and get(nh) % get(tp) != 0:
        add(tp, [nh], f"must divide {nh} = {shown(nh)} (each IPU of a stage holds whole heads)")
    elif ok(tp, kv) and get(kv) % get(tp) != 0:
        add(tp, [kv], f"must divide {kv} = {shown(kv)} (each IPU of a stage holds whole key and value heads)")
    elif ok(tp, "workload.ffn_width") and get("workload.ffn_width") % get(tp) != 0:
        add(tp, ["workload.ffn_width"], f"must divide workload.ffn_width = {shown('workload.ffn_width')} (each IPU "
                                        "of a stage holds whole columns of the MLP)")
    if ok(tr, rc) and get(rc) and not get(tr):
        add(rc, [tr], f"applies only with training ({tr} = {shown(tr)}): inference keeps no activations to "
                      "recompute")


#: What each lever of an ipu scenario moves, and why it leaves the rest (docs/ipu.md, "Which lever
#: moves which figure"): key -> (the figures it moves, why it leaves the others where they are).
LEVERS = {
    "workload.layers_per_stage": (("stage_li", "samples_per_second"), "it moves blocks between stages"),
    "workload.hidden_size": (("samples_per_second", "li", "memory_max_bytes"),
                             "every stage's operators widen alike"),
    "workload.n_layers": (("samples_per_second", "stage_li"),
                          "the stages' balance moves only as the split of the layers over them does"),
    "workload.tensor_parallel": (("samples_per_second", "li", "exchange_fraction"),
                                 "every stage splits over its IPUs alike, so the stages' balance stays; the "
                                 "tiles' balance and the time move"),
    "machine.ipus_per_node": (("samples_per_second", "exchange_fraction", "transfer_fraction"),
                              "it decides which all-reduces and transfers take the slower links between nodes"),
    "workload.batch": (("samples_per_second", "pipeline_bubble_fraction"),
                       "every stage's time per micro-batch grows alike"),
    "workload.microbatches": (("pipeline_bubble_fraction", "samples_per_second"),
                                       "more micro-batches fill the pipeline; each stage's time per micro-batch "
                                       "shrinks alike"),
    "workload.replicas": (("samples_per_second",), "replicas run the same stages side by side"),
    "workload.precision": (("samples_per_second", "compute_fraction"),
                           "fp32 slows every tile's MACs alike (machine.fp32_rate)"),
    "machine.fp32_rate": (("samples_per_second", "compute_fraction"), "it slows every tile's MACs alike at fp32"),
    "machine.exchange_bytes_per_cycle": (("exchange_fraction", "samples_per_second"),
                                         "every stage exchanges at the same rate"),
    "machine.gemm_block": (("li", "memory_max_bytes"), "it moves how a stage's work spreads over its tiles"),
    "workload.optimizer": (("samples_per_second", "transfer_fraction"),
                           "the update streams its state at the step's end, on every stage at once"),
    "workload.master_weights": (("samples_per_second", "transfer_fraction"),
                                "an fp32 master copy adds bytes to the update alone"),
    "workload.recompute": (("compute_fraction", "memory_max_bytes"),
                           "every stage recomputes its own blocks"),
    "workload.pipeline_schedule": (("memory_max_bytes", "pipeline_bubble_fraction", "samples_per_second"),
                                   "the schedule orders the same stages' work: it moves the activations each keeps, "
                                   "the idle slots and the transfers paid, not how the work is split between them"),
}
