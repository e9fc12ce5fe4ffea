"""Deprecated: the run loop is meshsim.run (run_scenario, RunInterrupted, RunResult, StopSignals);
the mesh's run between kernel calls is meshsim.mesh.run."""

import warnings

from . import run as _run

_NAMES = ("run_scenario", "RunInterrupted", "RunResult", "StopSignals", "check_output_path", "default_output_path")


def __getattr__(name):
    if name in _NAMES:
        warnings.warn(f"meshsim.engine.{name} is deprecated: use meshsim.run.{name}", DeprecationWarning,
                      stacklevel=2)
        return getattr(_run, name)
    raise AttributeError(f"module 'meshsim.engine' has no attribute {name!r}")
