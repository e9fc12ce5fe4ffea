"""Generation on the ipu (docs/ipu.md, "Generation"): the step the compiler builds for a decode
scenario against the reference written from the page, the schedule of the tokens, the cache in the
tiles' memory, the file, and what a generation refuses."""

import json
from pathlib import Path

import h5py
import numpy as np
import pytest

import meshsim
from kernels.reference import ipu_ref as R
from meshsim.cli import main
from meshsim.errors import InputError
from meshsim.ipu.decode import decode_program
from meshsim.scenario import load_scenario, parse_overrides, scenario_from_dict

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = ROOT / "scenarios" / "ipu_gpt2_xl_decode.toml"

SMALL = ["machine.type=ipu", "workload.type=decode", "workload.hidden_size=64", "workload.n_layers=3",
         "workload.n_heads=4", "workload.vocab_size=100", "workload.context=5", "workload.output_tokens=3",
         "machine.tiles=16", "machine.gemm_block=8"]


def small(*extra):
    return scenario_from_dict({}, overrides=parse_overrides([*SMALL, *extra]))


@pytest.mark.parametrize("extra", [
    (),
    ("workload.layers_per_stage=[0, 2, 1]",),
    ("workload.layers_per_stage=[1, 2]", "workload.batch=3", "workload.precision=fp32"),
    ("workload.layers_per_stage=[0, 1, 1, 1]", "workload.tensor_parallel=2", "machine.ipus_per_node=4"),
    ("workload.n_kv_heads=2", "workload.mlp=gated", "workload.norm=rmsnorm", "workload.bias=false",
     "workload.tied_head=false", "workload.positions=rotary", "workload.layers_per_stage=[0, 3]"),
    ("workload.vocab_size=0",),
], ids=["one-ipu", "embedding-alone", "batch-fp32", "tensor-parallel", "llama-like", "no-head"])
def test_a_step_and_the_tokens_are_the_reference_s(extra):
    sc = small(*extra)
    dp = decode_program(sc)
    ref = R.simulate_decode(sc.values)
    prog = dp.prog
    mine = [dict(name=t.name, stage=t.stage, compute=t.compute, sync=t.sync, exchange=t.exchange)
            for t in prog.templates]
    theirs = [{k: t[k] for k in ("name", "stage", "compute", "sync", "exchange")} for t in ref["templates"]]
    assert mine == theirs
    assert list(dp.stage_cycles) == list(ref["stage_cycles"])
    assert dp.step_cycles == ref["step_cycles"] and dp.prompt_io == ref["prompt_io"]
    assert [dp.token_end(k) for k in range(dp.output_tokens)] == list(ref["token_end"])
    assert np.array_equal(prog.memory, np.array(ref["memory"], np.int64))
    assert [list(dp.filled_bytes(k)) for k in range(dp.output_tokens)] == [list(c) for c in ref["cache_filled"]]


def mine_rows(dp):
    """The rows of the tokens/ table, the cache's filled bytes after each, and the latencies, as a run gives them."""
    from meshsim.ipu.decode import IpuDecodeState, token_columns

    state = IpuDecodeState(dp)
    table, caches = state.advance(dp.rows)
    cols = list(token_columns(dp))
    rows = [dict(zip(cols, map(int, r), strict=True)) for r in table]
    return rows, caches.tolist(), state.latencies().tolist(), state


