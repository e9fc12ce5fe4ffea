"""The sweep file's expander on its own (meshsim/sweep/spec.py, docs/sweeps.md): a sweep file in,
its points out, in order, with their overrides, seeds, ids and result paths; and the messages of a
bad file. Nothing here starts Dask or runs a point. Also: `distributed` is imported by
meshsim/sweep/cluster.py alone."""

import ast
import os
import re
from pathlib import Path

import pytest

from meshsim.errors import InputError
from meshsim.scenario import toml_repr
from meshsim.sweep.spec import SEED_KEY, TABLES, Point, Sweep, derive_seed, load_sweep, point_id

ROOT = Path(__file__).resolve().parents[1]

BASE = """
[run]
cycles = 300
seed = 5
[machine]
rows = 24
cols = 12
queue_capacity = 6
[migration]
policy = "least_loaded"
threshold = 2
[workload]
type = "skewed"
injection_rate = 0.1
sigma = 1.0
"""

HEAD = '[sweep]\nbase = "base.toml"\n'


def write(tmp_path, text, name="s.toml", base=BASE):
    (tmp_path / "base.toml").write_text(base)
    path = tmp_path / name
    path.write_text(text)
    return path


def expand(tmp_path, text, **kw) -> Sweep:
    return load_sweep(write(tmp_path, text), **kw)


def problems(tmp_path, text, **kw) -> list:
    with pytest.raises(InputError) as e:
        expand(tmp_path, text, **kw)
    return e.value.problems


def params(sw: Sweep) -> list:
    return [dict(p.params) for p in sw.points]


# ---------------------------------------------------------------------------------------------
# Expanding


def test_a_grid_is_every_combination_with_the_first_key_slowest(tmp_path):
    sw = expand(tmp_path, HEAD + "[grid]\nmigration.threshold = [1, 2]\nworkload.injection_rate = [0.05, 0.1, 0.2]\n")
    assert sw.keys == ["migration.threshold", "workload.injection_rate"]
    assert [tuple(d.values()) for d in params(sw)] == [(1, 0.05), (1, 0.1), (1, 0.2), (2, 0.05), (2, 0.1), (2, 0.2)]
    assert [p.index for p in sw.points] == list(range(6)) and [p.repetition for p in sw.points] == [0] * 6
    assert sw.shape == {"grid": [2, 3], "zip": 0} and sw.repetitions == 1 and sw.seeds == "per_point"
    assert all(isinstance(p, Point) for p in sw.points)


def test_zip_rows_run_alongside_inside_each_grid_combination_with_repetitions_innermost(tmp_path):
    sw = expand(tmp_path, HEAD + "repetitions = 2\n[grid]\nmigration.threshold = [1, 2]\n"
                                 "[zip]\nmachine.rows = [8, 16, 32]\nmachine.cols = [4, 8, 16]\n")
    assert sw.keys == ["migration.threshold", "machine.rows", "machine.cols"]
    assert len(sw.points) == 2 * 3 * 2 and sw.shape == {"grid": [2], "zip": 3}
    expected = [(t, r, c, rep) for t in (1, 2) for r, c in ((8, 4), (16, 8), (32, 16)) for rep in (0, 1)]
    assert [(*d.values(), p.repetition) for d, p in zip(params(sw), sw.points, strict=True)] == expected
    # A zip alone: its rows, in order.
    alone = expand(tmp_path, HEAD + "[zip]\nworkload.injection_rate = [0.05, 0.1]\nworkload.sigma = [0.5, 1.5]\n")
    assert params(alone) == [{"workload.injection_rate": 0.05, "workload.sigma": 0.5},
                             {"workload.injection_rate": 0.1, "workload.sigma": 1.5}]
    assert alone.shape == {"grid": [], "zip": 2}


