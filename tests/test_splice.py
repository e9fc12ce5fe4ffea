"""Spliced kernels (docs/design.md, "Spliced kernels"): the function Numba compiles is its steps'
bodies, written out; the splice refuses a step whose body would not do what its call does; and the
mesh's steps, run as the plain functions they are written as, give the kernel's results."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from kernels import splice as S

ROOT = Path(__file__).resolve().parents[1]


def test_every_spliced_kernel_is_its_steps_written_out():
    assert S.stale() == []
    p = subprocess.run([sys.executable, "-m", "kernels.splice", "--check"], cwd=ROOT, capture_output=True, text=True)
    assert p.returncode == 0, p.stderr


def test_every_step_is_under_150_lines_and_the_spliced_kernel_reads_as_its_steps():
    import ast

    for spec in S.SPLICED:
        for rel in spec.sources:
            for node in ast.parse((spec.root / rel).read_text()).body:
                if isinstance(node, ast.FunctionDef):
                    assert node.end_lineno - node.lineno + 1 <= 150, (rel, node.name)
                    assert ast.get_docstring(node), (rel, node.name)


TARGET = '''\
import math

SCALE = 3


def helper(x):
    return x + 1


# BEGIN SPLICED entry: python -m kernels.splice writes it from its steps; edit those, not this.
# END SPLICED entry
'''

STEPS = '''\
def entry(xs, n):
    """Sum and count of the scaled values above n."""
    total = 0
    count = 0
    for x in xs:
        total, count = add(x, n, total, count)
    total = finish(total)
    return total, count


def add(x, n, total, count):
    """Add x scaled if above n."""
    # a comment that travels with the body
    if x > n:
        y = scaled(x)
        total += y
        count += 1
    return total, count


def scaled(x):
    """x times SCALE, plus one."""
    y = helper(x * SCALE)
    return y


def finish(total):
    """The total, floored at its square root."""
    total = max(total, int(math.sqrt(total)))
    return total
'''


def spec(tmp_path, steps=STEPS, target=TARGET):
    (tmp_path / "target.py").write_text(target)
    (tmp_path / "steps.py").write_text(steps)
    return S.Spliced("target.py", "entry", "", ("steps.py",), root=tmp_path)


def test_a_spliced_function_does_what_its_steps_do_as_functions(tmp_path):
    sp = spec(tmp_path)
    assert S.stale([sp]) == ["target.py:entry"]
    assert S.write([sp]) == ["target.py:entry"]
    assert S.stale([sp]) == [] and S.write([sp]) == []
    text = (tmp_path / "target.py").read_text()
    assert "# a comment that travels with the body" in text and "scaled(" not in text and "add(" not in text
    spliced, plain = {}, {}
    exec(text, spliced)
    exec(TARGET + STEPS, plain)
    for xs, n in [([], 0), ([1, 2, 3], 1), ([5, -2, 9, 9], 4), (list(range(40)), 17)]:
        assert spliced["entry"](xs, n) == plain["entry"](xs, n)


@pytest.mark.parametrize("old, new, message", [
    ("total, count = add(x, n, total, count)", "total, count = add(x, n, count, total)",
     "its arguments must be its parameters' names"),
    ("total, count = add(x, n, total, count)", "count, total = add(x, n, total, count)", "must be the same names"),
    ("total, count = add(x, n, total, count)", "total = add(x, n, total, count)", "must be the same names"),
    ("    total = finish(total)\n", "    total = 1 + finish(total)\n", "must be called as a statement of its own"),
    ('    """x times SCALE, plus one."""\n', '    """x times SCALE, plus one."""\n    if x < 0:\n        return 0\n',
     "returns before its end"),
    ("        count += 1\n    return total, count", "        count += 1\n        x = 0\n    return total, count",
     "rebinds its parameter(s) x without returning them"),
    ("    y = helper(x * SCALE)", "    y = helper(x * SCALES)", "does not define: SCALES"),
    ("def scaled(x):", "def scaled(x, k=1):", "plain positional parameters"),
    ("total, count = add(x, n, total, count)", "total, count = add(x, n, total, count); n += 0",
     "its lines to itself"),
])
def test_a_step_that_would_not_do_what_its_call_does_is_refused_by_name(tmp_path, old, new, message):
    assert old in STEPS
    sp = spec(tmp_path, STEPS.replace(old, new, 1))
    with pytest.raises(S.SpliceError, match=message.replace("(", r"\(").replace(")", r"\)")):
        S.splice(sp)


def test_a_target_without_its_markers_is_refused(tmp_path):
    sp = spec(tmp_path, target=TARGET.replace("# END SPLICED entry\n", ""))
    with pytest.raises(S.SpliceError, match="lacks the marker lines"):
        S.stale([sp])


#: The kernel tests the unspliced steps run (interpreted, so a few of each kind): every migration
#: policy, a trace, routed traffic and the layer pipeline with migration; the slow run adds
#: hysteresis, two-cycle hops and every policy in the pipeline.
UNSPLICED = ("(uniform_work and 1- and 3x5) or (trace and 1- and not quiet) or "
             "(routed_traffic and 1- and (uniform or transpose) and 3x5) or "
             "(with_migration_in_the_pipeline and (gradient or work_stealing))")
UNSPLICED_SLOW = ("(uniform_work and 3x5) or (trace and not quiet) or hysteresis or "
                  "(routed_traffic and (uniform or transpose or hotspot)) or with_migration_in_the_pipeline")


def run_unspliced(selection: str, least: int, files=("tests/test_mesh_kernel.py", "tests/test_pipeline_kernel.py")):
    env = dict(os.environ, NUMBA_DISABLE_JIT="1", PYTHONPATH=os.pathsep.join(
        [str(ROOT / "tests"), str(ROOT)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    p = subprocess.run([sys.executable, "-m", "pytest", "-q", "-n", "0", "-p", "no:cacheprovider", "-p", "unspliced",
                        "-W", "ignore::RuntimeWarning", *files, "-k", selection], cwd=ROOT, env=env,
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert " passed" in p.stdout and " failed" not in p.stdout
    assert int(p.stdout.split(" passed")[0].split()[-1]) >= least, p.stdout[-500:]


def test_the_mesh_steps_run_as_plain_functions_give_the_kernels_results():
    run_unspliced(UNSPLICED, 15)


def test_the_rdu_steps_run_as_plain_functions_give_the_kernels_results():
    run_unspliced("test_", 45, ("tests/test_rdu_reference.py",))


@pytest.mark.slow
def test_the_mesh_steps_run_as_plain_functions_give_the_kernels_results_in_more_cases():
    run_unspliced(UNSPLICED_SLOW, 30)
