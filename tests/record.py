"""Results held against a stored record: a few short runs of each machine, their result files
reduced to fingerprints in tests/data/results_record.json, which tests/test_record.py compares on
every default test run.

    python tests/record.py check                     # run the cases, list what differs (exit 1)
    python tests/record.py update --why "MESSAGE"    # record them again, MESSAGE saying why

A change that is not meant to move results must leave every fingerprint as it is. A change that
moves results by design updates the record in the same commit, and its message (kept in the
record's log, newest last) says which results move and why.

A fingerprint holds, for every dataset and group of the result file, its type and shape and:
integer, boolean and text data exactly (a SHA-256 of the values); floating-point data as its count,
its NaNs, its sum, a position-weighted sum of magnitudes (so that values trading places show),
its least and largest value, compared within a relative 1e-9 (the one allowance: a numpy release
may sum in another order); every attribute that is a result, floats within the same 1e-9. Left
out: what measures the host (timings, threads), what names the run (its id, paths, creation time,
the meshsim version) and the scenario's own text, which echoes the input rather than the result.
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import math
import sys
import tempfile
from pathlib import Path

import h5py
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
RECORD = ROOT / "tests" / "data" / "results_record.json"
SCENARIOS = ROOT / "scenarios"
REL = 1e-9

# Attributes that are not results: the host's timings, the run's identity, the scenario echoed back,
# and the file's own bookkeeping (HDF5 dimension scales, descriptions and units).
NOT_RESULTS = {"wall_seconds", "kernel_seconds", "first_call_seconds", "output_seconds",
               "pe_cycles_per_second", "created", "run_id", "run_seconds", "scenario_path", "threads",
               "meshsim_version", "scenario_text", "scenario_resolved", "overrides", "description", "units",
               "CLASS", "NAME", "DIMENSION_LIST", "REFERENCE_LIST"}

_POLICIES = [f"migration.policy={p}" for p in ("none", "random_lower", "diffusion", "gradient", "work_stealing")]
_PIPE = ["run.cycles=3000", "run.window_cycles=500"]

# name: (scenario, overrides). A few short runs per machine, chosen to pass through every branch of
# each machine's step: every migration policy, hysteresis and a slower information delay, routed
# traffic, the layer pipeline inference and training, with migration and weight streaming, a trace
# (tests/data/trace_bursts.toml), and the rdu's and the ipu's compilers in several modes. A scenario
# is named relative to scenarios/.
CASES = {
    "mesh-smoke-least_loaded": ("smoke.toml", ["run.cycles=800"]),
    **{f"mesh-hotspot-{p.split('=')[1]}": ("mesh_policies.toml", ["run.cycles=600", "machine.rows=32",
                                                                   "machine.cols=32", p])
       for p in _POLICIES},
    "mesh-hotspot-hysteresis": ("mesh_policies.toml", ["run.cycles=600", "machine.rows=32", "machine.cols=32",
                                                       "migration.threshold=3", "migration.hysteresis=2",
                                                       "migration.info_delay_cycles=3",
                                                       "migration.max_per_cycle=2"]),
    "mesh-uniform-slow-links": ("wse2_uniform.toml", ["run.cycles=500", "machine.rows=40", "machine.cols=150",
                                                      "workload.work_distribution=uniform",
                                                      "workload.work_min_cycles=2", "workload.work_max_cycles=30",
                                                      "machine.hop_latency_cycles=2", "machine.credit_delay_cycles=2",
                                                      "output.frame_every_cycles=50"]),
    "mesh-skewed-wide-links": ("wse2_skewed_migrating.toml", ["run.cycles=500", "machine.rows=48",
                                                              "machine.cols=80", "machine.link_messages_per_cycle=2",
                                                              "machine.link_buffer_messages=4"]),
    "mesh-traffic": ("noc_uniform_k16.toml", ["run.cycles=1500", "workload.warmup_cycles=300",
                                              "workload.measure_cycles=800"]),
    "mesh-pipeline": ("mesh_pipeline_policies.toml", _PIPE),
    "mesh-pipeline-gradient": ("mesh_pipeline_policies.toml", _PIPE + ["migration.policy=gradient",
                                                                       "migration.threshold=1"]),
    "mesh-pipeline-train": ("mesh_pipeline_policies.toml", _PIPE + ["workload.training=true"]),
    "mesh-pipeline-streaming": ("mesh_pipeline_policies.toml", _PIPE + ["workload.weight_streaming=true"]),
    "rdu-o3-train": ("rdu_gpt2_o3.toml", []),
    "rdu-o0": ("rdu_gpt2_o0.toml", []),
    "rdu-t4p2d1": ("rdu_t4p2d1.toml", []),
    "rdu-prefetch": ("rdu_prefetch.toml", []),
    "ipu-4stage": ("ipu_gpt2_4stage.toml", ["run.steps=2"]),
    "ipu-uneven": ("ipu_gpt2_uneven.toml", ["run.steps=2"]),
    "mesh-trace": ("../tests/data/trace_bursts.toml", []),
    "mesh-trace-stealing": ("../tests/data/trace_bursts.toml", ["migration.policy=work_stealing"]),
}


def _float(v) -> float | str:
    v = float(v)
    return v if math.isfinite(v) else repr(v)


def _attr(v):
    if isinstance(v, bytes):
        return v.decode(errors="replace")
    if isinstance(v, np.ndarray):
        return data_fingerprint(v) if v.dtype.kind == "f" else [_attr(x) for x in v.tolist()]
    if isinstance(v, np.generic):
        v = v.item()
    if isinstance(v, float):
        return _float(v)
    return v if isinstance(v, (int, str, bool, type(None))) else repr(v)


def data_fingerprint(a: np.ndarray) -> dict:
    a = np.asarray(a)
    out = {"dtype": a.dtype.kind, "shape": list(a.shape)}
    if a.dtype.kind == "f":
        x = a.astype(np.float64).ravel()
        finite = x[np.isfinite(x)]
        w = np.arange(1, finite.size + 1, dtype=np.float64) / max(finite.size, 1)
        out.update(n=int(x.size), nan=int(np.isnan(x).sum()), inf=int(np.isinf(x).sum()),
                   sum=_float(finite.sum()), weighted=_float((np.abs(finite) * w).sum()),
                   min=_float(finite.min()) if finite.size else None,
                   max=_float(finite.max()) if finite.size else None)
    elif a.dtype.kind == "O":
        out["sha256"] = hashlib.sha256(repr([_attr(v) for v in a.ravel().tolist()]).encode()).hexdigest()
    else:
        out["sha256"] = hashlib.sha256(np.ascontiguousarray(a).tobytes()).hexdigest()
    return out


def fingerprint(path) -> dict:
    """{object path: {"attrs": ..., "data": ...}} of every group and dataset of a result file."""
    out = {}
    with h5py.File(path, "r") as f:
        def visit(name, obj):
            entry = {"attrs": {k: _attr(v) for k, v in sorted(obj.attrs.items()) if k not in NOT_RESULTS}}
            if isinstance(obj, h5py.Dataset):
                entry["data"] = data_fingerprint(obj[()])
            out[name] = entry
        out["/"] = {"attrs": {k: _attr(v) for k, v in sorted(f.attrs.items()) if k not in NOT_RESULTS}}
        f.visititems(visit)
    return out


def run_case(name: str, folder: Path, threads: int = 1) -> dict:
    """The fingerprint of case `name` run with `threads` threads into `folder`."""
    import meshsim

    scenario, overrides = CASES[name]
    out = folder / f"{name}-{threads}.h5"
    meshsim.run(SCENARIOS / scenario, list(overrides), out=out, threads=threads)
    return fingerprint(out)


def same(a, b) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return math.isclose(a, b, rel_tol=REL, abs_tol=1e-300)
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and a == b


def differences(stored: dict, now: dict) -> list:
    """Lines naming each object whose fingerprint differs between `stored` and `now`."""
    lines = []
    for obj in sorted(set(stored) | set(now)):
        if obj not in now:
            lines.append(f"{obj}: in the record, not in the result")
        elif obj not in stored:
            lines.append(f"{obj}: new in the result, not in the record")
        elif not same(stored[obj], now[obj]):
            for part in ("attrs", "data"):
                x, y = stored[obj].get(part), now[obj].get(part)
                if isinstance(x, dict) and isinstance(y, dict):
                    keys = [k for k in sorted(set(x) | set(y)) if not same(x.get(k), y.get(k))]
                    for k in keys:
                        lines.append(f"{obj} {part} {k}: recorded {x.get(k)!r}, now {y.get(k)!r}"[:300])
                elif not same(x, y):
                    lines.append(f"{obj} {part}: recorded {x!r}, now {y!r}"[:300])
    return lines


def load() -> dict:
    return json.loads(RECORD.read_text())


def check() -> int:
    stored = load()["results"]
    bad = 0
    with tempfile.TemporaryDirectory() as tmp:
        for name in CASES:
            lines = differences(stored.get(name, {}), run_case(name, Path(tmp)))
            print(f"{name}: {'as recorded' if not lines else f'{len(lines)} differences'}", flush=True)
            for line in lines[:20]:
                print("  " + line)
            bad += bool(lines)
    return 1 if bad else 0


def update(why: str) -> int:
    import meshsim

    old = load() if RECORD.exists() else {"log": []}
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name in CASES:
            results[name] = run_case(name, Path(tmp))
            print(f"{name}: {len(results[name])} objects", flush=True)
    before = old.get("results", {})
    moved = sorted(n for n in results if n in before and differences(before[n], results[n]))
    new = sorted(n for n in results if n not in before)
    log = old.get("log", []) + [{"date": datetime.date.today().isoformat(), "meshsim": meshsim.__version__,
                                 "why": why, "cases_moved": moved, "cases_new": new}]
    RECORD.parent.mkdir(parents=True, exist_ok=True)
    RECORD.write_text(json.dumps({"cases": {n: [s, o] for n, (s, o) in CASES.items()}, "log": log,
                                  "results": results}, indent=1, sort_keys=True) + "\n")
    print(f"recorded {len(results)} cases; moved: {', '.join(moved) or 'none'}; new: {', '.join(new) or 'none'}")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("check", help="run the cases and list what differs from the record")
    u = sub.add_parser("update", help="record the cases again")
    u.add_argument("--why", required=True, help="which results move and why (kept in the record's log)")
    args = ap.parse_args()
    return check() if args.cmd == "check" else update(args.why)


if __name__ == "__main__":
    sys.exit(main())
