"""The mesh kernel's state and configuration are read by name, and Python calls the kernels with
keyword arguments: a reordering of the state tuple, the configuration vector or a kernel's parameters
cannot silently swap two arrays (kernels/mesh.py: MeshState, CFG_*, mesh_config)."""

import ast
import inspect
import re
from pathlib import Path

import numpy as np
import pytest
from mesh_compare import small_scenario

import meshsim.mesh
import meshsim.mesh.sim
from kernels import ipu as KI
from kernels import mesh as K
from kernels import rdu as KR
from meshsim.mesh import state as S

ROOT = Path(__file__).resolve().parents[1]
KERNEL_SOURCE = ROOT / "kernels" / "mesh.py"
# Python modules that call kernels, and the kernel module each imports as K.
CALLERS = {"meshsim/mesh/sim.py": K, "meshsim/mesh/state.py": K, "meshsim/rdu/sim.py": KR, "meshsim/ipu/sim.py": KI}


def _all_fields(value=1):
    return {f: value for f in K.CFG_FIELDS}


def test_the_cfg_indices_are_0_to_n_minus_1_in_the_order_of_cfg_fields():
    constants = {k: v for k, v in vars(K).items() if k.startswith("CFG_") and k != "CFG_FIELDS"}
    assert sorted(constants.values()) == list(range(len(K.CFG_FIELDS))) == list(range(K.N_CFG))
    assert len(set(K.CFG_FIELDS)) == len(K.CFG_FIELDS)
    for i, field in enumerate(K.CFG_FIELDS):
        assert constants["CFG_" + field.upper()] == i, field
    assert meshsim.mesh.sim.CFG_FIELDS == meshsim.mesh.CFG_FIELDS == K.CFG_FIELDS


def test_mesh_config_puts_each_field_at_its_index():
    values = {f: 1000 + i for i, f in enumerate(K.CFG_FIELDS)}
    cfg = K.mesh_config(**values)
    assert cfg.dtype == np.int64 and cfg.shape == (K.N_CFG,)
    assert cfg[K.CFG_QUEUE_CAPACITY] == values["queue_capacity"]
    assert cfg[K.CFG_ROUTER_QUEUE_PACKETS] == values["router_queue_packets"]
    assert cfg.tolist() == [values[f] for f in K.CFG_FIELDS]


def test_mesh_config_names_a_missing_field():
    values = _all_fields()
    del values["credit_delay_cycles"]
    with pytest.raises(TypeError, match="missing field.*credit_delay_cycles"):
        K.mesh_config(**values)


def test_mesh_config_names_an_unknown_field():
    with pytest.raises(TypeError, match="unknown field.*credit_delay"):
        K.mesh_config(**_all_fields(), credit_delay=3)


def test_build_inputs_fills_the_fields_by_name():
    sc = small_scenario(3, 5, machine__credit_delay_cycles=3, migration__threshold=2)
    cfg = meshsim.mesh.sim.build_inputs(sc).cfg
    assert cfg[K.CFG_QUEUE_CAPACITY] == 6
    assert cfg[K.CFG_CREDIT_DELAY_CYCLES] == 3
    assert cfg[K.CFG_THRESHOLD] == 2
    assert cfg[K.CFG_POLICY] == K.POLICY_LEAST_LOADED
    assert cfg[K.CFG_WORK_KIND] == K.WORK_UNIFORM and cfg[K.CFG_WORK_MAX_CYCLES] == 9
    assert cfg[K.CFG_IS_TRAFFIC] == cfg[K.CFG_IS_PIPELINE] == cfg[K.CFG_IS_TRACE] == 0
    traffic = meshsim.mesh.sim.build_inputs(small_scenario(3, 5, workload="traffic", machine__router_queue_packets=7))
    assert traffic.cfg[K.CFG_ROUTER_QUEUE_PACKETS] == 7 and traffic.cfg[K.CFG_IS_TRAFFIC] == 1
    assert traffic.cfg[K.CFG_WARMUP_CYCLES] == 10 and traffic.cfg[K.CFG_MEASURE_END] == 70


def test_allocate_mesh_builds_the_kernels_state_type():
    assert S.MeshState is K.MeshState
    st = S.allocate_mesh(3, 4, 5, 2, 4, np.full((3, 4), 7, np.uint32), traffic=True, router_queue_packets=3)
    assert type(st) is K.MeshState
    assert st._fields == K.MeshState._fields
    layout = S.mesh_layout(3, 4, 5, 2, 4, traffic=True, router_queue_packets=3)
    assert set(st._fields) == set(layout) | set(S.VIEW_FIELDS) | {"geo_log"}
    for name, (shape, dtype) in layout.items():
        a = getattr(st, name)
        assert a.shape == shape and a.dtype == dtype, name
    assert (st.thr == 7).all() and st.oq.shape == (3, 4, 5, 3)
    # The views share the arrays they view.
    st.sent_h32[1, 2, 3] = 0x04030201
    assert st.sent_h[1, 2, 3].tolist() == [1, 2, 3, 4]


