"""`meshsim bench`'s own roofline: the bytes of state a PE-cycle touches are counted from the state's
dtypes and the run's events (docs/design.md, "Performance"). Figures of speed are never tested."""

import pytest
from mesh_compare import small_scenario

from kernels import mesh as K
from meshsim.mesh import bench
from meshsim.mesh.bench import idle_and_busy_fit, pipeline_path_bytes, task_path_bytes, traffic_path_bytes
from meshsim.mesh.sim import MeshSim, build_inputs
from meshsim.scenario import scenario_from_dict


def _run(sc, cycles=60):
    sim = MeshSim(build_inputs(sc), cycles)
    sim.advance(cycles)
    return sim


def test_the_task_path_counts_every_pes_fields_and_each_event_it_ran():
    busy = task_path_bytes(_run(small_scenario(6, 8)), 60)
    # uint8 counts in 4 directions, read and written; uint8 queue length, uint16 server (read and
    # written), uint32 threshold, uint8 depth written and, with migration on, a neighbour's read.
    assert busy["every PE: send and receive counts (read, written)"] == 16
    assert busy["every PE: queue length, server, threshold, depth"] == 11
    assert busy["offered tasks"] > 0 and busy["started tasks"] > 0 and busy["completed tasks"] > 0
    assert busy["migrated tasks"] > 0
    assert busy["total"] == pytest.approx(sum(v for k, v in busy.items() if k != "total"))
    idle = task_path_bytes(_run(small_scenario(6, 8, workload__injection_rate=0.0, migration__policy="none")), 60)
    assert idle["total"] == 16 + 10  # nothing happens: only every PE's own fields, no neighbour's depth


def test_routed_traffic_counts_each_message_on_a_link():
    sim = _run(small_scenario(6, 8, workload="traffic"))
    b = traffic_path_bytes(sim, 60)
    assert b["every PE: queue length, server, threshold, depth, router and source queues"] == 1 + 4 + 4 + 1 + 8 + 4
    sent = float(sim.series[:60, K.S_LINK_SENT].sum()) / (48 * 60)
    assert sent > 0 and b["messages sent"] == pytest.approx(sent * (8 + 16))
    assert b["total"] == pytest.approx(sum(v for k, v in b.items() if k != "total"))


def test_the_layer_pipeline_counts_its_wavelets_and_tasks():
    sc = scenario_from_dict({
        "run": {"cycles": 400}, "machine": {"rows": 20, "cols": 20}, "migration": {"policy": "none"},
        "workload": {"type": "layer_pipeline", "hidden_size": 64, "n_layers": 1, "n_heads": 2, "seq_len": 16,
                     "batch": 1, "replicas": 3, "vocab_size": 0}})
    sim = _run(sc, 400)
    b = pipeline_path_bytes(sim, 400)
    # uint8 queue length and depth, uint16 server read and written, the 8-byte word of router-queue
    # lengths, int32 outputs left.
    assert b["every PE: queue length, server, depth, router queues, outputs left"] == 1 + 4 + 1 + 8 + 4
    got = float(sim.series[:400, K.S_PKT_DELIVERED].sum()) / (400 * 400)
    assert got > 0 and b["wavelets delivered"] == pytest.approx(got * 2 * 4)
    assert b["messages sent"] > 0 and b["tasks queued"] > 0 and b["completed tasks"] > 0
    assert b["total"] == pytest.approx(sum(v for k, v in b.items() if k != "total"))


def test_the_idle_and_busy_fit_reads_a_line_at_no_and_at_every_pe_busy():
    busy = [0.1, 0.2, 0.3, 0.4, 0.5]
    exact = idle_and_busy_fit(busy, [0.5 + 10 * x for x in busy])
    assert exact["idle"] == pytest.approx(0.5) and exact["busy"] == pytest.approx(10.5)
    assert exact["r2"] == pytest.approx(1.0) and exact["idle_se"] == pytest.approx(0, abs=1e-9)
    noise = (0.1, -0.1, 0.05, 0.1, -0.15)
    noisy = idle_and_busy_fit(busy, [0.5 + 10 * x + e for x, e in zip(busy, noise, strict=True)])
    assert noisy["idle_se"] > 0 and noisy["busy_se"] > noisy["idle_se"] and noisy["r2"] < 1
    assert abs(noisy["idle"] - 0.5) < 3 * noisy["idle_se"] and abs(noisy["busy"] - 10.5) < 3 * noisy["busy_se"]
    with pytest.raises(ValueError, match="four or more"):
        idle_and_busy_fit([0.1, 0.2, 0.3], [1, 2, 3])
    with pytest.raises(ValueError, match="four or more"):
        idle_and_busy_fit([0.2] * 5, [1, 2, 3, 4, 5])


def test_a_fresh_process_reports_its_own_peak_memory_not_its_parents():
    import subprocess
    import sys

    import numpy as np

    big = np.ones(60_000_000)  # 480 MB held, and touched, by this process while the child runs
    code = "from meshsim.bench import peak_memory_bytes; print(peak_memory_bytes())"
    child = int(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout)
    assert 10 * 2**20 < child < big.nbytes / 2


def test_each_policy_is_timed_beside_least_loaded():
    lines = []
    fig = {"n_pes": 128 * 128, "grid": "128 x 128"}
    bench._policies(fig, quick=True, cycles=40, log=lines.append)
    rates = fig["policy_pe_cycles_per_second"]
    assert list(rates) == [label for label, _ in bench.POLICY_RUNS] and all(r > 0 for r in rates.values())
    assert len(lines) == 1 + len(rates)
    assert "none" in lines[1] and "0.0000 tasks moved" in lines[1]
    assert "least_loaded: " in lines[2] and "1.00 of least_loaded's" in lines[2]
    assert all("0.0000 tasks moved" not in line for line in lines[2:])


def test_a_checkpoint_is_timed_and_weighed_as_a_run_writes_it():
    lines = []
    fig = {}
    bench._checkpoint(fig, quick=True, log=lines.append)
    assert fig["checkpoint_seconds"] > 0 and 0 < fig["checkpoint_file_bytes"] < fig["checkpoint_state_bytes"]
    assert fig["checkpoint_state_bytes"] > 128 * 128 * 16 * 7  # every PE's queue of 16, at the least
    assert lines == [lines[0]] and lines[0].startswith("checkpoint after 300 cycles: ")


@pytest.mark.parametrize("machine", ["mesh", "rdu", "ipu"])
def test_every_scenario_a_machines_bench_runs_is_shipped(machine):
    # (the bench leaves out a measurement whose scenario it cannot find: a moved file must not do that unseen)
    import importlib
    import re

    mod = importlib.import_module(f"meshsim.{machine}.bench")
    named = re.findall(r'SCENARIOS / "([\w.]+\.toml)"', open(mod.__file__).read())
    assert named and all((mod.SCENARIOS / n).is_file() for n in named), named
