"""The ipu machine (Graphcore-style bulk-synchronous tiles): a transformer mapped onto pipeline
stages, every operator a superstep of compute, sync and exchange (docs/ipu.md)."""

from .compiler import IpuProgram, IpuSpec, compile_program, compile_scenario

__all__ = ["IpuProgram", "IpuSpec", "compile_program", "compile_scenario"]
