"""Generation on the rdu (docs/rdu.md, "Generation"): every step of a generation against the reference
written from the page, the schedule of the tokens, the memory, the file, and what a generation
refuses."""

import json
from pathlib import Path

import h5py
import numpy as np
import pytest

from kernels.reference import rdu_decode_ref as R
from meshsim.cli import main
from meshsim.errors import InputError
from meshsim.rdu.decode import decode_spec, longest_context, step, switch_cycles, weight_bytes
from meshsim.scenario import load_scenario, parse_overrides, scenario_from_dict

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = ROOT / "scenarios" / "rdu_sn40l_llama31_8b_decode.toml"

SMALL = ["machine.type=rdu", "machine.preset=sn40l", "workload.type=decode", "workload.hidden_size=64",
         "workload.n_layers=2", "workload.n_heads=4", "workload.vocab_size=100", "workload.context=5",
         "workload.output_tokens=3", "workload.batch=2", 'workload.parallelism="T2P1D1"']


def small(*extra):
    return scenario_from_dict({}, overrides=parse_overrides([*SMALL, *extra]))


def _mine(sc) -> dict:
    spec = decode_spec(sc)
    steps = [step(spec, 1, spec.context + k - 1) for k in range(1, spec.output_tokens)]
    first = step(spec, spec.context, 0)
    ends = np.cumsum([first.cycles] + [s.cycles for s in steps]).tolist()
    return dict(ttft_cycles=first.cycles, token_end=ends, weights_bytes=weight_bytes(spec),
                longest_context=longest_context(spec), switch_cycles=switch_cycles(spec),
                steps=[dict(cycles=s.cycles, stream=s.stream, compute=s.compute, launch=s.launch,
                            allreduce=s.allreduce, bytes=s.bytes) for s in steps],
                cache_bytes=[(spec.context + k) * spec.kv_bytes_per_position for k in range(spec.output_tokens)])


@pytest.mark.parametrize("extra", [
    (),
    ('workload.parallelism="T1P1D1"', "workload.batch=1"),
    ('workload.parallelism="T4P1D2"', "workload.batch=6", "machine.chips_per_node=4", "workload.n_heads=8"),
    ("machine.orchestration=software", "machine.host_launch_us=3.3", "workload.precision=fp32"),
    ("workload.n_kv_heads=2", "workload.mlp=gated", "workload.norm=rmsnorm", "workload.bias=false",
     "workload.tied_head=false", "workload.positions=rotary"),
    ("workload.vocab_size=0", "workload.shared_norm=true"),
    ('machine.preset="sn30"', "workload.context=40", "workload.output_tokens=9"),
], ids=["sn40l", "one-socket", "two-replicas-across-nodes", "software-fp32", "llama-like", "no-head", "sn30-ddr"])
def test_every_step_of_a_generation_is_the_reference_s(extra):
    sc = small(*extra)
    ref = R.simulate_decode(sc.values)
    mine = _mine(sc)
    for key, value in mine.items():
        assert value == ref[key], key
    spec = decode_spec(sc)
    positions = spec.context + spec.output_tokens - 1
    assert weight_bytes(spec) + positions * spec.kv_bytes_per_position == ref["memory_bytes"]


def test_the_shipped_scenario_equals_the_reference_and_streams_from_hbm():
    sc = load_scenario(SHIPPED)
    ref, mine = R.simulate_decode(sc.values), _mine(sc)
    assert mine == {k: ref[k] for k in mine}
    spec = decode_spec(sc)
    # Llama 3.1 8B over eight sockets: an eighth of its weights each (the vocabulary split too)
    assert weight_bytes(spec) == pytest.approx(8_030_261_248 * 2 / 8, rel=0.001)
    s = step(spec, 1, spec.context)
    assert s.stream > 100 * s.compute  # a decode step streams; it hardly computes


