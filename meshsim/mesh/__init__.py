"""The mesh machine (WSE-2-style): a 2D grid of PEs with finite queues, neighbour links, routed
packets, migration and the layer pipeline (docs/mesh.md)."""

from .sim import (
    CFG_FIELDS,
    PES_PER_THREAD,
    MeshInputs,
    MeshSim,
    available_cores,
    build_inputs,
    compile_scenario,
    default_threads,
    set_threads,
)

__all__ = ["CFG_FIELDS", "PES_PER_THREAD", "MeshInputs", "MeshSim", "available_cores", "build_inputs",
           "compile_scenario", "default_threads", "set_threads"]
