"""Bit-identical results across thread counts and reruns (docs/design.md, "Correctness":
determinism as a contract). Each run is a fresh process that runs with the threads it is asked for,
more than the machine's cores if need be, and its result file says how many it used."""

import os
import subprocess
import sys

import h5py
import pytest
from conftest import THREAD_COUNTS, assert_same_results, result_contents

SCENARIO = """
[run]
cycles = 300
seed = 99
window_cycles = 50
[machine]
rows = 150
cols = 9
queue_capacity = 6
hop_latency_cycles = 2
link_buffer_messages = 3
[migration]
policy = "{policy}"
threshold = 1
hysteresis = {hysteresis}
max_per_cycle = 2
[workload]
type = "skewed"
injection_rate = 0.12
sigma = 1.0
work_distribution = "uniform"
work_min_cycles = 1
work_max_cycles = 12
[output]
frame_every_cycles = 25
flush_every_cycles = 70
"""

# `meshsim run` in a process that may use argv[1] threads on any machine: meshsim caps the threads at
# the cores the process may run on (meshsim.threads.available_cores), which this process alone
# reports as argv[1]; Numba's pool is made that size by NUMBA_NUM_THREADS (run() sets it). After the
# run, Numba must still be set to that many.
CHILD = """
import sys
import numba
import meshsim.threads
meshsim.threads.available_cores = lambda: int(sys.argv[1])
from meshsim.cli import main
status = main(sys.argv[2:])
assert numba.get_num_threads() == int(sys.argv[1]), (numba.get_num_threads(), sys.argv[1])
sys.exit(status)
"""


def run(tmp_path, scenario, threads, name):
    """Run the scenario with exactly `threads` Numba threads, whatever the cores; the result file."""
    out = tmp_path / f"{name}.h5"
    env = dict(os.environ, NUMBA_NUM_THREADS=str(threads))
    subprocess.run([sys.executable, "-c", CHILD, str(threads), "run", str(scenario), "-o", str(out),
                    "--threads", str(threads), "-q"], check=True, env=env, cwd=tmp_path)
    with h5py.File(out, "r") as f:
        assert f.attrs["threads"] == threads  # the threads the run set Numba to: the count asked
    return out


# the names other test modules use
contents = result_contents
assert_identical = assert_same_results


def first_run_then_the_same_with(tmp_path, text, runs=tuple((n, f"t{n}") for n in THREAD_COUNTS[1:])) -> dict:
    """Run a scenario with 1 thread, then with each (threads, name) of `runs`, and assert every
    result equals the first; return the first's contents (for a check that it did something)."""
    sc = tmp_path / "s.toml"
    sc.write_text(text)
    first = contents(run(tmp_path, sc, 1, "t1"))
    for threads, name in runs:
        assert_identical(first, contents(run(tmp_path, sc, threads, name)))
    return first


# Two policies in the default run (the threads split rows alike whatever the policy; work stealing's
# requests and least-loaded's hysteresis are the most stateful); the other three under -m slow.
@pytest.mark.parametrize("policy, hysteresis", [
    pytest.param("diffusion", 0, marks=pytest.mark.slow), pytest.param("random_lower", 0, marks=pytest.mark.slow),
    ("least_loaded", 1),
    pytest.param("gradient", 0, marks=pytest.mark.slow), ("work_stealing", 0)])
def test_results_are_bit_identical_with_1_2_and_3_threads_and_on_rerun(tmp_path, policy, hysteresis):
    first = first_run_then_the_same_with(tmp_path, SCENARIO.format(policy=policy, hysteresis=hysteresis),
                                         ((2, "t2"), (3, "t3"), (3, "t3again")))
    assert first["summary@migrated"] > 0


def test_in_process_chunking_does_not_change_results(tmp_path):
    """Many cycles per kernel call or one: the same file."""
    from meshsim.run import run_scenario
    from meshsim.scenario import load_scenario

    sc = tmp_path / "s.toml"
    sc.write_text(SCENARIO.format(policy="least_loaded", hysteresis=0))
    a = run_scenario(load_scenario(sc), tmp_path / "a.h5", progress=False)
    b = run_scenario(load_scenario(sc), tmp_path / "b.h5", progress=False, max_cycles_per_call=7)
    assert_identical(contents(a.path), contents(b.path))


TRAFFIC = """
[run]
cycles = 400
seed = 5
[machine]
rows = 130
cols = 7
link_buffer_messages = 3
router_queue_packets = 2
[migration]
policy = "none"
[workload]
type = "traffic"
pattern = "{pattern}"
injection_rate = 0.2
warmup_cycles = 100
measure_cycles = 200
[output]
frame_every_cycles = 50
flush_every_cycles = 90
"""


# hotspot under -m slow: the same kernel path as uniform's, other destinations
@pytest.mark.parametrize("pattern", ["uniform", pytest.param("hotspot", marks=pytest.mark.slow)])
def test_routed_traffic_is_bit_identical_with_1_2_and_3_threads(tmp_path, pattern):
    assert first_run_then_the_same_with(tmp_path, TRAFFIC.format(pattern=pattern))["summary@packets_delivered"] > 0


PIPELINE = """
[run]
cycles = 600
seed = 3
window_cycles = 100
[machine]
rows = 80
cols = 30
queue_capacity = 4
router_queue_packets = 2
pe_flops_per_cycle = 2.0
sram_read_bytes_per_cycle = 64
sram_write_bytes_per_cycle = 32
wavelet_bytes = 8
[migration]
policy = "{policy}"
threshold = 0
info_delay_cycles = 2
[workload]
type = "layer_pipeline"
hidden_size = 32
n_layers = 3
n_heads = 2
seq_len = 8
batch = 1
replicas = 2
vocab_size = 0
chunks_in_flight = 40
[output]
frame_every_cycles = 100
flush_every_cycles = 150
"""


# without migration under -m slow: the gradient case runs the same pipeline and migrates in it too
@pytest.mark.parametrize("policy", [pytest.param("none", marks=pytest.mark.slow), "gradient"])
def test_layer_pipeline_is_bit_identical_with_1_2_and_3_threads(tmp_path, policy):
    first = first_run_then_the_same_with(tmp_path, PIPELINE.format(policy=policy))
    assert first["summary@chunks_finished"] > 0
    assert (first["summary@migrated"] > 0) == (policy != "none")


def test_an_in_process_run_is_the_same_at_every_thread_count(tmp_path, thread_count):
    """The same scenario run in this process with 1 thread and with `thread_count` threads: the same
    file. Here meshsim caps the threads at the cores, so a count beyond them is skipped (the runs in
    fresh processes above use every count)."""
    from meshsim.run import run_scenario
    from meshsim.scenario import load_scenario
    from meshsim.threads import available_cores

    if thread_count > available_cores():
        pytest.skip(f"{thread_count} threads: this process may use {available_cores()}")
    sc = tmp_path / "s.toml"
    sc.write_text(SCENARIO.format(policy="least_loaded", hysteresis=0))
    one = run_scenario(load_scenario(sc), tmp_path / "one.h5", threads=1, progress=False).path
    other = run_scenario(load_scenario(sc), tmp_path / "other.h5", threads=thread_count, progress=False).path
    with h5py.File(other, "r") as f:
        assert f.attrs["threads"] == thread_count
    assert_same_results(one, other)