def test_a_run_writes_its_tokens_and_its_figures(tmp_path, capsys):
    out = tmp_path / "g.h5"
    assert main(["run", str(SHIPPED), "-q", "-o", str(out)]) == 0
    spec = decode_spec(load_scenario(SHIPPED))
    with h5py.File(out, "r") as f:
        s = dict(f["summary"].attrs)
        start, cycles, ctx = f["tokens/start_cycle"][:], f["tokens/cycles"][:], f["tokens/context"][:]
        cache = f["occupancy/cache_bytes"][:]
        busy = f["units/socket_busy_cycles"][:]
    n = spec.output_tokens
    assert len(cycles) == n and start[0] == 0 and np.array_equal(start[1:], start[:-1] + cycles[:-1])
    assert cycles[0] == step(spec, spec.context, 0).cycles
    # each token attends to one key more than the one before: its step is no shorter
    assert (np.diff(cycles[1:]) >= 0).all() and cycles[-1] > cycles[1]
    assert list(ctx) == list(range(spec.context, spec.context + n))
    assert cache.shape == (n, 8) and (cache == cache[:, :1]).all()
    assert np.array_equal(cache[:, 0], ctx * spec.kv_bytes_per_position)
    assert s["cycles"] == int(cycles.sum()) and s["cache_li"] == 1.0 and (busy == busy[0]).all()
    assert s["time_to_first_token_ms"] == pytest.approx(cycles[0] / 3.195e6)
    assert s["time_per_token_ms_mean"] == pytest.approx(cycles[1:].mean() / 3.195e6)
    assert s["memory_bandwidth_fraction"] < 0.85 and s["step_bound"] == "stream"
    assert s["model_switch_ms"] > 0 and s["decode_longest_context"] > spec.context + n
    capsys.readouterr()
    assert main(["report", str(out)]) == 0
    text = capsys.readouterr().out
    assert "first token" in text and "all-reduces" in text and "HBM" in text
    # the timeline: the first token's step holds the prompt, then one slice a token, and the cache's counters
    assert main(["export", str(out), "-o", str(tmp_path / "t.json")]) == 0
    events = json.loads((tmp_path / "t.json").read_text())["traceEvents"]
    tokens = [e for e in events if e["ph"] == "X" and e.get("cat") == "token"]
    assert [e["name"] for e in tokens[:2]] == ["prompt and token 0", "token 1"] and len(tokens) == len(cycles)
    assert any(e["ph"] == "C" and e["name"].startswith("cache on the fullest") for e in events)


def test_the_levers_move_what_they_should():
    base = decode_spec(small())
    soft = decode_spec(small("machine.orchestration=software"))
    one = step(base, 1, 5)
    assert step(soft, 1, 5).cycles - one.cycles == 3 * (soft.launch - base.launch) > 0  # 2 layers and the head
    # more sequences: the same weights streamed once for all of them
    eight = decode_spec(small("workload.batch=16"))
    assert step(eight, 1, 5).cycles < 8 * one.cycles
    # a longer prompt: more cache to stream
    assert step(base, 1, 500).stream > one.stream


def test_a_cache_past_the_memory_is_refused_and_the_longest_context_fits():
    big = ("workload.hidden_size=4096", "workload.n_heads=32", "workload.n_layers=32", "workload.batch=64")
    spec = decode_spec(small(*big))
    most = longest_context(spec)
    assert 1000 < most < 10_000
    decode_spec(small(*big, f"workload.context={most - 2}"))  # context + output_tokens - 1 positions fit
    with pytest.raises(InputError, match="machine.hbm_gib = 64: a socket needs"):
        decode_spec(small(*big, f"workload.context={most - 1}"))


@pytest.mark.parametrize("override,message", [
    ('workload.parallelism="T8P2D1"', "has pipeline degree 2; must be 1 for decode on the rdu"),
    ("workload.context=0", "workload.context = 0: must be at least 1 for decode on the rdu"),
    ("workload.training=true", "workload.training = true: must be false for decode"),
    ("workload.microbatches=2", "workload.microbatches = 2: does not apply to decode on the rdu"),
    ('workload.parallelism="T3P1D1"', "has tensor degree 3, which must divide workload.n_heads"),
    ("machine.hbm_bandwidth_gbps=0", "machine.hbm_bandwidth_gbps = 0.0: must be above 0 when machine.hbm_gib is"),
    ('workload.kv_policy="append"', 'workload.kv_policy = "append": applies only when machine.type is "mesh"'),
    ("workload.decode_regions=2", "workload.decode_regions = 2: applies only when machine.type is \"mesh\""),
])
def test_bad_generation_scenarios_are_refused_naming_the_key(tmp_path, capsys, override, message):
    out = tmp_path / "x.h5"
    assert main(["run", str(SHIPPED), override, "-q", "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    assert not list(tmp_path.iterdir())


def test_the_sn40l_roofline_is_its_hbm_for_a_generation_and_its_ddr_for_a_compiled_step():
    from meshsim.roofline import platform_of

    decode = load_scenario(SHIPPED)
    step = scenario_from_dict({"machine": {"type": "rdu", "preset": "sn40l"}, "workload": {"type": "transformer"}})
    assert platform_of(decode.values).bandwidth == 1600e9 and platform_of(decode.values).memory == "HBM"
    assert platform_of(step.values).bandwidth == 200e9 and platform_of(step.values).memory == "DDR"
