"""meshsim: a Numba-accelerated, cycle-approximate simulator of spatial AI accelerators.

See docs/design.md for the design, and docs/mesh.md, docs/rdu.md and docs/ipu.md for the machines'
semantics. The Python API: `meshsim.run(scenario, **overrides)` runs a scenario and returns a
`meshsim.Result` (meshsim.result); `meshsim.load(path)` reads a result file; `meshsim.resume(path)` goes
on with a stopped run and returns its Result (docs/results.md, "Resuming a run"). The run loop underneath
is `meshsim.run.run_scenario`: `meshsim.run` is that module, and calling it is `meshsim.run.run`.
"""

__version__ = "0.1.0"

_API = ("load", "Result")


def __getattr__(name):
    # Loaded on first use, so that `import meshsim` (and the command line's start) stays light.
    import importlib

    if name == "run":
        return importlib.import_module(".run", __name__)
    if name == "resume":
        return importlib.import_module(".run", __name__).resume
    if name in _API:
        return getattr(importlib.import_module(".result", __name__), name)
    raise AttributeError(f"module 'meshsim' has no attribute {name!r}")


def __dir__():
    return sorted([*globals(), "run", "resume", *_API])
