"""The rdu machine (SambaNova-style reconfigurable dataflow unit): a transformer compiled into
sections of fused operators over PCUs and PMUs, run section by section (docs/rdu.md)."""

from .compiler import RduProgram, RduSpec, compile_program, compile_scenario, parse_parallelism, spec_for
from .sim import RduSim

__all__ = ["RduProgram", "RduSim", "RduSpec", "compile_program", "compile_scenario", "parse_parallelism", "spec_for"]
