"""meshsim export --format perfetto: the Chrome trace-event JSON of a result file (docs/results.md,
"Timelines in Perfetto"), checked against the trace-event format as its specification states it,
written here without the exporter's code: the fields every phase requires, one name per process and
thread, timestamps in order on every track, slices that nest, and files bounded for long runs; and
what Perfetto, which keeps time in integer nanoseconds, needs on top: every timestamp and duration a
whole number of nanoseconds, and no two samples of a counter track in the same nanosecond."""

import json
import math
import subprocess
import sys
from collections import defaultdict
from decimal import Decimal
from pathlib import Path

import numpy as np
import pytest

import meshsim
from meshsim.errors import InputError
from meshsim.export import Timeline, bucket, export, spans
from meshsim.run import RunInterrupted, run_scenario
from meshsim.scenario import load_scenario

ROOT = Path(__file__).resolve().parents[1]
METADATA = {"process_name": "name", "thread_name": "name", "process_sort_index": "sort_index",
            "thread_sort_index": "sort_index"}


def _no_constants(name):
    raise AssertionError(f"the trace holds {name}, which JSON does not")


def check_trace(path) -> dict:
    """The trace of `path`, after checking it against the trace-event format; returns the parsed
    document with, added, `_processes` {pid: name}, `_slices` {(pid, tid): [(ts, dur, name)]} and
    `_counters` {(pid, name): [(ts, value)]}."""
    text = Path(path).read_text()
    doc = json.loads(text, parse_constant=_no_constants)
    assert isinstance(doc, dict) and isinstance(doc["traceEvents"], list)
    # times as written (decimals, not binary floats): microseconds in whole nanoseconds
    for ev in json.loads(text, parse_float=Decimal)["traceEvents"]:
        for key in ("ts", "dur"):
            assert key not in ev or (Decimal(ev[key]) * 1000) % 1 == 0, f"{key} is no whole nanosecond: {ev}"
    assert doc.get("displayTimeUnit") in (None, "ms", "ns")
    processes, threads, slices, counters = {}, {}, defaultdict(list), defaultdict(list)
    for ev in doc["traceEvents"]:
        assert isinstance(ev, dict) and isinstance(ev.get("ph"), str), ev
        assert isinstance(ev.get("pid"), int), ev
        ph = ev["ph"]
        if ph == "M":
            assert ev["name"] in METADATA, ev
            value = ev["args"][METADATA[ev["name"]]]
            if ev["name"] == "process_name":
                assert isinstance(value, str) and ev["pid"] not in processes, f"one name per process: {ev}"
                processes[ev["pid"]] = value
            elif ev["name"] == "thread_name":
                key = (ev["pid"], ev["tid"])
                assert isinstance(value, str) and key not in threads, f"one name per thread: {ev}"
                threads[key] = value
            else:
                assert isinstance(value, int)
            continue
        assert isinstance(ev.get("name"), str) and ev["name"], ev
        assert isinstance(ev.get("ts"), (int, float)) and ev["ts"] >= 0 and math.isfinite(ev["ts"]), ev
        if ph == "X":
            assert isinstance(ev.get("tid"), int), ev
            assert isinstance(ev.get("dur"), (int, float)) and ev["dur"] >= 0, ev
            assert isinstance(ev.get("args", {}), dict)
            slices[(ev["pid"], ev["tid"])].append((ev["ts"], ev["dur"], ev["name"]))
        elif ph == "C":
            args = ev["args"]
            assert args and all(isinstance(v, (int, float)) and math.isfinite(v) for v in args.values()), ev
            counters[(ev["pid"], ev["name"])].append((ev["ts"], args))
        else:
            raise AssertionError(f"a phase this exporter does not write: {ev}")
    for (pid, tid), track in slices.items():
        assert pid in processes and (pid, tid) in threads, f"track {pid}/{tid} is named"
        assert [t for t, _, _ in track] == sorted(t for t, _, _ in track), f"track {pid}/{tid}: timestamps in order"
        open_ends = []  # the slices holding the current one: each must end no later than its holder
        for ts, dur, name in track:
            while open_ends and ts >= open_ends[-1] - 1e-9:
                open_ends.pop()
            if open_ends:
                assert ts + dur <= open_ends[-1] + 1e-6, f"track {pid}/{tid}: {name} at {ts} crosses its holder's end"
            open_ends.append(ts + dur)
    for (pid, name), track in counters.items():
        assert pid in processes
        times = [round(t * 1000) for t, _ in track]  # integer nanoseconds, as Perfetto keeps them
        assert times == sorted(times) and len(set(times)) == len(times), f"counter {pid}/{name}: time increases"
    doc.update(_processes=processes, _slices=slices, _counters=counters)
    return doc


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    d = tmp_path_factory.mktemp("export")
    out = {}
    out["rdu"] = meshsim.run(ROOT / "scenarios" / "rdu_t4p2d1.toml", out=d / "rdu.h5", workload={"n_layers": 2}).path
    out["ipu"] = meshsim.run(ROOT / "scenarios" / "ipu_gpt2_even.toml", out=d / "ipu.h5", run={"steps": 3}).path
    out["hotspot"] = meshsim.run(ROOT / "scenarios" / "smoke.toml", out=d / "smoke.h5").path
    out["pipeline"] = meshsim.run(ROOT / "scenarios" / "mesh_pipeline_policies.toml", out=d / "pipe.h5",
                                  run={"cycles": 3000}).path
    return out


