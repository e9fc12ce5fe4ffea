"""Result files as timelines for other tools (docs/results.md, "Timelines in Perfetto").

`meshsim export RESULT.h5 --format perfetto -o trace.json` writes the Chrome trace-event JSON
format that ui.perfetto.dev and chrome://tracing open: an object with `traceEvents` (complete
events "X" for what has a start and a length, counter events "C" for values over time, metadata
events "M" naming every process and thread) and `otherData` (what the trace is of, and how it was
sampled).

Timestamps (`ts`, `dur`) are microseconds of simulated time on a grid of whole nanoseconds:
round(cycles / machine.clock_ghz) / 1,000, written with at most three decimals. A clock's cycle is
not a whole number of nanoseconds (1.1 GHz: 0.909 ns), and Perfetto keeps time in integer
nanoseconds (it rounds a JSON timestamp to the nearest), so exact times would put some samples a
cycle apart at the same time, with no order between them. On the grid, what a viewer shows is what
the file says: a slice starts and ends on grid points (its end rounded as its start is, so slices
that nest still nest and slices that follow each other still touch), and a counter track has at
most one sample per nanosecond: of the samples that round to the same nanosecond, the last is
kept (the value in effect as that nanosecond ends; `otherData.notes` says how many were merged).
A time is off by at most half a nanosecond; the data are exact in the result file.

Each machine says what its timeline holds (its registry entry's `trace_events`, built from the
helpers here); this module writes the file, written once for every machine. A file stays bounded
however long the run: every counter track has at most `points` points (a longer series is averaged
over equal runs of cycles, each point the mean of its run) and the trace at most `slices` complete
events (a machine keeps the earliest, whole steps or sections, and says what it left out).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from . import __version__, files
from . import machine as machines
from .errors import InputError
from .output import open_result_file, plain
from .report import read_summary
from .roofline import values_of_file

FORMATS = ("perfetto",)
DEFAULT_POINTS = 2000
DEFAULT_SLICES = 200_000


@dataclass
class Timeline:
    """The events of a trace as a machine builds them, and the notes on what was sampled or left out.

    clock_ghz turns cycles into whole nanoseconds (`ns`) and microseconds on that grid (`us`); processes
    and threads are named once each (`process`, `thread`) and given in that order in the file."""

    clock_ghz: float
    points: int = DEFAULT_POINTS
    slices: int = DEFAULT_SLICES
    events: list = field(default_factory=list)
    notes: list = field(default_factory=list)
    _names: list = field(default_factory=list)
    _slices_used: int = 0
    _merged: int = 0

    def ns(self, cycles) -> int:
        """Simulated time at `cycles` in whole nanoseconds: round(cycles / clock_ghz)."""
        return round(float(cycles) / self.clock_ghz)  # (to even at a half, as np.rint in `counter`)

    def us(self, cycles) -> float:
        """Microseconds of simulated time at `cycles` on the whole-nanosecond grid: `ns` / 1,000 (exact
        in three decimals, which JSON writes as they are)."""
        return self.ns(cycles) / 1000.0

    @property
    def merged(self) -> int:
        """Counter samples left out because a later one of their track fell in the same nanosecond."""
        return self._merged

    def process(self, pid: int, name: str) -> None:
        self._names.append({"name": "process_name", "ph": "M", "pid": pid, "tid": 0, "args": {"name": name}})
        self._names.append({"name": "process_sort_index", "ph": "M", "pid": pid, "tid": 0,
                            "args": {"sort_index": pid}})

    def thread(self, pid: int, tid: int, name: str) -> None:
        self._names.append({"name": "thread_name", "ph": "M", "pid": pid, "tid": tid, "args": {"name": name}})
        self._names.append({"name": "thread_sort_index", "ph": "M", "pid": pid, "tid": tid,
                            "args": {"sort_index": tid}})

    @property
    def slices_left(self) -> int:
        return self.slices - self._slices_used

    def slice(self, pid: int, tid: int, name: str, start, cycles, cat: str = "", args: dict | None = None) -> None:
        """A complete event of `cycles` cycles from cycle `start` (callers keep within `slices_left`), its
        start and end on the nanosecond grid."""
        begin, end = self.ns(start), self.ns(float(start) + float(cycles))
        ev = {"name": name, "ph": "X", "ts": begin / 1000.0, "dur": (end - begin) / 1000.0, "pid": pid, "tid": tid}
        if cat:
            ev["cat"] = cat
        if args:
            ev["args"] = _plain(args)
        self.events.append(ev)
        self._slices_used += 1

    def counter(self, pid: int, name: str, starts, values, ends) -> None:
        """A counter track: `values[i]` from cycle `starts[i]` to `ends[i]`. More than `points` values are
        averaged over equal runs of cycles (`bucket`); NaN values are left out; then each sample's time is
        rounded to whole nanoseconds, and of the samples in one nanosecond the last is kept (module doc)."""
        starts, values = bucket(np.asarray(starts, dtype=np.float64), np.asarray(ends, dtype=np.float64),
                                np.asarray(values, dtype=np.float64), self.points)
        known = ~np.isnan(values)
        at, values = np.rint(starts[known] / self.clock_ghz).astype(np.int64), values[known]
        last = np.append(at[1:] != at[:-1], True)  # the last sample of each nanosecond
        self._merged += int(np.count_nonzero(~last))
        for t, v in zip(at[last].tolist(), values[last].tolist(), strict=True):
            self.events.append({"name": name, "ph": "C", "ts": t / 1000.0, "pid": pid, "tid": 0, "args": {"value": v}})

    def trace(self) -> list:
        """The names, then every track's events in time order (a slice before the slices it holds)."""
        def key(ev):
            return (ev["pid"], ev["ph"] == "C", ev["tid"] if ev["ph"] == "X" else ev["name"], ev["ts"],
                    -ev.get("dur", 0.0))

        return self._names + sorted(self.events, key=key)


