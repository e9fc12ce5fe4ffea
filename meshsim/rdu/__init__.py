"""The rdu machine (SambaNova-style reconfigurable dataflow unit): a transformer compiled into
sections of fused operators over PCUs and PMUs, run section by section (docs/rdu.md)."""

_WHERE = {
    "RduProgram": ".compiler",
    "RduSpec": ".compiler",
    "compile_program": ".compiler",
    "compile_scenario": ".compiler",
    "parse_parallelism": ".compiler",
    "spec_for": ".compiler",
    "RduSim": ".sim",
}

__all__ = ["RduProgram", "RduSim", "RduSpec", "compile_program", "compile_scenario", "parse_parallelism", "spec_for"]


def __getattr__(name):
    # Imported on first use: reading a scenario imports this package (its machine's checks), and
    # that must not import the kernels, Numba or h5py.
    if name in _WHERE:
        import importlib

        return getattr(importlib.import_module(_WHERE[name], __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
