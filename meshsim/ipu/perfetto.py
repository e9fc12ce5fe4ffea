"""The ipu's timeline for Perfetto (meshsim.export; docs/ipu.md, "Result file"): a process per
pipeline stage (its simulated IPU), each superstep a slice holding its compute, sync and exchange
phases, and a process for the pipeline's steps and the transfers between stages."""

from __future__ import annotations

import numpy as np

from ..export import Timeline

SUPERSTEPS = 1
PHASES = ("compute", "sync", "exchange")
DIRECTIONS = ("forward", "backward", "recompute", "interleaved")


def trace_events(f, values: dict, tl: Timeline) -> None:
    stages = f["stage"][()] if "stage" in f else np.zeros(0, np.int32)
    for s in stages.tolist():
        tl.process(int(s) + 1, f"IPU {s} (stage {s})")
        tl.thread(int(s) + 1, SUPERSTEPS, "supersteps")
    pipe_pid = len(stages) + 1
    tl.process(pipe_pid, "pipeline")
    tl.thread(pipe_pid, 1, "pipeline steps")
    names = [n.decode() if isinstance(n, bytes) else str(n) for n in f["templates/name"][()]] \
        if "templates" in f else []
    ss = f["supersteps"] if "supersteps" in f else None
    n = len(ss["start_cycle"]) if ss is not None else 0
    pl = f["pipeline"] if "pipeline" in f else None
    m = len(pl["start_cycle"]) if pl is not None else 0
    # a superstep is 4 slices (itself and its phases), a pipeline row one; whole steps from the first
    step = ss["step"][()] if ss is not None else np.zeros(0, np.int64)
    keep = n
    if 4 * n + m > tl.slices_left and n:
        fit = max(0, tl.slices_left - m) // 4  # supersteps that fit
        # the whole steps before the first superstep that does not fit; if the first step alone does not
        # fit, as many of its supersteps as do
        keep = int(np.searchsorted(step, step[fit], side="left")) if fit < n else n
        if keep == 0:
            keep = fit
        tl.notes.append(f"supersteps: the first {keep:,} of {n:,} (whole steps from the first where they fit; "
                        "every step repeats the first)")
    if keep:
        cols = {k: ss[k][:keep] for k in ("stage", "start_cycle", "compute_cycles", "sync_cycles", "exchange_cycles",
                                          "template", "direction", "microbatch", "step", "pipeline_step")}
        for i in range(keep):
            pid = int(cols["stage"][i]) + 1
            t = int(cols["start_cycle"][i])
            phases = [int(cols[f"{p}_cycles"][i]) for p in PHASES]
            tpl = int(cols["template"][i])
            tl.slice(pid, SUPERSTEPS, names[tpl] if tpl < len(names) else f"template {tpl}", t, sum(phases),
                     cat=DIRECTIONS[int(cols["direction"][i])] if int(cols["direction"][i]) < 4 else "superstep",
                     args={"step": cols["step"][i], "microbatch": cols["microbatch"][i],
                           "pipeline_step": cols["pipeline_step"][i], "template": tpl})
            for p, c in zip(PHASES, phases, strict=True):
                if c:
                    tl.slice(pid, SUPERSTEPS, p, t, c, cat=p)
                t += c
    if m:
        cols = {k: pl[k][()] for k in ("start_cycle", "cycles", "direction", "step", "index", "slowest_stage",
                                      "transfer_cycles")}
        for i in range(min(m, tl.slices_left)):
            d = int(cols["direction"][i])
            name = "end of step: all-reduce and update" if d == 2 else \
                f"{DIRECTIONS[d]} pipeline step {int(cols['index'][i])}"
            tl.slice(pipe_pid, 1, name, int(cols["start_cycle"][i]), int(cols["cycles"][i]), cat="pipeline",
                     args={"step": cols["step"][i], "slowest_stage": cols["slowest_stage"][i],
                           "transfer_cycles": cols["transfer_cycles"][i]})
