"""What only the ipu asks of a scenario, beyond each key's own range (meshsim.scenario calls it
through meshsim.machine.Machine.check_scenario; docs/ipu.md, "Mapping")."""

from __future__ import annotations


def check_scenario(ok, get, add, shown) -> None:
    """Problems of an ipu scenario that involve several keys, each reported through `add`."""
    mtype, wtype = "machine.type", "workload.type"
    if not ok(wtype):
        return
    if get(wtype) != "transformer":
        add(wtype, [mtype], 'must be "transformer" when machine.type is "ipu" (the ipu runs a model mapped '
                            'onto its tiles)')
        return
    _check_transformer(ok, get, add, shown)


def _check_transformer(ok, get, add, shown) -> None:
    """Problems of an ipu scenario that involve several keys (docs/ipu.md, "Mapping"), each reported
    through `add`. Whether every tile's memory suffices is the compiler's check (meshsim.ipu)."""
    hs, nh, layers, lpi = "workload.hidden_size", "workload.n_heads", "workload.n_layers", "workload.layers_per_ipu"
    batch, reps, ga = "workload.batch", "workload.replicas", "workload.gradient_accumulation"
    tr, rc = "workload.training", "workload.recompute"
    if ok(hs, nh) and get(hs) % get(nh) != 0:
        add(hs, [nh], f"must be a multiple of {nh} = {shown(nh)}")
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
        if ok(reps) and len(split) * get(reps) > 4096:
            add(lpi, [reps], f"{len(split)} IPUs x {reps} = {get(reps)} asks for {len(split) * get(reps)} IPUs; "
                             "at most 4096")
    if ok(batch, reps, ga) and get(batch) % (get(reps) * get(ga)) != 0:
        add(batch, [reps, ga], f"must be a multiple of {reps} x {ga} = {get(reps)} x {get(ga)} = "
                               f"{get(reps) * get(ga)} (each micro-batch holds whole sequences)")
    if ok(tr, rc) and get(rc) and not get(tr):
        add(rc, [tr], f"applies only with training ({tr} = {shown(tr)}): inference keeps no activations to "
                      "recompute")
