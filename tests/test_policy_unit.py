"""A migration policy is a unit (docs/mesh.md, "Adding a migration policy"): a fifth pushing policy,
defined here, is added as that page says (an id and a step in a copy of the kernels, its call where
the pick is made, a row of the table, one oracle function) and then runs through the kernel against
the oracle cycle by cycle, `meshsim run` and `meshsim report`, with no other change.

Slow: the copied kernel compiles from cold (about as long as the first run of a fresh install)."""

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from kernels import splice as S

ROOT = Path(__file__).resolve().parents[1]

#: The policy's step: of the eligible directions (listed in increasing d), the highest.
STEP = '''

def _highest_pick(elig, n_elig):
    """highest: the eligible direction with the highest d."""
    best = elig[n_elig - 1]
    return best
'''

#: Where the pick is made (kernels/mesh_policies.py, `_push`): the pick of random_lower, then its own.
PICK = "            best = _random_lower_pick(key_migrate, elig, k, u, n_elig)\n"
CALL = PICK + "        if policy == POLICY_HIGHEST:\n            best = _highest_pick(elig, n_elig)\n"

#: In the copy's process: the table's row and the oracle's rule, then the kernel against the oracle,
#: a run and its report.
SCRIPT = textwrap.dedent('''
    import sys
    from pathlib import Path

    import kernels
    assert Path(kernels.__file__).parent == Path(sys.argv[1]), kernels.__file__
    from meshsim.mesh import policies as P
    row = P.Policy("highest", "highest to the eligible neighbour in the highest direction",
                   bench=(("highest", {}),))
    P.POLICIES += (row,)
    P.BY_NAME[row.name] = row

    from kernels.reference import mesh_ref

    def highest(sim, t, u, limit, sent_now, obs):
        """highest: the eligible direction with the highest d (eligible as for least_loaded)."""
        sim._push(t, u, limit, sent_now, obs, lambda d, kd, depth: kd + 1 < depth, lambda eligible, k: eligible[-1][0])

    mesh_ref.MIGRATION_RULES["highest"] = highest

    from mesh_compare import compare_cycle_by_cycle, small_scenario
    mine = compare_cycle_by_cycle(small_scenario(4, 6, migration__policy="highest"), 120)
    other = compare_cycle_by_cycle(small_scenario(4, 6, migration__policy="least_loaded"), 120)
    assert mine["migrated"] > 0 and mine != other  # (its own rule: the runs differ)
    print("cycles equal; migrated", mine["migrated"], "against least_loaded's", other["migrated"])

    from meshsim.cli import main
    out = Path(sys.argv[2])
    code = main(["run", str(Path(sys.argv[3]) / "scenarios" / "smoke.toml"), "migration.policy=highest",
                 "run.cycles=600", "-o", str(out)])
    assert code == 0, code
    assert main(["report", str(out)]) == 0
''')


@pytest.mark.slow
def test_a_policy_added_as_the_docs_say_runs_through_kernel_oracle_run_and_report(tmp_path):
    copy = tmp_path / "kernels"
    shutil.copytree(ROOT / "kernels", copy, ignore=shutil.ignore_patterns("__pycache__"))
    mesh = (copy / "mesh.py").read_text()
    anchor = "POLICY_WORK_STEALING = 5\n"
    assert anchor in mesh
    (copy / "mesh.py").write_text(mesh.replace(anchor, anchor + "POLICY_HIGHEST = 6\n"))
    policies = (copy / "mesh_policies.py").read_text()
    assert policies.count(PICK) == 1
    (copy / "mesh_policies.py").write_text(policies.replace(PICK, CALL) + STEP)
    specs = [S.Spliced(s.target, s.entry, s.decorator, s.sources, root=copy) for s in S.SPLICED]
    assert S.write(specs) == ["mesh.py:_step_rows"]

    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), str(ROOT / "tests"), str(ROOT)]))
    out = tmp_path / "highest.h5"
    p = subprocess.run([sys.executable, "-c", SCRIPT, str(copy), str(out), str(ROOT)], cwd=tmp_path, env=env,
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert "cycles equal" in p.stdout
    assert "highest" in p.stdout and out.is_file()
