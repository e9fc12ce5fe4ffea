"""The suite holds results against a stored record (tests/record.py): every case's result file
has the fingerprint recorded in tests/data/results_record.json, so a change not meant to move
results is checked on every test run, and one that moves them by design records them again with a
message saying why."""

import copy

import numpy as np
import pytest
import record

UPDATE = 'python tests/record.py update --why "which results move, and why"'


@pytest.fixture(scope="module")
def stored():
    return record.load()


@pytest.mark.parametrize("name", list(record.CASES))
def test_results_are_as_recorded(name, stored, tmp_path):
    assert name in stored["results"], f"case {name} is not in the record: {UPDATE}"
    lines = record.differences(stored["results"][name], record.run_case(name, tmp_path))
    assert not lines, (f"{name}: {len(lines)} results differ from the record. If the change is meant to move "
                       f"them, record them again ({UPDATE}); if not, it changed the model:\n" + "\n".join(lines[:30]))


def test_results_on_two_threads_are_as_recorded(stored, tmp_path):
    # The record is taken on one thread; a policy that talks over the links and the layer pipeline
    # with migration give the same results on two.
    for name in ("mesh-hotspot-work_stealing", "mesh-pipeline-gradient"):
        assert not record.differences(stored["results"][name], record.run_case(name, tmp_path, threads=2)), name


def test_the_record_holds_the_cases_listed_and_says_why_each_time_it_was_taken(stored):
    assert stored["cases"] == {n: [s, o] for n, (s, o) in record.CASES.items()}
    assert set(stored["results"]) == set(record.CASES)
    assert stored["log"] and all(e["why"].strip() and e["date"] for e in stored["log"])
    machines = {stored["results"][n]["/"]["attrs"]["machine"] for n in record.CASES}
    assert machines == {"mesh", "rdu", "ipu"}


def test_a_changed_result_is_seen_and_a_rounding_difference_is_not(stored):
    case = stored["results"]["mesh-smoke-least_loaded"]
    assert record.differences(case, copy.deepcopy(case)) == []
    # an integer series one count off
    moved = copy.deepcopy(case)
    moved["series/busy"]["data"]["sha256"] = "0" * 64
    was = case["series/busy"]["data"]["sha256"]
    assert record.differences(case, moved) == [f"series/busy data sha256: recorded {was!r}, now {'0' * 64!r}"]
    # a summary figure moved in its sixth digit, and the same figure moved in its fifteenth
    li = case["summary"]["attrs"]["li"]
    for factor, seen in ((1 + 1e-6, True), (1 + 1e-14, False)):
        other = copy.deepcopy(case)
        other["summary"]["attrs"]["li"] = li * factor
        assert bool(record.differences(case, other)) is seen
    # floating-point data: two values trading places change the weighted sum
    a = record.data_fingerprint(np.array([1.0, 2.0, 3.0]))
    b = record.data_fingerprint(np.array([2.0, 1.0, 3.0]))
    assert a["sum"] == b["sum"] and not record.same(a, b)
    # an object that appears or disappears
    gone = copy.deepcopy(case)
    del gone["series/busy"]
    assert record.differences(case, gone) == ["series/busy: in the record, not in the result"]