@pytest.mark.parametrize("extra", [
    ("workload.layers_per_stage=[1, 1, 1]", "workload.microbatches=2", "workload.batch=2",
     "workload.context=2", "workload.output_tokens=2"),
    ("workload.layers_per_stage=[0, 2, 1]", "workload.microbatches=3", "workload.batch=6"),
    ("workload.layers_per_stage=[1, 2]", "workload.microbatches=2", "workload.batch=2", "workload.output_tokens=7"),
    ("workload.layers_per_stage=[0, 1, 1, 1]", "workload.microbatches=4", "workload.batch=4",
     "workload.tensor_parallel=2", "machine.ipus_per_node=4"),
    ("workload.layers_per_stage=[0, 1, 1, 1]", "workload.microbatches=1", "workload.batch=2"),
], ids=["hand-checked", "three-of-three", "two-ipus", "tensor-parallel", "sharded"])
def test_a_pipelined_generation_is_the_reference_s(extra):
    sc = small(*extra)
    dp = decode_program(sc)
    ref = R.simulate_decode(sc.values)
    rows, caches, lat, state = mine_rows(dp)
    assert dp.microbatches == ref["microbatches"] and dp.prompt_io == ref["prompt_io"]
    if dp.microbatches > 1:
        assert dp.pipeline_steps == ref["pipeline_steps"]
        assert [dp.pipeline_step_cycles(q) for q in range(dp.pipeline_steps)] == ref["pipeline_step_cycles"]
        assert [dp.pipeline_end(q) for q in range(dp.pipeline_steps)] == list(
            np.cumsum(ref["pipeline_step_cycles"]) + dp.prompt_io)
        assert [(r["token"], r["microbatch"]) for r in rows] == [(r["token"], r["microbatch"]) for r in ref["rows"]]
    assert [(r["start_cycle"], r["cycles"]) for r in rows] == [(r["start_cycle"], r["cycles"]) for r in ref["rows"]]
    assert [dp.row_end(r) for r in range(dp.rows)] == list(ref["token_end"])
    assert caches == [list(c) for c in ref["cache_filled"]] and lat == list(ref["latencies"])
    assert state.cycle == ref["cycles"] and np.array_equal(dp.prog.memory, np.array(ref["memory"], np.int64))
    assert state.steps_run() == sum(ref["stage_runs"]) // dp.prog.stages


def test_the_hand_checked_pipeline():
    # three IPUs of a layer each, two micro-batches of one sequence, a prompt of 2 and 2 tokens: ten pipeline
    # steps (1 + 3 x 3); token 1 of micro-batch 1 is known at the end of the last
    dp = decode_program(small("workload.layers_per_stage=[1, 1, 1]", "workload.microbatches=2", "workload.batch=2",
                              "workload.context=2", "workload.output_tokens=2"))
    assert dp.pipeline_steps == 10 and [dp.row_step(r) for r in range(4)] == [5, 6, 8, 9]
    c, x = list(dp.stage_cycles), dp.forward_transfer
    assert [dp.pipeline_step_cycles(q) for q in range(10)] == [c[0] + x] * 2 + [max(c[1:]) + x] + [
        max(c[0], c[2]) + x, max(c[:2]) + x, max(c[1:]) + x] * 2 + [c[2] + x]


def test_pipelining_the_batch_keeps_every_ipu_busy_and_raises_the_rate(tmp_path):
    base = ["workload.layers_per_stage=[0, 1, 1, 1]", "workload.batch=4", "workload.output_tokens=20"]
    sharded = meshsim.run({}, [*SMALL, *base], out=tmp_path / "s.h5").summary
    piped = meshsim.run({}, [*SMALL, *base, "workload.microbatches=4"], out=tmp_path / "p.h5").summary
    assert piped["microbatches"] == 4 and piped["sequences"] == sharded["sequences"] == 4
    assert piped["tokens_per_second_total"] > sharded["tokens_per_second_total"]
    assert piped["utilization"] > sharded["utilization"]
    assert piped["decode_tokens"] == 20 and piped["completed"] == 80
    with h5py.File(tmp_path / "p.h5") as f:
        assert f["tokens/microbatch"][()].tolist() == [0, 1, 2, 3] * 20
        assert (np.diff(f["tokens/start_cycle"][()] + f["tokens/cycles"][()]) > 0).all()  # known in row order


def test_the_shipped_scenario_equals_the_reference():
    sc = load_scenario(SHIPPED)
    dp = decode_program(sc)
    ref = R.simulate_decode(sc.values)
    assert dp.step_cycles == ref["step_cycles"] == 1_923_880
    assert np.array_equal(dp.prog.memory, np.array(ref["memory"], np.int64))