def bucket(starts, ends, values, points: int):
    """(starts, means) of a step function `values` on [starts[i], ends[i]) in at most `points` equal runs
    of cycles: each run's value is the cycle-weighted mean over it of the values that are not NaN (NaN
    where it has none). Returned as is when it has at most `points` steps."""
    if len(values) <= points or len(values) == 0:
        return starts, values
    t0, t1 = float(starts[0]), float(ends[-1])
    edges = np.linspace(t0, t1, points + 1)
    # the cycle-weighted integral of the step function, at every step's start and at the end
    widths = ends - starts
    known = ~np.isnan(values)
    v = np.where(known, values, 0.0)
    w = known.astype(np.float64)  # the cycles that count: those of values that are not NaN
    knots = np.append(starts, ends[-1])

    def integral_at(t, y):
        cum = np.concatenate([[0.0], np.cumsum(y * widths)])
        i = np.clip(np.searchsorted(knots, t, side="right") - 1, 0, len(y) - 1)
        return cum[i] + y[i] * np.clip(t - knots[i], 0.0, widths[i])

    area, counted = np.diff(integral_at(edges, v)), np.diff(integral_at(edges, w))
    return edges[:-1], np.where(counted > 0, area / np.where(counted > 0, counted, 1.0), np.nan)


def spans(busy, starts, ends, most: int):
    """(start, end) of the runs where `busy` is true, as at most `most` spans: when there are more, the
    shortest gaps between runs are closed first (a span then holds short idle gaps)."""
    busy = np.asarray(busy, dtype=bool)
    if not busy.any() or most < 1:
        return []
    edges = np.diff(np.concatenate([[0], busy.astype(np.int8), [0]]))
    first, last = np.flatnonzero(edges == 1), np.flatnonzero(edges == -1) - 1
    s, e = np.asarray(starts)[first].astype(np.int64), np.asarray(ends)[last].astype(np.int64)
    if len(s) > most:
        gaps = s[1:] - e[:-1]
        keep = np.sort(np.argsort(gaps, kind="stable")[len(gaps) - (most - 1):]) if most > 1 else np.array([], int)
        s = np.concatenate([[s[0]], s[keep + 1]])
        e = np.concatenate([e[keep], [e[-1]]])
    return list(zip(s.tolist(), e.tolist(), strict=True))


def runs_of(busy) -> int:
    """How many runs of true values `busy` holds (what `spans` keeps when `most` allows)."""
    b = np.asarray(busy, dtype=np.int8)
    return int(np.count_nonzero(np.diff(np.concatenate([[0], b])) == 1))


def export(path, fmt: str = "perfetto", out=None, *, points: int = DEFAULT_POINTS,
           slices: int = DEFAULT_SLICES) -> Path:
    """Write the timeline of a result file; returns the path written (default: beside the result, its
    name with .trace.json). The file appears whole or not at all (written aside, then renamed)."""
    if fmt not in FORMATS:
        raise InputError(f"--format {fmt}: must be one of {', '.join(FORMATS)}")
    for flag, value, least in (("--points", points, 2), ("--slices", slices, 1)):
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            raise InputError(f"{flag} {value}: must be an integer >= {least}")
    root, summary = read_summary(path)
    m = machines.get(root.get("machine"))
    values = values_of_file(path)
    target = Path(out) if out is not None else Path(path).with_name(Path(path).name.removesuffix(".h5")
                                                                   .removesuffix(".incomplete") + ".trace.json")
    if target.is_dir():
        raise InputError(f"-o {target}: is a folder; give the trace file's name")
    if not target.parent.exists():
        raise InputError(f"-o {target}: no such folder {target.parent}")
    tl = Timeline(clock_ghz=float(values["machine"]["clock_ghz"]), points=points, slices=slices)
    with open_result_file(path) as f:
        m.trace_events(f, values, tl)
    _host_slices(tl, root, summary)
    if tl.merged:
        tl.notes.append(f"counters: {tl.merged:,} samples left out, each followed within the same nanosecond by a "
                        "later sample of its track, which is kept (timestamps are whole nanoseconds)")
    doc = {
        "traceEvents": tl.trace(),
        "displayTimeUnit": "ns",
        "otherData": _plain({
            "generator": f"meshsim {__version__}", "result": Path(path).name, "machine": m.name,
            "scenario": root.get("scenario_name", ""), "complete": bool(root.get("complete")),
            "cycles": int(root.get("cycles_done", 0)), "clock_ghz": tl.clock_ghz,
            "time": "microseconds of simulated time in whole nanoseconds: round(cycles / clock_ghz) / 1000",
            "points_per_counter": points, "slices_at_most": slices, "notes": tl.notes,
            "li": summary.get("li"), "chip_seconds": summary.get("chip_seconds"),
            "host_seconds": summary.get("host_seconds"),
        }),
    }
    text = json.dumps(doc, separators=(",", ":"), allow_nan=False)
    files.write_through_temporary(target, "trace", lambda fh: fh.write(text.encode()))
    return target


