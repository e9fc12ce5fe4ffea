"""A manifest of result files: every dataset's hash and every attribute that is not a timing, so
that a change meant to leave results alone can be checked against files recorded before it.

    python tests/manifest.py record OUT.json [--threads 1 2]   # run the shipped scenarios, scaled down
    python tests/manifest.py compare A.json B.json              # exit 1 and list what differs

The shipped scenarios run with the overrides in SCALED (full-wafer runs cut to a few hundred
cycles, long runs to a few steps) into a temporary folder.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import h5py
import numpy as np

ROOT = Path(__file__).resolve().parents[1]

# Attributes that measure the host, not the model.
TIMING = {"wall_seconds", "kernel_seconds", "first_call_seconds", "output_seconds", "pe_cycles_per_second",
          "created", "run_id", "run_seconds", "scenario_path", "threads"}
# Attributes that hold HDF5 object references (their addresses depend on the file's layout).
REFERENCES = {"DIMENSION_LIST", "REFERENCE_LIST"}

SCALED = {
    "wse2_uniform.toml": ["run.cycles=300"],
    "wse2_hotspot.toml": ["run.cycles=300"],
    "wse2_skewed_migrating.toml": ["run.cycles=300"],
    "wse2_skewed_static.toml": ["run.cycles=300"],
    "wse2_gpt2_small.toml": ["run.cycles=1500"],
    "wse2_gpt2_small_train.toml": ["run.cycles=1500"],
    "wse2_llm_7b.toml": ["run.cycles=2000"],
    "ipu_gpt2_24l_8ipu.toml": ["run.steps=3"],
}


def _value(v):
    if isinstance(v, bytes):
        return v.decode(errors="replace")
    if isinstance(v, np.ndarray):
        if v.dtype.kind == "f":
            return hashlib.sha256(np.ascontiguousarray(v).tobytes()).hexdigest()
        return [_value(x) for x in v.tolist()]
    if isinstance(v, np.generic):
        v = v.item()
    if isinstance(v, float):
        return float(v).hex()
    return v if isinstance(v, (int, str, bool, type(None))) else repr(v)


def manifest(path) -> dict:
    """{object path: description} of every group and dataset of the file."""
    out = {}
    with h5py.File(path, "r") as f:
        def visit(name, obj):
            attrs = {k: _value(v) for k, v in obj.attrs.items() if k not in TIMING and k not in REFERENCES}
            entry = {"attrs": attrs}
            if isinstance(obj, h5py.Dataset):
                data = obj[()]
                if obj.dtype.kind == "O":
                    digest = hashlib.sha256(repr(data.tolist()).encode()).hexdigest()
                else:
                    digest = hashlib.sha256(np.ascontiguousarray(data).tobytes()).hexdigest()
                entry.update(dtype=str(obj.dtype), shape=list(obj.shape), sha256=digest,
                             dims=[[d.label, [s.name for s in d.values()]] for d in obj.dims])
            out[name] = entry
        out["/"] = {"attrs": {k: _value(v) for k, v in f.attrs.items() if k not in TIMING}}
        f.visititems(visit)
    return out


def record(out: Path, threads) -> None:
    result = {}
    with tempfile.TemporaryDirectory() as tmp:
        for sc in sorted((ROOT / "scenarios").glob("*.toml")):
            for t in threads:
                res = Path(tmp) / f"{sc.stem}_{t}.h5"
                cmd = [sys.executable, "-m", "meshsim", "run", str(sc), *SCALED.get(sc.name, []), "-o", str(res),
                       "-q", "--threads", str(t)]
                p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
                if p.returncode != 0:
                    raise SystemExit(f"{sc.name}: {p.stderr}")
                result[f"{sc.name} threads={t}"] = manifest(res)
                print(f"{sc.name} threads={t}: {len(result[f'{sc.name} threads={t}'])} objects", flush=True)
    out.write_text(json.dumps(result, indent=1, sort_keys=True))


def compare(a: Path, b: Path) -> int:
    x, y = json.loads(a.read_text()), json.loads(b.read_text())
    bad = 0
    for run in sorted(set(x) | set(y)):
        if run not in x or run not in y:
            print(f"{run}: only in {'the first' if run in x else 'the second'}")
            bad += 1
            continue
        for obj in sorted(set(x[run]) | set(y[run])):
            if x[run].get(obj) != y[run].get(obj):
                print(f"{run}: {obj} differs: {x[run].get(obj)} != {y[run].get(obj)}"[:400])
                bad += 1
    print("identical" if not bad else f"{bad} differences")
    return 1 if bad else 0


def main() -> int:
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("record")
    r.add_argument("out", type=Path)
    r.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    c = sub.add_parser("compare")
    c.add_argument("a", type=Path)
    c.add_argument("b", type=Path)
    args = ap.parse_args()
    if args.cmd == "record":
        record(args.out, args.threads)
        return 0
    return compare(args.a, args.b)


if __name__ == "__main__":
    sys.exit(main())
