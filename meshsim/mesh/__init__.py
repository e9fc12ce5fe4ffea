"""The mesh machine (WSE-2-style): a 2D grid of PEs with finite queues, neighbour links, routed
packets, migration and the layer pipeline (docs/mesh.md)."""

_WHERE = {
    "CFG_FIELDS": ".sim",
    "PES_PER_THREAD": ".sim",
    "MeshInputs": ".sim",
    "MeshSim": ".sim",
    "available_cores": ".sim",
    "build_inputs": ".sim",
    "compile_scenario": ".sim",
    "default_threads": ".sim",
    "set_threads": ".sim",
}

__all__ = ["CFG_FIELDS", "MeshInputs", "MeshSim", "PES_PER_THREAD", "available_cores", "build_inputs",
           "compile_scenario", "default_threads", "set_threads"]


def __getattr__(name):
    # Imported on first use: reading a scenario imports this package (its machine's checks), and
    # that must not import the kernels, Numba or h5py.
    if name in _WHERE:
        import importlib

        return getattr(importlib.import_module(_WHERE[name], __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