HOST_PID = 1_000_000  # the host's process in the trace, apart from every chip's

#: A generation's cache datasets (docs/decode.md, docs/ipu.md and docs/rdu.md): name -> what it counts.
_GENERATION_CACHES = {"occupancy/cache_tokens": "tokens", "occupancy/cache_bytes": "bytes"}


def generation_events(f, tl: Timeline, unit: str) -> None:
    """A decode run's timeline, for every machine: the prompt's part (the wafer's prefill and reshuffle,
    before its tokens; on the ipu and the rdu the first token's step holds the prompt), each token a
    slice with its tokens/ row as arguments, and counters of the cache on its fullest unit and its mean
    over the units (`unit`: what they are)."""
    summary = {k: v for k, v in f["summary"].attrs.items()}
    cols = {k: f[f"tokens/{k}"][()] for k in f["tokens"] if k != "token_row"}
    n = len(cols.get("cycles", ()))
    tl.process(1, "generation")
    tl.thread(1, 1, "tokens")
    offset = 0
    wafer = "prefill_cycles" in summary  # the wafer's prefill and reshuffle come before its tokens
    if wafer and int(summary["prefill_cycles"]):
        pre, shuffle = int(summary["prefill_cycles"]), int(summary["reshuffle_cycles"])
        tl.thread(1, 2, "prompt")
        tl.slice(1, 2, "prefill", 0, pre, cat="prefill",
                 args={"region": summary["prefill_region"], "cycles_a_layer": summary["prefill_cycles_per_layer"]})
        if shuffle:
            tl.slice(1, 2, "reshuffle", pre, shuffle, cat="prefill")
        offset = pre + shuffle
    # a pipelined generation's micro-batches overlap in time: each has a track of its own
    mbs = cols.get("microbatch")
    for j in sorted(set(mbs.tolist())) if mbs is not None else ():
        tl.thread(1, 10 + j, f"tokens of micro-batch {j}")
    shown = min(n, max(0, tl.slices_left - 2))
    for i in range(shown):
        tok = int(cols["token"][i])
        name = "prompt and token 0" if tok == 0 and not wafer else f"token {tok}"
        tl.slice(1, 1 if mbs is None else 10 + int(mbs[i]), name, offset + int(cols["start_cycle"][i]),
                 int(cols["cycles"][i]), cat="token",
                 args={k: v[i] for k, v in cols.items() if k not in ("token", "start_cycle", "cycles")})
    if shown < n:
        tl.notes.append(f"tokens: the first {shown:,} of {n:,}")
    name = next((k for k in _GENERATION_CACHES if k in f), None)
    if name is not None and n:
        cache = f[name][()][:n].astype(np.float64)
        starts = offset + cols["start_cycle"].astype(np.float64)
        ends = starts + cols["cycles"]
        what = _GENERATION_CACHES[name]
        tl.counter(1, f"cache on the fullest {unit} ({what})", starts, cache.max(axis=1), ends)
        tl.counter(1, f"cache, mean over the {unit}s ({what})", starts, cache.mean(axis=1), ends)


def _host_slices(tl: Timeline, root: dict, summary: dict) -> None:
    """The host's part of every step (`host_seconds`) as slices of its own process, after the chip's
    simulated time: the model adds it to the chip's time, it does not overlap it."""
    host = summary.get("host_seconds")
    steps = int(summary.get("steps", 1) or 0)
    if not isinstance(host, float) or not host > 0 or not steps or not tl.slices_left:
        return
    end, width = int(root.get("cycles_done", 0)), host * tl.clock_ghz * 1e9
    tl.process(HOST_PID, "host")
    tl.thread(HOST_PID, 1, "host part of each step")
    shown = min(steps, tl.slices_left)
    for i in range(shown):
        tl.slice(HOST_PID, 1, "host", end + i * width, width, cat="host", args={"step": i})
    tl.notes.append(f"host: {host:g} s a step after the chip's {end:,} cycles, added to them as the summary's "
                    f"step_seconds does" + (f" (the first {shown:,} of {steps:,} steps)" if shown < steps else ""))


def _plain(d: dict) -> dict:
    """JSON-ready values (meshsim.output.plain), NaN and infinities as None."""
    out = {k: plain(v) for k, v in d.items()}
    return {k: None if isinstance(v, float) and not math.isfinite(v) else v for k, v in out.items()}
