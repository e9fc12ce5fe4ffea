"""The run engine's own logic: where it stops the kernel, and the defaults it applies."""

from pathlib import Path

from meshsim.engine import _stops, default_output_path
from meshsim.scenario import scenario_from_dict


def test_the_kernel_stops_at_every_window_frame_and_flush_boundary():
    assert list(_stops(450, 100, 50, 200, 200)) == [50, 100, 150, 200, 250, 300, 350, 400, 450]
    assert list(_stops(10, 0, 0, 4, 4)) == [4, 8, 10]
    assert list(_stops(7, 3, 0, 5, 5)) == [3, 5, 6, 7]


def test_stops_are_generated_lazily_for_very_long_runs():
    stops = _stops(10**9, 100, 100, 500, 500)
    assert next(stops) == 100 and next(stops) == 200


def test_a_run_without_output_path_writes_under_results_by_name():
    sc = scenario_from_dict({"run": {"name": "abc"}})
    assert default_output_path(sc) == Path("results") / "abc.h5"