def test_rdu_sections_and_ddr_per_chip(runs, tmp_path):
    doc = check_trace(export(runs["rdu"], out=tmp_path / "t.json"))
    with meshsim.load(runs["rdu"]) as r:
        chips = r.maps["chip"].values.tolist()
        assert len(chips) == r.summary["chips_simulated"] == 2  # T4P2D1: a chip of each pipeline stage
        # one process per chip, and the host's part of the step (the SN30 preset's host_seconds)
        assert sorted(doc["_processes"].values()) == [f"chip {c}" for c in chips] + ["host"]
        sections = r.dataset("sections")
        clock = r.scenario["machine"]["clock_ghz"]
        chip0 = sections.where(sections["chip"] == 0, drop=True)
        got = doc["_slices"][(1, 1)]
        assert [n for _, _, n in got] == [str(x).split(":", 1)[1] for x in chip0["name"].values]
        first = chip0.isel(section_row=0)
        assert got[0][0] == pytest.approx(float(first["start_cycle"]) / clock / 1000)
        assert got[0][1] == pytest.approx((float(first["end_cycle"]) - float(first["start_cycle"]) + 1) / clock / 1000)
    assert doc["_slices"][(1, 2)] and all(n == "DDR" for _, _, n in doc["_slices"][(1, 2)])
    assert (1, "busy PCUs") in doc["_counters"] and doc["otherData"]["machine"] == "rdu"


def test_ipu_supersteps_hold_their_phases_per_stage(runs, tmp_path):
    doc = check_trace(export(runs["ipu"], out=tmp_path / "t.json"))
    assert sorted(doc["_processes"].values()) == sorted([f"IPU {s} (stage {s})" for s in range(4)] + ["pipeline"])
    track = doc["_slices"][(1, 1)]
    assert {n for _, _, n in track} >= {"compute", "sync", "exchange", "embedding"}
    with meshsim.load(runs["ipu"]) as r:
        ss = r.series
        n0 = int((ss["stage"] == 0).sum())
        assert sum(1 for _, _, n in track if n not in ("compute", "sync", "exchange")) == n0
        total = float((ss["compute_cycles"] + ss["sync_cycles"] + ss["exchange_cycles"]).where(ss["stage"] == 0).sum())
        clock = r.scenario["machine"]["clock_ghz"]
    phases = sum(d for _, d, n in track if n in ("compute", "sync", "exchange"))
    assert phases == pytest.approx(total / clock / 1000)


