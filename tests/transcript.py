"""A transcript of the command line: help, `validate --resolved` of every shipped scenario, `report`
and `report --json` of small runs of each machine, and the messages and exit statuses of bad input,
so that a change meant to leave the CLI alone can be checked against one recorded before it.

    python tests/transcript.py record OUT.json     # about a minute
    python tests/transcript.py compare A.json B.json

Timings (wall seconds, speeds, thread counts) and temporary paths are masked.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

TIMING_KEYS = {"wall_seconds", "kernel_seconds", "first_call_seconds", "output_seconds", "pe_cycles_per_second",
               "created", "run_seconds", "scenario_path", "threads", "result"}
TIMING_LINE = re.compile(r"^(speed|wall|timing|threads|kernel|created|run took|simulation)\b", re.I)

RUNS = {
    "mesh": ["scenarios/smoke.toml", "run.cycles=400"],
    "traffic": ["scenarios/noc_uniform_k16.toml"],
    "pipeline": ["scenarios/wse2_gpt2_small.toml", "run.cycles=1200"],
    "rdu": ["scenarios/rdu_gpt2_o1.toml"],
    "ipu": ["scenarios/ipu_gpt2_4stage.toml"],
}

BAD = [
    ["validate", "scenarios/smoke.toml", "machine.type=mseh"],
    ["validate", "scenarios/smoke.toml", "run.cycles=-3"],
    ["validate", "scenarios/smoke.toml", "nosuch.key=1"],
    ["validate", "scenarios/smoke.toml", "run.cyles=10"],
    ["validate", "scenarios/smoke.toml", "workload.type=transformer"],
    ["validate", "scenarios/rdu_gpt2_o1.toml", "workload.fusion=o2"],
    ["validate", "scenarios/rdu_gpt2_o1.toml", "workload.microbatches=0"],
    ["validate", "scenarios/ipu_gpt2_4stage.toml", "workload.layers_per_stage=[1,1,1]"],
    ["validate", "scenarios/ipu_gpt2_4stage.toml", "machine.preset=sn30"],
    ["validate", "no/such/file.toml"],
    ["run", "scenarios/smoke.toml", "-o", ""],
    ["run", "scenarios/smoke.toml", "-o", "scenarios"],
    ["report", "no/such/result.h5"],
    ["report", "scenarios/smoke.toml"],
    ["sweep", "no/such/sweep.toml"],
    ["sweep", "scenarios/smoke.toml"],
    ["roofline", "scenarios/smoke.toml", "machine.rows=0"],
    ["plot", "no/such/result.h5"],
    ["bench", "--bogus"],
]


def _mask(text: str, tmp: str) -> str:
    text = text.replace(tmp, "TMP")
    out = []
    for line in text.splitlines():
        if TIMING_LINE.match(line.strip()):
            line = re.sub(r"[\d.,]+", "N", line)
        out.append(line)
    return "\n".join(out)


def _mask_json(text: str, tmp: str):
    try:
        data = json.loads(text)
    except ValueError:
        return _mask(text, tmp)

    def walk(x):
        if isinstance(x, dict):
            return {k: ("MASKED" if k in TIMING_KEYS else walk(v)) for k, v in x.items()}
        if isinstance(x, list):
            return [walk(v) for v in x]
        if isinstance(x, str):
            return x.replace(tmp, "TMP")
        return x

    return walk(data)


def _cli(args, tmp, *, as_json=False) -> dict:
    p = subprocess.run([sys.executable, "-m", "meshsim", *args], cwd=ROOT, capture_output=True, text=True)
    out = _mask_json(p.stdout, tmp) if as_json else _mask(p.stdout, tmp)
    return {"rc": p.returncode, "stdout": out, "stderr": _mask(p.stderr, tmp)}


def record(out: Path) -> None:
    t = {}
    with tempfile.TemporaryDirectory() as tmp:
        for cmd in (["--help"], ["run", "--help"], ["validate", "--help"], ["report", "--help"], ["plot", "--help"],
                    ["roofline", "--help"], ["sweep", "--help"], ["bench", "--help"], ["--version"]):
            t[" ".join(cmd)] = _cli(cmd, tmp)
        for sc in sorted((ROOT / "scenarios").glob("*.toml")):
            cmd = ["validate", str(sc.relative_to(ROOT)), "--resolved"]
            t[" ".join(cmd)] = _cli(cmd, tmp)
        for name, args in RUNS.items():
            res = str(Path(tmp) / f"{name}.h5")
            t[f"run {name}"] = {"rc": _cli(["run", *args, "-o", res, "-q", "--threads", "1"], tmp)["rc"]}
            t[f"report {name}"] = _cli(["report", res], tmp)
            t[f"report --json {name}"] = _cli(["report", res, "--json"], tmp, as_json=True)
        both = [str(Path(tmp) / f"{n}.h5") for n in ("pipeline", "rdu", "ipu")]
        t["report three"] = _cli(["report", *both], tmp)
        t["report three --json"] = _cli(["report", *both, "--json"], tmp, as_json=True)
        for cmd in BAD:
            t[" ".join(cmd)] = _cli(cmd, tmp)
    out.write_text(json.dumps(t, indent=1, sort_keys=True))


def compare(a: Path, b: Path) -> int:
    x, y = json.loads(a.read_text()), json.loads(b.read_text())
    bad = 0
    for k in sorted(set(x) | set(y)):
        if x.get(k) != y.get(k):
            bad += 1
            print(f"{k}:\n  first:  {json.dumps(x.get(k))[:600]}\n  second: {json.dumps(y.get(k))[:600]}")
    print("identical" if not bad else f"{bad} differences")
    return 1 if bad else 0


def main() -> int:
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("record")
    r.add_argument("out", type=Path)
    c = sub.add_parser("compare")
    c.add_argument("a", type=Path)
    c.add_argument("b", type=Path)
    args = ap.parse_args()
    if args.cmd == "record":
        record(args.out)
        return 0
    return compare(args.a, args.b)


if __name__ == "__main__":
    sys.exit(main())
