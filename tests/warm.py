"""Compile the kernels into Numba's on-disk cache before the test workers start (tests/conftest.py).

In a fresh clone every xdist worker, and every command-line test that starts before a kernel is in the
cache, compiled that kernel itself: about three minutes of a clean run on two cores went to compiling
the same kernels several times over. Run first, once, in one process (two compiling at once took as
long here as one after the other), each kernel is compiled once and the tests load it. With the cache
already filled this takes a few seconds.

    python tests/warm.py

Nothing here is a test: a failure only means the tests compile what was left.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

#: A small decode model (tests/test_decode.py's) on a region whose rows hold tokens, then on one with
#: empty rows: the decode kernel's two paths, and the prefill's reductions.
_DECODE = ["machine.type=mesh", "machine.rows=12", "machine.cols=12", "migration.policy=none", "workload.type=decode",
           "workload.hidden_size=96", "workload.n_layers=2", "workload.n_heads=4", "workload.ffn_width=256",
           "workload.context=30", "workload.output_tokens=2", "machine.sram_kib=6", "workload.prefill_region=24"]

#: (scenario file, or {} for overrides alone; overrides): small runs that reach every kernel the tests use.
RUNS = [
    ("smoke.toml", ["run.cycles=200"]),  # the mesh kernel: tasks and migration
    ("noc_uniform_k16.toml", ["run.cycles=200"]),  # routed traffic
    ("wse2_gpt2_small.toml", ["run.cycles=300"]),  # the layer pipeline
    ({}, _DECODE),
    ({}, [*_DECODE, "workload.context=3"]),
    ("rdu_gpt2_o0.toml", []),
    ("rdu_sn40l_llama31_8b_decode.toml", ["workload.output_tokens=2", "workload.context=16"]),
    ("ipu_gpt2_4stage.toml", ["run.steps=1"]),
    ("ipu_gpt2_xl_decode.toml", ["workload.output_tokens=2", "workload.context=8"]),
]


def main() -> int:
    import meshsim

    failed = 0
    with tempfile.TemporaryDirectory() as tmp:
        for i, (name, overrides) in enumerate(RUNS):
            try:
                scenario = ROOT / "scenarios" / name if isinstance(name, str) else name
                meshsim.run(scenario, overrides, out=Path(tmp) / f"{i}.h5", threads=1)
            except Exception as exc:  # noqa: BLE001 - the tests report real failures; this only compiles
                print(f"tests/warm.py: {name or overrides}: {exc}", file=sys.stderr)
                failed += 1
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
