"""What the tests share: the thread counts results must not depend on, and one way to compare two
result files (docs/design.md, "Correctness": bit-identical across thread counts, reruns and the
split of a run into kernel calls)."""

from __future__ import annotations

import h5py
import numpy as np
import pytest

#: Thread counts a determinism test runs with. tests/test_determinism.py runs each in a fresh
#: process that uses exactly that many on any machine (more threads than cores if need be) and checks
#: the result file's `threads`; in this process meshsim caps them at the cores, and a test skips the
#: counts beyond them.
THREAD_COUNTS = (1, 2, 3)

#: Attributes that measure the host, not the model: they legitimately differ between runs.
VOLATILE = frozenset({"threads", "created", "run_id", "wall_seconds", "kernel_seconds", "first_call_seconds",
                      "pe_cycles_per_second", "output_seconds"})


#: Test files that compile no mesh kernel, run early (pytest_collection_modifyitems).
NO_MESH_KERNEL = ("test_ipu.py", "test_decode.py", "test_splice.py", "test_decode_kernel.py", "test_rdu_reference.py",
                  "test_rdu_compile.py", "test_rdu_run.py", "test_rdu_decode.py", "test_ipu_decode.py")
#: Tests of those files that do run the mesh.
RUNS_THE_MESH = ("test_report_compares_the_three_machines_side_by_side",)


def pytest_collection_modifyitems(items):
    """One test that runs the mesh's kernel first, then the files that compile no mesh kernel, then the rest, each in
    its own order. The mesh's kernels take about 110 s to compile in a fresh clone, and a process that
    wants them while another compiles them waits for it (meshsim/compiled.py): the first worker
    compiles them in the first test while the other works through tests that need none. Which
    tests run where changes no result; with the kernels cached, the order costs nothing."""
    def name(i):
        return getattr(i, "originalname", None)

    first = [i for i in items if name(i) == "test_kernel_equals_reference_uniform_work"][:1]
    early = [i for i in items if i.path.name in NO_MESH_KERNEL and name(i) not in RUNS_THE_MESH]
    early.sort(key=lambda i: NO_MESH_KERNEL.index(i.path.name))
    taken = {id(i) for i in first + early}
    items[:] = first + early + [i for i in items if id(i) not in taken]


@pytest.fixture(params=THREAD_COUNTS, ids=lambda n: f"{n}threads")
def thread_count(request) -> int:
    """Each of THREAD_COUNTS in turn."""
    return request.param


def result_contents(path) -> dict:
    """Every dataset ("group/name": array) and every attribute but the volatile ones ("group/name@key",
    "@key" for the root's) of a result file."""
    data = {}
    with h5py.File(path, "r") as f:
        def visit(name, obj):
            if isinstance(obj, h5py.Dataset):
                data[name] = obj[()]
            for k, v in obj.attrs.items():
                if k not in VOLATILE and k not in ("REFERENCE_LIST", "DIMENSION_LIST"):
                    data[f"{name}@{k}"] = v
        f.visititems(visit)
        for k, v in f.attrs.items():
            if k not in VOLATILE:
                data[f"@{k}"] = v
    return data


def assert_same_results(a, b) -> None:
    """Two result files (paths, or result_contents of them) hold the same datasets and attributes,
    bit for bit (NaN equal to NaN)."""
    a = a if isinstance(a, dict) else result_contents(a)
    b = b if isinstance(b, dict) else result_contents(b)
    assert a.keys() == b.keys(), sorted(set(a) ^ set(b))
    for k in a:
        x, y = a[k], b[k]
        if isinstance(x, np.ndarray):
            assert x.dtype == y.dtype and np.array_equal(x, y, equal_nan=x.dtype.kind == "f"), k
        elif isinstance(x, float) and np.isnan(x):
            assert np.isnan(y), k
        else:
            assert x == y, k
