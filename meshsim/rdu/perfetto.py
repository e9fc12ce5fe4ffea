"""The rdu's timeline for Perfetto (meshsim.export; docs/rdu.md, "Result file"): a process per
simulated chip, with its sections as slices on one thread and its DDR transfers on another, and
counters of its busy PCUs, PMUs in use and DDR."""

from __future__ import annotations

import numpy as np

from ..export import Timeline, runs_of, spans

SECTIONS, DDR = 1, 2


def trace_events(f, values: dict, tl: Timeline) -> None:
    chips = f["chip"][()] if "chip" in f else np.zeros(1, np.int32)
    have = "interval_start" in f and "series" in f and "interval_cycles" in f["series"]
    # a killed run's file may hold more rows in one dataset than in another: the rows all hold
    n = min([len(f["interval_start"]), *(len(d) for d in f["series"].values())]) if have else 0
    starts = f["interval_start"][:n]
    ends = starts + f["series/interval_cycles"][:n] if have else starts
    sec = f["sections"] if "sections" in f else None
    rows = sec["chip"][()] if sec is not None else np.zeros(0, np.int32)
    # slices: the sections first (every chip's, earliest first), then DDR spans with what is left
    n_sections = min(len(rows), tl.slices_left)
    if n_sections < len(rows):
        tl.notes.append(f"sections: the first {n_sections:,} of {len(rows):,} (by start) are shown")
    order = np.argsort(sec["start_cycle"][()], kind="stable")[:n_sections] if sec is not None else []
    ddr_share = tl.slices_left - n_sections
    for k, chip in enumerate(chips.tolist()):
        pid = int(chip) + 1
        tl.process(pid, f"chip {chip}")
        tl.thread(pid, SECTIONS, "sections")
        tl.thread(pid, DDR, "DDR transfers")
        if have:
            busy = f["series/ddr_busy"][:n, k] > 0
            most = ddr_share // max(1, len(chips))
            runs = spans(busy, starts, ends - 1, most)
            if runs_of(busy) > most:
                tl.notes.append(f"chip {chip}: {runs_of(busy):,} DDR transfers, shown as {len(runs):,} spans (the "
                                "shortest gaps closed first; none shown when the sections take every slice)")
            for s, e in runs:
                tl.slice(pid, DDR, "DDR", s, e - s + 1, cat="ddr")
            for name, key in (("busy PCUs", "busy_pcus"), ("PMUs in use", "pmus_in_use"),
                              ("DDR busy", "ddr_busy"), ("waiting on DDR", "ddr_wait")):
                if key in f["series"]:
                    tl.counter(pid, name, starts, f[f"series/{key}"][:n, k], ends)
    if sec is not None:
        cols = {k: sec[k][()] for k in ("chip", "start_cycle", "end_cycle", "name", "pcus", "pmus", "flops",
                                         "microbatch", "instance", "spilled_bytes", "li")}
        for i in order.tolist():
            name = cols["name"][i]
            name = name.decode() if isinstance(name, bytes) else str(name)
            start, end = int(cols["start_cycle"][i]), int(cols["end_cycle"][i])
            tl.slice(int(cols["chip"][i]) + 1, SECTIONS, name.split(":", 1)[-1], start, end - start + 1, cat="section",
                     args={k: cols[k][i] for k in ("pcus", "pmus", "flops", "microbatch", "instance", "spilled_bytes",
                                                  "li")})