def test_the_kernel_reads_state_and_configuration_by_name_only():
    text = KERNEL_SOURCE.read_text()
    assert not re.search(r"\bst\[\s*\d", text)
    assert not re.search(r"\bcfg\[\s*\d", text)
    tree = ast.parse(text)
    for node in ast.walk(tree):
        # No st[...] at all, and no unpacking of the whole tuple (a, b, ... = st).
        if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name):
            assert node.value.id != "st", f"line {node.lineno}: st indexed"
            if node.value.id == "cfg":
                index = node.slice
                assert isinstance(index, ast.Name) and index.id.startswith("CFG_"), f"line {node.lineno}: cfg[...]"
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Name) and node.value.id == "st":
            assert not any(isinstance(t, (ast.Tuple, ast.List)) for t in node.targets), f"line {node.lineno}"


def test_no_state_attribute_is_read_inside_a_prange_loop():
    """Numba (parallel=True) loses writes made through a NamedTuple's attribute in a prange body
    (numba issue 7135): the parallel kernels bind the arrays to locals before the loop."""
    tree = ast.parse(KERNEL_SOURCE.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.For) and isinstance(node.iter, ast.Call) and \
                isinstance(node.iter.func, ast.Name) and node.iter.func.id == "prange":
            for sub in ast.walk(ast.Module(body=node.body, type_ignores=[])):
                bad = isinstance(sub, ast.Attribute) and isinstance(sub.value, ast.Name) and sub.value.id == "st"
                assert not bad, f"kernels/mesh.py line {sub.lineno}: st.{sub.attr} inside a prange loop"


def test_python_calls_the_kernels_with_keyword_arguments():
    seen = set()
    for path, module in CALLERS.items():
        tree = ast.parse((ROOT / path).read_text())
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            func, args = node.func, node.args
            if isinstance(func, ast.Name) and func.id == "call" and args:  # meshsim.compiled.call(K.kernel, ...)
                func, args = args[0], args[1:]
            if not (isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id == "K"):
                continue
            if len(args) + len(node.keywords) <= 3:
                continue
            where = f"{path} line {node.lineno}: K.{func.attr}"
            assert not args, f"{where} passes {len(args)} positional argument(s)"
            names = [k.arg for k in node.keywords]
            assert None not in names, f"{where} passes **arguments"
            kernel = getattr(module, func.attr)
            if hasattr(kernel, "py_func"):  # a Numba dispatcher: every parameter, by its name
                assert set(names) == set(inspect.signature(kernel.py_func).parameters), where
            seen.add(func.attr)
    assert {"run_cycles", "count_in_flight", "new_state", "run_intervals", "run_steps"} <= seen


def test_the_drivers_fork_the_threads_once_a_cycle():
    """Only the drivers' prange loops run on threads (kernels/config.py): Numba's parallelisation of
    array expressions would make every allocation, clear and sum in run_cycles a parallel region of
    its own, forked and joined each cycle."""
    from kernels.config import JIT_PARALLEL

    try:
        from numba.core.cpu_options import ParallelOptions
    except ImportError:
        pytest.skip("this Numba has no ParallelOptions: the drivers take plain parallel=True")
    opts = JIT_PARALLEL["parallel"]
    assert isinstance(opts, ParallelOptions)
    assert opts.enabled and opts.prange
    assert not any(getattr(opts, k) for k in ("comprehension", "reduction", "inplace_binop", "setitem", "numpy",
                                               "stencil", "fusion"))
    for driver in (K.run_cycles, K._fast_forward, K._quiet_cycles):
        assert driver.targetoptions["parallel"] is opts


def test_the_policies_table_names_every_kernel_policy_and_its_state():
    """One table (meshsim.mesh.policies) gives migration.policy's choices, the kernel's id for each,
    the state each keeps alone and the bench's runs."""
    from meshsim.mesh import policies
    from meshsim.params import param

    kernel_ids = {name[len("POLICY_"):].lower(): v for name, v in vars(K).items() if name.startswith("POLICY_")}
    assert {p.name: p.kernel_id for p in policies.POLICIES} == kernel_ids
    assert param("migration", "policy").choices == policies.names()
    assert all(policies.by_kernel_id(p.kernel_id) is p for p in policies.POLICIES)
    # a policy's own arrays at their size under it, placeholders under any other
    for p in policies.POLICIES:
        layout = S.mesh_layout(3, 4, 5, 2, 4, policy=p.name)
        for q in policies.POLICIES:
            for name, (shape, dtype) in q.layout(3, 4, 4).items():
                assert layout[name] == ((shape if q is p else (1,) * len(shape)), dtype)
    assert S.mesh_layout(3, 4, 5, 2, 4, policy="gradient")["press_h"][0] == (4, 3, 4)
    assert S.mesh_layout(3, 4, 5, 2, 4, policy="work_stealing")["steal"][0] == (3, 4)
    labels = [label for label, _ in policies.bench_runs()]
    assert len(labels) == len(set(labels)) and {keys["policy"] for _, keys in policies.bench_runs()} == set(kernel_ids)
