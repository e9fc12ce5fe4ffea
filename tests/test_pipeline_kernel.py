"""The layer_pipeline workload in the fast kernel against the plain reference, cycle by cycle
(docs/mesh.md, "Dataflow"), and its set-up (meshsim/pipeline.py)."""

import numpy as np
import pytest
from mesh_compare import compare_cycle_by_cycle

from kernels import mesh as K
from meshsim.errors import InputError
from meshsim.mesh import build_inputs
from meshsim.pipeline import build
from meshsim.scenario import scenario_from_dict


def pipeline_scenario(rows=10, cols=14, **over):
    """A small transformer on a small grid; the PE rate is low so that tasks take a few cycles."""
    d = {
        "run": {"cycles": 200, "seed": 5},
        "machine": {"rows": rows, "cols": cols, "queue_capacity": 4, "pe_flops_per_cycle": 200.0},
        "migration": {"policy": "none", "threshold": 0},
        "workload": {"type": "layer_pipeline", "hidden_size": 32, "n_layers": 2, "n_heads": 2, "seq_len": 8,
                     "batch": 1, "chunks_in_flight": 16},
        "output": {"frame_every_cycles": 0},
    }
    for key, value in over.items():
        section, name = key.split("__")
        d.setdefault(section, {})[name] = value
    return scenario_from_dict(d)


CASES = {
    "two_layers": {},
    "unfused": dict(cols=24, workload__fuse_elementwise=False),
    "training": dict(rows=12, workload__training=True),
    "two_replicas": dict(cols=28, workload__replicas=2),
    "hop2_tight": dict(machine__hop_latency_cycles=2, machine__router_queue_packets=1, machine__queue_capacity=2,
                       machine__link_buffer_messages=1, workload__chunks_in_flight=3),
    # Slow links (a message per L + Lc = 6 cycles): output stages back up and hold their PE's next task.
    "slow_links": dict(machine__hop_latency_cycles=2, machine__credit_delay_cycles=4, machine__link_buffer_messages=1,
                       machine__router_queue_packets=2, machine__queue_capacity=6),
    "wide_links": dict(machine__link_messages_per_cycle=2, machine__link_buffer_messages=4,
                       machine__credit_delay_cycles=2),
    "three_layers_uneven": dict(rows=11, cols=13, workload__n_layers=3, workload__tokens_per_chunk=2),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_kernel_equals_reference_cycle_by_cycle(case):
    over = dict(CASES[case])
    rows, cols = over.pop("rows", 10), over.pop("cols", 14)
    sc = pipeline_scenario(rows, cols, **over)
    totals = compare_cycle_by_cycle(sc, 160)
    # The case must exercise the pipeline: chunks finish and packets (copies included) move.
    assert totals["chunks_finished"] > 0
    assert totals["packets_delivered"] > 0


def test_pipeline_table_follows_the_placement():
    sc = pipeline_scenario()
    p = build(sc)
    t = p.table
    # One chain, first to last, bands alternating flow, the turn through bottom/col edges.
    assert p.n_replicas == 1 and t[0, K.REG_FIRST] == 1 and (t[1:, K.REG_FIRST] == 0).all()
    assert list(t[:-1, K.REG_NEXT]) == list(range(1, len(t))) and t[-1, K.REG_NEXT] == -1
    per_band = len(t) // 2
    assert set(t[:per_band, K.REG_FLOW]) == {1} and set(t[per_band:, K.REG_FLOW]) == {-1}
    assert t[per_band - 1, K.REG_OUTPUT] == K.OUTPUT_BOTTOM and t[per_band, K.REG_INPUT] == K.INPUT_COL
    assert (t[:per_band - 1, K.REG_OUTPUT] == K.OUTPUT_SIDE).all()
    # The band's last region and the next band's first share the east end of the grid.
    last, first = t[per_band - 1], t[per_band]
    assert last[K.REG_COL0] + last[K.REG_WIDTH] == first[K.REG_COL0] + first[K.REG_WIDTH] == 14
    assert first[K.REG_ROW0] == last[K.REG_ROW0] + last[K.REG_HEIGHT]
    # Work per task: ceil(FLOPs x tokens / (batch x seq_len) / (PEs x rate)).
    k0 = p.kernels[0]
    n0 = int(t[0, K.REG_WIDTH] * t[0, K.REG_HEIGHT])
    assert t[0, K.REG_WORK] == int(np.ceil(k0.flops / 8 / (n0 * 200.0)))
    assert (p.region_of >= 0).all() and p.idle_pes == 0


def test_fused_kernels_hold_the_elementwise_operators():
    p = build(pipeline_scenario())
    names = [k.name for k in p.kernels]
    assert names[:6] == ["layer0.ln1+qkv_proj", "layer0.attn_scores_softmax", "layer0.attn_v",
                         "layer0.out_proj+residual1", "layer0.ln2+ffn_up+gelu", "layer0.ffn_down+residual2"]
    unfused = build(pipeline_scenario(cols=24, workload__fuse_elementwise=False))
    assert len(unfused.kernels) == 22
    assert sum(k.flops for k in unfused.kernels) == sum(k.flops for k in p.kernels)
    trained = build(pipeline_scenario(rows=12, workload__training=True))
    assert trained.kernels[-1].name == "layer0.ln1+qkv_proj.backward"


def test_weights_that_do_not_fit_fail_with_a_clear_message():
    sc = pipeline_scenario(workload__hidden_size=512, machine__sram_kib=1)
    with pytest.raises(InputError, match="do not fit the PEs' SRAM.*weight streaming"):
        build_inputs(sc)


def test_a_task_longer_than_the_work_field_is_refused():
    sc = pipeline_scenario(machine__pe_flops_per_cycle=0.001)
    with pytest.raises(InputError, match="workload.tokens_per_chunk = 1: a task of region .* more than 65,535"):
        build_inputs(sc)
