"""The kernels run as plain Python too (NUMBA_DISABLE_JIT=1, as a coverage run uses them) and give the
same results as the reference there: the compiled and interpreted kernels agree through it."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


# Under -m slow: the default run interprets the mesh's kernel code already, as the steps the kernels
# are spliced from (tests/test_splice.py, the steps run as plain functions).
@pytest.mark.slow
def test_kernel_bodies_equal_the_reference_without_jit():
    env = dict(os.environ, NUMBA_DISABLE_JIT="1")
    p = subprocess.run([sys.executable, "-m", "pytest", "-q", "-n", "0", "-p", "no:cacheprovider", "-W",
                        "ignore::RuntimeWarning", "tests/test_mesh_kernel.py", "-k",
                        "counter or rate_maps or (uniform_work and (2x2 or 3x5)) or trace or edges"],
                       cwd=ROOT, env=env, capture_output=True, text=True)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert " passed" in p.stdout and " failed" not in p.stdout