def test_mesh_windows_and_regions_are_counters(runs, tmp_path):
    doc = check_trace(export(runs["hotspot"], out=tmp_path / "t.json"))
    assert list(doc["_processes"].values())[0].startswith("wafer 32 x 48")
    assert len(doc["_processes"]) == 3  # the wafer, the hot region and the rest
    counters = doc["_counters"]
    for name in ("LI (window)", "utilisation (window)", "queued tasks", "busy PEs"):
        assert (1, name) in counters, name
    with meshsim.load(runs["hotspot"]) as r:
        li = r.dataset("windows")["li"].values.tolist()
        n_windows = len(li)
    assert [a["value"] for _, a in counters[(1, "LI (window)")]] == pytest.approx(li)
    assert len(counters[(2, "tasks completed a cycle")]) == n_windows
    assert not doc["_slices"]


def test_the_pipeline_shows_each_region_s_chunks(runs, tmp_path):
    doc = check_trace(export(runs["pipeline"], out=tmp_path / "t.json"))
    regions = [n for n in doc["_processes"].values() if n.startswith("region")]
    with meshsim.load(runs["pipeline"]) as r:
        n = r.dataset("regions").sizes["region"]
        finished = int(r.series["chunks_finished"].sum())
        window = r.scenario["output"]["window_cycles"] if "window_cycles" in r.scenario["output"] else None
    assert len(regions) == n and finished > 0
    chunks = [doc["_counters"][(pid, "chunks a cycle")] for pid in doc["_processes"] if pid > 1]
    # in the steady state every region passes chunks at the pipeline's rate, a few per hundred cycles
    last = [track[-1][1]["value"] for track in chunks]
    assert all(0 < v < 1 for v in last), (last, window)
    assert (1, "chunks finished a cycle") in doc["_counters"]


def test_long_runs_stay_bounded_and_say_what_was_sampled(runs, tmp_path):
    doc = check_trace(export(runs["ipu"], out=tmp_path / "t.json", slices=500, points=10))
    n_slices = sum(len(t) for t in doc["_slices"].values())
    assert n_slices <= 500 and any("supersteps: the first" in note for note in doc["otherData"]["notes"])
    # room for the first step and part of the second: the first step, whole, and no part of the second
    with meshsim.load(runs["ipu"]) as r:
        per_step = int((r.series["step"] == 0).sum())
        n_pipe = r.dataset("pipeline").sizes["pipeline_row"]
    doc = check_trace(export(runs["ipu"], out=tmp_path / "t2.json", slices=4 * per_step + n_pipe + 4 * 5))
    supersteps = sum(1 for t in doc["_slices"].values() for _, _, n in t if n not in ("compute", "sync", "exchange"))
    assert supersteps - n_pipe == per_step
    doc = check_trace(export(runs["hotspot"], out=tmp_path / "h.json", points=10))
    assert all(len(track) <= 10 for track in doc["_counters"].values())
    doc = check_trace(export(runs["rdu"], out=tmp_path / "r.json", slices=100, points=50))
    assert sum(len(t) for t in doc["_slices"].values()) <= 100 and doc["otherData"]["notes"]


def test_bucket_keeps_the_cycle_weighted_mean_and_spans_close_the_shortest_gaps():
    import numpy as np

    starts, ends = np.array([0.0, 10, 11, 30]), np.array([10.0, 11, 30, 40])
    values = np.array([1.0, 5, 0, 2])
    t, v = bucket(starts, ends, values, 2)
    assert t.tolist() == [0.0, 20.0] and v.tolist() == pytest.approx([(10 + 5) / 20, (0 * 10 + 2 * 10) / 20])
    # a NaN (a window with no work in a region) leaves the other values' mean, not a hole in the track
    t, v = bucket(starts, ends, np.array([np.nan, 5, 0, 2]), 2)
    assert v.tolist() == pytest.approx([(5 * 1 + 0 * 9) / 10, 1.0])  # over the 10 cycles with a value
    t, v = bucket(starts, ends, np.array([np.nan, np.nan, np.nan, 2]), 2)
    assert math.isnan(v[0]) and v[1] == pytest.approx(2.0)
    busy = np.array([1, 0, 1, 0, 0, 1], bool)
    s, e = np.arange(6) * 10, np.arange(6) * 10 + 9
    assert spans(busy, s, e, 10) == [(0, 9), (20, 29), (50, 59)]
    assert spans(busy, s, e, 2) == [(0, 29), (50, 59)]  # the 10-cycle gap closes before the 20-cycle one
    assert spans(busy, s, e, 1) == [(0, 59)]


