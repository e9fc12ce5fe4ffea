"""What only the mesh asks of a scenario, beyond each key's own range (meshsim.scenario calls it
through meshsim.machine.Machine.check_scenario; docs/mesh.md, "Dataflow")."""

from __future__ import annotations


def check_scenario(ok, get, add, shown) -> None:
    """Problems of a mesh scenario that involve several keys, each reported through `add`."""
    mtype, wtype, reps, pol = "machine.type", "workload.type", "workload.replicas", "migration.policy"
    if ok(wtype) and get(wtype) == "transformer":
        add(wtype, [mtype], 'applies only when machine.type is "rdu" or "ipu"; the mesh runs a transformer as '
                            '"layer_pipeline"')
    if not (ok(wtype) and get(wtype) == "layer_pipeline"):
        return
    if ok(reps) and get(reps) > 64:
        add(reps, [wtype], "must be an integer in [1, 64] (copies) for a layer_pipeline workload")
    if ok(pol) and get(pol) != "none":
        add(pol, [wtype], "must be \"none\" when workload.type is \"layer_pipeline\" (tasks stay "
                          "in their kernel's region)")
    seq, tpc = "workload.seq_len", "workload.tokens_per_chunk"
    if ok(seq, tpc) and get(seq) % get(tpc) != 0:
        add(tpc, [seq], f"must divide {seq} = {shown(seq)}")
    hs, nh = "workload.hidden_size", "workload.n_heads"
    if ok(hs, nh) and get(hs) % get(nh) != 0:
        add(hs, [nh], f"must be a multiple of {nh} = {shown(nh)}")
    ws, tr = "workload.weight_streaming", "workload.training"
    if ok(ws, reps) and get(ws) and get(reps) != 1:
        add(reps, [ws], "must be 1 with weight streaming (the whole wafer holds one layer)")
    if ok(ws, tr) and get(ws) and get(tr):
        add(tr, [ws], "must be false with weight streaming: a training step is modelled only in "
                      "layer-pipelined mode")
