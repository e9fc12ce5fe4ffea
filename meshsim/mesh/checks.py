"""What only the mesh asks of a scenario, beyond each key's own range (meshsim.scenario calls it
through meshsim.machine.Machine.check_scenario; the layer pipeline's rules, which follow from the
workload, are meshsim.scenario's): its queues and migration, its links, its work distributions,
its grid and hot regions, a trace file, and routed traffic's pattern and measurement window."""

from __future__ import annotations

import os
import stat

from ..files import kind_of
from ..params import BERNOULLI_WORKLOADS, format_number
from .keys import MAX_MESH_PES


def check_scenario(ok, get, add, shown, path=None) -> None:
    """Problems of a mesh scenario that involve several keys, each reported through `add`; `path`:
    the scenario file's, which a trace file's path is relative to."""
    from ..scenario import resolve_relative, toml_repr  # (meshsim.scenario asks the machine for this)

    mtype, wtype = "machine.type", "workload.type"
    if ok(wtype) and get(wtype) == "transformer":
        add(wtype, [mtype], 'applies only when machine.type is "rdu" or "ipu"; the mesh runs a transformer as '
                            '"layer_pipeline"')

    if ok(wtype) and get(wtype) == "decode":
        _check_decode(ok, get, add, shown)

    t, q, pol = "migration.threshold", "machine.queue_capacity", "migration.policy"
    # With migration off the threshold is never compared with anything.
    if ok(t, q, pol) and get(pol) != "none" and get(t) >= get(q):
        add(t, [q], f"must be less than {q} = {shown(q)}, so an integer in "
                    f"[0, {get(q) - 1}] (tasks)")

    y = "migration.hysteresis"
    if ok(t, y, pol) and get(pol) != "none" and get(y) > get(t):
        add(y, [t], f"must be at most {t} = {shown(t)} (the queue a shedding PE stops at is threshold - "
                    f"hysteresis), so an integer in [0, {get(t)}] (tasks)")

    k, b = "machine.link_buffer_messages", "machine.link_messages_per_cycle"
    if ok(k, b) and get(k) < get(b):
        add(k, [b], f"must be at least {b} = {shown(b)}, so an integer in "
                    f"[{get(b)}, 64] (messages)")

    dist = "workload.work_distribution"
    lo, hi, mean = "workload.work_min_cycles", "workload.work_max_cycles", "workload.work_cycles"
    if ok(wtype, dist) and get(wtype) in BERNOULLI_WORKLOADS:
        if get(dist) == "uniform" and ok(lo, hi) and get(lo) > get(hi):
            add(lo, [hi, dist], f"must be at most {hi} = {shown(hi)} when {dist} is \"uniform\"")
        if get(dist) == "geometric" and ok(mean, hi) and get(mean) > get(hi):
            add(mean, [hi, dist], f"must be at most {hi} = {shown(hi)} when {dist} is "
                                  f"\"geometric\", since it caps the work")

    rows, cols = "machine.rows", "machine.cols"
    grid_ok = ok(rows, cols)
    if grid_ok and get(rows) * get(cols) > MAX_MESH_PES:
        n = get(rows) * get(cols)
        add(rows, [cols], None, text=f"{rows} x {cols} = {get(rows)} x {get(cols)} = {format_number(n)} PEs: must be "
                                     f"at most {format_number(MAX_MESH_PES)} PEs")
        grid_ok = False

    regions = "workload.hot_regions"
    if grid_ok and ok(wtype, regions) and get(wtype) == "hotspot":
        n_rows, n_cols = get(rows), get(cols)
        bad = []
        for i, region in enumerate(get(regions)):
            wrong = _region_problems(region, n_rows, n_cols)
            if wrong:
                bad.append((i, f"{toml_repr(list(region))}: {', '.join(wrong)}"))
        if bad:
            # one message however many regions miss the grid (a scenario's regions kept as the grid shrinks)
            if len(bad) == 1:
                said = f"{regions}[{bad[0][0]}] = {bad[0][1]}"
            else:
                said = (f"{regions}: {len(bad)} of its {len(get(regions))} regions do not fit the {n_rows} x {n_cols} "
                        f"grid (give regions for this grid): " + "; ".join(f"[{i}] = {w}" for i, w in bad[:3])
                        + (f"; and {len(bad) - 3} more" if len(bad) > 3 else ""))
            add(regions, [], None, text=f"{said}; a region [row0, col0, row1, col1] needs 0 <= row0 < row1 <= {n_rows} "
                                        f"and 0 <= col0 < col1 <= {n_cols}")

    trace = "workload.trace_file"
    if ok(wtype, trace) and get(wtype) == "trace":
        if get(trace) == "":
            add(trace, [wtype], "required when workload.type is \"trace\": the path of a CSV or "
                                "HDF5 trace, relative to the scenario file")
        else:
            resolved = resolve_relative(get(trace), path)
            try:
                st = os.stat(resolved)
            except OSError:
                add(trace, [wtype], f"no such trace file (looked for {resolved})")
            else:
                if stat.S_ISDIR(st.st_mode):
                    add(trace, [wtype], f"is a folder, not a trace file ({resolved})")
                elif not stat.S_ISREG(st.st_mode):
                    add(trace, [wtype], f"{resolved} is {kind_of(st.st_mode)}; a trace file must be a regular file")

    pat, warm, meas, cyc = "workload.pattern", "workload.warmup_cycles", "workload.measure_cycles", "run.cycles"
    if ok(wtype) and get(wtype) == "traffic":
        if ok(pat, rows, cols) and get(pat) == "transpose" and get(rows) != get(cols):
            add(pat, [rows, cols], f"needs a square grid; {rows} x {cols} = {get(rows)} x {get(cols)}")
        if ok(warm, meas, cyc) and get(warm) + get(meas) > get(cyc):
            add(meas, [warm, cyc], f"{warm} + {meas} = {get(warm) + get(meas)} must be at most {cyc} = {shown(cyc)}, "
                                   "so that the measurement window ends inside the run")


def _check_decode(ok, get, add, shown) -> None:
    """A decode scenario's own rules (docs/decode.md): a square region, no training, at most a region a
    layer."""
    regions, layers = "workload.decode_regions", "workload.n_layers"
    if ok(regions, layers) and get(regions) > get(layers):
        add(regions, [layers], f"must be at most {layers} = {shown(layers)}: every region holds at least one layer")
    rows, cols = "machine.rows", "machine.cols"
    if ok(rows, cols) and get(rows) != get(cols):
        add(cols, [rows], f"must equal {rows} = {shown(rows)}: decode runs on a square region of PEs")
    if ok("workload.training") and get("workload.training"):
        add("workload.training", ["workload.type"], "must be false for decode, which generates tokens")


def _region_problems(region, n_rows: int, n_cols: int) -> list:
    """What is wrong with a hot region [row0, col0, row1, col1] on an n_rows x n_cols grid."""
    r0, c0, r1, c1 = region
    rows, cols = "machine.rows", "machine.cols"
    wrong = []
    if r0 < 0:
        wrong.append(f"row0 = {r0} is negative")
    if c0 < 0:
        wrong.append(f"col0 = {c0} is negative")
    if r1 <= r0:
        wrong.append(f"row1 = {r1} is not greater than row0 = {r0}")
    if c1 <= c0:
        wrong.append(f"col1 = {c1} is not greater than col0 = {c0}")
    if r1 > n_rows:
        wrong.append(f"row1 = {r1} is beyond {rows} = {n_rows}")
    if c1 > n_cols:
        wrong.append(f"col1 = {c1} is beyond {cols} = {n_cols}")
    return wrong