def test_set_applies_to_every_point_before_the_swept_values_and_the_seed(tmp_path):
    sw = expand(tmp_path, HEAD + "[set]\nrun.cycles = 200\nmachine.rows = 16\n[grid]\nmigration.threshold = [1, 3]\n")
    assert sw.keys == ["migration.threshold"]
    for p in sw.points:
        keys = [k for k, _ in p.overrides]
        assert keys == ["run.cycles", "machine.rows", "migration.threshold", SEED_KEY]
        assert dict(p.overrides)["run.cycles"] == 200 and dict(p.overrides)[SEED_KEY] == p.seed
        assert "rows = 16" in p.resolved and "cycles = 200" in p.resolved
    # Nothing swept: one point, the base itself with its derived seed.
    one = expand(tmp_path, HEAD)
    assert len(one.points) == 1 and one.keys == [] and one.points[0].params == ()
    assert one.points[0].overrides == ((SEED_KEY, one.points[0].seed),)


def test_an_inline_base_expands_to_the_same_points_as_the_base_file(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    grid = "[grid]\nmigration.threshold = [1, 2]\n"
    from_file = expand(tmp_path, HEAD + 'output = "out"\n' + grid)
    inline = "".join(f"[base.{line[1:-1]}]\n" if line.startswith("[") else line + "\n"
                     for line in BASE.strip().splitlines())
    (tmp_path / "i.toml").write_text('[sweep]\noutput = "out"\n' + grid + inline)
    inlined = load_sweep(tmp_path / "i.toml")
    assert [p.id for p in inlined.points] == [p.id for p in from_file.points]
    assert [p.seed for p in inlined.points] == [p.seed for p in from_file.points]
    # A point carries the base's text and the absolute path that anchors it: the base file's, or the
    # sweep file's for an inline base.
    assert from_file.points[0].base_path == str(tmp_path / "base.toml")
    assert from_file.points[0].base_text == BASE
    assert inlined.points[0].base_path == str(tmp_path / "i.toml")


def test_seeds_derive_from_the_base_seed_per_point_or_shared_or_are_given(tmp_path):
    per_point = expand(tmp_path, HEAD + "repetitions = 2\n[grid]\nmigration.threshold = [1, 2]\n")
    assert [p.seed for p in per_point.points] == [derive_seed(5, p.params, p.repetition) for p in per_point.points]
    assert len({p.seed for p in per_point.points}) == 4
    shared = expand(tmp_path, HEAD + 'repetitions = 2\nseeds = "shared"\n[grid]\nmigration.threshold = [1, 2]\n')
    assert [p.seed for p in shared.points] == [5, 6, 5, 6]
    given = expand(tmp_path, HEAD + "[zip]\nrun.seed = [3, 4]\nmigration.threshold = [1, 2]\n")
    assert [p.seed for p in given.points] == [3, 4]
    assert [dict(p.overrides)[SEED_KEY] for p in given.points] == [3, 4]


def test_points_are_named_by_the_hash_of_their_resolved_overrides(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # sweep.output is relative to the current folder
    sw = expand(tmp_path, HEAD + 'output = "out"\n[grid]\nworkload.injection_rate = [1, 0.5]\n', threads=3)
    for p in sw.points:
        assert re.fullmatch("[0-9a-f]{12}", p.id) and p.id == point_id(p.overrides)
        assert p.output == str(tmp_path / "out" / "points" / f"{p.id}.h5") and p.threads == 3
    assert dict(sw.points[0].params)["workload.injection_rate"] == 1.0  # resolved: an integer for a float key
    # The name does not depend on the results folder, the threads or the order the keys are written in.
    again = expand(tmp_path, HEAD + "[grid]\nworkload.injection_rate = [1.0, 0.5]\n", output=tmp_path / "elsewhere")
    assert [p.id for p in again.points] == [p.id for p in sw.points]
    assert point_id([("a.b", 1), ("c.d", 2)]) == point_id([("c.d", 2), ("a.b", 1)])


def test_the_sweep_name_and_its_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    sw = expand(tmp_path, HEAD)
    assert sw.name == "s" and sw.output == tmp_path / "results" / "sweeps" / "s"
    assert sw.summary_csv == sw.output / "summary.csv" and sw.summary_h5 == sw.output / "summary.h5"
    named = expand(tmp_path, HEAD + 'name = "load"\n')
    assert named.name == "load" and named.output == tmp_path / "results" / "sweeps" / "load"
    assert expand(tmp_path, HEAD + 'name = "load"\n', output="mine").output == tmp_path / "mine"
    assert sw.path == str(tmp_path / "s.toml") and sw.text == HEAD


def test_expanding_writes_nothing(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path = write(tmp_path, HEAD + 'output = "deep/out"\nrepetitions = 3\n[grid]\nmigration.threshold = [1, 2]\n')
    before = sorted(os.listdir(tmp_path))
    sw = load_sweep(path)
    assert len(sw.points) == 6 and sorted(os.listdir(tmp_path)) == before
    assert not any(Path(p.output).exists() for p in sw.points)


# ---------------------------------------------------------------------------------------------
# Bad input: every message names the file, the key, the value and what is allowed


@pytest.mark.parametrize("text, expected", [
    ("[grdi]\n", ["[grdi]: unknown table (did you mean [grid]?); allowed: " + ", ".join(f"[{t}]" for t in TABLES),
                  "no base scenario: give sweep.base = \"FILE.toml\" or an inline [base] table"]),
    (HEAD + "repetiton = 3\ngrid = 3\n",
     ["sweep.repetiton: unknown key (did you mean sweep.repetitions?); allowed: base, name, output, repetitions, seeds",
      "sweep.grid: unknown key; allowed: base, name, output, repetitions, seeds"]),
    ("sweep = 3\n", ["sweep = 3: must be a table, written [sweep]",
                     'no base scenario: give sweep.base = "FILE.toml" or an inline [base] table']),
    (HEAD + 'repetitions = "3"\nseeds = 1\nname = "a/b"\n',
     ['sweep.repetitions = "3": must be an integer: runs of every point, each with its own seed (default 1)',
      'sweep.seeds = 1: must be a string: "per_point" (default) or "shared"',
      "sweep.name = \"a/b\": must be a non-empty name without '/'"]),
    (HEAD + "repetitions = 20000\n", ["sweep.repetitions = 20000: must be an integer in [1, 10000]"]),
    (HEAD + 'seeds = "same"\n', ["sweep.seeds = \"same\": must be one of 'per_point', 'shared'"]),
    (HEAD + "[zip]\nmigration.threshold = 1\n[grid]\nworkload.sigma = []\n",
     ["[grid] workload.sigma = []: must be a non-empty list of the values to run, e.g. workload.sigma = [1, 2]",
      "[zip] migration.threshold = 1: must be a non-empty list of the values to run, e.g. "
      "migration.threshold = [1, 2]"]),
    (HEAD + "[grid]\nmachin.rows = [1]\nmachine.rowz = [1]\n",
     ["[grid] machin.rows: unknown section; did you mean machine?",
      "[grid] machine.rowz: unknown key; did you mean machine.rows?"]),
    (HEAD + "[set]\nmigration.threshold = [1, 2]\n",
     ["[set] migration.threshold = [1, 2]: must be an integer in [0, 254] (tasks)"]),
    (HEAD + '[grid]\nmigration.policy = ["least_loaded", "nope"]\n',
     ['[grid] migration.policy = "nope": must be one of "none", "least_loaded", "random_lower", "diffusion", '
      '"gradient", "work_stealing"; did you mean "none"?']),
    (HEAD + "[zip]\nmachine.rows = [8, 16]\nmachine.cols = [4]\n",
     ["[zip]: every list must have the same length; the lengths are machine.rows 2, machine.cols 1"]),
    (HEAD + "[set]\nmigration.threshold = 1\n[grid]\nmigration.threshold = [1, 2]\n",
     ["migration.threshold: is in both [set] and [grid]; give each key once"]),
    (HEAD + "[grid]\nworkload.sigma = [0.5, 0.5]\n",
     ["the points workload.sigma=0.5 (repetition 0) and workload.sigma=0.5 (repetition 0) are the same run; "
      "remove the repeated values"]),
])
def test_a_bad_sweep_file_says_where_what_and_what_is_allowed(tmp_path, text, expected):
    where = tmp_path / "s.toml"
    assert problems(tmp_path, text) == [f"{where}: {m}" for m in expected]


def test_a_sweep_file_that_is_not_toml_or_not_there(tmp_path):
    msgs = problems(tmp_path, "[sweep\n")
    assert len(msgs) == 1 and msgs[0].startswith(f"{tmp_path / 's.toml'}: invalid TOML: ")
    with pytest.raises(InputError) as e:
        load_sweep(tmp_path / "none.toml")
    assert e.value.problems == [f"{tmp_path / 'none.toml'}: no such sweep file"]


def test_a_bad_output_folder_names_the_option_that_gave_it(tmp_path):
    (tmp_path / "afile").write_text("")
    # the value is shortened as every message shortens one (a long temporary folder makes it long)
    assert problems(tmp_path, HEAD, output=tmp_path / "afile" / "x") == [
        f"{tmp_path / 's.toml'}: -o = {toml_repr(str(tmp_path / 'afile' / 'x'))}: {tmp_path / 'afile'} is a file, "
        "not a folder"]
    assert problems(tmp_path, HEAD + 'output = " "\n') == [
        f"{tmp_path / 's.toml'}: sweep.output = \" \": must name a folder, such as results/sweeps/NAME"]


# ---------------------------------------------------------------------------------------------
# Module boundaries


def _imported_modules(path: Path) -> set:
    """The absolute module names a file imports (relative imports excluded)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
            names.update(f"{node.module}.{a.name}" for a in node.names)
    return names


def _imports_distributed(names) -> bool:
    return any(n == "distributed" or n.startswith("distributed.") or n == "dask.distributed"
               or n.startswith("dask.distributed.") for n in names)


def test_only_the_sweeps_cluster_module_imports_distributed():
    files = sorted((ROOT / "meshsim").rglob("*.py"))
    assert len(files) > 10
    importers = [str(f.relative_to(ROOT)) for f in files if _imports_distributed(_imported_modules(f))]
    assert importers == ["meshsim/sweep/cluster.py"]


def test_the_spec_expander_needs_no_dask_no_h5py_and_none_of_the_running_parts():
    path = ROOT / "meshsim" / "sweep" / "spec.py"
    names = _imported_modules(path)
    assert not [n for n in names if n.split(".")[0] in ("dask", "distributed", "h5py", "tqdm", "numba")]
    siblings = set()  # what it takes from meshsim/sweep/ itself
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            siblings.update([node.module] if node.module else [a.name for a in node.names])
    assert siblings.isdisjoint({"execute", "cluster", "table"})


IPU_BASE = '[machine]\ntype = "ipu"\n[workload]\ntype = "transformer"\nhidden_size = 64\nn_layers = 2\n' \
           'n_heads = 2\nseq_len = 16\nbatch = 8\nvocab_size = 0\n'


def test_a_keys_old_name_in_a_sweep_is_its_new_one_with_a_warning(tmp_path):
    with pytest.warns(FutureWarning, match=r"\[grid\] workload.gradient_accumulation is now workload.microbatches"):
        sw = load_sweep(write(tmp_path, HEAD + '[grid]\n"workload.gradient_accumulation" = [2, 4]\n', base=IPU_BASE))
    assert [p["workload.microbatches"] for p in params(sw)] == [2, 4]
    text = HEAD + '[grid]\n"workload.layers_per_ipu" = [[1, 1]]\n"workload.layers_per_stage" = [[2, 0]]\n'
    with pytest.warns(FutureWarning), pytest.raises(InputError) as e:
        load_sweep(write(tmp_path, text, base=IPU_BASE))
    found = e.value.problems
    assert any("workload.layers_per_ipu: is the old name of workload.layers_per_stage, and the table sets both" in p
               for p in found), found
