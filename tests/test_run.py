"""The run loop's own logic: where the mesh stops its kernel, and the defaults a run applies."""

from pathlib import Path

from meshsim.mesh.run import _stops
from meshsim.run import default_output_path
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


def test_a_grid_too_big_for_the_memory_is_an_input_error_before_anything_is_written(tmp_path, monkeypatch):
    import pytest

    from meshsim.errors import InputError
    from meshsim.mesh import state
    from meshsim.run import run_scenario

    monkeypatch.setattr(state, "available_memory_bytes", lambda: 100 * 2**20)
    sc = scenario_from_dict({"machine": {"rows": 757, "cols": 996}})
    with pytest.raises(InputError, match=r"757 x 996 .* the state and buffers need 0.2 GiB and 0.1 GiB of memory "
                                         r"is available"):
        run_scenario(sc, tmp_path / "big.h5", progress=False)
    assert not list(tmp_path.iterdir())


def test_state_layout_counts_what_is_allocated():
    from meshsim.mesh.state import allocate_mesh, layout_bytes, mesh_layout, state_bytes_per_pe

    st = allocate_mesh(10, 20, 16, 2, 2, [0] * 200)
    assert layout_bytes(mesh_layout(10, 20, 16, 2, 2)) == state_bytes_per_pe(st) * 200


def test_a_compilation_is_announced_once_and_a_compiled_kernel_says_nothing(capsys):
    """meshsim.run.compile_notice: one line on stderr when Numba compiles inside the block (a fresh
    function here; a run's kernels the first time), none for a function already compiled."""
    import numba

    from meshsim.machine import get
    from meshsim.run import compile_notice

    @numba.njit
    def twice(x):
        return 2 * x

    @numba.njit
    def thrice(x):
        return 3 * x

    mesh = get("mesh")
    with compile_notice(mesh):
        assert twice(2) == 4 and thrice(2) == 6  # two compilations, one line
    err = capsys.readouterr().err
    assert err.count("meshsim: compiling") == 1
    assert f"compiling the mesh kernels, about {mesh.compile_seconds} s on two cores, once" in err
    assert mesh.compile_seconds > 0
    with compile_notice(mesh):
        assert twice(3) == 6  # compiled already: nothing to say
    assert capsys.readouterr().err == ""