def test_every_counter_sample_has_its_own_nanosecond(runs, tmp_path):
    """At 1.1 GHz a cycle lasts 0.909 ns, under Perfetto's 1 ns: one cycle in 11 would share its
    nanosecond with the next. On the nanosecond grid each track keeps the last sample of each
    nanosecond (the value in effect as it ends), and says how many it left out."""
    path = export(runs["hotspot"], out=tmp_path / "t.json", points=100_000)  # a sample per cycle
    doc = check_trace(path)
    with meshsim.load(runs["hotspot"]) as r:
        queued = r.series["queued"].values.tolist()
        clock = r.scenario["machine"]["clock_ghz"]
    at = np.rint(np.arange(len(queued)) / clock).astype(np.int64).tolist()
    assert clock == 1.1 and len(set(at)) < len(at)  # cycles that would share a nanosecond
    last = dict(zip(at, queued, strict=True))  # of each nanosecond, its last cycle's value
    got = {round(t * 1000): a["value"] for t, a in doc["_counters"][(1, "queued tasks")]}
    assert got == last
    assert any(note.startswith("counters:") for note in doc["otherData"]["notes"])


def test_times_round_to_the_nanosecond_grid_and_slices_still_nest():
    tl = Timeline(clock_ghz=1.1)
    c = np.arange(12)
    tl.counter(1, "q", c, c * 10.0, c + 1)
    # cycles 5 and 6 start at 4.55 and 5.45 ns: both at 5 ns, where cycle 6's value is kept
    assert [(round(e["ts"] * 1000), e["args"]["value"]) for e in tl.events] == \
        [(t, 10.0 * (t if t < 5 else t + 1)) for t in range(11)]
    assert tl.merged == 1
    tl.events.clear()
    tl.slice(1, 1, "superstep", 5, 7)  # cycles 5 to 11: from 4.55 ns to 10.91 ns
    tl.slice(1, 1, "compute", 5, 1)
    tl.slice(1, 1, "exchange", 6, 6)
    got = [(round(e["ts"] * 1000), round(e["dur"] * 1000)) for e in tl.events]
    assert got == [(5, 6), (5, 0), (5, 6)]  # the parts tile the whole, 5 to 11 ns
    assert tl.us(11) == 0.01 and tl.ns(12) == 11


def test_an_incomplete_file_exports_what_it_holds(tmp_path):
    calls = []
    sc = load_scenario(ROOT / "scenarios" / "smoke.toml", ["output.flush_every_cycles=100"])
    with pytest.raises(RunInterrupted) as err:
        run_scenario(sc, tmp_path / "s.h5", progress=False, max_cycles_per_call=100,
                     stop=lambda: calls.append(1) or len(calls) > 5)
    doc = check_trace(export(err.value.path, out=tmp_path / "s.json"))
    assert doc["otherData"]["complete"] is False and doc["_counters"][(1, "queued tasks")]


def test_the_command_line_writes_beside_the_result_and_refuses_bad_input(runs, tmp_path):
    proc = subprocess.run([sys.executable, "-m", "meshsim", "export", str(runs["hotspot"]), "--format", "perfetto"],
                          capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    written = Path(proc.stdout.strip())
    assert written == runs["hotspot"].with_name("smoke.trace.json") and check_trace(written)
    for args, said in ((["--format", "otf2"], "--format otf2: must be one of perfetto"),
                       (["--points", "1"], "--points 1: must be an integer >= 2"),
                       (["-o", str(tmp_path / "no" / "t.json")], "no such folder")):
        proc = subprocess.run([sys.executable, "-m", "meshsim", "export", str(runs["hotspot"]), *args],
                              capture_output=True, text=True, cwd=ROOT)
        assert proc.returncode == 2 and said in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    with pytest.raises(InputError, match="no such result file"):
        export(tmp_path / "none.h5")
    assert not list(tmp_path.glob("*.tmp")) and not list(tmp_path.glob(".*.tmp"))
