"""The ipu machine (Graphcore-style bulk-synchronous tiles): a transformer mapped onto pipeline
stages, every operator a superstep of compute, sync and exchange (docs/ipu.md)."""

_WHERE = {
    "IpuProgram": ".compiler",
    "IpuSpec": ".compiler",
    "compile_program": ".compiler",
    "compile_scenario": ".compiler",
}

__all__ = ["IpuProgram", "IpuSpec", "compile_program", "compile_scenario"]


def __getattr__(name):
    # Imported on first use: reading a scenario imports this package (its machine's checks), and
    # that must not import the kernels, Numba or h5py.
    if name in _WHERE:
        import importlib

        return getattr(importlib.import_module(_WHERE[name], __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