def test_a_run_writes_its_tokens_cache_and_figures(tmp_path, capsys):
    out = tmp_path / "g.h5"
    assert main(["run", str(SHIPPED), "-q", "-o", str(out)]) == 0
    sc = load_scenario(SHIPPED)
    dp = decode_program(sc)
    step, context, n = dp.step_cycles, 136, 128
    with h5py.File(out, "r") as f:
        s = dict(f["summary"].attrs)
        start, cycles, filled = f["tokens/start_cycle"][:], f["tokens/cycles"][:], f["tokens/context"][:]
        cache = f["occupancy/cache_bytes"][:]
        busy = f["units/tile_busy_cycles"][:]
        per_template = f["occupancy/tile_busy_cycles"][:]
    # the first token after the prompt's steps, then one step a token
    assert cycles[0] == dp.prompt_io + context * step and list(cycles[1:]) == [step] * (n - 1)
    assert start[0] == 0 and np.array_equal(start[1:], start[:-1] + cycles[:-1])
    # each step writes the position of the token it took: token k is known with context + k filled
    assert list(filled) == list(range(context, context + n))
    assert s["cycles"] == dp.prompt_io + (context + n - 1) * step
    assert s["time_per_token_ms_p50"] == s["time_per_token_ms_p99"] == pytest.approx(step / 1.33e6)
    assert s["time_to_first_token_ms"] == pytest.approx(cycles[0] / 1.33e6)
    # the cache fills one position a token on every IPU that holds blocks: IPU 0 holds none
    assert (cache[:, 0] == 0).all() and (np.diff(cache[:, 1:], axis=0) > 0).all()
    per_position = cache[-1] // filled[-1]
    assert np.array_equal(cache, np.outer(filled, per_position))
    assert list(per_position[1:]) == [2 * k * 1600 * 2 for k in (6, 7, 7, 7, 7, 7, 7)]
    assert s["cache_li"] == pytest.approx(per_position.mean() / per_position.max())
    # every tile's busy cycles: one step's, as many times as steps ran
    assert np.array_equal(busy[0], per_template[[i for i, t in enumerate(dp.prog.templates) if t.stage == 0]]
                          .sum(axis=0) * (context + n - 1))
    assert s["stage_li"] < 0.9 and s["li"] < 0.5
    capsys.readouterr()
    assert main(["report", str(out)]) == 0
    text = capsys.readouterr().out
    assert "first token" in text and "exchange" in text and "cache" in text
    # the timeline: the first token's step holds the prompt, then one slice a token, and the cache's counters
    assert main(["export", str(out), "-o", str(tmp_path / "t.json")]) == 0
    events = json.loads((tmp_path / "t.json").read_text())["traceEvents"]
    tokens = [e for e in events if e["ph"] == "X" and e.get("cat") == "token"]
    assert [e["name"] for e in tokens[:2]] == ["prompt and token 0", "token 1"] and len(tokens) == len(cycles)
    assert any(e["ph"] == "C" and e["name"].startswith("cache on the fullest") for e in events)


def test_a_run_is_the_same_on_one_thread_and_two_and_again(tmp_path):
    from conftest import assert_same_results

    from meshsim.run import run_scenario

    for i, t in enumerate((1, 2, 2)):
        run_scenario(small(), tmp_path / f"{i}.h5", threads=t, progress=False)
    assert_same_results(tmp_path / "0.h5", tmp_path / "1.h5")
    assert_same_results(tmp_path / "1.h5", tmp_path / "2.h5")


def test_the_batch_shares_a_step_and_the_cache_is_checked_with_the_weights():
    one, eight = (decode_program(small(f"workload.batch={b}")) for b in (1, 8))
    # eight sequences in one step: each pays the same supersteps' sync, so the step grows less than 8x
    assert one.step_cycles < eight.step_cycles < 8 * one.step_cycles
    big = decode_program(small("workload.context=500"))
    assert big.prog.memory_parts["cache"].max() > one.prog.memory_parts["cache"].max()
    with pytest.raises(InputError, match="key-value cache for 12,003 positions"):
        decode_program(small("workload.context=12000"))


@pytest.mark.parametrize("override,message", [
    ("workload.microbatches=16", "workload.microbatches = 16: must be at most the IPUs of a replica (8)"),
    ("workload.context=0", "workload.context = 0: must be at least 1 for decode on the ipu"),
    ("workload.training=true", "workload.training = true: must be false for decode"),
    ('workload.kv_policy="append"', 'workload.kv_policy = "append": applies only when machine.type is "mesh"'),
    ("machine.decode_phase_cycles=10", "machine.decode_phase_cycles = 10: applies only when machine.type is"),
])
def test_bad_generation_scenarios_are_refused_naming_the_key(tmp_path, capsys, override, message):
    out = tmp_path / "x.h5"
    assert main(["run", str(SHIPPED), override, "-q", "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    assert not list(tmp_path.iterdir())
